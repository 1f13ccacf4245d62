"""What makes the NUTS sampler fast, lever by lever (docs/model.md §6). No optional dependency.

Run
``.venv/bin/python benchmarks/studies/bench_sampler_levers.py --part grad,warmup,chains,lowalpha``
(each part prints its own table; ``--seeds`` and ``--alpha`` change the posteriors).

Posterior: spiked, L=3, nu=2, Delta=0.01, D=100 (``--D``), teacher start unless the row says
``init=random``. Gradient counts, ESS and R-hat do not depend on the machine's load; CPU seconds
(``process_time``, all threads) are robust to it; wall seconds are printed with the load.

Parts:

* ``grad``: cost of one gradient of the potential per chain, for 1 chain, 2 and 4 chains under
  ``vmap`` and 2 chains under ``lax.map``, with the fields computed as one stacked contraction
  ``X [k v]`` (``bayesslr.core.task.fields``, the model's) or as two separate ones; float32 and
  float64. Each timing is a ``fori_loop`` of 2000 gradients inside one ``jit``.
* ``warmup``: warm-up length and adaptation (``adapt=grad`` our gradient-based diagonal, pooled
  over chains; ``adapt=stan`` NumPyro's windowed Welford; ``mass`` diag/dense/none), 500 draws:
  warm-up and total gradients, min bulk/tail ESS, max R-hat, ESS per gradient.
* ``chains``: number of chains, chain method (``vectorized``, ``parallel``, ``sequential``) and
  precision at the default adaptation: ESS per gradient, CPU and wall per gradient, ESS per
  CPU-second, the lock-step overhead of vectorized chains (gradients the batch computes,
  ``chains * sum_t max_c steps``, over the useful ones).
* ``lowalpha``: ``alpha=1`` (slow mixing) with long chains (``--long-draws``): ESS per gradient
  and posterior summaries (``|k|^2/D``, ``k.k*/D``, ``v.v*/D``, log density) with their Monte
  Carlo standard errors, to check that the adaptations agree and to compare their efficiency
  where mixing is slow.
"""

# isort: skip_file
from __future__ import annotations

import bayesslr  # noqa: F401  (JAX configuration before JAX starts)

import argparse
import math
import os
import time

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from bayesslr.bayes import arviz_adapter
from bayesslr.bayes.model import model_spec
from bayesslr.bayes.nuts import potential_fn_gen
from bayesslr.bayes.sampler import SamplerOptions, init_params, run_nuts
from bayesslr.core.task import make_task, sample_task

_sample_task = jax.jit(sample_task, static_argnums=(1, 2, 3))


def load() -> float:
    return round(os.getloadavg()[0], 1)


def setup(D: int, alpha: float, seed: int):
    task = make_task("spiked", L=3, nu=2.0, delta=0.01, D=D)
    teacher, data, _ = _sample_task(jax.random.key(seed), task, int(round(alpha * D)), 0)
    return task, model_spec(task), teacher, data


# ------------------------------------------------------------------------------------------
# gradient cost
# ------------------------------------------------------------------------------------------
def _separate_potential(*args):
    """The same potential with ``chi`` and ``z`` from two separate contractions."""
    X, y, mask, w, nu, delta = args
    D = X.shape[-1]

    def pot(z):
        k, v = z["k"], z["v"]
        chi = jnp.einsum("nld,d->nl", X, k) / math.sqrt(D)
        zz = jnp.einsum("nld,d->nl", X, v) / math.sqrt(D)
        a = jnp.sqrt(nu) * chi - 0.5 * nu * jnp.sum(k * k) / D
        log_n = -0.5 * (jnp.log(2 * jnp.pi * delta)) - 0.5 * (y[:, None] - zz) ** 2 / delta
        ll = jax.nn.logsumexp(jnp.where(mask, a + log_n, -jnp.inf), axis=-1)
        ll = ll - jnp.log(jnp.sum(mask, axis=-1))
        prior = 0.5 * (k @ k + v @ v) + D * math.log(2 * math.pi)
        return prior - jnp.sum(w * ll)

    return pot


