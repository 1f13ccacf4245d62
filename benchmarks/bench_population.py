"""Timings of the population layer (docs/model.md §3).

Run: ``.venv/bin/python -m pytest benchmarks/bench_population.py --benchmark-only`` (group
``population``; samples per call: ``smoke`` 2000, ``default`` 1e5 (2e5 for the Bayes risk),
``paper`` 2e5, the paper preset's). Compile time is paid in a warm-up round outside the
statistics.
"""

from __future__ import annotations

import pytest

import bayesslr  # noqa: F401  (JAX configuration, compilation cache)
from bayesslr.core.task import make_task
from bayesslr.population.method import bayes_risk, best_excess_risk

CASES = [("spiked", "3", 2.0), ("max", "1,2,3", 2.0)]
SIZES = {"smoke": (2000, 2000, 1), "default": (100_000, 200_000, 3),
         "paper": (200_000, 200_000, 3)}


@pytest.mark.parametrize("variant,L,nu", CASES)
@pytest.mark.parametrize("activation", ["softmax", "linear", "erf"])
def test_best_excess_risk(benchmark, bench_size, variant, L, nu, activation):
    samples, _, rounds = SIZES[bench_size]
    benchmark.group = "population"
    task = make_task(variant, L=L, nu=nu)
    res = benchmark.pedantic(best_excess_risk, args=(task, activation),
                             kwargs={"samples": samples, "seed": 0}, rounds=rounds,
                             warmup_rounds=1)
    benchmark.extra_info["excess_risk"] = res.excess_risk


@pytest.mark.parametrize("variant,L,nu", CASES)
def test_bayes_risk(benchmark, bench_size, variant, L, nu):
    _, samples, rounds = SIZES[bench_size]
    benchmark.group = "population"
    task = make_task(variant, L=L, nu=nu)
    benchmark.pedantic(bayes_risk, args=(task,), kwargs={"samples": samples}, rounds=rounds,
                       warmup_rounds=1)
