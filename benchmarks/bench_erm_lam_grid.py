"""A 10-value ``lam`` grid on 4 seeds against single fits (docs/estimators.md; issue 15 item 4).

What is timed (spiked, ``L = 3``, ``nu = 2``, ``alpha = 5``, grid ``logspace(-3, 1, 10)``, the
paper's protocol: informed start for every ``lam``), each side as one
:func:`bayesslr.erm.protocol.fit_seeds` call over the same 4 seeds, after a first call that
compiles (its time is printed apart):

* ``grid``: the 10 penalties fitted as one batch per seed, the batch shrinking as members stop
  (:func:`bayesslr.erm.lbfgs.lbfgs_solve_compact`);
* ``grid_nocompact``: the same batch run whole until its slowest member stops (the previous
  solver: stopped members still take part in every evaluation);
* ``single[lam]``: one fit per ``lam`` (4 seeds each);
* ``warm_path``: the penalties one after another from the largest, each started from the
  previous solution (the lam-path continuation the issue suggests; a different protocol, since
  the objective is non-convex: printed with the objectives it reaches against the informed
  starts).

Printed ratios (one run, one process): ``grid / mean single`` (the issue's target is 3),
``grid / slowest single`` (what batching can at best approach: the batch cannot finish before
its slowest member), ``grid / sum of singles`` and ``grid / grid_nocompact``; evaluations of
each side. The ``evalmodel_`` ratios compare the same runs in evaluation time (the shared
passes each side ran at each batch size, times the best-of-7 time of one evaluation at that
size), which a loaded machine disturbs far less than the wall times. Results and the load at
the time are in ``benchmarks/README.md`` (section ERM).

Run: ``.venv/bin/python benchmarks/bench_erm_lam_grid.py [--D 400] [--seeds 4] [--repeats 1]
[--scaling scalar|block]`` (``--scaling``: the L-BFGS initial inverse Hessian of every fit,
:data:`bayesslr.erm.lbfgs.DEFAULT_SCALING` by default);
or ``.venv/bin/python -m pytest benchmarks/bench_erm_lam_grid.py --benchmark-only`` for the
timing suite's group ``erm_lam_grid``: each of the ten single fits (4 seeds each) and the grid,
with ``ratio_grid_over_slowest_single`` (the figure to keep: the batch cannot finish before its
slowest member; 1.87 in issue 23's measurement) and ``ratio_grid_over_mean_single`` in the
grid's ``extra_info`` (sizes: ``smoke`` ``D = 50``, 2 seeds; ``default`` ``D = 200``, 4 seeds,
the committed baseline's; ``paper`` ``D = 400``, 4 seeds, the script's setting and the issue's).
"""

# isort: skip_file
from __future__ import annotations

import bayesslr  # noqa: F401  (JAX configuration, compilation cache)

import argparse
import os
import time

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from bayesslr.core.activations import get_activation
from bayesslr.erm import lbfgs
from bayesslr.erm.lbfgs import lbfgs_solve_compact
from bayesslr.erm.objective import value_and_grad_batch
from bayesslr.erm.protocol import ERMOptions, _draw_train, _seed_keys, fit_seeds
from bayesslr.core.task import make_task
from benchutil import ratio, record, stat

GRID = tuple(float(x) for x in np.logspace(-3, 1, 10))
OPTS = ERMOptions()


def _setup(D: int, alpha: float, activation: str = "softmax"):
    task = make_task("spiked", L=3, nu=2.0, delta=0.0, D=D)
    return task, activation, int(round(alpha * D))


def fit_grid(task, activation, n, seeds, compact=None, passes=None):
    return fit_seeds(task, activation, n, seeds, GRID, opts=OPTS, compact=compact,
                     passes=passes)


def fit_singles(task, activation, n, seeds, passes=None):
    """Per lam: (seconds, result) of one fit of all seeds."""
    out = []
    for lam in GRID:
        t = time.perf_counter()
        r = fit_seeds(task, activation, n, seeds, [lam], opts=OPTS, passes=passes)
        out.append((time.perf_counter() - t, r))
    return out


def eval_times(task, activation, n, sizes, repeats=7):
    """Best wall seconds of one shared evaluation (objective and gradient) per batch size."""
    act = get_activation(activation)
    flags = (jnp.asarray(True), jnp.asarray(OPTS.init_noise), jnp.asarray(OPTS.init_scale))
    _, data, (k0, v0) = _draw_train(_seed_keys(np.array([0]))[0], *flags, task=task,
                                    n_train=n, restarts=1)
    f = jax.jit(value_and_grad_batch, static_argnames=("act",))
    out = {}
    for G in sorted(sizes):
        p = {"k": jnp.tile(k0, (G, 1)), "v": jnp.tile(v0, (G, 1)),
             "theta": jnp.zeros((G, act.n_params))}
        lam = jnp.full((G,), 0.1)
        jax.block_until_ready(f(act, p, data, lam, lam))
        ts = []
        for _ in range(repeats):
            t = time.perf_counter()
            jax.block_until_ready(f(act, p, data, lam, lam))
            ts.append(time.perf_counter() - t)
        out[G] = min(ts)
    return out


