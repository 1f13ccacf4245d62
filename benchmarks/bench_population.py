"""Timings of the population layer (docs/model.md §3).

Run: ``.venv/bin/python -m pytest benchmarks/bench_population.py --benchmark-only``.
Compile time is paid in a warm-up call outside the timed region and printed apart.
"""

from __future__ import annotations

import time

import pytest

import bayesslr  # noqa: F401  (JAX configuration, compilation cache)
from bayesslr.core.task import make_task
from bayesslr.population.method import bayes_risk, best_excess_risk

CASES = [("spiked", "3", 2.0), ("max", "1,2,3", 2.0)]


@pytest.mark.parametrize("variant,L,nu", CASES)
@pytest.mark.parametrize("activation", ["softmax", "linear", "erf"])
def test_best_excess_risk(benchmark, variant, L, nu, activation):
    task = make_task(variant, L=L, nu=nu)
    t0 = time.perf_counter()
    best_excess_risk(task, activation, samples=100_000, seed=0)  # compile + first run
    benchmark.extra_info["first_call_s"] = time.perf_counter() - t0
    res = benchmark.pedantic(best_excess_risk, args=(task, activation),
                             kwargs={"samples": 100_000, "seed": 0}, rounds=3, iterations=1)
    benchmark.extra_info["excess_risk"] = res.excess_risk


@pytest.mark.parametrize("variant,L,nu", CASES)
def test_bayes_risk(benchmark, variant, L, nu):
    task = make_task(variant, L=L, nu=nu)
    bayes_risk(task, samples=200_000)
    benchmark.pedantic(bayes_risk, args=(task,), kwargs={"samples": 200_000}, rounds=3,
                       iterations=1)
