"""Our NUTS sampler against nutpie (PyMC's Rust NUTS) on the same SLR posterior (docs/model.md §6).

Needs the optional benchmark extra: ``pip install -e '.[bench]'`` (PyMC, nutpie; nothing in the
package depends on them; without it the benchmarks are skipped with that reason). Part of the
timing suite::

    .venv/bin/python -m pytest benchmarks/bench_sampler_nutpie.py --benchmark-only

Groups (each ratio ours / nutpie of bulk ESS per second of wall time, ``speedup_*``, in the
``extra_info`` of our benchmark; the same per CPU-second beside it; sizes: ``smoke`` ``D = 20``,
50 + 50 iterations, 2 posteriors in the sweep; ``default`` and ``paper`` the posterior below, 5
in the sweep):

* ``nutpie_first_posterior``: one posterior including compilation, in this process. Ours with
  nothing compiled (JAX's caches cleared, persistent cache off: ``cold``) and with the
  persistent compilation cache (``disk_cache``: what a second process of the same shape
  pays); nutpie compiling the PyMC model with the data as constants (its fastest form for one
  posterior), with PyTensor's numba file cache on (warm: filled by the first round or earlier
  runs) and off (``numba__cache = False``). In-process, numba's own helper kernels stay
  compiled after the first round, so even the cache-off rows are warmer than a fresh process;
  the fresh-process comparison is the script's ``--part fresh`` below.
* ``nutpie_warm``: sampling alone, everything compiled: ours (vectorized chains, one XLA
  program, and the opt-in levers: ``parallel`` chains on the two host devices, and the
  warm-up of 150 iterations from the teacher) against nutpie (data as constants, 2 chains on 2
  threads, tune 500 and 150).
* ``nutpie_sweep``: ``S`` posteriors of one shape, compilation included: ours compiling once
  (cold); nutpie compiling the ``pm.Data`` model once and swapping data with
  ``CompiledModel.with_data`` (its shared-variable gradient is dearer), and nutpie recompiling
  the constant-data model for every posterior. Both forms are shown.

As a script (fresh processes, printed tables)::

    .venv/bin/python benchmarks/bench_sampler_nutpie.py            # everything below
    .venv/bin/python benchmarks/bench_sampler_nutpie.py --part sweep --seeds 5

Posterior: spiked, L=3, nu=2, Delta=0.01, D=100, alpha=4 (N=400); 2 chains, 500 warm-up + 500
draws each (``--warmup``/``--draws``), both samplers started at the teacher (an exact posterior
draw). The PyMC model is the same marginal likelihood as ``bayesslr.bayes.model.marginal_model``
(priors ``k, v ~ N(0, I)``, the location summed out by a log-sum-exp, a ``pm.Potential``); its
log density is checked against ours at three points before anything is timed. nutpie samples
in float64 (its only precision), ours in float32 (the default; the data are the same float32
draws, cast).

Parts (``--part``):

* ``check``: the two log densities agree (relative error printed, must be below 1e-9 in float64).
* ``fresh``: one posterior *including compilation*, each sampler in its own fresh process,
  alternated ``--rounds`` times: ours with the persistent compilation cache off (a true first
  compile) and on (a second process of the same shape; the process calls
  ``bayesslr.configure_jax()``, which the cache needs), nutpie compiling the PyMC model with
  the data as constants, with PyTensor's numba file cache in a fresh directory (cold) and in
  its usual one (warm).
* ``sweep``: ``--seeds`` posteriors of one shape (different teachers and data), alternating
  ours and nutpie in one process: ours compiles once; nutpie compiles the ``pm.Data`` model
  once and swaps data with ``CompiledModel.with_data``, and also recompiles the constant-data
  model for every posterior (compile and sampling both measured).

Printed per run: min bulk and tail ESS and max split R-hat over the 200 coordinates (ArviZ,
the same function for both), gradient evaluations (warm-up included), wall and CPU seconds,
ESS per gradient and per second; then the ratios ours / nutpie. CPU seconds (``process_time``,
all threads) are the robust figure on a shared machine; wall seconds are what a user waits.
The 1-minute load average is printed with every timing.
"""

# isort: skip_file
from __future__ import annotations

import bayesslr  # noqa: F401  (JAX configuration before JAX starts)