def warm_path(task, activation, n, seeds):
    """Penalties from the largest down, each fit started from the previous one's solution.

    Returns the seconds and, per seed and lam (grid order), evaluations and final objective.
    """
    act = get_activation(activation)
    flags = (jnp.asarray(True), jnp.asarray(OPTS.init_noise), jnp.asarray(OPTS.init_scale))
    evals = np.zeros((len(seeds), len(GRID)), int)
    obj = np.zeros((len(seeds), len(GRID)))
    t0 = time.perf_counter()
    for s, key in enumerate(_seed_keys(np.asarray(seeds))):
        _, data, (k0, v0) = _draw_train(key, *flags, task=task, n_train=n, restarts=1)
        p = {"k": k0, "v": v0, "theta": jnp.zeros((1, act.n_params))}
        for j in np.argsort(GRID)[::-1]:
            r = lbfgs_solve_compact(act, p, data, GRID[j], GRID[j], max_iter=OPTS.max_iter,
                                    gtol=OPTS.gtol, memory=OPTS.memory)
            p = r.params
            evals[s, j] = int(r.evaluations[0])
            obj[s, j] = float(r.objective[0])
    return time.perf_counter() - t0, evals, obj


def compare(D: int = 400, alpha: float = 5.0, n_seeds: int = 4, repeats: int = 1,
            activation: str = "softmax", warm: bool = True) -> dict[str, float]:
    """Median wall times (compilation excluded) and the ratios; see the module docstring."""
    task, act, n = _setup(D, alpha, activation)
    seeds = list(range(n_seeds))
    info: dict[str, float] = {"D": D, "N": n, "seeds": n_seeds, "scaling": lbfgs.DEFAULT_SCALING,
                              "load_start": os.getloadavg()[0]}
    t = time.perf_counter()
    grid = fit_grid(task, act, n, seeds)
    info["first_call_grid_s"] = time.perf_counter() - t
    t = time.perf_counter()
    fit_grid(task, act, n, seeds, compact=False)
    info["first_call_grid_nocompact_s"] = time.perf_counter() - t
    t = time.perf_counter()
    fit_seeds(task, act, n, seeds, [GRID[0]], opts=OPTS)
    info["first_call_single_s"] = time.perf_counter() - t
    tg, tn, ts = [], [], []
    pg, pn, ps = {}, {}, {}
    for _ in range(repeats):
        pg.clear(), pn.clear(), ps.clear()
        t = time.perf_counter()
        grid = fit_grid(task, act, n, seeds, passes=pg)
        tg.append(time.perf_counter() - t)
        t = time.perf_counter()
        fit_grid(task, act, n, seeds, compact=False, passes=pn)
        tn.append(time.perf_counter() - t)
        singles = fit_singles(task, act, n, seeds, passes=ps)
        ts.append([s for s, _ in singles])
    t_grid = float(np.median(tg))
    t_single = np.median(np.asarray(ts), axis=0)  # per lam
    info.update({
        "grid_s": t_grid, "grid_nocompact_s": float(np.median(tn)),
        "single_mean_s": float(t_single.mean()), "single_max_s": float(t_single.max()),
        "single_sum_s": float(t_single.sum()),
        "ratio_grid_over_mean_single": t_grid / float(t_single.mean()),
        "ratio_grid_over_slowest_single": t_grid / float(t_single.max()),
        "ratio_grid_over_sum_singles": t_grid / float(t_single.sum()),
        "ratio_grid_over_nocompact": t_grid / float(np.median(tn)),
        "grid_evaluations_max_member": int(np.max(grid[0].evaluations)),
        "grid_evaluations_sum": int(np.sum(grid[0].evaluations)),
        "single_evaluations_mean": float(np.mean(
            [np.sum(r[0].evaluations) for _, r in singles])),
        "single_evaluations_max": int(np.max([np.sum(r[0].evaluations) for _, r in singles])),
    })
    # the same comparison in evaluation time: passes run at each batch size x the best time of
    # one evaluation at that size (steady on a loaded machine; leaves out the solver's own
    # per-iteration work, small next to a pass over the data at large D)
    te = eval_times(task, act, n, set(pg) | set(pn) | {1})
    info.update({f"eval_s_G{G}": t for G, t in te.items()})
    info["passes_grid"] = " ".join(f"G{G}:{p}" for G, p in sorted(pg.items(), reverse=True))
    model_grid = sum(p * te[G] for G, p in pg.items())
    model_single = ps[1] * te[1] / len(GRID)  # mean over the lams
    info.update({
        "evalmodel_grid_s": model_grid,
        "evalmodel_ratio_grid_over_mean_single": model_grid / model_single,
        "evalmodel_ratio_grid_over_nocompact": model_grid / sum(
            p * te[G] for G, p in pn.items())})
    info["per_lam_single_s"] = " ".join(f"{x:.2f}" for x in t_single)
    info["per_lam_evaluations"] = " ".join(
        str(int(np.sum(r[0].evaluations))) for _, r in singles)
    if warm:
        tw, ev, obj = warm_path(task, act, n, seeds)
        cold = grid[0].objective
        info.update({"warm_path_s": tw, "ratio_warm_path_over_grid": tw / t_grid,
                     "evalmodel_ratio_warm_path_over_grid": ev.sum() * te[1] / model_grid,
                     "warm_path_evaluations_sum": int(ev.sum()),
                     "warm_lower_objective_fraction": float(np.mean(obj < cold * (1 - 1e-6))),
                     "warm_max_rel_objective_change": float(np.max(np.abs(obj / cold - 1)))})
    info["load_end"] = os.getloadavg()[0]
    return info


