"""Timings of the NUTS driver (docs/model.md §6): chain methods, compile vs run, vs ``MCMC.run``.

Run: ``.venv/bin/python -m pytest benchmarks/bench_bayes.py --benchmark-only`` (pytest-benchmark;
group ``chain_method``: the second posterior of the same shapes per chain method; group
``compile_nuts``: the first posterior with nothing compiled, persistent cache off, against a
warm one, ratio in ``extra_info``; sizes ``smoke`` ``D = 20``, 50 + 50 iterations, ``default``
``D = 50``, 300 + 300, ``paper`` ``D = 100``, 500 + 500), or
``.venv/bin/python benchmarks/bench_bayes.py`` for a printed table with the ratio of NumPyro's
``MCMC.run`` (which retraces its loop on every call) to the one-jit driver on a second
posterior of the same shapes.

Measured 2026-11-30 on the 2-core dev host under heavy contention (load ~8), D=50, alpha=4,
2 chains x (300 + 300): second posterior vectorized 3.7 s, parallel 1.8 s, sequential 2.6 s;
first call (trace + compile, warm persistent cache) 14-39 s; MCMC.run 4.5 s (ratio 1.21).
The spec's uncontended measurement (MCMC.run) found vectorized fastest; re-measure on an idle
host before changing the default (vectorized; parallel falls back to it).

The warm-up, mass matrix, chain count and precision levers are measured in
``bench_sampler_levers.py``, the comparison with nutpie in ``bench_sampler_nutpie.py``; results
in ``benchmarks/README.md`` (section "Sampler").
"""

# isort: skip_file
# (bayesslr first: it must request the host devices of 'parallel' before JAX starts)
from __future__ import annotations

import bayesslr  # noqa: F401  (JAX configuration, compilation cache)

import functools
import time

import jax
import pytest
from bayesslr.bayes import nuts
from bayesslr.bayes.model import marginal_model, model_spec
from bayesslr.bayes.sampler import SamplerOptions, init_params, run_nuts
from bayesslr.core.task import make_task, sample_task
from benchutil import cold_jax, ratio, record, stat

D, ALPHA, CHAINS, WARMUP, DRAWS = 50, 4, 2, 300, 300
SIZES = {"smoke": (20, 50, 50, 1), "default": (D, WARMUP, DRAWS, 2), "paper": (100, 500, 500, 3)}


def _setup(seed: int = 0, D: int = D):
    task = make_task("spiked", L=3, nu=2.0, delta=0.01, D=D)
    teacher, data, _ = sample_task(jax.random.key(seed), task, ALPHA * D)
    return task, teacher, data, model_spec(task)


def _run(method: str, seed: int, D: int = D, warmup: int = WARMUP, draws: int = DRAWS):
    task, teacher, data, spec = _setup(seed, D)
    opts = SamplerOptions(chains=CHAINS, warmup=warmup, draws=draws, chain_method=method)
    start = init_params(None, "teacher", CHAINS, D, teacher)
    return run_nuts(jax.random.key(seed), spec, data, opts, start=start, init="teacher")


@pytest.mark.parametrize("method", ["vectorized", "parallel", "sequential"])
def test_chain_method(benchmark, bench_size, method):
    D_, warmup, draws, rounds = SIZES[bench_size]
    benchmark.group = "chain_method"
    _run(method, 0, D_, warmup, draws)  # compile + first posterior (group compile_nuts)
    res = benchmark.pedantic(_run, args=(method, 1, D_, warmup, draws), rounds=rounds)
    benchmark.extra_info.update(chain_method_used=res.chain_method,
                                ess_per_grad=res.ess_per_grad, r_hat_max=res.r_hat_max,
                                grad_evals=res.grad_evals)
    record(benchmark, method)


def test_first_posterior(benchmark, bench_size):
    """The first posterior with nothing compiled (vectorized chains; persistent cache off):
    trace + compile + sampling, against the warm posterior of group ``chain_method``."""
    D_, warmup, draws, _ = SIZES[bench_size]
    benchmark.group = "compile_nuts"

    def cold():
        with cold_jax(nuts.compiled_run):
            return _run("vectorized", 1, D_, warmup, draws)

    benchmark.pedantic(cold, rounds=1)
    ratio(benchmark, "ratio_first_call_over_warm_posterior", stat(benchmark, "self"),
          stat(benchmark, "vectorized", group="chain_method"))


def _mcmc_run(seed: int) -> float:
    from numpyro.infer import MCMC, NUTS

    task, teacher, data, spec = _setup(seed)
    model = functools.partial(marginal_model, variant="spiked")
    mcmc = _mcmc_run.cache.get("m")
    if mcmc is None:
        mcmc = MCMC(NUTS(model), num_warmup=WARMUP, num_samples=DRAWS, num_chains=CHAINS,
                    chain_method="vectorized", progress_bar=False, jit_model_args=True)
        _mcmc_run.cache["m"] = mcmc
    start = init_params(None, "teacher", CHAINS, D, teacher)
    w = jax.numpy.ones(data.n)
    t0 = time.perf_counter()
    mcmc.run(jax.random.key(seed), data.X, data.y, data.mask, w, spec.nu, spec.delta,
             init_params=start)
    jax.block_until_ready(mcmc.get_samples())
    return time.perf_counter() - t0


_mcmc_run.cache = {}


def main() -> None:
    print(f"spiked L=3 nu=2 D={D} alpha={ALPHA} chains={CHAINS} warmup={WARMUP} draws={DRAWS}")
    print(f"{'driver':<22}{'first_s':>9}{'second_s':>10}{'ess/grad':>10}{'r_hat':>8}")
    times = {}
    for method in ("vectorized", "parallel", "sequential"):
        t0 = time.perf_counter()
        _run(method, 0)
        first = time.perf_counter() - t0
        t0 = time.perf_counter()
        res = _run(method, 1)
        second = time.perf_counter() - t0
        times[method] = second
        print(f"{method + ' (' + res.chain_method + ')':<22}{first:9.2f}{second:10.2f}"
              f"{res.ess_per_grad:10.4f}{res.r_hat_max:8.3f}")
    first = _mcmc_run(0)
    second = _mcmc_run(1)
    print(f"{'MCMC.run vectorized':<22}{first:9.2f}{second:10.2f}")
    print(f"ratio MCMC.run / one-jit driver (second posterior): "
          f"{second / times['vectorized']:.2f}")


if __name__ == "__main__":
    main()