import argparse
import dataclasses
import json
import os
import subprocess
import sys
import time
import warnings

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from bayesslr.bayes import arviz_adapter
from bayesslr.bayes.model import model_spec
from bayesslr.bayes.nuts import potential_fn_gen
from bayesslr.bayes.sampler import SamplerOptions, init_params, run_nuts
from bayesslr.core.task import make_task, sample_task
from benchutil import cold_jax, ratio, record, stat

D, ALPHA, CHAINS = 100, 4, 2
TASK = make_task("spiked", L=3, nu=2.0, delta=0.01, D=D)
SPEC = model_spec(TASK)
_sample_task = jax.jit(sample_task, static_argnums=(1, 2, 3))


def load() -> float:
    return round(os.getloadavg()[0], 1)


def posterior(seed: int):
    teacher, data, _ = _sample_task(jax.random.key(seed), TASK, ALPHA * D, 0)
    return teacher, data


# ------------------------------------------------------------------------------------------
# PyMC / nutpie side
# ------------------------------------------------------------------------------------------
def pymc_model(data, as_data: bool = False):
    """The marginal SLR likelihood as a PyMC model: the data as constants (nutpie's fastest
    gradient, one compile per posterior), or as ``pm.Data`` (``as_data``: nutpie can swap them
    with ``with_data``, but its numba backend keeps them as shared variables, a dearer
    gradient)."""
    import pymc as pm
    import pytensor.tensor as pt

    X = np.asarray(data.X, np.float64)
    n, L, D = X.shape
    wrap = pm.Data if as_data else (lambda _name, value: pt.as_tensor_variable(value))
    with pm.Model() as model:
        Xd = wrap("X", X.reshape(n * L, D))
        yd = wrap("y", np.asarray(data.y, np.float64))
        md = wrap("mask", np.asarray(data.mask, np.float64))
        k = pm.Normal("k", 0.0, 1.0, shape=D)
        v = pm.Normal("v", 0.0, 1.0, shape=D)
        # two products, not one on stacked fields: numba's gradient of the stacked form
        # costs 2.4x as much
        chi = (pt.dot(Xd, k) / np.sqrt(D)).reshape((n, L))
        z = (pt.dot(Xd, v) / np.sqrt(D)).reshape((n, L))
        a = np.sqrt(SPEC.nu) * chi - 0.5 * SPEC.nu * pt.sum(k * k) / D
        log_n = (-0.5 * np.log(2 * np.pi * SPEC.delta)
                 - 0.5 * (yd[:, None] - z) ** 2 / SPEC.delta)
        s = pt.switch(md > 0, a + log_n, -np.inf)
        ll = pm.math.logsumexp(s, axis=-1).reshape((n,)) - pt.log(pt.sum(md, axis=-1))
        pm.Potential("lik", pt.sum(ll))
    return model


def nutpie_compile(data, teacher, as_data: bool = False):
    import nutpie

    start = {"k": np.asarray(teacher.k, np.float64), "v": np.asarray(teacher.v, np.float64)}
    return nutpie.compile_pymc_model(pymc_model(data, as_data), initial_points=start,
                                     jitter_rvs=set())


def nutpie_for(compiled, data, teacher):
    """``compiled`` (a ``pm.Data`` model) with new data and the new teacher as the
    (unjittered) start."""
    n, L, D = data.X.shape
    c = compiled.with_data(X=np.asarray(data.X, np.float64).reshape(n * L, D),
                           y=np.asarray(data.y, np.float64),
                           mask=np.asarray(data.mask, np.float64))
    start = np.concatenate([teacher.k, teacher.v]).astype(np.float64)  # nutpie's order: k, v
    return dataclasses.replace(c, initial_point_func=lambda _seed: start.copy())


def sample_nutpie(compiled, seed: int, warmup: int, draws: int) -> dict:
    """nutpie's 2 chains on 2 threads, and the same diagnostics as ours (ArviZ)."""
    import nutpie

    tr = nutpie.sample(compiled, draws=draws, tune=warmup, chains=CHAINS, cores=CHAINS,
                       seed=seed, progress_bar=False)
    k, v = tr.posterior["k"].values, tr.posterior["v"].values
    d = arviz_adapter.diagnostics({"k": k, "v": v})
    g_w = int(tr.warmup_sample_stats["n_steps"].values.sum()) if warmup else 0
    d["grads"] = int(tr.sample_stats["n_steps"].values.sum()) + g_w
    d["grads_warmup"] = g_w
    d["divergences"] = int(tr.sample_stats["diverging"].values.sum())
    return d