def part_grad(D: int, alpha: float) -> None:
    REP = 2000
    print(f"gradient of the potential, D={D}, N={int(alpha * D)}, L=3: CPU (wall) us per "
          "chain-gradient, best of 3")
    print(f"  {'form':<10}{'dtype':<9}" + "".join(f"{c:>22}" for c in
                                             ("1 chain", "vmap 2", "vmap 4", "lax.map 2")))
    for x64 in (False, True):
        with jax.enable_x64(x64):
            dt = jnp.float64 if x64 else jnp.float32
            _, spec, teacher, data = setup(D, alpha, 0)
            args = (jnp.asarray(data.X, dt), jnp.asarray(data.y, dt), data.mask,
                    jnp.ones(data.n, dt), jnp.asarray(spec.nu, dt), jnp.asarray(spec.delta, dt))
            for form in ("stacked", "separate"):
                gen = (potential_fn_gen("marginal", "spiked") if form == "stacked"
                       else _separate_potential)

                def loop(args, z0, gen=gen):
                    g = jax.grad(gen(*args))

                    def body(i, pos):
                        return jax.tree.map(lambda p_, g_: p_ - 1e-6 * g_, pos, g(pos))

                    return lax.fori_loop(0, REP, body, z0)

                fns = {"1 chain": (jax.jit(loop), 1),
                       "vmap 2": (jax.jit(jax.vmap(loop, in_axes=(None, 0))), 2),
                       "vmap 4": (jax.jit(jax.vmap(loop, in_axes=(None, 0))), 4),
                       "lax.map 2": (jax.jit(lambda a, z, loop=loop: lax.map(
                           lambda zz: loop(a, zz), z)), 2)}
                cells = []
                for _name, (f, c) in fns.items():
                    z = {n: jnp.asarray(a, dt) for n, a in (("k", teacher.k), ("v", teacher.v))}
                    if c > 1:
                        z = {n: jnp.stack([a * (1 - 0.01 * i) for i in range(c)])
                             for n, a in z.items()}
                    jax.block_until_ready(f(args, z))
                    best = (math.inf, math.inf)
                    for _ in range(3):
                        c0, w0 = time.process_time(), time.perf_counter()
                        jax.block_until_ready(f(args, z))
                        best = min(best, ((time.process_time() - c0) / REP / c * 1e6,
                                          (time.perf_counter() - w0) / REP / c * 1e6))
                    cells.append(f"{best[0]:8.1f} ({best[1]:7.1f})")
                print(f"  {form:<10}{'float64' if x64 else 'float32':<9}"
                      + "".join(f"{s:>22}" for s in cells) + f"   load {load()}", flush=True)


# ------------------------------------------------------------------------------------------
# runs of the sampler
# ------------------------------------------------------------------------------------------
def run(D, alpha, seed, variant: dict, draws: int = 500, timed: bool = True):
    kw = dict(variant)
    init = kw.pop("init", "teacher")
    _, spec, teacher, data = setup(D, alpha, seed)
    opts = SamplerOptions(draws=draws, **kw)
    start = init_params(jax.random.key(seed + 7), init, opts.chains, D, teacher)
    if timed:  # compile first, so that the timing is of the sampling alone
        run_nuts(jax.random.key(seed + 100), spec, data, opts, start=start, init=init)
    c0, w0, l0 = time.process_time(), time.perf_counter(), load()
    res = run_nuts(jax.random.key(seed + 100), spec, data, opts, start=start, init=init)
    cpu, wall = time.process_time() - c0, time.perf_counter() - w0
    return res, cpu, wall, l0, teacher


def _fmt(kw: dict) -> str:
    return ", ".join(f"{k}={v}" for k, v in kw.items()) or "defaults"


def part_warmup(D: int, alpha: float, seeds: list[int]) -> None:
    variants = [dict(adapt="stan", warmup=500), dict(adapt="stan", warmup=500, mass="dense"),
                dict(adapt="stan", warmup=150), dict(adapt="grad", warmup=500),
                dict(adapt="grad", warmup=300), dict(adapt="grad", warmup=150),
                dict(adapt="grad", warmup=100), dict(adapt="grad", warmup=150, pool=False),
                dict(adapt="grad", warmup=150, mass="none")]
    print(f"warm-up and adaptation, alpha={alpha}, D={D}, 2 chains x 500 draws, teacher start; "
          f"seeds {seeds}")
    print(f"  {'variant':<40}{'warm-up grads':>14}{'grads':>8}{'ess bulk':>10}{'tail':>7}"
          f"{'r_hat':>8}{'ess/grad':>10}{'div':>5}")
    for var in variants:
        rows = [run(D, alpha, s, var)[0] for s in seeds]
        print(f"  {_fmt(var):<40}{np.mean([r.grad_evals_warmup for r in rows]):14.0f}"
              f"{np.mean([r.grad_evals for r in rows]):8.0f}"
              f"{np.mean([r.ess_bulk_min for r in rows]):10.0f}"
              f"{np.mean([r.ess_tail_min for r in rows]):7.0f}"
              f"{max(r.r_hat_max for r in rows):8.4f}"
              f"{np.mean([r.ess_per_grad for r in rows]):10.4f}"
              f"{sum(r.divergences for r in rows):5d}", flush=True)


