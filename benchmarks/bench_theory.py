"""Timing of a full 20-point ``alpha`` curve of the finite-alpha theory (spec section 5).

Target (issue 5): one setting's 20-point curve solves in minutes on two CPU cores. Run::

    .venv/bin/python benchmarks/bench_theory.py [--samples 20000] [--points 20] [--which erm]
                                                [--accel anderson|none]

Prints the compile time apart (first call of the jitted channel), then per point the
iterations and wall time, the total, and the ratio of the total to the target budget
(``--budget-s``, default 600 s: "minutes"). Times measured on a shared machine are inflated by
the other processes; the CPU time of this process is printed too.
"""

from __future__ import annotations

import argparse
import dataclasses
import time

import jax
import jax.numpy as jnp
import numpy as np

import bayesslr  # noqa: F401  (configures JAX)
from bayesslr.activations import get_activation
from bayesslr.channel import channel64
from bayesslr.task import make_task
from bayesslr.theory import bayes as tb
from bayesslr.theory.channel import prox_channel
from bayesslr.theory.erm import ErmTheoryOptions, solve_erm
from bayesslr.theory.solver import continuation


def bench_erm(task, alphas, samples: int, lam: float, accel: str) -> float:
    opt = ErmTheoryOptions(samples=samples)
    opt = dataclasses.replace(opt, solver=dataclasses.replace(opt.solver, accel=accel))
    print(f"erm solver: accel={accel} tol={opt.solver.tol:g} damping={opt.solver.damping}")
    ch = channel64(task, samples, opt.seed)

    def timed_call(m_k: float, q_k: float) -> float:
        t0 = time.perf_counter()
        with jax.enable_x64(True):
            jax.block_until_ready(prox_channel(get_activation("softmax"), ch, m_k, q_k, 1.0, 1.0,
                                               1.5, 1.0, jnp.zeros(0), n_explore=opt.n_explore,
                                               n_refine=opt.n_refine, shift=opt.shift))
        return time.perf_counter() - t0

    t_first = timed_call(1.0, 1.5)  # compile + run
    t_call = timed_call(1.1, 1.6)  # new overlaps, same shapes: run only
    print(f"erm channel: first call (compile + run) {t_first:.1f} s, one call {t_call:.2f} s "
          f"({samples} samples)")
    t0 = time.perf_counter()

    def solve_at(alpha, x0):  # erm_curve's upward sweep, printing each point as it lands
        r = solve_erm(task, "softmax", alpha, lam, lam, opt, start="informed", x0=x0)
        print(f"  alpha={r.alpha:7.3f} test_error={r.test_error:.4f} converged={r.converged} "
              f"iterations={r.iterations:3d} time={r.runtime_s:6.1f} s", flush=True)
        return r

    best = continuation(solve_at, alphas, None)
    total = time.perf_counter() - t0
    print(f"erm curve: {len(alphas)} points in {total:.1f} s "
          f"({sum(r.iterations for r in best)} iterations)")
    return total


def bench_bayes(task, alphas, samples: int) -> float:
    opt = tb.BayesTheoryOptions(samples=samples)
    t0 = time.perf_counter()
    pts = tb.bayes_curve(task, alphas, opt)
    total = time.perf_counter() - t0
    for p in pts:
        print(f"  alpha={p.alpha:7.3f} test_error={p.best.test_error:.4f} "
              f"hard_phase={p.hard_phase} iterations={p.informed.iterations}+"
              f"{p.uninformed.iterations}")
    print(f"bayes curve (both starts): {len(alphas)} points in {total:.1f} s")
    return total


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--samples", type=int, default=20_000)
    ap.add_argument("--points", type=int, default=20)
    ap.add_argument("--which", choices=("erm", "bayes", "both"), default="both")
    ap.add_argument("--lam", type=float, default=0.1)
    ap.add_argument("--accel", choices=("anderson", "none"), default="anderson",
                    help="ERM fixed-point acceleration (none: the plain damped iteration)")
    ap.add_argument("--budget-s", type=float, default=600.0)
    a = ap.parse_args()
    task = make_task("spiked", 3, 2.0, 0.0, 1)
    alphas = [float(x) for x in np.linspace(1.0, 20.0, a.points)]
    cpu0 = time.process_time()
    total = 0.0
    if a.which in ("erm", "both"):
        total += bench_erm(task, alphas, a.samples, a.lam, a.accel)
    if a.which in ("bayes", "both"):
        total += bench_bayes(task, alphas, a.samples)
    print(f"total {total:.1f} s wall, {time.process_time() - cpu0:.1f} s CPU; "
          f"ratio to budget {total / a.budget_s:.2f}")


if __name__ == "__main__":
    main()
