"""L-BFGS history and stopping rule on the ``lam`` grid: evaluations per ``lam`` and what the
fits give (docs/estimators.md; issue 15 item 4).

The 10-``lam`` x 4-seed grid of ``bench_erm_lam_grid.py`` (spiked, ``L = 3``, ``nu = 2``,
``alpha = 5``, ``D = 400``, grid ``logspace(-3, 1, 10)``, informed start) is bounded below by
its slowest member: a seed's batch runs until its slowest ``lam`` stops. This script fits the
grid under several ``memory:gtol[:scaling]`` settings (L-BFGS history, tolerance on
``|grad S| / sqrt(D)``, and the initial inverse Hessian ``scalar`` or ``block``: see
:func:`bayesslr.erm.lbfgs.lbfgs_solve_batch`; the first setting is the reference, by default
the package's) on the same seeds and prints, per setting:

* the evaluations per ``lam`` (summed over seeds; they do not depend on the machine's load),
  their total, and the evaluation bound of the grid against the mean single fit
  (``sum over seeds of the slowest member / (all evaluations / 10)``; the issue's target for
  the wall-time ratio is 3);
* the converged fits;
* against the reference, on the same seeds: the largest ``|mean difference|`` of the test
  error over the penalties in units of its seed-to-seed standard error, the largest per-seed
  ``|difference|`` in units of that seed's test-set standard error, and the largest
  ``|mean difference|`` of the seven overlaps in seed-to-seed standard errors.

Run:
``.venv/bin/python benchmarks/studies/bench_erm_lbfgs_settings.py 10:1e-4 30:1e-4 10:1e-4:block``
(``--D``, ``--seeds``; ``--out FILE`` appends one JSON record per setting). Results are in
``benchmarks/README.md`` (section ERM).
"""

# isort: skip_file
from __future__ import annotations

import bayesslr  # noqa: F401  (JAX configuration, compilation cache)

import argparse
import json
import os
import sys
import time

import numpy as np

from bayesslr.erm import lbfgs
from bayesslr.erm.lbfgs import DEFAULT_GTOL, DEFAULT_MEMORY
from bayesslr.erm.protocol import ERMOptions, evaluate_grid, fit_seeds

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # benchmarks/
from bench_erm_lam_grid import GRID, _setup  # noqa: E402


def fit_setting(memory: int, gtol: float, scaling: str, D: int = 400,
                n_seeds: int = 4) -> dict:
    """Fit the grid with one setting; evaluations, flags, test errors and overlaps."""
    task, act, n = _setup(D, 5.0)
    seeds = list(range(n_seeds))
    opts = ERMOptions(memory=memory, gtol=gtol)
    default, lbfgs.DEFAULT_SCALING = lbfgs.DEFAULT_SCALING, scaling
    try:
        t = time.perf_counter()
        res = fit_seeds(task, act, n, seeds, GRID, opts=opts)
        t_fit = time.perf_counter() - t
    finally:
        lbfgs.DEFAULT_SCALING = default
    errs, ovs = evaluate_grid(task, act, seeds, res[0].params, opts.n_test)
    return {"memory": memory, "gtol": gtol, "scaling": scaling, "D": D, "seeds": seeds,
            "fit_s_with_compile": t_fit, "load": os.getloadavg()[0],
            "evals": np.asarray(res[0].evaluations).tolist(),  # (seed, lam)
            "converged": np.asarray(res[0].converged).tolist(),
            "objective": np.asarray(res[0].objective).tolist(),
            "test_error": np.asarray([e.test_error for e in errs]).T.tolist(),  # (seed, lam)
            "stderr": np.asarray([e.stderr for e in errs]).T.tolist(),
            "overlaps": {k: np.asarray([o[k] for o in ovs]).T.tolist() for k in ovs[0]}}


def summary(rec: dict, ref: dict | None) -> str:
    """One table row (see the module docstring)."""
    ev = np.asarray(rec["evals"])
    conv = np.asarray(rec["converged"])
    bound = ev.max(1).sum() / (ev.sum() / ev.shape[1])
    row = (f"| {rec['memory']}, {rec['gtol']:.0e}, {rec['scaling']} | "
           f"{' '.join(map(str, ev.sum(0)))} | "
           f"{ev.sum()} | {bound:.2f} | {conv.sum()}/{conv.size} |")
    if ref is None:
        return row + " (reference) | | |"
    te, te0 = np.asarray(rec["test_error"]), np.asarray(ref["test_error"])
    se_mean = te0.std(0, ddof=1) / np.sqrt(te0.shape[0])
    z_mean = np.max(np.abs((te - te0).mean(0)) / se_mean)
    z_seed = np.max(np.abs(te - te0) / np.asarray(ref["stderr"]))
    z_ov = 0.0
    for k, o0 in ref["overlaps"].items():
        o0, o = np.asarray(o0), np.asarray(rec["overlaps"][k])
        se = o0.std(0, ddof=1) / np.sqrt(o0.shape[0])
        z_ov = max(z_ov, float(np.max(np.abs((o - o0).mean(0)) / se)))
    return row + f" {z_mean:.2f} | {z_seed:.2f} | {z_ov:.2f} |"


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("settings", nargs="*", default=[f"{DEFAULT_MEMORY}:{DEFAULT_GTOL}",
                                                    "30:1e-4", "10:1e-3"],
                    help="memory:gtol[:scaling], the first is the reference")
    ap.add_argument("--D", type=int, default=400)
    ap.add_argument("--seeds", type=int, default=4)
    ap.add_argument("--out", default=None, help="append one JSON record per setting")
    args = ap.parse_args()
    print(f"load {os.getloadavg()[0]:.1f}; lam grid {' '.join(f'{x:.0e}' for x in GRID)}")
    print(f"| memory, gtol, scaling | evaluations per lam ({args.seeds} seeds) | all | bound | "
          "converged | test error, mean / se | test error, per seed / stderr | overlaps / se |")
    ref = None
    for spec in args.settings:
        m, g, *sc = spec.split(":")
        rec = fit_setting(int(m), float(g), sc[0] if sc else lbfgs.DEFAULT_SCALING, args.D,
                          args.seeds)
        print(summary(rec, ref), flush=True)
        if args.out:
            with open(args.out, "a") as f:
                f.write(json.dumps(rec) + "\n")
        ref = ref or rec
