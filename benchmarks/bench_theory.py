"""Timing of a full 20-point ``alpha`` curve of the finite-alpha theory (docs/theory.md).

Target (issue 15): the replica ERM curve of 20 points (softmax, spiked ``L = 3``, ``nu = 2``,
``Delta = 0``, ``lam = 0.1``, ``alpha = 1..20``, 2e4 channel samples, each point with its
channel error) in under 2 minutes on two CPU cores, every point converged or flagged. Run::

    .venv/bin/python benchmarks/bench_theory.py [--samples 20000] [--points 20] [--which erm]
        [--accel anderson|none] [--no-track] [--save out.json] [--compare ref.json]
        [--lamopt 5,10]

Prints the compile time apart (first exploring and first tracked proximal step), one warm
call of each kind and their ratio, then per point: test error, flag, fixed-point iterations,
update calls (exploring + tracked, channel error included), wall seconds and seconds per call;
then the total and its ratio to the budget (``--budget-s``, default 120 s). ``--save`` writes
every point (JSON); ``--compare`` reads such a file (e.g. from an older version of the code,
same seeds) and prints, per point, the test-error difference in units of the combined
standard error (the numbers must not move beyond the channel Monte Carlo error).
``--lamopt`` times ``lam='optimal'`` (:func:`bayesslr.theory.lam_opt.optimal_lambda_curve`)
on the given ``alpha`` values (``--which lamopt``: that curve alone, by default on the paper
preset's replica grid, ``Delta = 0.01``): per point the optimum, solves, iterations, update
calls, wall and CPU seconds.

Times measured on a shared machine are inflated by the other processes: the load average and
this process's CPU time are printed too.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import os
import time

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from benchutil import ratio, record, stat

import bayesslr  # noqa: F401  (configures JAX)
from bayesslr.core.activations import get_activation
from bayesslr.core.task import make_task
from bayesslr.population.teacher_channel import channel64
from bayesslr.theory import bayes as tb
from bayesslr.theory import erm as erm_module
from bayesslr.theory.erm import ErmTheoryOptions, solve_erm
from bayesslr.theory.erm_proximal import cold_starts, prox_step, tracked_starts
from bayesslr.theory.solver import continuation


def _load() -> str:
    return f"load {os.getloadavg()[0]:.1f}"


def bench_prox(task, opt: ErmTheoryOptions) -> None:
    """One exploring and one tracked proximal step: compile apart, then warm."""
    ch = channel64(task, opt.samples, opt.seed)
    act = get_activation("softmax")

    def timed(starts, n: int, m: int, m_k: float) -> tuple[float, float, object]:
        t0, c0 = time.perf_counter(), time.process_time()
        with jax.enable_x64(True):
            out = jax.block_until_ready(prox_step(
                act, ch, m_k, 1.6, 1.0, 1.0, 1.5, 1.0, jnp.zeros(0), starts, n_explore=n,
                n_refine=m, n_best=opt.n_best, n_keep=opt.n_keep))
        return time.perf_counter() - t0, time.process_time() - c0, out

    with jax.enable_x64(True):
        cold = cold_starts(task.L_max, opt.shift)
    first_e, _, out = timed(cold, opt.n_explore, opt.n_refine, 1.0)
    with jax.enable_x64(True):
        tr = tracked_starts(out.minima)
    first_t, _, _ = timed(tr, opt.n_track, opt.n_track, 1.0)
    we, ce, _ = timed(cold, opt.n_explore, opt.n_refine, 1.01)
    wt, ct, _ = timed(tr, opt.n_track, opt.n_track, 1.01)
    print(f"proximal step ({opt.samples} samples): first exploring call {first_e:.1f} s, first "
          f"tracked {first_t:.1f} s (compile + run); warm: exploring {we:.2f} s wall "
          f"({ce:.2f} s CPU), tracked {wt:.2f} s ({ct:.2f} s CPU), ratio {we / wt:.1f}; "
          f"{_load()}", flush=True)


def bench_erm(task, alphas, opt: ErmTheoryOptions, lam: float, budget: float,
              compare: str | None, save: str | None) -> float:
    print(f"erm solver: accel={opt.solver.accel} tol={opt.solver.tol:g} confirm="
          f"{opt.solver.confirm} damping={opt.solver.damping} track={opt.track} "
          f"(n_explore={opt.n_explore} n_refine={opt.n_refine} n_track={opt.n_track} "
          f"n_keep={opt.n_keep})")
    bench_prox(task, opt)
    ref = None
    if compare:
        ref = {round(p["alpha"], 9): p for p in json.load(open(compare))}
    rows: list[dict] = []
    t0, c0 = time.perf_counter(), time.process_time()
    load0 = os.getloadavg()[0]

    def solve_at(alpha, x0):  # erm_curve's upward sweep, printing each point as it lands
        cpu = time.process_time()
        r = solve_erm(task, "softmax", alpha, lam, lam, opt, start="informed", x0=x0)
        cpu = time.process_time() - cpu
        per = r.runtime_s / max(r.update_calls, 1)
        line = (f"  alpha={r.alpha:6.2f} test_error={r.test_error:.4f}+-{r.stderr:.4f} "
                f"converged={r.converged!s:5} iterations={r.iterations:3d} update_calls="
                f"{r.update_calls:3d} ({r.exact_calls} exploring) {r.runtime_s:6.1f} s "
                f"({per:.2f} s/call, {cpu:.1f} s CPU)")
        if ref is not None and round(r.alpha, 9) in ref:
            p = ref[round(r.alpha, 9)]
            se = math.hypot(r.stderr, p["stderr"])
            line += f"  vs ref {(r.test_error - p['test_error']) / se:+.2f} se"
        if not r.converged:
            line += f"  [{r.reason}]"
        print(line, flush=True)
        d = r.to_dict(with_history=True)
        d.pop("order_stderr")
        d["cpu_s"] = cpu
        rows.append(d)
        if save:
            with open(save, "w") as f:
                json.dump(rows, f, default=float)
        return r

    best = continuation(solve_at, alphas, None)
    total = time.perf_counter() - t0
    calls = sum(r.update_calls for r in best)
    print(f"erm curve: {len(alphas)} points in {total:.1f} s wall, "
          f"{time.process_time() - c0:.1f} s CPU ({sum(r.iterations for r in best)} "
          f"iterations, {calls} update calls, {sum(r.exact_calls for r in best)} exploring; "
          f"{total / calls:.2f} s per call); converged {sum(r.converged for r in best)}, "
          f"flagged {sum(r.reached and not r.converged for r in best)}, failed "
          f"{sum(not r.reached for r in best)}; load {load0:.1f} -> {os.getloadavg()[0]:.1f}")
    print(f"erm curve against the {budget:g} s budget: ratio {total / budget:.2f}")
    if ref is not None:
        z = [abs(r.test_error - ref[round(r.alpha, 9)]["test_error"])
             / math.hypot(r.stderr, ref[round(r.alpha, 9)]["stderr"])
             for r in best if round(r.alpha, 9) in ref]
        z = [v for v in z if math.isfinite(v)]
        if z:
            print(f"vs reference: max |test_error difference| / combined stderr {max(z):.2f} "
                  f"over {len(z)} points (mean {np.mean(z):.2f})")
    return total


PAPER_ALPHAS = "0.5,1,1.5,2,3,4,5,6,8,10,12,14,16,18,20"  # the paper preset's replica grid


def bench_lamopt(alphas, opt: ErmTheoryOptions, delta: float) -> float:
    """``lam='optimal'`` along ``alphas`` with continuation (the paper preset's replica cells:
    softmax, spiked ``L = 3``, ``nu = 2``), each point timed as it lands."""
    import bayesslr.theory.lam_opt as lo

    task = make_task("spiked", 3, 2.0, delta, 1)
    inner = lo.optimal_lambda
    t0, c0 = time.perf_counter(), time.process_time()
    load0 = os.getloadavg()[0]
    res = []

    def timed(*args, **kw):
        t, c = time.perf_counter(), time.process_time()
        r = inner(*args, **kw)
        res.append(r)
        p = r.result
        print(f"  lam=optimal alpha={r.alpha:6.2f} lam*={r.lam:.4g} test_error={r.test_error:.4f}"
              f"+-{p.stderr:.4f} solves={len(r.solves):2d} iterations={p.iterations:3d} "
              f"update_calls={p.update_calls:3d} ({p.exact_calls} exploring) "
              f"converged={p.converged!s:5} {time.perf_counter() - t:6.1f} s "
              f"({time.process_time() - c:.1f} s CPU)"
              + ("" if p.converged else f"  [{p.reason}]"), flush=True)
        return r

    lo.optimal_lambda = timed
    try:
        lo.optimal_lambda_curve(task, "softmax", alphas, opt)
    finally:
        lo.optimal_lambda = inner
    total = time.perf_counter() - t0
    print(f"lam=optimal curve (Delta={delta:g}): {len(alphas)} points in {total:.1f} s wall, "
          f"{time.process_time() - c0:.1f} s CPU ({total / len(alphas):.1f} s per point, the "
          f"first includes compilation; {sum(len(r.solves) for r in res)} solves, "
          f"{sum(r.result.update_calls for r in res)} update calls); converged "
          f"{sum(r.result.converged for r in res)}, flagged "
          f"{sum(r.result.reached and not r.result.converged for r in res)}; load {load0:.1f} -> "
          f"{os.getloadavg()[0]:.1f}")
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


# ------------------------------------------------------------------------------------------
# the timing suite (pytest-benchmark): group replica_curve
# ------------------------------------------------------------------------------------------
SIZES = {"smoke": {"points": 3, "samples": 2000},
         "default": {"points": 20, "samples": 20_000},
         "paper": {"points": 20, "samples": 20_000}}


@pytest.fixture(scope="module")
def replica(bench_size):
    size = SIZES[bench_size]
    task = make_task("spiked", 3, 2.0, 0.0, 1)
    alphas = [float(x) for x in np.linspace(1.0, 20.0, size["points"])]
    opt = ErmTheoryOptions(samples=size["samples"])
    mid = alphas[len(alphas) // 2]

    cpu: dict[str, float] = {}  # CPU seconds of this process in the last call of each

    def on_cpu(name, fn):
        def timed():
            c0 = time.process_time()
            out = fn()
            cpu[name] = time.process_time() - c0
            return out
        return timed

    def point():
        return solve_erm(task, "softmax", mid, 0.1, 0.1, opt, start="informed")

    def curve():
        return continuation(lambda a, x0: solve_erm(task, "softmax", a, 0.1, 0.1, opt,
                                                    start="informed", x0=x0), alphas, None)

    return {"point": on_cpu("point", point), "curve": on_cpu("curve", curve), "cpu": cpu,
            "alphas": alphas, "mid": mid}


def _start_afresh() -> None:
    """Empty what a process keeps between solves but not compiled code: the exploring map's
    cache (:class:`bayesslr.theory.erm.ChannelMap`), the channel samples and the test
    formula's samples. A round then pays for them as a run of its own does, not only the
    warm-up round."""
    erm_module._EXACT_CACHE.clear()
    erm_module._drawn_test_fields.cache_clear()
    channel64.cache_clear()


def test_one_point(benchmark, replica):
    """One replica point on its own (cold start at the curve's middle ``alpha``); the first
    call, which compiles, is a warm-up round. Each round starts afresh (:func:`_start_afresh`):
    the warm-up's exploring calls at the same order parameters would otherwise be cache hits,
    and the timed point would skip the exploring calls that a point solved on its own makes."""
    benchmark.group = "replica_curve"
    r = benchmark.pedantic(replica["point"], setup=_start_afresh, rounds=1,
                           warmup_rounds=1)
    assert r.reached and np.isfinite(r.test_error)
    benchmark.extra_info.update(alpha=replica["mid"], converged=bool(r.converged),
                                iterations=r.iterations, update_calls=r.update_calls,
                                exploring_calls=r.exact_calls, cpu_s=replica["cpu"]["point"])
    record(benchmark, "point")


def test_curve(benchmark, replica):
    """The whole curve by upward continuation (compiled by the point before)."""
    benchmark.group = "replica_curve"
    pts = benchmark.pedantic(replica["curve"], setup=_start_afresh, rounds=1)
    assert len(pts) == len(replica["alphas"]) and all(np.isfinite(p.test_error) for p in pts)
    benchmark.extra_info.update(
        points=len(pts), converged=sum(p.converged for p in pts),
        flagged=sum(p.reached and not p.converged for p in pts),
        failed=sum(not p.reached for p in pts),
        iterations=sum(p.iterations for p in pts),
        update_calls=sum(p.update_calls for p in pts),
        exploring_calls=sum(p.exact_calls for p in pts),
        # where the time goes along the curve (the solver's own clock, per point)
        point_seconds=" ".join(f"{p.runtime_s:.1f}" for p in pts),
        point_update_calls=" ".join(str(p.update_calls) for p in pts),
        cpu_s=replica["cpu"]["curve"])
    ratio(benchmark, "ratio_curve_over_point", stat(benchmark, "self"),
          stat(benchmark, "point"))
    # CPU seconds move less with the load than wall seconds (the ratio's two sides run minutes
    # apart, often at different loads)
    ratio(benchmark, "ratio_cpu_curve_over_point",
          replica["cpu"]["curve"] if not benchmark.disabled else None,
          replica["cpu"].get("point") if not benchmark.disabled else None)


# ------------------------------------------------------------------------------------------
# group worker_malloc: what dask's MALLOC_TRIM_THRESHOLD_ cost a replica search
# ------------------------------------------------------------------------------------------
# dask's nanny starts its workers with MALLOC_TRIM_THRESHOLD_=65536, which switches off glibc's
# adaptive mmap threshold; the local cluster of `bayesslr run --workers N` no longer passes it
# on (bayesslr.sweep.executors._worker_environ). Each side is a fresh process (glibc reads the
# variable at start-up) running the same lam='optimal' search, the persistent compilation
# cache shared; the child reports its own CPU time and page faults.
MALLOC_SIZES = {"smoke": {"samples": 500, "grid": [0.3, 0.1], "refine": 0, "warm": False},
                "default": {"samples": 20_000, "grid": [1.0, 0.3, 0.1, 0.03], "refine": 2,
                            "warm": True},
                "paper": {"samples": 20_000, "grid": [1.0, 0.3, 0.1, 0.03], "refine": 2,
                          "warm": True}}
_MALLOC_CHILD = """
import json, os, resource, sys, time
import bayesslr
from bayesslr.core.task import make_task
from bayesslr.theory.erm import ErmTheoryOptions
from bayesslr.theory.lam_opt import optimal_lambda
size = json.loads(sys.argv[1])
task = make_task("spiked", 3, 1.0, 0.01, 1)
opt = ErmTheoryOptions(samples=size["samples"])
if size["warm"]:  # compile first (smoke: the timed search compiles)
    optimal_lambda(task, "softmax", 1.5, opt, lam_grid=size["grid"][:2], refine_iter=0)
t0, c0, f0 = time.perf_counter(), os.times(), resource.getrusage(resource.RUSAGE_SELF).ru_minflt
r = optimal_lambda(task, "softmax", 1.5, opt, lam_grid=size["grid"], refine_iter=size["refine"])
c1 = os.times()
print(json.dumps({"wall_s": time.perf_counter() - t0, "user_s": c1.user - c0.user,
                  "sys_s": c1.system - c0.system, "lam": r.lam, "test_error": r.test_error,
                  "minflt": resource.getrusage(resource.RUSAGE_SELF).ru_minflt - f0}))
"""
_MALLOC: dict[str, dict] = {}


def _malloc_child(bench_size: str, trim: str | None) -> dict:
    import subprocess
    import sys

    env = {k: v for k, v in os.environ.items() if k != "MALLOC_TRIM_THRESHOLD_"}
    if trim is not None:
        env["MALLOC_TRIM_THRESHOLD_"] = trim
    proc = subprocess.run([sys.executable, "-c", _MALLOC_CHILD,
                           json.dumps(MALLOC_SIZES[bench_size])],
                          env=env, capture_output=True, text=True, timeout=1800)
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    assert math.isfinite(out["test_error"]) and out["minflt"] > 0, out
    return out


def test_search_with_glibc_defaults(benchmark, bench_size):
    """The replica search in a process with glibc's malloc defaults (what the local cluster's
    workers now get)."""
    benchmark.group = "worker_malloc"
    out = benchmark.pedantic(_malloc_child, args=(bench_size, None), rounds=1)
    _MALLOC["default"] = out
    benchmark.extra_info.update(out)
    record(benchmark, "default")


def test_search_with_dask_trim_threshold(benchmark, bench_size):
    """The same search with ``MALLOC_TRIM_THRESHOLD_=65536`` (what dask's nanny sets): the
    ratios of CPU time, system time and page faults against the defaults."""
    benchmark.group = "worker_malloc"
    out = benchmark.pedantic(_malloc_child, args=(bench_size, "65536"), rounds=1)
    benchmark.extra_info.update(out)
    base = _MALLOC.get("default") if not benchmark.disabled else None
    cpu = out["user_s"] + out["sys_s"]
    ratio(benchmark, "ratio_cpu_trim_over_default",
          cpu if base else None, base["user_s"] + base["sys_s"] if base else None)
    ratio(benchmark, "ratio_sys_trim_over_default",
          out["sys_s"] if base else None, base["sys_s"] if base else None)
    ratio(benchmark, "ratio_minflt_trim_over_default",
          out["minflt"] if base else None, base["minflt"] if base else None)
    if base:  # malloc does not enter the arithmetic: the same optimum either way
        benchmark.extra_info["same_numbers"] = (out["lam"] == base["lam"]
                                                and out["test_error"] == base["test_error"])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--samples", type=int, default=20_000)
    ap.add_argument("--points", type=int, default=20)
    ap.add_argument("--which", choices=("erm", "bayes", "both", "lamopt"), default="erm",
                    help="lamopt: only the lam='optimal' curve (--lamopt, --delta)")
    ap.add_argument("--lam", type=float, default=0.1)
    ap.add_argument("--accel", choices=("anderson", "none"), default="anderson",
                    help="ERM fixed-point acceleration (none: the plain damped iteration)")
    ap.add_argument("--no-track", action="store_true",
                    help="iterate with the exploring map only (every call from the cold starts)")
    ap.add_argument("--budget-s", type=float, default=120.0)
    ap.add_argument("--save", help="write the ERM points (JSON)")
    ap.add_argument("--compare", help="ERM points of a reference run (JSON from --save)")
    ap.add_argument("--lamopt", help="comma list of alpha: time lam='optimal' there "
                    f"(default with --which lamopt: the paper preset's {PAPER_ALPHAS})")
    ap.add_argument("--delta", type=float, default=0.01,
                    help="Delta of the lam='optimal' curve (the paper preset's 0.01)")
    a = ap.parse_args()
    task = make_task("spiked", 3, 2.0, 0.0, 1)
    alphas = [float(x) for x in np.linspace(1.0, 20.0, a.points)]
    opt = ErmTheoryOptions(samples=a.samples, track=not a.no_track)
    opt = dataclasses.replace(opt, solver=dataclasses.replace(opt.solver, accel=a.accel))
    print(f"bench_theory: {_load()} at start, {os.cpu_count()} CPUs")
    cpu0 = time.process_time()
    total = 0.0
    if a.which in ("erm", "both"):
        total += bench_erm(task, alphas, opt, a.lam, a.budget_s, a.compare, a.save)
    if a.which in ("bayes", "both"):
        total += bench_bayes(task, alphas, a.samples)
    if a.which == "lamopt" and not a.lamopt:
        a.lamopt = PAPER_ALPHAS
    if a.lamopt:
        total += bench_lamopt([float(x) for x in a.lamopt.split(",")], opt, a.delta)
    print(f"total {total:.1f} s wall, {time.process_time() - cpu0:.1f} s CPU; {_load()}")


if __name__ == "__main__":
    main()