def run_nutpie(compiled, seed: int, warmup: int, draws: int) -> dict:
    w0, c0, l0 = time.perf_counter(), time.process_time(), load()
    d = sample_nutpie(compiled, seed, warmup, draws)
    wall, cpu = time.perf_counter() - w0, time.process_time() - c0
    return _row("nutpie", seed, d, d["grads"], d["grads_warmup"], wall, cpu, l0,
                d["divergences"])


# ------------------------------------------------------------------------------------------
# our side
# ------------------------------------------------------------------------------------------
def run_ours(data, teacher, seed: int, opts: SamplerOptions) -> dict:
    start = init_params(None, "teacher", opts.chains, D, teacher)
    w0, c0, l0 = time.perf_counter(), time.process_time(), load()
    res = run_nuts(jax.random.key(seed), SPEC, data, opts, start=start, init="teacher")
    wall, cpu = time.perf_counter() - w0, time.process_time() - c0
    d = {"r_hat_max": res.r_hat_max, "ess_bulk_min": res.ess_bulk_min,
         "ess_tail_min": res.ess_tail_min}
    return _row("ours", seed, d, res.grad_evals, res.grad_evals_warmup, wall, cpu, l0,
                res.divergences)


def _row(who, seed, d, g, g_w, wall, cpu, l0, div) -> dict:
    return {"who": who, "seed": seed, "ess_bulk": round(d["ess_bulk_min"], 1),
            "ess_tail": round(d["ess_tail_min"], 1), "r_hat": round(d["r_hat_max"], 4),
            "grads": g, "grads_warmup": g_w, "divergences": div, "wall_s": round(wall, 3),
            "cpu_s": round(cpu, 3), "ess_per_grad": round(d["ess_bulk_min"] / g, 4),
            "ess_per_s": round(d["ess_bulk_min"] / wall, 1),
            "ess_per_cpu_s": round(d["ess_bulk_min"] / cpu, 1), "load": [l0, load()]}


def _print(row: dict) -> None:
    print(f"  {row['who']:<7} seed {row['seed']:>3}  ess {row['ess_bulk']:7.0f} "
          f"(tail {row['ess_tail']:5.0f})  r_hat {row['r_hat']:.4f}  grads {row['grads']:6d} "
          f"(warm-up {row['grads_warmup']:6d})  wall {row['wall_s']:7.2f} s  cpu "
          f"{row['cpu_s']:7.2f} s  ess/grad {row['ess_per_grad']:.4f}  ess/s "
          f"{row['ess_per_s']:7.1f}  ess/cpu-s {row['ess_per_cpu_s']:7.1f}  load "
          f"{row['load'][0]}-{row['load'][1]}", flush=True)


# ------------------------------------------------------------------------------------------
# parts
# ------------------------------------------------------------------------------------------
def part_check() -> float:
    teacher, data = posterior(0)
    model = pymc_model(data)
    logp = model.compile_logp()
    rng = np.random.default_rng(0)
    worst = 0.0
    logp_data = pymc_model(data, as_data=True).compile_logp()
    with jax.enable_x64(True):
        args = (jnp.asarray(data.X, jnp.float64), jnp.asarray(data.y, jnp.float64), data.mask,
                jnp.ones(data.n, jnp.float64), jnp.float64(SPEC.nu), jnp.float64(SPEC.delta))
        pot = potential_fn_gen("marginal", "spiked")(*args)
        for j in range(3):
            k = np.asarray(teacher.k, np.float64) + 0.3 * j * rng.standard_normal(D)
            v = np.asarray(teacher.v, np.float64) + 0.1 * j * rng.standard_normal(D)
            ours = -float(pot({"k": jnp.asarray(k), "v": jnp.asarray(v)}))
            theirs = float(logp({"k": k, "v": v}))
            rel = max(abs(ours - t) / max(1.0, abs(t))
                      for t in (theirs, float(logp_data({"k": k, "v": v}))))
            worst = max(worst, rel)
            print(f"  log density at point {j}: ours {ours:.10f}  PyMC {theirs:.10f}  "
                  f"rel. diff {rel:.1e}")
    assert worst < 1e-9, f"log densities differ: {worst:.2e}"
    return worst


