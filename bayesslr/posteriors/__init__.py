"""The named posteriors of the inference benchmark, for samplers written anywhere
(docs/targets.md): the targets API, as data apart from the code that builds them.

* :mod:`bayesslr.posteriors.target`: :class:`~bayesslr.posteriors.target.Target` (one SLR
  posterior as a pure JAX log density, with its teacher, data and Bayes-optimal reference),
  :func:`~bayesslr.posteriors.target.target`, :func:`~bayesslr.posteriors.target.targets`,
  :func:`~bayesslr.posteriors.target.score_draws` (public as ``bayesslr.target`` etc.) and the
  stored targets' records (``bayesslr targets``);
* :mod:`bayesslr.posteriors.entries`: draws made outside the package as entries of the
  inference leaderboard (``bayesslr score-draws --out``).

The reference they are scored against is the stored ground truth of the ``inference`` family
(:mod:`bayesslr.inference.reference`, reading ``bayesslr/data/inference_reference.nc``); its
builder is :mod:`bayesslr.ground_truth`.

:func:`entry` and :func:`write_entry` are loaded on first use.
"""

from __future__ import annotations

from typing import Any

_LAZY = {"entry": "bayesslr.posteriors.entries", "write_entry": "bayesslr.posteriors.entries"}


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        import importlib

        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'bayesslr.posteriors' has no attribute {name!r}")
