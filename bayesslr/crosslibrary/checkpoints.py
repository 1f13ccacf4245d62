"""A run scored at budget checkpoints: error against gradient evaluations as a curve.

At a budget ``B`` (gradient evaluations, all chains together, warm-up included) the draws are
the **prefix** of the one run (:class:`bayesslr.crosslibrary.runners.Run`): the post-warm-up
iterations ``i`` such that the gradients spent up to and including iteration ``i`` of every
chain (they advance in step) are at most ``B``. The points of one curve are therefore not
independent runs: they share their first draws.

At each budget (:func:`score_run`):

* ``excess`` ± ``excess_stderr``: :func:`bayesslr.score_draws` of the prefix's draws against
  the target's reference (paired on the same test inputs), on at most :data:`SCORE_DRAWS`
  draws per chain, thinned evenly (the predictor's cost grows with the draws; the R-hat and
  ESS below use every draw); ``reaches_reference``: excess at most 3 of its standard errors;
* ``ess_bulk_min``, ``ess_tail_min``, ``r_hat_max`` over the ``2 D`` coordinates (ArviZ),
  ``divergences``, ``converged``: :data:`bayesslr.core.thresholds.CONVERGENCE` ``"inference"``
  (R-hat at most 1.05, 100 bulk ESS in all, no divergence);
* ``ess_per_grad``, and ``ess_per_s`` / ``ess_per_cpu_s``: the bulk ESS over the wall / CPU
  seconds the run took to reach the prefix's gradients (its timeline, interpolated; the
  compilation apart: ``compile_s``);
* ``status``: ``ok``; ``warmup_unfinished`` (the warm-up alone costs more than ``B``: no draws);
  ``too_few_draws`` (fewer than :data:`MIN_DRAWS` per chain); ``budget_not_reached`` (the run
  stopped before spending ``B``).
"""

from __future__ import annotations

import json
import os
from typing import Any

import numpy as np
import xarray as xr

from bayesslr.core.thresholds import CONVERGENCE
from bayesslr.crosslibrary.runners import Run

SCORE_DRAWS = 250  # draws per chain the predictor is scored on (thinned evenly)
MIN_DRAWS = 10  # draws per chain below which no R-hat, ESS or score is computed
BUDGET_VARS: tuple[str, ...] = (
    "grad_evals", "draws_per_chain", "test_error", "excess", "excess_stderr",
    "reaches_reference", "ess_bulk_min", "ess_tail_min", "r_hat_max", "divergences",
    "converged", "ess_per_grad", "wall_s", "cpu_s", "ess_per_s", "ess_per_cpu_s")
STATUSES: tuple[str, ...] = ("ok", "warmup_unfinished", "too_few_draws", "budget_not_reached",
                             "failed", "missing")


def prefix_length(run: Run, budget: float) -> int:
    """Post-warm-up iterations per chain within ``budget`` gradients (warm-up included).

    Examples
    --------
    >>> import numpy as np
    >>> from bayesslr.crosslibrary.runners import Run
    >>> z = np.zeros((2, 3, 1))
    >>> r = Run("numpyro", z, z, np.full((2, 2), 5), np.full((2, 3), 10), z[..., 0] > 0, 2,
    ...         np.array([[2, 0, 0], [82, 1, 1]]), 0.0)
    >>> [prefix_length(r, b) for b in (10, 22, 41, 42, 62, 1e9)]
    [0, 0, 0, 1, 2, 3]
    """
    start = run.init_grads + int(run.warmup_grads.sum())
    cum = start + np.cumsum(run.grads.sum(axis=0))
    return int(np.searchsorted(cum, budget, side="right")) if start <= budget else 0


def _diagnostics(k: np.ndarray, v: np.ndarray) -> dict[str, float]:
    import arviz as az

    ds = az.convert_to_dataset({"k": k, "v": v})
    bulk = az.ess(ds, method="bulk")
    tail = az.ess(ds, method="tail")
    rhat = az.rhat(ds)
    cat = lambda d: np.concatenate([np.ravel(d[c].values) for c in "kv"])  # noqa: E731
    return {"ess_bulk_min": float(np.min(cat(bulk))), "ess_tail_min": float(np.min(cat(tail))),
            "r_hat_max": float(np.max(cat(rhat)))}