SIZES = {"smoke": (50, 2, 1), "default": (200, 4, 3), "paper": (400, 4, 3)}


@pytest.fixture(scope="module")
def problem(bench_size):
    D, n_seeds, rounds = SIZES[bench_size]
    task, act, n = _setup(D, 5.0)
    seeds = list(range(n_seeds))
    fit_grid(task, act, n, seeds)  # compile the batch sizes the grid runs
    fit_singles(task, act, n, seeds)
    return task, act, n, seeds, rounds


@pytest.mark.parametrize("lam", GRID, ids=[f"{x:.3g}" for x in GRID])
def test_single(benchmark, problem, lam):
    """One fit at ``lam``, all seeds (as the grid's members fit on their own)."""
    task, act, n, seeds, rounds = problem
    benchmark.group = "erm_lam_grid"
    r = benchmark.pedantic(fit_seeds, args=(task, act, n, seeds, [lam]),
                           kwargs={"opts": OPTS}, rounds=rounds)
    benchmark.extra_info["evaluations"] = int(np.sum(r[0].evaluations))
    record(benchmark, f"single_{lam:.3g}")


def test_grid(benchmark, problem):
    """The ten penalties as one shrinking batch per seed, against the single fits."""
    task, act, n, seeds, rounds = problem
    benchmark.group = "erm_lam_grid"
    r = benchmark.pedantic(fit_grid, args=(task, act, n, seeds), rounds=rounds)
    benchmark.extra_info.update(evaluations_sum=int(np.sum(r[0].evaluations)),
                                evaluations_max_member=int(np.max(r[0].evaluations)))
    singles = [stat(benchmark, f"single_{lam:.3g}") for lam in GRID]
    ok = None not in singles
    ratio(benchmark, "ratio_grid_over_slowest_single", stat(benchmark, "self"),
          max(singles) if ok else None)
    ratio(benchmark, "ratio_grid_over_mean_single", stat(benchmark, "self"),
          float(np.mean(singles)) if ok else None)


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--D", type=int, default=400)
    ap.add_argument("--alpha", type=float, default=5.0)
    ap.add_argument("--seeds", type=int, default=4)
    ap.add_argument("--repeats", type=int, default=1)
    ap.add_argument("--activation", default="softmax")
    ap.add_argument("--no-warm", action="store_true", help="skip the warm-started lam path")
    ap.add_argument("--scaling", choices=lbfgs.SCALINGS, default=lbfgs.DEFAULT_SCALING,
                    help="L-BFGS initial inverse Hessian of every fit")
    args = ap.parse_args()
    lbfgs.DEFAULT_SCALING = args.scaling
    res = compare(args.D, args.alpha, args.seeds, args.repeats, args.activation,
                  warm=not args.no_warm)
    for k, v in res.items():
        print(f"{k:>32s}  {v:.4g}" if isinstance(v, float) else f"{k:>32s}  {v}")
    print(f"10-lam x {args.seeds}-seed grid: {res['ratio_grid_over_mean_single']:.2f} x the "
          f"mean single fit, {res['ratio_grid_over_slowest_single']:.2f} x the slowest, "
          f"{res['ratio_grid_over_sum_singles']:.2f} x all ten single fits "
          f"(load {res['load_start']:.1f} -> {res['load_end']:.1f} on {os.cpu_count()} cores)")
