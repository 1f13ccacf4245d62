"""Passes over the data of the ERM protocols, by batch size: the load-free input of the ERM
cost model (``bayesslr/erm/method.py``, ``ERM_COST``; issue 15 item 1).

For each ``alpha`` and activation (spiked, ``L = 3``, ``nu = 2``, the paper's sizing
``D = sqrtND / sqrt(alpha)``, informed start, one seed), counts the shared evaluations that
:func:`bayesslr.erm.protocol.fit_seeds` runs at each batch size for

* ``fixed``: one fit at ``--lam`` (what a fixed or ``lam = "replica"`` cell runs);
* ``grid``: the validation search of ``lam = "validation"`` (the default 7-value grid on
  80% of the training set, the batch shrinking as members stop), before its refit;

and times one evaluation at each batch size (best of 5), so that the grid's cost is expressed in
single-member passes: ``grid_passes_equiv = sum_G passes_G x t_G / t_1``. Evaluation counts do
not depend on the machine's load; the ``t_G / t_1`` ratios do a little.

Run: ``nice -n 10 .venv/bin/python benchmarks/studies/bench_erm_passes.py [--sqrtND 3000]
[--alphas 0.5,2,5,20] [--activations softmax,linear]``; one JSON line per setting, appended to
``--out``. Results: ``benchmarks/README.md``, section "Cost model".
"""

# isort: skip_file
from __future__ import annotations

import bayesslr  # noqa: F401  (JAX configuration, compilation cache)

import argparse
import json
import math
import os
import sys

import numpy as np

from bayesslr.erm.protocol import ERMOptions, fit_seeds
from bayesslr.core.task import make_task
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # benchmarks/
from bench_erm_lam_grid import eval_times  # noqa: E402  (the same timing of one evaluation)


def eval_ratios(task, activation, n, sizes, repeats=5):
    """``t_G / t_1`` of one shared evaluation per batch size ``G`` (timed by
    ``bench_erm_lam_grid.eval_times``), and ``t_1``."""
    out = eval_times(task, activation, n, set(sizes) | {1}, repeats=repeats)
    return {G: t / out[1] for G, t in out.items()}, out[1]


def measure(sqrtND: float, alpha: float, activation: str, lam: float) -> dict:
    D = int(round(sqrtND / math.sqrt(alpha)))
    n = int(round(alpha * D))
    task = make_task("spiked", L=3, nu=2.0, delta=0.01, D=D)
    opts = ERMOptions()
    fixed: dict[int, int] = {}
    res, _, _ = fit_seeds(task, activation, n, [0], [lam], opts=opts, passes=fixed)
    n_val = min(max(1, int(round(opts.val_frac * n))), n - 1)
    grid: dict[int, int] = {}
    res_g, _, val = fit_seeds(task, activation, n, [0], opts.lam_grid, opts=opts,
                              n_fit=n - n_val, passes=grid)
    val = np.where(np.isfinite(val), val, np.inf).mean(axis=0)
    chosen = float(opts.lam_grid[int(np.argmin(val))])  # as select_lam chooses
    refit: dict[int, int] = {}
    fit_seeds(task, activation, n, [0], [chosen], opts=opts, passes=refit)
    ratios, t1 = eval_ratios(task, activation, n, grid)
    equiv = sum(p * ratios[G] for G, p in grid.items())
    return {"sqrtND": sqrtND, "alpha": alpha, "activation": activation, "D": D, "N": n,
            "lam": lam, "fixed_passes": sum(fixed.values()),
            "fixed_converged": bool(np.all(res.converged)),
            "grid_passes": {str(G): p for G, p in sorted(grid.items(), reverse=True)},
            "grid_member_evaluations": [int(x) for x in np.asarray(res_g.evaluations[0])],
            "grid_converged": [bool(x) for x in np.asarray(res_g.converged[0])],
            "grid_passes_equiv": equiv, "lam_chosen": chosen,
            "refit_passes": sum(refit.values()),
            "eval_ratio_G": {str(G): r for G, r in ratios.items()}, "eval_1_s": t1,
            "validation_over_fixed": (equiv + sum(refit.values())) / sum(fixed.values()),
            "load": os.getloadavg()[0]}


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sqrtND", type=float, default=3000)
    ap.add_argument("--alphas", default="0.5,2,5,20")
    ap.add_argument("--activations", default="softmax,linear")
    ap.add_argument("--lam", type=float, default=0.1)
    ap.add_argument("--out", default="erm_passes.jsonl")
    args = ap.parse_args()
    for act in args.activations.split(","):
        for a in (float(x) for x in args.alphas.split(",")):
            rec = measure(args.sqrtND, a, act, args.lam)
            with open(args.out, "a") as f:
                f.write(json.dumps(rec) + "\n")
            print(json.dumps(rec), flush=True)