def score_run(run: Run, target: Any, budgets: tuple[float, ...]) -> xr.Dataset:
    """The run scored at each budget (the module's variables), one ``budget`` dimension.

    Examples
    --------
    A made-up run (prior draws, 10 gradients an iteration, 2 chains, 50 warm-up gradients):

    >>> import jax, numpy as np, bayesslr as bs
    >>> from bayesslr.crosslibrary.runners import Run
    >>> t = bs.target("slr_spiked_L3_nu2_delta0.01-D50_alpha5_seed0")
    >>> d = t.init(jax.random.key(0), 2 * 40)
    >>> k, v = (np.asarray(d[c]).reshape(2, 40, t.D) for c in "kv")
    >>> r = Run("numpyro", k, v, np.full((2, 5), 5), np.full((2, 40), 10),
    ...         np.zeros((2, 40), bool), 2, np.array([[2, 0, 0], [852, 1.0, 2.0]]), 0.5)
    >>> ds = score_run(r, t, (40.0, 200.0, 800.0, 1000.0))
    >>> [str(s) for s in ds["status"].values]
    ['warmup_unfinished', 'too_few_draws', 'ok', 'budget_not_reached']
    >>> int(ds["grad_evals"].sel(budget=800.0)), int(ds["draws_per_chain"].sel(budget=800.0))
    (792, 37)
    >>> bool(ds["excess"].sel(budget=800.0) > 0.3)  # prior draws: far from the posterior
    True
    """
    import bayesslr as bs

    conv = CONVERGENCE["inference"]
    rows, status = [], []
    tl = np.asarray(run.timeline, float)
    start = run.init_grads + int(run.warmup_grads.sum())
    for b in budgets:
        row = dict.fromkeys(BUDGET_VARS, np.nan)
        n = prefix_length(run, b)
        if start > b:
            status.append("warmup_unfinished")
        elif run.total_grads < b:
            status.append("budget_not_reached")
        elif n < MIN_DRAWS:
            status.append("too_few_draws")
        else:
            k, v = run.k[:, :n], run.v[:, :n]
            grads = start + int(run.grads[:, :n].sum())
            step = max(1, n // SCORE_DRAWS)
            s = bs.score_draws(target, {"k": k[:, ::step], "v": v[:, ::step]})
            d = _diagnostics(k, v)
            div = int(run.divergent[:, :n].sum())
            wall = float(np.interp(grads, tl[:, 0], tl[:, 1]))
            cpu = float(np.interp(grads, tl[:, 0], tl[:, 2]))
            row.update(grad_evals=grads, draws_per_chain=n, test_error=s["test_error"],
                       excess=s["excess_over_reference"],
                       excess_stderr=s["excess_over_reference_stderr"],
                       reaches_reference=float(s["reaches_reference"]), divergences=div,
                       converged=float(d["r_hat_max"] <= conv.r_hat_max
                                       and d["ess_bulk_min"] >= conv.ess_floor(run.chains)
                                       and div == 0),
                       ess_per_grad=d["ess_bulk_min"] / grads, wall_s=wall, cpu_s=cpu,
                       ess_per_s=d["ess_bulk_min"] / wall if wall > 0 else np.nan,
                       ess_per_cpu_s=d["ess_bulk_min"] / cpu if cpu > 0 else np.nan, **d)
            status.append("ok")
        rows.append(row)
    data = {name: ("budget", np.asarray([r[name] for r in rows], float))
            for name in BUDGET_VARS}
    data["status"] = ("budget", np.asarray(status, dtype=object).astype(str))
    steps = run.grads[:, :].mean() if run.grads.size else np.nan
    data.update(
        compile_s=((), float(run.compile_s)), warmup_grads=((), float(start)),
        total_grads=((), float(run.total_grads)), run_wall_s=((), float(tl[-1, 1])),
        run_cpu_s=((), float(tl[-1, 2])), steps_per_iteration=((), float(steps)),
        total_draws_per_chain=((), float(run.k.shape[1])))
    ds = xr.Dataset(data, coords={"budget": np.asarray(budgets, float)})
    ds.attrs.update(library=run.library, target=target.name,
                    settings=json.dumps(run.settings, sort_keys=True))
    return ds


def failed_row(library: str, target_name: str, budgets: tuple[float, ...], reason: str
               ) -> xr.Dataset:
    """A (target, library) whose run raised: every number NaN, ``status`` ``failed``, the
    reason in ``attrs``."""
    data = {name: ("budget", np.full(len(budgets), np.nan)) for name in BUDGET_VARS}
    data["status"] = ("budget", np.asarray(["failed"] * len(budgets)))
    for name in ("compile_s", "warmup_grads", "total_grads", "run_wall_s", "run_cpu_s",
                 "steps_per_iteration", "total_draws_per_chain"):
        data[name] = ((), np.nan)
    ds = xr.Dataset(data, coords={"budget": np.asarray(budgets, float)})
    ds.attrs.update(library=library, target=target_name, settings="{}",
                    failure=reason[:2000], load=os.getloadavg()[0])
    return ds
