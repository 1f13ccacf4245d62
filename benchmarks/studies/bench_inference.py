"""Benchmark of the inference family: what a gradient evaluation costs in each algorithm.

Run: ``nice -n 10 python benchmarks/studies/bench_inference.py [D] [alpha]`` (default D = 100,
alpha = 5; spiked SLR, L = 3, nu = 2, Delta = 0.01, seed 0). Prints, measured in one process
(report ``uptime`` with it; the machine is shared):

1. the chunked, budgeted NUTS driver (:func:`bayesslr.inference.mcmc.run_mcmc`) against the
   one-scan NUTS of :mod:`bayesslr.bayes.sampler` on the same data, the same number of chains
   and about the same gradient evaluations: the ratio of gradient evaluations per second of
   execution (compilation excluded: each is run once to compile, then timed). The budget's
   granularity costs one host round trip per ``chunk`` iterations;
2. per algorithm at a budget of 3e4: gradient evaluations per second of execution and the
   compile time of a warm process (the second run of the same shapes), i.e. whether the
   budget's currency is comparable across algorithms (a gradient of VI or SMC should cost
   about what one of NUTS costs).
"""

from __future__ import annotations

import os
import sys
import time

import jax

from bayesslr.bayes.model import model_spec
from bayesslr.bayes.sampler import SamplerOptions, init_params, run_nuts
from bayesslr.core.task import make_task
from bayesslr.inference.evaluate import task_data
from bayesslr.inference.mcmc import MCMCSettings, run_mcmc


def main(D: int = 100, alpha: float = 5.0) -> None:
    from bayesslr.core.jaxconfig import configure_jax

    configure_jax()
    print(f"load average {os.getloadavg()}, jax {jax.__version__}, D={D}, alpha={alpha}")
    task = make_task("spiked", L=3, nu=2.0, delta=0.01, D=D)
    spec = model_spec(task)
    data = task_data(task, 0, int(round(alpha * D)), 100)
    start = init_params(jax.random.key(0), "teacher", 4, D, data.teacher)

    # 1. driver overhead
    opt = SamplerOptions(chains=4, warmup=200, draws=300)
    run_nuts(jax.random.key(1), spec, data.train, opt, start=start)  # compile
    t0 = time.perf_counter()
    ref = run_nuts(jax.random.key(2), spec, data.train, opt, start=start)
    one_scan = ref.grad_evals / (time.perf_counter() - t0)
    print(f"one-scan NUTS: {ref.grad_evals} gradient evaluations, {one_scan:.0f} per second")
    for chunk in (10, 50):
        s = MCMCSettings("nuts", chains=4, warmup=200, chunk=chunk)
        run_mcmc(jax.random.key(1), spec, data.train, s, start=start, budget=ref.grad_evals,
                 with_diagnostics=False)
        r = run_mcmc(jax.random.key(2), spec, data.train, s, start=start,
                     budget=ref.grad_evals, with_diagnostics=False)
        rate = r.grad_evals / r.run_s
        print(f"budgeted NUTS, chunk {chunk}: {r.grad_evals} gradient evaluations, "
              f"{rate:.0f} per second; ratio to one-scan {rate / one_scan:.2f}")

    # 2. per algorithm
    from bayesslr.registry import Cell, run_cell

    print(f"{'method':34s} {'grads/s':>9s} {'compile_s':>9s} {'run_s':>7s}")
    for m in ("nuts-random", "hmc-random", "gibbs-random", "advi-random", "lowrank-random",
              "map-random", "smc-prior"):
        cell = Cell(f"inference:{m}-3e4", alpha=alpha, D=D, delta=0.01, seed=0,
                    options={"n_test": 100, "reference": "none"})
        run_cell(cell)  # compile (persistent cache) and warm up
        r = run_cell(cell)
        print(f"{cell.method:34s} {r['grad_evals'] / r['run_s']:9.0f} {r['compile_s']:9.2f} "
              f"{r['run_s']:7.2f}")
    print(f"load average {os.getloadavg()}")


if __name__ == "__main__":
    main(*(int(sys.argv[1]),) if len(sys.argv) > 1 else (),
         **({"alpha": float(sys.argv[2])} if len(sys.argv) > 2 else {}))
