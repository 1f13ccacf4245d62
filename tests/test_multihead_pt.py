"""Parallel tempering for the multi-head Bayes-optimal sampler (docs/multihead.md §7.6): on the
easy setting shared with tests/test_multihead_sampling.py (tests/multihead_easy.py) the ``b = 1``
replica's posterior mean reaches the teacher-known Bayes error within 4 combined standard errors
(the same criterion as NUTS's) and the run passes the verdict
(invariant R-hat / ESS, no zero-acceptance cold transition, swap rates and round trips); bad PT
settings are refused in one line before any work; a ``multihead:bayes_sampling`` cell with
``sampler = "pt"`` runs through the registry. One PT setting (shapes) for the whole file, so its
chunks compile once (~8 CPU-s); the fixture's run (6000 sampling iterations, see ``EASY_DRAWS``)
is ~45 s, compilation included, with load ~5 on two cores (the whole file: 54 CPU-s, 35 with
the 1500 iterations it had before)."""

from __future__ import annotations

import math

import jax
import numpy as np
import pytest
from multihead_easy import EASY, assert_reaches_bayes_error, easy_run

import bayesslr as bs
from bayesslr.core.task import ConfigError
from bayesslr.multihead import sampling as mhs
from bayesslr.multihead.sampling import MultiheadSamplingOptions, posterior_draws
from bayesslr.registry import Cell

# 2 replica systems of 10 temperatures down to b = 0.05, 8 leapfrog steps: the shapes (and so
# the compiled chunks) of every PT run below
PT = dict(sampler="pt", chains=2, replicas=10, beta_min=0.05, pt_integration_steps=8)


# 6000 sampling iterations, every 4th kept (1500 a chain): the verdict's R-hat is the largest
# of 13 invariant quantities' split R-hats, itself a random variable. Over run keys 1-30 (this
# data, random starts) its values in the 23 runs without a cold zero-acceptance move were, with
# 1500 iterations: mean 1.0070, sd 0.0032, 4 of 23 above 1.01 (up to 1.0155; CI failed on
# 1.014); 3000: mean 1.0040, sd 0.0016, max 1.0081; 6000: mean 1.0020, sd 0.0008, max 1.0039,
# its Monte Carlo error (rhat_mc_error) 0.0010, so 1.01 lies 10 sds above the mean and 5 Monte
# Carlo errors above the largest. The kept draws (and the prediction's cost) stay 1500 a chain.
# Not covered by this: 7 of the 30 keys (2, 4, 5, 13, 16, 19, 20) fail the verdict at any of
# these lengths on cold zero-acceptance moves (1 to 10861), spread over the whole sampling phase:
# the warm-up leaves the cold step size too large for the final mass (bayesslr.bayes.pt adapts
# no step size after the last mass update). A real sampler failure, still asserted here.
EASY_DRAWS, EASY_KEPT = 6000, 1500


@pytest.fixture(scope="module")
def easy():
    return easy_run(MultiheadSamplingOptions(**PT, warmup=630, draws=EASY_DRAWS,
                                             pt_max_draws=EASY_KEPT))


def test_pt_posterior_mean_reaches_the_teacher_known_bayes_error(easy):
    """The same criterion as the NUTS test: |test error - oracle error| below 4 combined
    standard errors (test inputs, unpaired, plus the chains' Monte Carlo error), and the same
    tolerance rejects the Bayes predictor of a wrong (prior-drawn) teacher."""
    teacher, _, test, r = easy
    assert isinstance(r, mhs.MultiheadPTResult)
    assert_reaches_bayes_error(teacher, test, r)


def test_pt_reports_tempering_diagnostics_and_counts_its_budget(easy):
    _, _, _, r = easy
    d = r.draws
    assert isinstance(d, mhs.MultiheadPTDraws)
    # the verdict's PT terms: every neighbouring pair swaps, replicas travel the whole ladder
    assert np.all(np.isfinite(d.swap_rates)) and d.swap_rates.shape == (9,)
    assert r.swap_rate_min == pytest.approx(float(d.swap_rates.min()))
    assert r.swap_rate_min >= 0.1 and r.round_trips >= 2 and r.replicas == 10
    assert d.betas[0] == 1.0 and d.betas[-1] == pytest.approx(0.05) and np.all(
        np.diff(d.betas) < 0)
    assert r.divergences == d.cold_rejects == 0
    # draws: every 4th of the 6000 sampling iterations kept, mapped to (K, V); every gradient
    # counted
    assert d.K.shape == d.V.shape == (2, EASY_KEPT, 2, 8) and d.thin == EASY_DRAWS // EASY_KEPT
    assert d.iterations == 630 + EASY_DRAWS and d.warmup_done == 630
    assert r.grad_evals == 2 * 10 * 8 * (1 + 630 + EASY_DRAWS)
    # the invariant diagnostics, as for NUTS, and the log density at the draws
    assert set(r.per_quantity) == {"eig_K", "eig_V", "log_lik", "predict", "overlap_K",
                                   "overlap_V"}
    assert np.all(np.isfinite(d.log_density))


