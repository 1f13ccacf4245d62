"""GAMP's seconds per iteration against the data-traffic floor, measured in one process.

Part of the timing suite (group ``gamp_vs_floor``: GAMP per iteration against two passes over
``X``, measured in one run; group ``compile_gamp``: its first call against a warm call; sizes
``smoke`` ``D = 200``, ``default`` 2000, ``paper`` 10000, spiked ``L = 3``, ``alpha = 5``)::

    .venv/bin/python -m pytest benchmarks/bench_amp.py --benchmark-only

Or as a script (the variance forms and the regeneration cost)::

    python benchmarks/bench_amp.py [--D 10000] [--alpha 5] [--L 3] [--variant spiked]
                                   [--nu 2] [--iterations 12] [--repeats 5]
                                   [--variance auto|derivative|nishimori|both]

Draws the seed-0 data of the task (``bayesslr.amp.amp_task_data``: one float32 ``X`` of
``N L x D``), then in the same process:

* the floor: one ``X``-times-vector pass (``X w``) plus one ``X^T``-times-vector pass, each
  timed as the fastest of its compiled forms (``X^T g`` and ``g^T X``: XLA's CPU backend is
  several times slower on the former), median of ``repeats`` warm calls;
* GAMP: ``iterations`` iterations (undamped, no stopping), median warm seconds per iteration
  (the first, which compiles, apart);
* a warm blocked draw of ``min(N, 2000)`` samples, scaled to ``N``: what regenerating ``X``
  chunk by chunk from the key would cost per pass, instead of reading it.

With ``--variance both`` GAMP runs twice on the same data and start, with the Onsager
coefficient's derivative form and its Nishimori form (``GampOptions.variance``), and prints
the ratio of their seconds per iteration and the largest difference of their overlaps.

Prints the ratio GAMP / floor (1 would be pure data traffic), the effective bandwidth of the
floor, the load average at the start and the end (timings on a shared machine are noisy: re-run
on an idle one before quoting absolute numbers; the ratio, measured within one process, is the
robust figure).
"""

from __future__ import annotations

import argparse
import os
import sys
import time

import jax
import jax.numpy as jnp
import numpy as np
import pytest

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))

from benchutil import cold_jax, ratio, record, stat  # noqa: E402

from bayesslr.amp import GampOptions, amp_task_data, gamp  # noqa: E402
from bayesslr.core.task import make_task  # noqa: E402


def _median_time(fn, *args, repeats: int) -> float:
    jax.block_until_ready(fn(*args))  # compile
    ts = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        jax.block_until_ready(fn(*args))
        ts.append(time.perf_counter() - t0)
    return float(np.median(ts))


def main(argv: list[str] | None = None) -> dict[str, float]:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--D", type=int, default=2000)
    ap.add_argument("--alpha", type=float, default=5.0)
    ap.add_argument("--L", type=int, default=3)
    ap.add_argument("--variant", default="spiked")
    ap.add_argument("--nu", default="2")
    ap.add_argument("--delta", type=float, default=0.01)
    ap.add_argument("--iterations", type=int, default=12)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--variance", default="auto",
                    choices=("auto", "derivative", "nishimori", "both"))
    a = ap.parse_args(argv)
    load0 = os.getloadavg()
    task = make_task(a.variant, a.L, float(a.nu), a.delta, a.D)
    N = round(a.alpha * a.D)
    t0 = time.perf_counter()
    teacher, train, _ = amp_task_data(jax.random.key(0), task, N, 2)
    jax.block_until_ready(train.X)
    draw_s = time.perf_counter() - t0
    # regeneration cost per pass: a warm blocked draw of n_small samples, scaled to N
    from bayesslr.amp.data import sample_data_blocked

    n_small = min(N, 2000)
    jax.block_until_ready(sample_data_blocked(jax.random.key(3), task, teacher, n_small).X)
    t0 = time.perf_counter()
    jax.block_until_ready(sample_data_blocked(jax.random.key(4), task, teacher, n_small).X)
    regen_s = (time.perf_counter() - t0) * N / n_small
    X2 = train.X.reshape(-1, a.D)
    gb = X2.size * X2.dtype.itemsize / 1e9
    w = jnp.ones((a.D,), X2.dtype) / np.sqrt(a.D)
    g = jnp.ones((X2.shape[0],), X2.dtype)
    t_xw = _median_time(jax.jit(lambda X, w: X @ w), X2, w, repeats=a.repeats)
    t_xtg = _median_time(jax.jit(lambda X, g: X.T @ g), X2, g, repeats=a.repeats)
    t_gtx = _median_time(jax.jit(lambda X, g: g @ X), X2, g, repeats=a.repeats)
    floor = t_xw + min(t_xtg, t_gtx)
    forms = ("derivative", "nishimori") if a.variance == "both" else (a.variance,)
    runs = {}
    for form in forms:
        opt = GampOptions(max_iter=a.iterations, min_iter=a.iterations, tol=1e-30,
                          adaptive_damping=False, variance=form)
        runs[form] = gamp(jax.random.key(1), task, train, opt, teacher=teacher)
    res = runs[forms[-1]]
    load1 = os.getloadavg()
    out = {"D": a.D, "alpha": a.alpha, "L": a.L, "X_GB": gb, "draw_s": draw_s,
           "floor_s": floor, "X_w_s": t_xw, "XT_g_s": t_xtg, "gT_X_s": t_gtx,
           "gamp_s_per_iteration": res.seconds_per_iteration, "gamp_compile_s": res.compile_s,
           "ratio": res.seconds_per_iteration / floor,
           "floor_bandwidth_GBps": 2 * gb / floor, "regenerate_s": regen_s,
           "regenerate_over_pass": regen_s / (floor / 2)}
    print(f"{a.variant} L={a.L} D={a.D} alpha={a.alpha}: X = {N * a.L} x {a.D} float32 "
          f"({gb:.2f} GB), drawn in {draw_s:.1f} s")
    print(f"floor: X w {t_xw:.3f} s + min(X^T g {t_xtg:.3f} s, g^T X {t_gtx:.3f} s) = "
          f"{floor:.3f} s ({2 * gb / floor:.1f} GB/s)")
    print(f"GAMP ({res.variance}): {res.seconds_per_iteration:.3f} s per iteration (first: "
          f"+{res.compile_s:.1f} s compile), ratio to the floor {out['ratio']:.2f}")
    if len(runs) == 2:
        d, n = runs["derivative"], runs["nishimori"]
        gap = max(max(abs(x - y) for x, y in zip(d.trajectory[k], n.trajectory[k],
                                                  strict=True))
                  for k in ("m_k", "m_v"))
        out.update(derivative_s_per_iteration=d.seconds_per_iteration,
                   derivative_over_nishimori=d.seconds_per_iteration / n.seconds_per_iteration,
                   overlap_gap=gap)
        print(f"variance: derivative {d.seconds_per_iteration:.3f} s, nishimori "
              f"{n.seconds_per_iteration:.3f} s per iteration (ratio "
              f"{out['derivative_over_nishimori']:.1f}); overlaps m_k, m_v differ by at most "
              f"{gap:.3f} over the {a.iterations} iterations")
    print(f"regenerating X from the key instead of reading it: {regen_s:.2f} s, "
          f"{out['regenerate_over_pass']:.0f} times a pass (warm blocked draw, scaled to N)")
    print(f"load average {load0[0]:.1f} at the start, {load1[0]:.1f} at the end "
          f"({os.cpu_count()} cores)")
    return out