def part_chains(D: int, alpha: float, seeds: list[int]) -> None:
    variants = [dict(chains=1), dict(chains=2), dict(chains=4),
                dict(chains=2, chain_method="parallel"),
                dict(chains=2, chain_method="sequential"), dict(chains=2, x64=True)]
    print(f"chains, chain method, precision (adapt=grad, 500 + 500), alpha={alpha}, D={D}; "
          f"seeds {seeds}")
    print(f"  {'variant':<36}{'ess/grad':>10}{'r_hat':>8}{'cpu us/grad':>13}"
          f"{'wall us/grad':>14}{'ess/cpu-s':>11}{'lockstep':>10}{'load':>7}")
    for var in variants:
        out = [run(D, alpha, s, var) for s in seeds]
        rows = [o[0] for o in out]
        cpu, wall = sum(o[1] for o in out), sum(o[2] for o in out)
        g = sum(r.grad_evals for r in rows)
        lock = np.mean([r.num_steps.max(0).sum() * r.num_steps.shape[0] / r.num_steps.sum()
                        for r in rows])
        print(f"  {_fmt(var) + ' (' + rows[0].chain_method + ')':<36}"
              f"{np.mean([r.ess_per_grad for r in rows]):10.4f}"
              f"{max(r.r_hat_max for r in rows):8.4f}{cpu / g * 1e6:13.1f}{wall / g * 1e6:14.1f}"
              f"{sum(r.ess_bulk_min for r in rows) / cpu:11.1f}{lock:10.3f}"
              f"{out[0][3]:7.1f}", flush=True)


def part_lowalpha(D: int, seeds: list[int], draws: int) -> None:
    variants = [dict(adapt="stan", warmup=500), dict(adapt="grad", warmup=500),
                dict(adapt="grad", warmup=150)]
    print(f"alpha=1 (slow mixing), D={D}, 2 chains x {draws} draws, teacher start; posterior "
          "means +- MCSE")
    print(f"  {'seed':<6}{'variant':<28}{'grads':>9}{'ess bulk':>9}{'r_hat':>8}"
          f"{'ess/grad':>10}  {'|k|^2/D':>16}{'k.k*/D':>16}{'v.v*/D':>16}{'log dens.':>18}")
    for seed in seeds:
        for var in variants:
            res, cpu, _, _, teacher = run(D, 1.0, seed, var, draws=draws, timed=False)
            tk, tv = np.asarray(teacher.k), np.asarray(teacher.v)
            cols = []
            for x in ((res.k ** 2).mean(-1), res.k @ tk / D, res.v @ tv / D, res.log_density):
                se = float(arviz_adapter.mcse_mean(x[..., None])[0])
                cols.append(f"{float(x.mean()):9.4f}+-{se:.4f}")
            print(f"  {seed:<6}{_fmt(var):<28}{res.grad_evals:9d}{res.ess_bulk_min:9.0f}"
                  f"{res.r_hat_max:8.3f}{res.ess_per_grad:10.6f}  " + "".join(
                      f"{c:>16}" for c in cols), flush=True)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--part", default="grad,warmup,chains,lowalpha")
    p.add_argument("--D", type=int, default=100)
    p.add_argument("--alpha", type=float, default=4.0)
    p.add_argument("--seeds", default="1,2,3")
    p.add_argument("--long-draws", type=int, default=4000)
    a = p.parse_args()
    seeds = [int(s) for s in a.seeds.split(",")]
    print(f"load {load()}, {os.cpu_count()} cores, jax {jax.__version__}")
    parts = a.part.split(",")
    if "grad" in parts:
        part_grad(a.D, a.alpha)
    if "warmup" in parts:
        part_warmup(a.D, a.alpha, seeds)
    if "chains" in parts:
        part_chains(a.D, a.alpha, seeds)
    if "lowalpha" in parts:
        part_lowalpha(a.D, seeds, a.long_draws)


if __name__ == "__main__":
    main()
