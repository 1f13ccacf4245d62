"""Our NUTS sampler against nutpie (PyMC's Rust NUTS) on the same SLR posterior (docs/model.md §6).

Needs the optional benchmark extra: ``pip install -e '.[bench]'`` (PyMC, nutpie; nothing in the
package depends on them). Run::

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
  compile) and on (a second process of the same shape), nutpie compiling the PyMC model.
* ``sweep``: ``--seeds`` posteriors of one shape (different teachers and data), alternating
  ours and nutpie in one process: ours compiles once; nutpie compiles once and swaps data with
  ``CompiledModel.with_data`` (its fastest path), and also as the straightforward user runs it
  (a compile per posterior, costed as the measured compile + sampling).

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

from bayesslr.bayes import arviz_adapter
from bayesslr.bayes.model import model_spec
from bayesslr.bayes.sampler import SamplerOptions, init_params, potential_fn_gen, run_nuts
from bayesslr.core.task import make_task, sample_task

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
def pymc_model(data):
    """The marginal SLR likelihood as a PyMC model (``pm.Data`` so that nutpie can swap data)."""
    import pymc as pm
    import pytensor.tensor as pt

    X = np.asarray(data.X, np.float64)
    n, L, _ = X.shape
    with pm.Model() as model:
        Xd = pm.Data("X", X.reshape(n * L, D))
        yd = pm.Data("y", np.asarray(data.y, np.float64))
        md = pm.Data("mask", np.asarray(data.mask, np.float64))
        k = pm.Normal("k", 0.0, 1.0, shape=D)
        v = pm.Normal("v", 0.0, 1.0, shape=D)
        h = pt.dot(Xd, pt.stack([k, v], axis=1)) / np.sqrt(D)  # one GEMM for both fields
        chi, z = h[:, 0].reshape((n, L)), h[:, 1].reshape((n, L))
        a = np.sqrt(SPEC.nu) * chi - 0.5 * SPEC.nu * pt.sum(k * k) / D
        log_n = (-0.5 * np.log(2 * np.pi * SPEC.delta)
                 - 0.5 * (yd[:, None] - z) ** 2 / SPEC.delta)
        s = pt.switch(md > 0, a + log_n, -np.inf)
        ll = pm.math.logsumexp(s, axis=-1).reshape((n,)) - pt.log(pt.sum(md, axis=-1))
        pm.Potential("lik", pt.sum(ll))
    return model


def nutpie_compile(data, teacher):
    import nutpie

    start = {"k": np.asarray(teacher.k, np.float64), "v": np.asarray(teacher.v, np.float64)}
    return nutpie.compile_pymc_model(pymc_model(data), initial_points=start, jitter_rvs=set())


def nutpie_for(compiled, data, teacher):
    """``compiled`` with new data and the new teacher as the (unjittered) start."""
    n, L, _ = data.X.shape
    c = compiled.with_data(X=np.asarray(data.X, np.float64).reshape(n * L, D),
                           y=np.asarray(data.y, np.float64),
                           mask=np.asarray(data.mask, np.float64))
    start = np.concatenate([teacher.k, teacher.v]).astype(np.float64)  # nutpie's order: k, v
    return dataclasses.replace(c, initial_point_func=lambda _seed: start.copy())


def run_nutpie(compiled, seed: int, warmup: int, draws: int) -> dict:
    import nutpie

    w0, c0, l0 = time.perf_counter(), time.process_time(), load()
    tr = nutpie.sample(compiled, draws=draws, tune=warmup, chains=CHAINS, cores=CHAINS,
                       seed=seed, progress_bar=False)
    wall, cpu = time.perf_counter() - w0, time.process_time() - c0
    k, v = tr.posterior["k"].values, tr.posterior["v"].values
    d = arviz_adapter.diagnostics({"k": k, "v": v})
    g_w = int(tr.warmup_sample_stats["n_steps"].values.sum()) if warmup else 0
    g = int(tr.sample_stats["n_steps"].values.sum()) + g_w
    return _row("nutpie", seed, d, g, g_w, wall, cpu, l0,
                int(tr.sample_stats["diverging"].values.sum()))


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
    with jax.enable_x64(True):
        args = (jnp.asarray(data.X, jnp.float64), jnp.asarray(data.y, jnp.float64), data.mask,
                jnp.ones(data.n, jnp.float64), jnp.float64(SPEC.nu), jnp.float64(SPEC.delta))
        pot = potential_fn_gen("marginal", "spiked")(*args)
        for j in range(3):
            k = np.asarray(teacher.k, np.float64) + 0.3 * j * rng.standard_normal(D)
            v = np.asarray(teacher.v, np.float64) + 0.1 * j * rng.standard_normal(D)
            ours = -float(pot({"k": jnp.asarray(k), "v": jnp.asarray(v)}))
            theirs = float(logp({"k": k, "v": v}))
            rel = abs(ours - theirs) / max(1.0, abs(theirs))
            worst = max(worst, rel)
            print(f"  log density at point {j}: ours {ours:.10f}  PyMC {theirs:.10f}  "
                  f"rel. diff {rel:.1e}")
    assert worst < 1e-9, f"log densities differ: {worst:.2e}"
    return worst


def fresh_one(who: str, seed: int, warmup: int, draws: int) -> dict:
    """One posterior, compilation included, in this (fresh) process."""
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

    out = {"ours_cold": [], "ours_cached": [], "nutpie": []}
    cache = tempfile.mkdtemp(prefix="bayesslr-bench-cache-")
    for r in range(rounds):
        for label, who, env in (("ours_cold", "ours", {"BAYESSLR_JAX_CACHE": "off"}),
                                ("nutpie", "nutpie", {}),
                                ("ours_cached", "ours", {"BAYESSLR_JAX_CACHE": cache})):
            if label == "ours_cached" and r == 0:  # fill the cache once, untimed
                _subprocess("ours", seed, warmup, draws, env)
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
    rows = {"ours": [], "nutpie": []}
    compile_s = {}
    opts = SamplerOptions(warmup=warmup, draws=draws)
    teacher, data = posterior(1000)
    w0, c0 = time.perf_counter(), time.process_time()
    compiled = nutpie_compile(data, teacher)
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
    return {"rows": rows, "compile": compile_s}


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
            print(_ratio_line(f"ESS/s incl. compile, {mine}",
                              med[mine]["ess_per_s_total"], med["nutpie"]["ess_per_s_total"]))
            print(_ratio_line(f"ESS/cpu-s incl. compile, {mine}",
                              med[mine]["ess_per_cpu_s_total"],
                              med["nutpie"]["ess_per_cpu_s_total"]))
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
        print(_ratio_line("ESS/s incl. compile, nutpie recompiling per posterior",
                          o["ess_bulk"] / (o["wall_s"] + comp["ours"][0]),
                          n["ess_bulk"] / (n["wall_s"] + a.seeds * comp["nutpie"][0])))
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
