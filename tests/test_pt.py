"""Parallel tempering (``inference:pt-*``, issue 24): the ladder rule, the round-trip count, the
budget, the family contract; slow: its posterior mean on a tiny task against importance
sampling."""

from __future__ import annotations

import math

import jax
import numpy as np
import pytest

from bayesslr.bayes import arviz_adapter
from bayesslr.bayes.model import model_spec
from bayesslr.bayes.pt import geometric_ladder, optimal_ladder, round_trips, run_pt
from bayesslr.core.task import ConfigError, make_task
from bayesslr.inference.evaluate import task_data
from bayesslr.registry import Cell, run_cell
from conftest import prior_importance

TINY = dict(variant="spiked", L=2, nu=1.0, delta=0.5, D=3)


def test_optimal_ladder_equalises_the_rejection_and_keeps_the_ends():
    b = geometric_ladder(5, 1e-3)
    assert b[0] == 1.0 and b[-1] == pytest.approx(1e-3)
    # all the rejection between the two coldest replicas: the new ladder crowds there
    new = optimal_ladder(b, np.array([0.9, 1e-3, 1e-3, 1e-3]))
    assert new[0] == 1.0 and new[-1] == pytest.approx(1e-3)
    assert np.all(np.diff(new) < 0)
    assert np.sum(new > b[1]) == 4  # four of five replicas now between b_1 and 1
    # uniform rejection: the barrier is linear in the replica index, the ladder stays put
    np.testing.assert_allclose(optimal_ladder(b, np.full(4, 0.3)), b)


def test_round_trips_follow_the_labels_through_the_swaps():
    R = 3
    T = np.zeros((6, 1, R - 1), bool)
    # label 0 goes 0 -> 1 -> 2 (bottom) -> 1 -> 0 (top): one round trip
    T[0, 0, 0] = T[1, 0, 1] = T[2, 0, 1] = T[3, 0, 0] = True
    assert round_trips(T, R) == 1
    assert round_trips(T[:3], R) == 0  # reached the bottom, not yet back


@pytest.fixture(scope="module")
def tiny():
    task = make_task(**TINY)
    data = task_data(task, 0, 6, 50)
    return task, model_spec(task), data


def test_budget_is_honoured_and_counted(tiny):
    task, spec, data = tiny
    r = run_pt(jax.random.key(0), spec, data.train, budget=20_000, chains=2, replicas=4,
               integration_steps=5, chunk=10)
    per_chunk = 2 * 4 * 5 * 10
    assert 20_000 - per_chunk < r.grad_evals <= 20_000
    assert r.iterations == r.warmup_done + (r.grad_evals - r.grad_evals_warmup) // 40
    assert r.k.shape[0] == 2 and r.k.shape[2] == 3 and r.swap_rates.shape == (3,)
    assert r.betas[0] == 1.0 and np.all(np.diff(r.betas) < 0)
    with pytest.raises(ConfigError, match="beta_min"):
        run_pt(jax.random.key(0), spec, data.train, budget=20_000, beta_min=1.0)
    with pytest.raises(ConfigError, match="budget"):
        run_pt(jax.random.key(0), spec, data.train, budget=100, replicas=4)


def test_the_family_runs_pt_cells():
    # the task and sampler shapes of TINY and test_budget_is_honoured_and_counted (N = 6 at
    # D = 3, 2 chains x 4 replicas, 5 leapfrog steps, chunks of 10): its compiled PT is re-used
    res = run_cell(Cell("inference:pt-random-1e4", alpha=2.0, **{**TINY, "L": "2"},
                        options={"n_test": 100, "reference": "none", "replicas": 4,
                                 "pt_chains": 2}))
    assert res["algorithm"] == "pt" and res["grad_evals"] <= 10_000
    assert res["replicas"] == 4 and len(res["swap_rates"].split(",")) == 3
    assert isinstance(res["converged"], bool) and res["reason"]
    with pytest.raises(ConfigError, match="do not apply"):
        run_cell(Cell("inference:pt-random-1e4", alpha=2.0, D=6, delta=0.5,
                      options={"particles": 10}))


@pytest.mark.slow
def test_pt_finds_the_posterior_mean(tiny):
    """The b = 1 draws' mean against self-normalised importance sampling from the prior
    (400k draws), 4 combined standard errors (the draws' MCSE and the importance error)."""
    task, spec, data = tiny
    d = data.train
    m, se, _, _, _ = prior_importance(spec, d)
    r = run_pt(jax.random.key(2), spec, d, budget=200_000, chains=4, replicas=4,
               integration_steps=5, max_draws=2000)
    draws = np.concatenate([r.k, r.v], axis=2)
    mc = arviz_adapter.mcse_mean(draws)
    z = np.abs(draws.mean(axis=(0, 1)) - m) / np.sqrt(se ** 2 + mc ** 2)
    assert z.max() < 4.0, (z, r.r_hat_max)
    assert math.isfinite(r.ess_bulk_min) and np.all(r.swap_rates > 0.1)
