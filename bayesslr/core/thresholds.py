"""The convergence thresholds of the samplers, in one table (as ArviZ keeps its defaults in
``rcparams``): split R-hat at most ``r_hat_max``, bulk (and, where checked, tail) ESS at least
``ess_min`` (per chain when ``per_chain``), no divergent transition.

Three uses, three rows, two R-hat values, each chosen for what its verdict decides:

* ``bayes_sampling``: the Bayes-optimal estimator's cells and the report's claim on them
  (:func:`bayesslr.bayes.method.verdict`, :mod:`bayesslr.report.claims`): Vehtari et al.
  (2021, "Rank-normalization, folding, and localization: an improved R-hat") recommend
  R-hat < 1.01 and 100 bulk and tail ESS per chain before a posterior mean is trusted;
* ``reference``: the inference benchmark's ground truth (:mod:`bayesslr.ground_truth`),
  the same R-hat and 400 bulk ESS in all (4 chains x 100): it must be at least as good as
  what it scores;
* ``inference``: the budgeted samplers of the leaderboard (:mod:`bayesslr.inference.method`),
  R-hat <= 1.05 and 100 bulk ESS in all. Their runs stop at a fixed gradient budget, often
  with few draws per chain, and the flag says whether the chains mixed at all; whether the
  answer is right is judged against the reference, not by this flag.

The stored cells depend on these values (their ``converged``/``reason`` outputs): changing one
changes that family's numbers and needs a version bump.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass


@dataclass(frozen=True)
class Convergence:
    """One row of :data:`CONVERGENCE`.

    Attributes
    ----------
    r_hat_max : float
        Largest split (rank-normalised) R-hat accepted.
    ess_min : float
        Smallest bulk ESS accepted (tail ESS too where the check reads it).
    per_chain : bool
        ``ess_min`` is per chain (multiply by the number of chains).
    """

    r_hat_max: float
    ess_min: float
    per_chain: bool

    def ess_floor(self, chains: float = 1.0) -> float:
        """The ESS floor of a run with ``chains`` chains."""
        return self.ess_min * chains if self.per_chain else self.ess_min


CONVERGENCE: dict[str, Convergence] = {
    "bayes_sampling": Convergence(r_hat_max=1.01, ess_min=100.0, per_chain=True),
    "reference": Convergence(r_hat_max=1.01, ess_min=400.0, per_chain=False),
    "inference": Convergence(r_hat_max=1.05, ess_min=100.0, per_chain=False),
}

# the bayes_sampling row by name, read by that family's verdict (bayesslr.bayes.method.verdict)
# and by the report's sampler claims, which quote the same thresholds
RHAT_MAX: float = CONVERGENCE["bayes_sampling"].r_hat_max
ESS_PER_CHAIN_MIN: float = CONVERGENCE["bayes_sampling"].ess_min


# parallel tempering (bayesslr.bayes.pt), on top of its row's R-hat and ESS rule: every pair of
# neighbouring temperatures swaps at least this often in the sampling phase (below it the ladder
# is cut in two and the cold chain never sees the hot end), and the cold slot's state makes at
# least this many round trips b = 1 -> beta_min -> b = 1 per independent replica system
# (without one, tempering did not act and the run is plain HMC from its start)
PT_SWAP_RATE_MIN = 0.1
PT_ROUND_TRIPS_PER_CHAIN_MIN = 1


def chain_failures(summary: Mapping[str, float], row: Convergence, chains: float = 1.0, *,
                   ess: tuple[str, ...] = ("ess_bulk_min",)) -> list[str]:
    """The one R-hat / ESS check of a run's chains against a row of :data:`CONVERGENCE`: why
    they fail it, one phrase each (``r_hat_max 1.0103 > 1.01``, ``ess_bulk_min 87.3 < 400``),
    empty when they pass. A missing or NaN diagnostic fails.

    Parameters
    ----------
    summary : mapping
        ``r_hat_max`` and the ESS named in ``ess``.
    row : Convergence
        The thresholds (``CONVERGENCE["bayes_sampling"]``, ``["reference"]``,
        ``["inference"]``).
    chains : float
        Chains of the run (a per-chain ESS floor is multiplied by it).
    ess : tuple of str
        The ESS diagnostics checked against the floor (bulk; bulk and tail).

    Examples
    --------
    >>> from bayesslr.core.thresholds import CONVERGENCE, chain_failures
    >>> chain_failures({"r_hat_max": 1.0103, "ess_bulk_min": 87.3}, CONVERGENCE["reference"])
    ['r_hat_max 1.0103 > 1.01', 'ess_bulk_min 87.3 < 400']
    >>> chain_failures({"r_hat_max": 1.002, "ess_bulk_min": 900, "ess_tail_min": 700},
    ...                CONVERGENCE["bayes_sampling"], 4, ess=("ess_bulk_min", "ess_tail_min"))
    []
    """
    fails = []
    r = summary.get("r_hat_max", math.nan)
    if not r <= row.r_hat_max:
        fails.append(f"r_hat_max {num(r, row.r_hat_max)} > {row.r_hat_max}")
    floor = row.ess_floor(chains)
    for name in ess:
        e = summary.get(name, math.nan)
        if not e >= floor:
            fails.append(f"{name} {num(e, floor)} < {floor:g}")
    return fails


def digits(*values: float, at_least: int = 3) -> int:
    """Significant digits that print distinct values distinctly (at least ``at_least``, at
    most 10): a comparison never shows two equal numbers for two different values."""
    vals = [float(v) for v in values if v is not None and math.isfinite(float(v))]
    for d in range(at_least, 11):
        shown = [float(f"{v:.{d}g}") for v in vals]
        if all(shown[i] != shown[j] or vals[i] == vals[j]
               for i in range(len(vals)) for j in range(i + 1, len(vals))):
            return d
    return 10


def num(x: float, *others: float) -> str:
    """``x`` with three significant digits, more where it would print like one of
    ``others`` (the values it is compared with): a sampler's reason never reads
    ``1.01 > 1.01``, nor a verdict two equal numbers for two different values.

    Examples
    --------
    >>> num(1.0103, 1.01), num(1.2, 1.01), num(99.96, 100)
    ('1.0103', '1.2', '99.96')
    """
    if x is None or not math.isfinite(float(x)):
        return "nan"
    return f"{float(x):.{digits(x, *others)}g}"