def fresh_one(who: str, seed: int, warmup: int, draws: int) -> dict:
    """One posterior, compilation included, in this (fresh) process."""
    bayesslr.configure_jax()  # the persistent cache of $BAYESSLR_JAX_CACHE ("off": none)
    teacher, data = posterior(seed)
    jax.block_until_ready(data.X)
    # imports are not compilation: done before the clock starts (PyMC imports ArviZ too)
    arviz_adapter._az()
    if who == "nutpie":
        import nutpie  # noqa: F401
        import pymc  # noqa: F401
    w0, c0 = time.perf_counter(), time.process_time()
    if who == "ours":
        row = run_ours(data, teacher, seed, SamplerOptions(warmup=warmup, draws=draws))
    else:
        compiled = nutpie_compile(data, teacher)
        row = run_nutpie(compiled, seed, warmup, draws)
    wall, cpu = time.perf_counter() - w0, time.process_time() - c0
    row.update(total_wall_s=round(wall, 2), total_cpu_s=round(cpu, 2),
               ess_per_s_total=round(row["ess_bulk"] / wall, 1),
               ess_per_cpu_s_total=round(row["ess_bulk"] / cpu, 1))
    return row


def part_fresh(rounds: int, seed: int, warmup: int, draws: int) -> dict:
    import tempfile

    out = {"ours_cold": [], "ours_cached": [], "nutpie": [], "nutpie_cold": []}
    cache = tempfile.mkdtemp(prefix="bayesslr-bench-cache-")
    for r in range(rounds):
        numba_cold = {"PYTENSOR_FLAGS": "base_compiledir="
                      + tempfile.mkdtemp(prefix="bayesslr-bench-pytensor-")}
        for label, who, env in (("ours_cold", "ours", {"BAYESSLR_JAX_CACHE": "off"}),
                                ("nutpie", "nutpie", {}),
                                ("nutpie_cold", "nutpie", numba_cold),
                                ("ours_cached", "ours", {"BAYESSLR_JAX_CACHE": cache})):
            if label in ("ours_cached", "nutpie") and r == 0:  # fill the caches, untimed
                _subprocess(who, seed, warmup, draws, env)
            row = _subprocess(who, seed, warmup, draws, env)
            out[label].append(row)
            print(f"  [{label}] round {r}: total wall {row['total_wall_s']:.1f} s, cpu "
                  f"{row['total_cpu_s']:.1f} s (sampling {row['wall_s']:.1f} s); ess "
                  f"{row['ess_bulk']:.0f}, r_hat {row['r_hat']:.4f}; ess/s incl. compile "
                  f"{row['ess_per_s_total']:.1f}, per cpu-s {row['ess_per_cpu_s_total']:.1f}; "
                  f"load {row['load'][0]}", flush=True)
    return out


def _subprocess(who, seed, warmup, draws, env) -> dict:
    cmd = [sys.executable, __file__, "--fresh-one", who, "--seed", str(seed), "--warmup",
           str(warmup), "--draws", str(draws)]
    p = subprocess.run(cmd, env={**os.environ, **env}, capture_output=True, text=True,
                       check=True)
    return json.loads(p.stdout.strip().splitlines()[-1])


def part_sweep(seeds: int, warmup: int, draws: int) -> dict:
    rows = {"ours": [], "nutpie": [], "nutpie_recompiled": []}
    compile_s = {}
    opts = SamplerOptions(warmup=warmup, draws=draws)
    teacher, data = posterior(1000)
    w0, c0 = time.perf_counter(), time.process_time()
    compiled = nutpie_compile(data, teacher, as_data=True)
    compile_s["nutpie"] = (time.perf_counter() - w0, time.process_time() - c0, load())
    w0, c0 = time.perf_counter(), time.process_time()
    run_ours(data, teacher, 1000, opts)  # compiles (and samples one posterior, untimed)
    compile_s["ours"] = (time.perf_counter() - w0, time.process_time() - c0, load())
    print(f"  first call (compile + one posterior): ours wall {compile_s['ours'][0]:.1f} s "
          f"cpu {compile_s['ours'][1]:.1f} s; nutpie compile only: wall "
          f"{compile_s['nutpie'][0]:.1f} s cpu {compile_s['nutpie'][1]:.1f} s", flush=True)
    for j, seed in enumerate(range(1, seeds + 1)):
        teacher, data = posterior(seed)
        order = ("ours", "nutpie") if j % 2 == 0 else ("nutpie", "ours")
        for who in order:
            row = (run_ours(data, teacher, seed, opts) if who == "ours" else
                   run_nutpie(nutpie_for(compiled, data, teacher), seed, warmup, draws))
            rows[who].append(row)
            _print(row)
        # the constant-data model compiled for this posterior: compile + sampling measured
        w0, c0 = time.perf_counter(), time.process_time()
        row = run_nutpie(nutpie_compile(data, teacher), seed, warmup, draws)
        row.update(wall_s=round(time.perf_counter() - w0, 3),
                   cpu_s=round(time.process_time() - c0, 3), who="nutpie_recompiled")
        rows["nutpie_recompiled"].append(row)
        _print(row)
    return {"rows": rows, "compile": compile_s}