@pytest.mark.parametrize("make, match", [
    (lambda: MultiheadSamplingOptions(sampler="pt", replicas=1), r"replicas=1 is out of range"),
    (lambda: MultiheadSamplingOptions(sampler="pt", beta_min=1.0), r"beta_min=1"),
    (lambda: MultiheadSamplingOptions(sampler="pt", pt_integration_steps=0),
     r"pt_integration_steps=0"),
    (lambda: MultiheadSamplingOptions(sampler="pt", pt_step_size=0.0), r"pt_step_size=0"),
    (lambda: MultiheadSamplingOptions(sampler="pt", pt_max_draws=2), r"pt_max_draws=2"),
    (lambda: MultiheadSamplingOptions(sampler="hmc"), r"sampler="),
])
def test_bad_pt_options_are_refused_in_one_line(make, match):
    with pytest.raises(ConfigError, match=match) as exc:
        make()
    msg = str(exc.value)
    assert "\n" not in msg and "allowed" in msg


def test_each_driver_refuses_the_other_sampler(easy):
    _, train, _, _ = easy
    with pytest.raises(ConfigError, match=r"sampler='pt' is not run by posterior_draws"):
        posterior_draws(jax.random.key(0), EASY, train, MultiheadSamplingOptions(**PT))
    with pytest.raises(ConfigError, match=r"sampler='pt'"):
        mhs.posterior_draws_pt(jax.random.key(0), EASY, train, MultiheadSamplingOptions())


CELL = dict(variant="multihead", L="2", nu=9.0, delta=0.1, alpha=50.0, D=8)
CELL_OPTS = {"F": 2, "teacher": "gaussian", "n_test": 500, **PT}


@pytest.mark.parametrize("bad, match", [
    ({"replicas": 1}, r"replicas=1 is out of range"),
    ({"beta_min": 0.0}, r"beta_min=0"),
    ({"sampler": "tempering"}, r"sampler="),
])
def test_a_bad_pt_cell_is_refused_before_any_work(bad, match):
    cell = Cell("multihead:bayes_sampling", options={**CELL_OPTS, **bad}, **CELL)
    with pytest.raises(ConfigError, match=match) as exc:
        bs.registry.validate_cell(cell)
    assert "\n" not in str(exc.value)
    # a PT setting on an attention student is refused too
    with pytest.raises(ConfigError, match=r"apply to multihead:bayes_sampling only"):
        bs.registry.validate_cell(Cell("multihead:softmax", lam=0.1,
                                       options={"sampler": "pt"}, **CELL))


def test_a_pt_cell_runs_through_the_registry(easy):
    """Short run (its verdict is not asserted), the fixture's shapes: the compiled chunks are
    re-used. The cell's outputs carry the tempering diagnostics; its cost model is PT's."""
    cell = Cell("multihead:bayes_sampling",
                options={**CELL_OPTS, "warmup": 60, "draws": 100}, **CELL)
    opts = bs.registry.validate_cell(cell)
    assert opts["sampler"] == "pt" and opts["replicas"] == 10
    spec = bs.registry.get_method("multihead:bayes_sampling")
    nuts = Cell("multihead:bayes_sampling", options={"F": 2, "teacher": "gaussian"}, **CELL)
    assert spec.cost(cell, opts) != spec.cost(nuts, bs.registry.validate_cell(nuts))
    out = bs.run_cell(cell)
    assert math.isfinite(out["swap_rate_min"]) and 0.0 <= out["swap_rate_min"] <= 1.0
    assert isinstance(out["round_trips"], int) and out["round_trips"] >= 0
    assert out["grad_evals"] == 2 * 10 * 8 * (1 + 60 + 100)
    assert isinstance(out["converged"], bool) and out["reason"]
    assert math.isfinite(out["test_error"]) and len(out["overlap_K"]) == 2
