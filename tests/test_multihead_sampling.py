"""The sampled Bayes-optimal estimator of multi-head SLR (docs/multihead.md §7): the log density
against a direct computation, the F = 1 reduction to the one-head model, the posterior mean
against the teacher-known Bayes predictor on an easy setting, a too-short run flagged, bad
input refused. Small sizes (one NUTS executable for every run of the file: it is compiled
once, ~12 CPU-s); fixed seeds; tolerances are 4 standard errors."""

from __future__ import annotations

import doctest
import functools
import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from multihead_easy import EASY, assert_reaches_bayes_error, easy_run
from numpyro.infer.util import log_density

from bayesslr.bayes.model import ModelSpec, log_lik_samples, marginal_model
from bayesslr.core.task import ConfigError
from bayesslr.multihead import MultiheadTask
from bayesslr.multihead import sampling as mhs
from bayesslr.multihead.sampling import (
    MultiheadSamplingOptions,
    bayes_optimal_by_sampling,
    frame_from_latent,
    multihead_model,
    posterior_draws,
    sample_train_test,
)


def direct_log_joint(task: MultiheadTask, z: np.ndarray, X: np.ndarray,
                     y: np.ndarray) -> float:
    """log prior + log likelihood written from the definitions (docs/multihead.md §1.2), in
    float64 NumPy with explicit loops: the likelihood ratio of a token shifted by
    ``sqrt(nu / D) k_f`` against the unshifted Gaussian, times the label density, averaged over
    the ``L F`` equally likely (location, direction) pairs."""
    z = np.asarray(z, np.float64)
    X, y = np.asarray(X, np.float64), np.asarray(y, np.float64)
    n, L, D = X.shape
    F = task.F
    if task.teacher == "orthonormal":
        Q, R = np.linalg.qr(z)
        Q = Q * np.sign(np.diag(R))[None, :]
        W = math.sqrt(D) * Q.T
        K, V = W[:F], W[F:]
    else:
        K, V = z[0], z[1]
    log_prior = float(-0.5 * np.sum(z ** 2) - 0.5 * z.size * math.log(2 * math.pi))
    total = 0.0
    for i in range(n):
        s = 0.0
        for l in range(L):
            for f in range(F):
                mu = math.sqrt(task.nu / D) * K[f]
                ratio = math.exp(-0.5 * np.sum((X[i, l] - mu) ** 2) + 0.5 * np.sum(X[i, l] ** 2))
                zz = X[i, l] @ V[f] / math.sqrt(D)
                dens = math.exp(-0.5 * (y[i] - zz) ** 2 / task.delta) / math.sqrt(
                    2 * math.pi * task.delta)
                s += ratio * dens / (L * F)
        total += math.log(s)
    return log_prior + total


@pytest.fixture(scope="module")
def easy():
    return easy_run(MultiheadSamplingOptions(chains=4, warmup=300, draws=600))


@functools.partial(jax.jit, static_argnames=("F", "prior"))
def _log_joint_mh(args, params, F, prior):
    return log_density(multihead_model, args, {"F": F, "prior": prior}, params)[0]


@jax.jit
def _log_joint_one_head(args, params):
    return log_density(marginal_model, args, {"variant": "spiked"}, params)[0]


@pytest.mark.parametrize("teacher", ["gaussian", "orthonormal"])
def test_log_density_equals_direct_computation(easy, teacher):
    """The NumPyro model's joint log density (prior + marginal likelihood) at a random point
    and at the teacher equals the loop over (location, direction) from the definitions (the
    identity holds for any data: the easy set's first 12 samples)."""
    task = MultiheadTask(L=2, F=2, nu=4.0, delta=0.3, D=8, teacher=teacher)
    X, y = easy[1].X[:12], easy[1].y[:12]
    t = mhs.sample_teacher(jax.random.key(3), task)
    shape = (task.D, 2 * task.F) if teacher == "orthonormal" else (2, task.F, task.D)
    at_teacher = (np.concatenate([t.K, t.V]).T if teacher == "orthonormal"
                  else np.stack([t.K, t.V]))
    with jax.enable_x64(True):
        for z in (np.asarray(jax.random.normal(jax.random.key(5), shape)), at_teacher):
            args = (jnp.asarray(X, jnp.float64), jnp.asarray(y, jnp.float64),
                    jnp.float64(task.nu), jnp.float64(task.delta))
            lp = _log_joint_mh(args, {mhs.site_name(teacher): jnp.asarray(z, jnp.float64)},
                               task.F, teacher)
            np.testing.assert_allclose(float(lp), direct_log_joint(task, z, X, y), rtol=1e-9)


def test_orthonormal_prior_maps_to_the_task_teacher():
    """The latent Gaussian with the Gram-Schmidt map is the task's orthonormal teacher law: the
    same normal draws give the same frame as bayesslr.multihead.task.sample_teacher."""
    task = MultiheadTask(L=2, F=2, D=8)
    kk, kv = jax.random.split(jax.random.key(4))
    Z = jnp.concatenate([jax.random.normal(kk, (2, 8)), jax.random.normal(kv, (2, 8))]).T
    K, V = frame_from_latent(Z, 2)
    t = mhs.sample_teacher(jax.random.key(4), task)
    np.testing.assert_allclose(K, t.K, atol=1e-5)
    np.testing.assert_allclose(V, t.V, atol=1e-5)