# ------------------------------------------------------------------------------------------
# the timing suite (pytest-benchmark)
# ------------------------------------------------------------------------------------------
SIZES = {"smoke": {"D": 20, "warmup": 50, "draws": 50, "sweep": 2, "rounds": 1},
         "default": {"D": D, "warmup": 500, "draws": 500, "sweep": 5, "rounds": 3},
         "paper": {"D": D, "warmup": 500, "draws": 500, "sweep": 5, "rounds": 5}}
WARM_LEVERS = {"vectorized": ("vectorized", None), "parallel": ("parallel", None),
               "vectorized_warmup150": ("vectorized", 150),
               "parallel_warmup150": ("parallel", 150)}
# PyMC, PyTensor and numba warn about their own internals (deprecations, numba's typing);
# they are not about the code measured here
pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning",
                                        "ignore::FutureWarning", "ignore::UserWarning",
                                        "ignore::RuntimeWarning")


class Timed:
    """A benchmark target that also keeps each round's process CPU seconds and result."""

    def __init__(self, fn):
        self.fn, self.cpu, self.out = fn, [], None

    def __call__(self):
        c = time.process_time()
        self.out = self.fn()
        self.cpu.append(time.process_time() - c)
        return self.out


@pytest.fixture(scope="module")
def nut(bench_size):
    """The benchmark posterior at this size, and nutpie's compiled models (skipped without
    the ``bench`` extra)."""
    pytest.importorskip("nutpie", reason="the nutpie comparison needs the bench extra: "
                        "pip install -e '.[bench]'")
    pytest.importorskip("pymc", reason="the nutpie comparison needs the bench extra")
    size = SIZES[bench_size]
    task = make_task("spiked", L=3, nu=2.0, delta=0.01, D=size["D"])
    spec = model_spec(task)
    posts = [_sample_task(jax.random.key(s), task, ALPHA * size["D"], 0)[:2]
             for s in range(1, size["sweep"] + 1)]
    arviz_adapter._az()  # imports are not compilation
    return {"size": size, "task": task, "spec": spec, "posts": posts,
            "constants": nutpie_compile(posts[0][1], posts[0][0]),
            "as_data": nutpie_compile(posts[0][1], posts[0][0], as_data=True)}


def _ours(nut, seed: int = 0, chain_method: str = "vectorized", warmup: int | None = None):
    from bayesslr.bayes import sampler

    size = nut["size"]
    teacher, data = nut["posts"][seed]
    opts = SamplerOptions(chains=CHAINS, warmup=warmup or size["warmup"], draws=size["draws"],
                          chain_method=chain_method)
    start = init_params(None, "teacher", CHAINS, size["D"], teacher)
    r = sampler.run_nuts(jax.random.key(seed), nut["spec"], data, opts, start=start,
                                 init="teacher")
    return {"ess_bulk_min": r.ess_bulk_min, "r_hat_max": r.r_hat_max, "grads": r.grad_evals,
            "chain_method": r.chain_method}


def _theirs(nut, compiled, seed: int = 0, warmup: int | None = None):
    size = nut["size"]
    return sample_nutpie(compiled, seed, warmup or size["warmup"], size["draws"])


def _finish(benchmark, name: str, target: Timed, ess: float) -> None:
    """ESS, per-round CPU seconds and the load into ``extra_info``; statistics recorded."""
    benchmark.extra_info.update(ess_bulk_min=ess, cpu_s_rounds=[round(c, 3) for c in target.cpu],
                                cpu_s_min=min(target.cpu))
    record(benchmark, name)


