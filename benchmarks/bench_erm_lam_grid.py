"""Cost of a 10-value ``lam`` grid fitted in one batch vs 10 single fits (spec section 4).

The grid shares one training set: :func:`bayesslr.erm.protocol.fit_seeds` ``vmap``-s the L-BFGS
runs over the grid, so every function evaluation reads the data matrix once for all ten. Both
sides are compiled first (compile time reported apart) and timed after ``block_until_ready``
(``fit_seeds`` returns numpy arrays, so it blocks).

The batch costs (largest per-member number of evaluations) x (cost of one batched evaluation);
ten single fits cost (sum of evaluations) x (cost of one single evaluation). Measured on the
2-core development machine (spiked, L = 3, nu = 2, alpha = 5, grid logspace(-3, 1, 10)): the
slowest member (the smallest ``lam``) needs about three times the mean number of evaluations;
a batched evaluation of ten members costs ~2x a single one at D = 600 and 1000 (the data matrix
no longer fits in cache, so reading it dominates) but ~6x at D = 200 (compute and per-op
overhead dominate). Ratios grid / ten singles: 2.45 (D = 200), 0.55 (D = 600), 0.55
(D = 1000, where the smallest ``lam`` also hit ``max_iter = 1000``).

Run: ``.venv/bin/python benchmarks/bench_erm_lam_grid.py [--D 400] [--alpha 5] [--repeats 3]``
prints a table and the ratio ``grid / (10 single fits)``; or
``.venv/bin/python -m pytest benchmarks/bench_erm_lam_grid.py --benchmark-only`` for
pytest-benchmark timings of both sides.
"""

# isort: skip_file
from __future__ import annotations

import bayesslr  # noqa: F401  (JAX configuration, compilation cache)

import argparse
import time

import numpy as np
import pytest

from bayesslr.erm.protocol import ERMOptions, fit_seeds
from bayesslr.task import make_task

GRID = tuple(float(x) for x in np.logspace(-3, 1, 10))
OPTS = ERMOptions()


def _setup(D: int, alpha: float, activation: str = "softmax"):
    task = make_task("spiked", L=3, nu=2.0, delta=0.0, D=D)
    return task, activation, int(round(alpha * D))


def fit_grid(task, activation, n):
    return fit_seeds(task, activation, n, [0], GRID, opts=OPTS)


def fit_singles(task, activation, n):
    return [fit_seeds(task, activation, n, [0], [lam], opts=OPTS) for lam in GRID]


def compare(D: int = 400, alpha: float = 5.0, repeats: int = 3,
            activation: str = "softmax") -> dict[str, float]:
    """Median wall times (compile excluded) and the ratio grid / singles."""
    task, act, n = _setup(D, alpha, activation)
    t = time.perf_counter()
    grid = fit_grid(task, act, n)
    compile_grid = time.perf_counter() - t
    t = time.perf_counter()
    fit_seeds(task, act, n, [0], [GRID[0]], opts=OPTS)
    compile_single = time.perf_counter() - t
    tg, ts = [], []
    for _ in range(repeats):
        t = time.perf_counter()
        fit_grid(task, act, n)
        tg.append(time.perf_counter() - t)
        t = time.perf_counter()
        singles = fit_singles(task, act, n)
        ts.append(time.perf_counter() - t)
    it_grid = int(np.max(grid[0].iterations))
    it_single = int(np.sum([s[0].iterations for s in singles]))
    ev_grid = int(np.max(grid[0].evaluations))
    ev_single = int(np.sum([s[0].evaluations for s in singles]))
    return {"D": D, "N": n, "grid_s": float(np.median(tg)), "singles_s": float(np.median(ts)),
            "ratio": float(np.median(tg) / np.median(ts)), "first_call_grid_s": compile_grid,
            "first_call_single_s": compile_single, "grid_iterations_max": it_grid,
            "single_iterations_sum": it_single, "grid_evaluations_max": ev_grid,
            "single_evaluations_sum": ev_single}


@pytest.fixture(scope="module")
def problem():
    return _setup(200, 5.0)


def test_bench_grid(benchmark, problem):
    fit_grid(*problem)
    benchmark(fit_grid, *problem)


def test_bench_singles(benchmark, problem):
    fit_singles(*problem)
    benchmark(fit_singles, *problem)


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--D", type=int, default=400)
    ap.add_argument("--alpha", type=float, default=5.0)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--activation", default="softmax")
    args = ap.parse_args()
    res = compare(args.D, args.alpha, args.repeats, args.activation)
    for k, v in res.items():
        print(f"{k:>24s}  {v:.4g}" if isinstance(v, float) else f"{k:>24s}  {v}")
    print(f"10-value lam grid costs {res['ratio']:.2f} x ten single fits")
