"""``bayes_sampling`` with ``sampler = "pt"`` (issue 34): parallel tempering as the family's
second sampler. Its posterior mean against long NUTS on a small posterior (slow), its
diagnostics and verdict on a deliberately too-short run, its refusals before any work.

Tolerances are ``4 *`` the combined Monte Carlo standard errors (ArviZ's MCSE of each chain
set's mean)."""

from __future__ import annotations

import jax
import numpy as np
import pytest

from bayesslr.bayes import arviz_adapter
from bayesslr.bayes.method import verdict
from bayesslr.bayes.model import model_spec
from bayesslr.bayes.sampler import (
    SamplerOptions,
    TemperingOptions,
    init_params,
    run_nuts,
    run_tempered,
)
from bayesslr.core.task import ConfigError, make_task, sample_task
from bayesslr.core.thresholds import PT_SWAP_RATE_MIN
from bayesslr.registry import Cell, run_cell, validate_cell

TASK = dict(variant="spiked", L="2", nu=1.0, delta=0.5, D=3)


@pytest.fixture(scope="module")
def small():
    task = make_task(**{**TASK, "L": 2})
    teacher, train, _ = jax.jit(sample_task, static_argnums=(1, 2, 3))(
        jax.random.key(3), task, 8, 10)
    return task, model_spec(task), teacher, train


@pytest.mark.slow
def test_tempered_mean_agrees_with_long_nuts(small):
    """The cold draws' mean of (k, v) against 4 x 8000 NUTS draws on the same data."""
    task, spec, teacher, train = small
    pt = run_tempered(jax.random.key(0), spec, train,
                      SamplerOptions(chains=4, warmup=500, draws=6000),
                      TemperingOptions(replicas=4, beta_min=0.05, pt_integration_steps=5,
                                       pt_max_draws=3000), init="teacher", teacher=teacher)
    nuts_opts = SamplerOptions(chains=4, warmup=500, draws=8000)
    nuts = run_nuts(jax.random.key(1), spec, train, nuts_opts,
                    start=init_params(jax.random.key(2), "teacher", 4, 3, teacher),
                    init="teacher")
    means, ses = [], []
    for r in (pt, nuts):
        draws = np.concatenate([r.k, r.v], axis=2)
        means.append(draws.mean(axis=(0, 1)))
        ses.append(arviz_adapter.mcse_mean(draws))
    z = np.abs(means[0] - means[1]) / np.hypot(ses[0], ses[1])
    assert z.max() < 4.0, (z, means)
    ok, why = verdict(pt.summary(), 4)
    assert ok, why
    assert pt.tempering["swap_rate_min"] >= PT_SWAP_RATE_MIN
    assert pt.tempering["round_trips"] >= 4


def test_a_longer_run_continues_the_shorter_one_draw_by_draw(small):
    """The paper preset's extension rule (docs/sampling.md): a run with ``b`` blocks of
    ``draws`` iterations and ``b`` times the kept draws is the one-block run continued: the
    same warm-up and, kept draw by kept draw, the same first block (so a continued cell keeps
    its first block's numbers, and only its added blocks are new)."""
    task, spec, teacher, train = small
    runs = [run_tempered(jax.random.key(5), spec, train,
                         SamplerOptions(chains=2, warmup=20, draws=60 * b),
                         TemperingOptions(replicas=4, beta_min=0.05, pt_integration_steps=3,
                                          pt_max_draws=20 * b), init="teacher", teacher=teacher)
            for b in (1, 2)]
    assert runs[0].k.shape[1] == 20 and runs[1].k.shape[1] == 40
    for name in ("k", "v"):
        np.testing.assert_array_equal(getattr(runs[1], name)[:, :20], getattr(runs[0], name))
    assert not np.array_equal(runs[1].k[:, 20:], runs[1].k[:, :20])  # the second block is new


def test_a_too_short_tempered_run_is_flagged():
    """20 draws a chain cannot give 100 ESS a chain: the cell says so, with the PT outputs."""
    out = run_cell(Cell("bayes_sampling", alpha=2.0, seed=0, **TASK,
                        options={"sampler": "pt", "chains": 2, "warmup": 20, "draws": 20,
                                 "replicas": 4, "pt_integration_steps": 3, "n_test": 50}))
    assert out["sampler"] == "pt" and out["converged"] is False
    assert "ess_bulk_min" in out["reason"]
    assert out["replicas"] == 4 and len(out["swap_rates"].split(",")) == 3
    assert len(out["ladder"].split(",")) == 4
    assert 0.0 <= out["swap_rate_min"] <= 1.0 and out["round_trips"] >= 0
    # every iteration: 2 chains x 4 replicas x 3 leapfrog steps
    assert out["grad_evals"] == 2 * 4 * 3 * (1 + 20 + 20)
    assert out["draws_kept"] == 20 and np.isfinite(out["test_error"])


def test_verdict_reads_the_tempering_diagnostics():
    good = {"r_hat_max": 1.003, "ess_bulk_min": 900.0, "ess_tail_min": 900.0,
            "divergences": 0, "swap_rate_min": 0.3, "round_trips": 8}
    assert verdict(good, 4) == (True, "converged")
    ok, why = verdict({**good, "swap_rate_min": 0.05}, 4)
    assert not ok and why == f"swap_rate_min 0.05 < {PT_SWAP_RATE_MIN}"
    ok, why = verdict({**good, "round_trips": 3}, 4)
    assert not ok and why == "round_trips 3 < 4"
    # a NUTS summary has no tempering keys: the rule is today's
    nuts = {k: v for k, v in good.items() if k not in ("swap_rate_min", "round_trips")}
    assert verdict(nuts, 4) == (True, "converged")


@pytest.mark.parametrize("options, match", [
    ({"init": "anneal"}, "init=anneal is not available with sampler=pt"),
    ({"init": "teacher,anneal"}, "init=anneal is not available with sampler=pt"),
    ({"x64": True}, "x64=true is not available with sampler=pt"),
    ({"model": "enumerated"}, "model=enumerated is not available with sampler=pt"),
    ({"replicas": 1}, "replicas=1 is out of range"),
    ({"beta_min": 1.0}, "beta_min=1"),
])
def test_tempered_options_are_refused_before_any_work(options, match):
    cell = Cell("bayes_sampling", alpha=2.0, seed=0, **TASK,
                options={"sampler": "pt", **options})
    with pytest.raises(ConfigError, match=match):
        validate_cell(cell)