def _speedups(benchmark, mine: str, theirs: str, suffix: str) -> None:
    """ours / nutpie in ESS per wall second and per CPU second (min over the rounds)."""
    a, b = stat(benchmark, mine), stat(benchmark, theirs)
    ea, eb = (_extra(benchmark, n, "ess_bulk_min") for n in (mine, theirs))
    ca, cb = (_extra(benchmark, n, "cpu_s_min") for n in (mine, theirs))
    ok = None not in (a, b, ea, eb)
    ratio(benchmark, "speedup_ess_per_s_" + suffix, ea / a if ok else None,
          eb / b if ok else None)
    ok = None not in (ca, cb, ea, eb)
    ratio(benchmark, "speedup_ess_per_cpu_s_" + suffix, ea / ca if ok else None,
          eb / cb if ok else None)


def _extra(benchmark, name: str, key: str):
    from benchutil import _STATS

    if name == "self":
        return benchmark.extra_info.get(key)
    got = _STATS.get((benchmark.group, name))
    return None if got is None else got["extra"].get(key)


def test_same_log_density(nut):
    """The PyMC models (constants and ``pm.Data``) have our log density (float64)."""
    teacher, data = nut["posts"][0]
    D_ = nut["size"]["D"]
    rng = np.random.default_rng(0)
    with jax.enable_x64(True):
        args = (jnp.asarray(data.X, jnp.float64), jnp.asarray(data.y, jnp.float64), data.mask,
                jnp.ones(data.n, jnp.float64), jnp.float64(SPEC.nu), jnp.float64(SPEC.delta))
        pot = potential_fn_gen("marginal", "spiked")(*args)
        for as_data in (False, True):
            logp = pymc_model(data, as_data).compile_logp()
            for j in range(3):
                k = np.asarray(teacher.k, np.float64) + 0.3 * j * rng.standard_normal(D_)
                v = np.asarray(teacher.v, np.float64) + 0.1 * j * rng.standard_normal(D_)
                ours = -float(pot({"k": jnp.asarray(k), "v": jnp.asarray(v)}))
                theirs = float(logp({"k": k, "v": v}))
                assert abs(ours - theirs) <= 1e-9 * max(1.0, abs(theirs))


@pytest.mark.parametrize("numba_cache", ["on", "off"])
def test_nutpie_first_posterior(benchmark, nut, numba_cache):
    """nutpie: compile the constant-data model and sample one posterior."""
    import pytensor

    benchmark.group = "nutpie_first_posterior"
    teacher, data = nut["posts"][0]
    target = Timed(lambda: _theirs(nut, nutpie_compile(data, teacher)))
    was = pytensor.config.numba__cache
    pytensor.config.numba__cache = numba_cache == "on"
    try:
        d = benchmark.pedantic(target, rounds=max(1, nut["size"]["rounds"] - 1))
    finally:
        pytensor.config.numba__cache = was
    benchmark.extra_info.update(model="constants", numba_cache=numba_cache,
                                r_hat_max=d["r_hat_max"], grads=d["grads"])
    _finish(benchmark, "nutpie_numba_cache_" + numba_cache, target, d["ess_bulk_min"])


@pytest.mark.parametrize("jax_cache", ["cold", "disk_cache"])
def test_ours_first_posterior(benchmark, nut, jax_cache):
    """Ours: compile and sample one posterior with nothing compiled in memory; ``cold``: the
    persistent compilation cache off too; ``disk_cache``: on (filled by an untimed first call
    in this process)."""
    from bayesslr.bayes import nuts

    benchmark.group = "nutpie_first_posterior"
    if jax_cache == "disk_cache":
        _ours(nut)  # fills the persistent cache for this shape

    def first():
        if jax_cache == "cold":
            with cold_jax(nuts.compiled_run):
                return _ours(nut)
        jax.clear_caches()
        nuts.compiled_run.cache_clear()
        return _ours(nut)

    target = Timed(first)
    d = benchmark.pedantic(target, rounds=max(1, nut["size"]["rounds"] - 1))
    benchmark.extra_info.update(jax_cache=jax_cache, r_hat_max=d["r_hat_max"],
                                grads=d["grads"])
    _finish(benchmark, "self", target, d["ess_bulk_min"])
    for cache in ("on", "off"):
        _speedups(benchmark, "self", "nutpie_numba_cache_" + cache,
                  f"vs_nutpie_numba_cache_{cache}")


