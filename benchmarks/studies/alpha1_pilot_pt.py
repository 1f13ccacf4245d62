"""Pilot of parallel tempering on one paper cell at alpha = 1 (docs/sampling.md, the table of
pilots): spiked L = 3, Delta = 0.01, D = 200, N = 200, every replica started at the teacher.
Prints one JSON line: wall and CPU seconds, R-hat, ESS, swap rates, round trips, ladder.

    python benchmarks/studies/alpha1_pilot_pt.py NU SEED REPLICAS BETA_MIN BUDGET STEPS CHAINS
    python benchmarks/studies/alpha1_pilot_pt.py 1.0 0 24 0.002 2e7 20 4
"""

from __future__ import annotations

import json
import sys
import time

import jax
import numpy as np

import bayesslr as bs
from bayesslr.bayes.model import model_spec
from bayesslr.bayes.pt import run_pt
from bayesslr.core.task import make_task, sample_task, seed_key

D, N = 200, 200


def main(nu: float, seed: int, R: int, beta_min: float, budget: int, steps: int,
         chains: int) -> dict:
    task = make_task("spiked", L=3, nu=nu, delta=0.01, D=D)
    teacher, train, _ = jax.jit(sample_task, static_argnums=(1, 2, 3))(
        seed_key(seed), task, N, 10_000)
    start = {n: np.broadcast_to(np.asarray(getattr(teacher, n)), (chains, R, D)).copy()
             for n in ("k", "v")}
    t0, c0 = time.perf_counter(), time.process_time()
    r = run_pt(jax.random.key(seed + 100), model_spec(task), train, budget=budget,
               start=start, chains=chains, replicas=R, beta_min=beta_min,
               integration_steps=steps, chunk=20, max_draws=2000)
    return {"nu": nu, "seed": seed, "replicas": R, "beta_min": beta_min, "budget": budget,
            "steps": steps, "wall_s": time.perf_counter() - t0,
            "cpu_s": time.process_time() - c0, "r_hat_max": r.r_hat_max,
            "ess_bulk_min": r.ess_bulk_min, "ess_tail_min": r.ess_tail_min,
            "iterations": r.iterations, "draws": int(r.k.shape[1]),
            **r.tempering_summary()}


if __name__ == "__main__":
    bs.configure_jax()
    a = sys.argv[1:]
    print(json.dumps(main(float(a[0]), int(a[1]), int(a[2]), float(a[3]), int(float(a[4])),
                          int(a[5]), int(a[6]))), flush=True)