def test_f1_log_density_is_the_one_head_spiked_model(easy):
    """At F = 1 (gaussian prior) the model's log density is bayesslr.bayes.model's
    marginal_model of the spiked task on the same data (docs/multihead.md §1.3, §7.1), at two
    random points; so is the per-sample likelihood (log_lik_samples)."""
    X, y = jnp.asarray(easy[1].X[:30]), jnp.asarray(easy[1].y[:30])
    mask, w = jnp.ones(X.shape[:2], bool), jnp.ones(y.shape)
    for key in (11, 12):
        kv = jax.random.normal(jax.random.key(key), (2, 1, X.shape[-1]))
        lp_mh = _log_joint_mh((X, y, 3.0, 0.2), {"KV": kv}, 1, "gaussian")
        lp_1 = _log_joint_one_head((X, y, mask, w, 3.0, 0.2), {"k": kv[0, 0], "v": kv[1, 0]})
        np.testing.assert_allclose(float(lp_mh), float(lp_1), rtol=1e-5)
        np.testing.assert_allclose(
            mhs.multihead_log_lik(3.0, 0.2, kv[0], kv[1], X, y),
            log_lik_samples(ModelSpec("spiked", 3.0, 0.2), kv[0, 0], kv[1, 0], X, y, mask),
            rtol=1e-5, atol=1e-5)


def test_easy_posterior_mean_reaches_the_teacher_known_bayes_error(easy):
    """alpha = 50, nu = 9: the run converges on the invariant quantities, and the posterior
    mean's test error equals the teacher-known Bayes predictor's within 4 combined standard
    errors (test inputs, unpaired, plus the chains' Monte Carlo error). The same tolerance
    rejects a predictor with a wrong teacher (a prior draw), so the check has power."""
    teacher, _, test, r = easy
    assert_reaches_bayes_error(teacher, test, r)  # and the wrong-teacher predictor fails it
    # the posterior has learned the directions (matched overlaps near the teacher's norms)
    assert min(r.overlap_K) > 0.5 and min(r.overlap_V) > 0.5


def test_diagnostics_are_on_invariant_quantities(easy):
    """Each invariant quantity is diagnosed; shapes (chains, draws, ...) as documented; the
    matched overlaps do not depend on the order of the draws' directions."""
    teacher, train, test, r = easy
    assert set(r.per_quantity) == {"eig_K", "eig_V", "log_lik", "predict", "overlap_K",
                                   "overlap_V"}
    K, V = r.draws.K[:, :8], r.draws.V[:, :8]
    q = mhs.invariant_quantities(EASY, K, V, train, test.X[:3], teacher)
    q_perm = mhs.invariant_quantities(EASY, K[:, :, ::-1], V[:, :, ::-1], train, test.X[:3],
                                      teacher)
    for name in q:
        np.testing.assert_allclose(q[name], q_perm[name], rtol=1e-4, atol=1e-4)
    assert q["predict"].shape == (4, 8, 3) and q["eig_K"].shape == (4, 8, 2)


def test_too_short_run_is_not_converged(easy):
    """Twenty warm-up iterations and twenty draws: flagged, with the failing diagnostics
    named (the thresholds of core/thresholds.py's bayes_sampling row)."""
    teacher, train, test, _ = easy
    opts = MultiheadSamplingOptions(chains=4, warmup=20, draws=20)
    r = bayes_optimal_by_sampling(jax.random.key(2), EASY, teacher, train, test, opts)
    assert not r.converged
    assert "ess_bulk_min" in r.reason and "< 400" in r.reason
    assert r.draws.K.shape == (4, 20, 2, 8)


@pytest.mark.parametrize("make, name", [
    (lambda: MultiheadSamplingOptions(chains=1), "chains=1"),
    (lambda: MultiheadSamplingOptions(draws=2), "draws=2"),
    (lambda: MultiheadSamplingOptions(init="anneal"), "init="),
    (lambda: MultiheadSamplingOptions(target_accept=1.0), "target_accept=1"),
])
def test_bad_options_refused(make, name):
    with pytest.raises(ConfigError, match=name) as exc:
        make()
    assert "allowed" in str(exc.value) and "\n" not in str(exc.value)


def test_bad_task_and_data_refused_before_any_work(easy):
    t, train, test, _ = easy
    test = test._replace(X=test.X[:10], y=test.y[:10])
    cases = [
        (MultiheadTask(L=2, F=2, nu=9.0, delta=0.1, D=8, theta="gaussian"), train, {},
         "theta="),
        (MultiheadTask(L=2, F=2, nu=9.0, delta=0.0, D=8), train, {}, "delta=0"),
        (MultiheadTask(L=3, F=2, nu=9.0, delta=0.1, D=8), train, {}, "train has X"),
        (EASY, train, {"options": MultiheadSamplingOptions(init="teacher")}, "init='teacher'"),
    ]
    for task, data, kw, name in cases:
        with pytest.raises(ConfigError, match=name) as exc:
            posterior_draws(jax.random.key(0), task, data, **kw)
        assert "allowed" in str(exc.value) and "\n" not in str(exc.value)
    with pytest.raises(ConfigError, match="test_points=11") as exc:
        bayes_optimal_by_sampling(jax.random.key(0), EASY, t, train, test,
                                  MultiheadSamplingOptions(test_points=11))
    assert "n_test = 10" in str(exc.value)
    with pytest.raises(ConfigError, match="n_test=1"):
        sample_train_test(jax.random.key(0), EASY, 20, 1)


def test_docstring_examples_run():
    finder = doctest.DocTestFinder()
    runner = doctest.DocTestRunner(optionflags=doctest.ELLIPSIS)
    tests = [t for t in finder.find(mhs) if t.examples]
    assert tests
    for t in tests:
        runner.run(t)
    assert runner.failures == 0
