"""The easy setting of the multi-head Bayes-optimal sampler's tests, shared by
tests/test_multihead_sampling.py (NUTS) and tests/test_multihead_pt.py (parallel tempering):
alpha = 50, nu = 9, Delta = 0.1; the same data for both samplers, and one criterion for
"reaches the teacher-known Bayes error"."""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp

from bayesslr.core.metrics import score_given
from bayesslr.multihead import MultiheadTask, bayes_predict, sample_multihead
from bayesslr.multihead import sampling as mhs

EASY = MultiheadTask(L=2, F=2, nu=9.0, delta=0.1, D=8, teacher="gaussian")
N_TRAIN, N_TEST = 400, 2000


def easy_run(opts: mhs.MultiheadSamplingOptions):
    """``(teacher, train, test, result)``: the easy data (key 0) and one sampling run on it
    (key 1) with ``opts``."""
    teacher, train, test = mhs.sample_train_test(jax.random.key(0), EASY, N_TRAIN, N_TEST)
    r = mhs.bayes_optimal_by_sampling(jax.random.key(1), EASY, teacher, train, test, opts)
    return teacher, train, test, r


def assert_reaches_bayes_error(teacher, test, r) -> None:
    """The run converged and its posterior mean's test error (and the plain average's) equals
    the teacher-known Bayes predictor's within 4 combined standard errors (test inputs,
    unpaired, plus the chains' Monte Carlo error); the same tolerance rejects the Bayes
    predictor of a wrong (prior-drawn) teacher, so the check has power."""
    assert r.converged, r.reason
    tol = 4 * math.sqrt(r.stderr ** 2 + r.oracle_error_stderr ** 2 + r.mcmc_stderr ** 2)
    assert abs(r.test_error - r.oracle_error) < tol, (r.test_error, r.oracle_error, tol)
    assert abs(r.test_error_plain - r.oracle_error) < tol
    assert 0.0 <= r.excess_over_oracle < tol
    wrong = sample_multihead(jax.random.key(99), EASY, 1)[0]
    P, z_s = mhs._oracle_terms(EASY, teacher, test.X)
    s = score_given(P, z_s, jnp.asarray(test.y), bayes_predict(EASY, wrong, test.X))
    assert float(s.test_error) - r.oracle_error > 10 * tol
