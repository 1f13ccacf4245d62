"""A sampler step against its own gradient (issue 35): group ``nuts_step_vs_gradient``.

In one run, on one posterior (the paper preset's NUTS size: spiked ``L = 3``, ``nu = 2``,
``Delta = 0.01``, ``D = 200``, ``alpha = 2``, seed 0; ``smoke``: ``D = 20``), the CPU time per
chain-gradient

* inside a NUTS run of the ``bayes_sampling`` family (4 vectorised chains from the teacher,
  the paper preset's chain count; warm-up and draws, compilation excluded: the run is compiled
  by a first call, the second is timed), its ``grad_evals`` being every leapfrog step of every
  chain;
* of the gradient alone: the same NumPyro potential's gradient, ``vmap``-ed over the same 4
  chains, ``fori_loop``-ed in one ``jit`` (no sampler around it);
* inside a parallel-tempering run (``sampler = "pt"``, the paper preset's alpha = 1 settings:
  4 systems x 24 temperatures, 20 leapfrog steps), for comparison: its replicas are one
  vectorised program.

``extra_info``: ``cpu_us_per_chain_gradient_nuts``, ``..._alone``, ``..._pt``,
``ratio_step_over_gradient`` (NUTS over alone; issue 35's target is <= 1.5) and
``ratio_pt_step_over_gradient`` (PT over alone), each measured in this one run, with the load.

Where a NUTS run's time goes, in the same run: the compiled sampler is called again with the
same warm-up and twice the draws (same keys, so the same warm-up), and the difference is the
sampling phase alone (``ratio_sampling_step_over_gradient``: frozen step size and mass, NumPyro's
NUTS transition, 4 chains in ``vmap``); the rest of the compiled call is the warm-up
(``ratio_warmup_step_over_gradient``: step-size searches, dual averaging, mass estimates, and
the chains waiting for each other's trees while the adaptation is pooled every iteration);
``diagnostics_cpu_share`` is the part of the ``run_nuts`` call spent in the R-hat and ESS after
sampling (``chain_diagnostics``), a fixed cost per run that a short run does not amortise.
Those diagnostics are ArviZ's formulas as array operations over all ``2 D`` coordinates
(:mod:`bayesslr.bayes.diagnostics`); ArviZ itself, looping over coordinates, is timed on the
same draws in the same run (``diagnostics_arviz_cpu_s``, ``diagnostics_speedup_over_arviz``;
the values are checked equal to 1e-10), and ``ratio_step_over_gradient_with_arviz_diagnostics``
is the whole-run ratio had the run used it (the run's CPU time with the one diagnostics time
swapped for the other); ``ratio_step_over_gradient_without_diagnostics`` leaves them out.

Run: ``.venv/bin/python -m pytest benchmarks/bench_nuts_step.py --benchmark-only -s``.
"""

# isort: skip_file
# (bayesslr first: it must request the host devices of 'parallel' before JAX starts)
from __future__ import annotations

import bayesslr  # noqa: F401  (JAX configuration, compilation cache)

import os
import time

import jax
import jax.numpy as jnp
import pytest

from bayesslr.bayes import arviz_adapter
from bayesslr.bayes.model import model_spec
from bayesslr.bayes.nuts import chain_diagnostics, compiled_run, model_args, potential_fn_gen
from bayesslr.bayes.sampler import (
    SamplerOptions,
    TemperingOptions,
    init_params,
    run_nuts,
    run_tempered,
)
from bayesslr.core.task import make_task, sample_task, seed_key

SIZES = {  # D, NUTS warm-up + draws, PT warm-up + draws, PT replicas, gradients alone
    "smoke": (20, (20, 20), (10, 10), 4, 200),
    "default": (200, (200, 300), (20, 30), 24, 4000),
    "paper": (200, (500, 1000), (50, 100), 24, 10000),
}
CHAINS = 4


@pytest.fixture(scope="module")
def posterior(bench_size):
    D = SIZES[bench_size][0]
    task = make_task("spiked", L=3, nu=2.0, delta=0.01, D=D)
    teacher, train, _ = jax.jit(sample_task, static_argnums=(1, 2, 3))(
        seed_key(0), task, 2 * D, 10)
    return task, model_spec(task), teacher, train


def _cpu(fn):
    """``(result, CPU seconds of this process: every thread)``."""
    c0 = time.process_time()
    out = fn()
    return out, time.process_time() - c0


def gradient_alone_us(spec, train, teacher, n: int) -> float:
    """CPU microseconds per chain-gradient of the model's potential, ``vmap``-ed over
    :data:`CHAINS` chains and looped ``n`` times in one compiled call (compiled first)."""
    pot = potential_fn_gen("marginal", spec.variant)(*model_args(spec, train))
    grad = jax.vmap(jax.grad(pot))
    start = {k: jnp.tile(getattr(teacher, k)[None], (CHAINS, 1)) for k in ("k", "v")}

    @jax.jit
    def loop(z):
        def body(_, z):  # a small move along the gradient keeps each step dependent
            g = grad(z)
            return jax.tree.map(lambda a, b: a - 1e-6 * b, z, g)
        return jax.lax.fori_loop(0, n, body, z)

    jax.block_until_ready(loop(start))
    _, cpu = _cpu(lambda: jax.block_until_ready(loop(start)))
    return 1e6 * cpu / (n * CHAINS)


