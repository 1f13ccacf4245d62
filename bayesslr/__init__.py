"""bayesslr: reference benchmark suite for single-location regression (SLR).

Duranthon, Marion, Boyer, Loureiro, Zdeborová, "Statistical Advantage of Softmax Attention:
Insights from Single-Location Regression", arXiv 2509.21936. The model, its conventions, each
estimator and the theory's equations are written down in ``docs/`` (``docs/model.md`` first).

The public API, one name per task (each documented with a runnable example):

* the task: :func:`make_task`, :func:`sample_task` (one key -> teacher, train, test),
  :func:`as_data` (a user's own arrays), :func:`seed_key`;
* the population level: :func:`bayes_risk`, :func:`best_excess_risk`, :func:`excess_risk`,
  :func:`excess_over_bayes` (on common random numbers);
* ERM on given data, batched over ``lam``: :func:`fit_erm`;
* the Bayes-optimal estimator by NUTS on given data: :func:`sample_posterior` (returns a
  :class:`Posterior` with the ArviZ ``InferenceData``, diagnostics, overlaps and a
  posterior-mean ``predict``);
* GAMP on given data (the algorithm the Bayes state evolution describes, docs/amp.md):
  :func:`gamp`, its posterior-mean prediction :func:`gamp_predict`, :class:`GampOptions`;
* scoring any predictor on fresh test data: :func:`test_errors`;
* theory curves over ``alpha`` as xarray: :func:`replica_curve` (ERM),
  :func:`state_evolution` (Bayes-optimal);
* sweeps: :func:`run` (a preset, a TOML file or a dict), :func:`load` (a results directory),
  :func:`load_reference` (the shipped results of the paper's settings: ``"reference"``, sizes
  reduced, or ``"paper"``, the paper's sizes);
  single cells: :func:`run_cell` with :class:`Cell`; every family's options and outputs:
  :func:`families`;
* the inference benchmark's posteriors for samplers written anywhere (docs/targets.md):
  :func:`targets` (the stored ones by name), :func:`target` (a :class:`Target`: a pure JAX
  log density, teacher, data, prior starts and the Bayes-optimal reference) and
  :func:`score_draws` (draws from any sampler scored against the reference);
  :func:`leaderboard` (NUTS in NumPyro, BlackJAX and nutpie on every target at equal gradient
  budgets) and :func:`place_on_leaderboard` (a user's score beside it);
* JAX set-up, explicit: :func:`configure_jax` (the ``bayesslr`` command calls it; importing
  the package changes no environment variable and no JAX setting).

Names are loaded on first use, so ``import bayesslr`` stays light.
"""

from __future__ import annotations

import importlib
from typing import Any

__version__ = "0.2.0"

# public name -> module that defines it
_API: dict[str, str] = {
    "configure_jax": "bayesslr.core.jaxconfig",
    "make_task": "bayesslr.core.task",
    "sample_task": "bayesslr.core.task",
    "as_data": "bayesslr.core.task",
    "seed_key": "bayesslr.core.task",
    "TaskConfig": "bayesslr.core.task",
    "LengthLaw": "bayesslr.core.task",
    "Teacher": "bayesslr.core.task",
    "Data": "bayesslr.core.task",
    "ConfigError": "bayesslr.core.task",
    "bayes_risk": "bayesslr.population.method",
    "best_excess_risk": "bayesslr.population.method",
    "excess_risk": "bayesslr.population.method",
    "excess_over_bayes": "bayesslr.population.method",
    "fit_erm": "bayesslr.erm.protocol",
    "ERMFit": "bayesslr.erm.protocol",
    "sample_posterior": "bayesslr.bayes.posterior",
    "Posterior": "bayesslr.bayes.posterior",
    "test_errors": "bayesslr.core.metrics",
    "gamp": "bayesslr.amp.gamp",
    "gamp_predict": "bayesslr.amp.gamp",
    "GampOptions": "bayesslr.amp.gamp",
    "replica_curve": "bayesslr.theory.curves",
    "state_evolution": "bayesslr.theory.curves",
    "run": "bayesslr.sweep.api",
    "load": "bayesslr.sweep.api",
    "load_reference": "bayesslr.results.reference",
    "run_cell": "bayesslr.registry",
    "Cell": "bayesslr.registry",
    "families": "bayesslr.registry",
    "targets": "bayesslr.posteriors.target",
    "target": "bayesslr.posteriors.target",
    "Target": "bayesslr.posteriors.target",
    "score_draws": "bayesslr.posteriors.target",
    "leaderboard": "bayesslr.crosslibrary.board",
    "place_on_leaderboard": "bayesslr.crosslibrary.board",
}

__all__ = ["__version__", *_API]


def __getattr__(name: str) -> Any:
    module = _API.get(name)
    if module is None:
        raise AttributeError(f"module 'bayesslr' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