@pytest.mark.parametrize("tune", [500, 150])
def test_nutpie_warm(benchmark, nut, tune):
    """nutpie sampling alone (compiled, data as constants), 2 chains on 2 threads."""
    benchmark.group = "nutpie_warm"
    warm = min(tune, nut["size"]["warmup"])
    target = Timed(lambda: _theirs(nut, nut["constants"], warmup=warm))
    d = benchmark.pedantic(target, rounds=nut["size"]["rounds"], warmup_rounds=1)
    benchmark.extra_info.update(warmup=warm, r_hat_max=d["r_hat_max"], grads=d["grads"])
    _finish(benchmark, f"nutpie_tune{tune}", target, d["ess_bulk_min"])


@pytest.mark.parametrize("lever", list(WARM_LEVERS))
def test_ours_warm(benchmark, nut, lever):
    """Ours sampling alone (compiled): the default (vectorized chains in one XLA program) and
    the opt-in levers: ``parallel`` chains (one per host device), a 150-iteration warm-up
    from the teacher. The default's numbers are not changed by any of them."""
    benchmark.group = "nutpie_warm"
    method, warmup = WARM_LEVERS[lever]
    warm = min(warmup or nut["size"]["warmup"], nut["size"]["warmup"])
    target = Timed(lambda: _ours(nut, chain_method=method, warmup=warm))
    d = benchmark.pedantic(target, rounds=nut["size"]["rounds"], warmup_rounds=1)
    benchmark.extra_info.update(warmup=warm, chain_method=d["chain_method"],
                                r_hat_max=d["r_hat_max"], grads=d["grads"])
    _finish(benchmark, "self", target, d["ess_bulk_min"])
    _speedups(benchmark, "self", "nutpie_tune500", "vs_nutpie_tune500")
    if warmup is not None:
        _speedups(benchmark, "self", "nutpie_tune150", "vs_nutpie_tune150")


def _time_sweep(benchmark, label: str, sweep) -> None:
    """Time one pass of ``sweep`` (one row per posterior of the sweep) and record it as
    ``label`` in the ``nutpie_sweep`` group, its ESS the sum over the posteriors."""
    benchmark.group = "nutpie_sweep"
    target = Timed(sweep)
    rows = benchmark.pedantic(target, rounds=1)
    _finish(benchmark, label, target, sum(r["ess_bulk_min"] for r in rows))


def test_nutpie_sweep_with_data(benchmark, nut):
    """nutpie over the sweep: one compile of the ``pm.Data`` model, data swapped per
    posterior with ``with_data``."""

    def sweep():
        compiled = nutpie_compile(nut["posts"][0][1], nut["posts"][0][0], as_data=True)
        return [_theirs(nut, nutpie_for(compiled, data, teacher), seed=j)
                for j, (teacher, data) in enumerate(nut["posts"])]

    _time_sweep(benchmark, "nutpie_with_data", sweep)


def test_nutpie_sweep_recompiled(benchmark, nut):
    """nutpie over the sweep: the constant-data model compiled for every posterior."""

    def sweep():
        return [_theirs(nut, nutpie_compile(data, teacher), seed=j)
                for j, (teacher, data) in enumerate(nut["posts"])]

    _time_sweep(benchmark, "nutpie_recompiled", sweep)


def test_ours_sweep(benchmark, nut):
    """Ours over the sweep: one cold compile (persistent cache off), then every posterior."""
    from bayesslr.bayes import nuts

    def sweep():
        with cold_jax(nuts.compiled_run):
            return [_ours(nut, seed=j) for j in range(len(nut["posts"]))]

    _time_sweep(benchmark, "self", sweep)
    _speedups(benchmark, "self", "nutpie_with_data", "vs_nutpie_with_data")
    _speedups(benchmark, "self", "nutpie_recompiled", "vs_nutpie_recompiled")


