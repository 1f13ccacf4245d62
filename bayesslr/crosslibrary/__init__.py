"""The cross-library leaderboard of the stored targets (docs/targets.md, "Leaderboard").

NUTS as NumPyro, BlackJAX and PyMC+nutpie each recommend running it, on every stored target
(:func:`bayesslr.targets`), at equal budgets of gradient evaluations, scored against the
target's Bayes-optimal reference by :func:`bayesslr.score_draws`:

* :mod:`~bayesslr.crosslibrary.runners`: one run of one library on one target (``Run``);
* :mod:`~bayesslr.crosslibrary.checkpoints`: a run scored at budget checkpoints (the prefix of
  the run within each budget);
* :mod:`~bayesslr.crosslibrary.build`: one file per (target, library) in a work directory,
  resumable, assembled into the shipped ``bayesslr/data/leaderboard.nc``;
* :mod:`~bayesslr.crosslibrary.board`: :func:`leaderboard` (the shipped Dataset) and
  :func:`place_on_leaderboard` (a user's score beside it);
* :mod:`~bayesslr.crosslibrary.figure`: error against gradient evaluations.

The study that computes the shipped file is ``benchmarks/studies/leaderboard.py``. (The
package is not named ``leaderboard``: importing a subpackage of that name would shadow the
function ``bayesslr.leaderboard``.)
"""

from bayesslr.crosslibrary.board import leaderboard, markdown_table, place_on_leaderboard

__all__ = ["leaderboard", "markdown_table", "place_on_leaderboard"]
