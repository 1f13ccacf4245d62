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

Run: ``.venv/bin/python -m pytest benchmarks/bench_nuts_step.py --benchmark-only -s``.
"""

# isort: skip_file
# (bayesslr first: it must request the host devices of 'parallel' before JAX starts)
from __future__ import annotations

import bayesslr  # noqa: F401  (JAX configuration, compilation cache)

import time

import jax
import jax.numpy as jnp
import pytest

from bayesslr.bayes.model import model_spec
from bayesslr.bayes.nuts import model_args, potential_fn_gen
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
                 "ratio_pt_step_over_gradient": pt_us / alone_us})
    print(f"\nnuts_step_vs_gradient (D={D}): NUTS {nuts_us:.1f} CPU-us per chain-gradient, "
          f"gradient alone {alone_us:.1f}, PT {pt_us:.1f}: NUTS/alone "
          f"{nuts_us / alone_us:.2f}, PT/alone {pt_us / alone_us:.2f}")
    assert nuts_us > 0 and alone_us > 0 and pt_us > 0