def _ratio_line(label: str, a: float, b: float) -> str:
    return f"  {label:<58}{a:10.2f} / {b:10.2f} = {a / b:6.2f}x"


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--part", default="check,fresh,sweep")
    p.add_argument("--seeds", type=int, default=5)
    p.add_argument("--rounds", type=int, default=2)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--warmup", type=int, default=500)
    p.add_argument("--draws", type=int, default=500)
    p.add_argument("--json", default=None, help="also write the raw rows to this file")
    p.add_argument("--fresh-one", default=None, help=argparse.SUPPRESS)
    a = p.parse_args()
    warnings.simplefilter("ignore")
    if a.fresh_one:
        print(json.dumps(fresh_one(a.fresh_one, a.seed, a.warmup, a.draws)))
        return
    parts = a.part.split(",")
    print(f"posterior: spiked L=3 nu=2 Delta=0.01 D={D} alpha={ALPHA}; {CHAINS} chains x "
          f"({a.warmup} warm-up + {a.draws} draws), teacher start; load {load()}; "
          f"{os.cpu_count()} cores")
    results = {}
    if "check" in parts:
        print("log density, ours (NumPyro model) vs PyMC model (float64):")
        results["check"] = part_check()
    if "fresh" in parts:
        print(f"one posterior including compilation, fresh processes, {a.rounds} rounds:")
        fr = results["fresh"] = part_fresh(a.rounds, a.seed, a.warmup, a.draws)
        print("ratios ours / nutpie (median over rounds):")
        med = {k: {m: float(np.median([r[m] for r in v])) for m in
                   ("ess_per_s_total", "ess_per_cpu_s_total", "ess_per_grad", "total_wall_s")}
               for k, v in fr.items()}
        for mine in ("ours_cold", "ours_cached"):
            for theirs in ("nutpie_cold", "nutpie"):
                print(_ratio_line(f"ESS/s incl. compile, {mine} / {theirs}",
                                  med[mine]["ess_per_s_total"], med[theirs]["ess_per_s_total"]))
                print(_ratio_line(f"ESS/cpu-s incl. compile, {mine} / {theirs}",
                                  med[mine]["ess_per_cpu_s_total"],
                                  med[theirs]["ess_per_cpu_s_total"]))
        print(_ratio_line("ESS per gradient", med["ours_cold"]["ess_per_grad"],
                          med["nutpie"]["ess_per_grad"]))
    if "sweep" in parts:
        print(f"sweep of {a.seeds} posteriors of one shape (D={D}, N={ALPHA * D}, L=3), "
              "one process, alternating:")
        sw = results["sweep"] = part_sweep(a.seeds, a.warmup, a.draws)
        rows, comp = sw["rows"], sw["compile"]
        tot = {w: {m: sum(r[m] for r in rows[w]) for m in ("ess_bulk", "wall_s", "cpu_s",
                                                            "grads")} for w in rows}
        o, n = tot["ours"], tot["nutpie"]
        print("ratios ours / nutpie over the sweep:")
        print(_ratio_line("ESS/s sampling alone", o["ess_bulk"] / o["wall_s"],
                          n["ess_bulk"] / n["wall_s"]))
        print(_ratio_line("ESS/cpu-s sampling alone", o["ess_bulk"] / o["cpu_s"],
                          n["ess_bulk"] / n["cpu_s"]))
        print(_ratio_line("ESS/s incl. one compile each (nutpie with_data)",
                          o["ess_bulk"] / (o["wall_s"] + comp["ours"][0]),
                          n["ess_bulk"] / (n["wall_s"] + comp["nutpie"][0])))
        print(_ratio_line("ESS/cpu-s incl. one compile each (nutpie with_data)",
                          o["ess_bulk"] / (o["cpu_s"] + comp["ours"][1]),
                          n["ess_bulk"] / (n["cpu_s"] + comp["nutpie"][1])))
        r = tot["nutpie_recompiled"]
        print(_ratio_line("ESS/s incl. compile, nutpie recompiling (constants) per posterior",
                          o["ess_bulk"] / (o["wall_s"] + comp["ours"][0]),
                          r["ess_bulk"] / r["wall_s"]))
        print(_ratio_line("ESS/cpu-s incl. compile, nutpie recompiling per posterior",
                          o["ess_bulk"] / (o["cpu_s"] + comp["ours"][1]),
                          r["ess_bulk"] / r["cpu_s"]))
        print(_ratio_line("ESS per gradient", o["ess_bulk"] / o["grads"],
                          n["ess_bulk"] / n["grads"]))
        print("  max r_hat: ours "
              f"{max(r['r_hat'] for r in rows['ours']):.4f}, nutpie "
              f"{max(r['r_hat'] for r in rows['nutpie']):.4f}")
    if a.json:
        with open(a.json, "w") as f:
            json.dump(results, f, indent=1, default=str)


if __name__ == "__main__":
    main()