def compiled_cpu(spec, train, opts: SamplerOptions, start, draws: int) -> tuple[float, int, int]:
    """CPU seconds of the ``bayes_sampling`` NUTS program (warm-up ``opts.warmup``, ``draws``
    draws, teacher start: the gradient-based warm-up), compiled first; with its sampling and
    warm-up gradient counts (every chain)."""
    fn = compiled_run("marginal", spec.variant, CHAINS, opts.warmup, draws, "vectorized",
                      opts.target_accept, opts.max_tree_depth, "grad", opts.mass, opts.pool)
    args = model_args(spec, train)
    keys = jax.random.split(jax.random.key(2), CHAINS)
    z0 = {n: jnp.asarray(start[n]).reshape(CHAINS, -1) for n in ("k", "v")}
    jax.block_until_ready(fn(keys, z0, args))
    out, cpu = _cpu(lambda: jax.block_until_ready(fn(keys, z0, args)))
    return cpu, int(out[4].sum()), int(out[5].sum())


def test_nuts_step_vs_gradient(benchmark, posterior, bench_size):
    task, spec, teacher, train = posterior
    D, (w, s), (pw, ps), R, n_alone = SIZES[bench_size]
    benchmark.group = "nuts_step_vs_gradient"
    opts = SamplerOptions(chains=CHAINS, warmup=w, draws=s)
    start = init_params(jax.random.key(1), "teacher", CHAINS, D, teacher)

    def nuts():
        return run_nuts(jax.random.key(2), spec, train, opts, start=start, init="teacher")

    nuts()  # compiled here; the timed call below reuses the executable
    res, cpu_nuts = benchmark.pedantic(lambda: _cpu(nuts), rounds=1, iterations=1)
    nuts_us = 1e6 * cpu_nuts / res.grad_evals
    alone_us = gradient_alone_us(spec, train, teacher, n_alone)

    # the phases: the same warm-up with s and 2 s draws
    cpu_a, draws_a, warm_a = compiled_cpu(spec, train, opts, start, s)
    cpu_b, draws_b, warm_b = compiled_cpu(spec, train, opts, start, 2 * s)
    sampling_us = 1e6 * (cpu_b - cpu_a) / (draws_b - draws_a)
    warmup_us = (1e6 * cpu_a - sampling_us * draws_a) / warm_a
    diag, cpu_diag = _cpu(lambda: chain_diagnostics(res.k, res.v))
    diag_az, cpu_diag_az = _cpu(lambda: arviz_adapter.diagnostics_arviz({"k": res.k, "v": res.v}))
    for name, ref in diag_az.items():  # the same numbers, to rounding
        assert diag[name] == pytest.approx(ref, rel=1e-10, nan_ok=True), name

    temper = TemperingOptions(replicas=R, beta_min=2e-3, pt_integration_steps=20)
    pt_opts = SamplerOptions(chains=CHAINS, warmup=pw, draws=ps)

    def pt():
        return run_tempered(jax.random.key(3), spec, train, pt_opts, temper, init="teacher",
                            teacher=teacher)

    pt()
    pt_res, cpu_pt = _cpu(pt)
    pt_us = 1e6 * cpu_pt / pt_res.grad_evals
    info = benchmark.extra_info
    info.update({"D": D, "alpha": 2.0, "chains": CHAINS, "nuts_grad_evals": res.grad_evals,
                 "cpu_us_per_chain_gradient_nuts": round(nuts_us, 2),
                 "cpu_us_per_chain_gradient_alone": round(alone_us, 2),
                 "cpu_us_per_chain_gradient_pt": round(pt_us, 2), "pt_replicas": R,
                 "ratio_step_over_gradient": nuts_us / alone_us,
                 "ratio_pt_step_over_gradient": pt_us / alone_us,
                 "cpu_us_per_chain_gradient_sampling": round(sampling_us, 2),
                 "cpu_us_per_chain_gradient_warmup": round(warmup_us, 2),
                 "ratio_sampling_step_over_gradient": sampling_us / alone_us,
                 "ratio_warmup_step_over_gradient": warmup_us / alone_us,
                 "warmup_gradient_share": warm_a / (warm_a + draws_a),
                 "steps_per_draw": draws_a / (CHAINS * s),
                 "steps_per_warmup_iteration": warm_a / (CHAINS * w),
                 "diagnostics_cpu_share": cpu_diag / cpu_nuts,
                 "diagnostics_cpu_s": cpu_diag, "diagnostics_arviz_cpu_s": cpu_diag_az,
                 "diagnostics_speedup_over_arviz": cpu_diag_az / cpu_diag,
                 "ratio_step_over_gradient_with_arviz_diagnostics":
                     1e6 * (cpu_nuts - cpu_diag + cpu_diag_az) / res.grad_evals / alone_us,
                 "ratio_step_over_gradient_without_diagnostics":
                     1e6 * max(cpu_nuts - cpu_diag, 0.0) / res.grad_evals / alone_us,
                 "load_average_1min": os.getloadavg()[0]})
    print(f"\nnuts_step_vs_gradient (D={D}): NUTS {nuts_us:.1f} CPU-us per chain-gradient, "
          f"gradient alone {alone_us:.1f}, PT {pt_us:.1f}: NUTS/alone "
          f"{nuts_us / alone_us:.2f}, PT/alone {pt_us / alone_us:.2f}; sampling phase "
          f"{sampling_us:.1f} ({sampling_us / alone_us:.2f}x), warm-up {warmup_us:.1f} "
          f"({warmup_us / alone_us:.2f}x, {warm_a / (warm_a + draws_a):.0%} of the gradients), "
          f"diagnostics {cpu_diag / cpu_nuts:.0%} of the run ({cpu_diag:.3f} CPU-s, ArviZ "
          f"{cpu_diag_az:.2f}, {cpu_diag_az / cpu_diag:.0f}x); load "
          f"{os.getloadavg()[0]:.1f}")
    assert nuts_us > 0 and alone_us > 0 and pt_us > 0
    assert draws_b > draws_a and warm_b == warm_a  # same keys: the same warm-up