# ------------------------------------------------------------------------------------------
# the timing suite (pytest-benchmark)
# ------------------------------------------------------------------------------------------
SIZES = {"smoke": {"D": 200, "iterations": 3, "rounds": 1},
         "default": {"D": 2000, "iterations": 8, "rounds": 5},
         "paper": {"D": 10000, "iterations": 8, "rounds": 3}}


@pytest.fixture(scope="module")
def amp_problem(bench_size):
    size = SIZES[bench_size]
    D = size["D"]
    task = make_task("spiked", 3, 2.0, 0.01, D)
    teacher, train, _ = amp_task_data(jax.random.key(0), task, round(5.0 * D), 2)
    X2 = jax.block_until_ready(train.X.reshape(-1, D))
    w = jnp.ones((D,), X2.dtype) / np.sqrt(D)
    g = jnp.ones((X2.shape[0],), X2.dtype)
    xw, gtx, xtg = (jax.jit(lambda X, w: X @ w), jax.jit(lambda X, g: g @ X),
                    jax.jit(lambda X, g: X.T @ g))
    opt = GampOptions(max_iter=size["iterations"], min_iter=size["iterations"], tol=1e-30,
                      adaptive_damping=False)

    def run():
        return gamp(jax.random.key(1), task, train, opt, teacher=teacher)

    return {"size": size, "D": D, "X_GB": X2.size * 4 / 1e9, "run": run,
            "floors": {"X_w+g^T_X": lambda: jax.block_until_ready((xw(X2, w), gtx(X2, g))),
                       "X_w+X^T_g": lambda: jax.block_until_ready((xw(X2, w), xtg(X2, g)))}}


@pytest.mark.parametrize("form", ["X_w+g^T_X", "X_w+X^T_g"])
def test_floor(benchmark, amp_problem, form):
    """Two passes over ``X``: ``X w`` and ``X^T g`` (two forms of the second; XLA's CPU
    backend is several times slower on ``X.T @ g``)."""
    benchmark.group = "gamp_vs_floor"
    benchmark.extra_info.update(D=amp_problem["D"], X_GB=amp_problem["X_GB"])
    benchmark.pedantic(amp_problem["floors"][form], rounds=amp_problem["size"]["rounds"],
                       warmup_rounds=1)
    record(benchmark, "floor_" + form)


def test_gamp(benchmark, amp_problem):
    """GAMP, ``iterations`` undamped iterations per call (a warm call first)."""
    benchmark.group = "gamp_vs_floor"
    its = amp_problem["size"]["iterations"]
    res = benchmark.pedantic(amp_problem["run"], rounds=amp_problem["size"]["rounds"],
                             warmup_rounds=1)
    assert res.iterations == its and np.all(np.isfinite(res.trajectory["m_k"]))
    benchmark.extra_info.update(iterations=its, variance=res.variance,
                                own_seconds_per_iteration=res.seconds_per_iteration)
    record(benchmark, "gamp")
    floors = [stat(benchmark, "floor_" + f) for f in ("X_w+g^T_X", "X_w+X^T_g")]
    floors = [f for f in floors if f is not None]
    own = stat(benchmark, "self")
    ratio(benchmark, "ratio_iteration_over_floor", None if own is None else own / its,
          min(floors) if floors else None)


def test_gamp_first_call(benchmark, amp_problem):
    """GAMP's first call with nothing compiled (persistent cache off)."""
    benchmark.group = "compile_gamp"

    def cold():
        with cold_jax():
            return amp_problem["run"]()

    benchmark.pedantic(cold, rounds=1)
    amp_problem["run"]()
    ratio(benchmark, "ratio_first_call_over_warm_call", stat(benchmark, "self"),
          stat(benchmark, "gamp", group="gamp_vs_floor"))


if __name__ == "__main__":
    main()
