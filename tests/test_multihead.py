"""Multi-head SLR (docs/multihead.md): reduction to the spiked one-head task at F = 1, the
Bayes predictor as bayes_softmax attention, the plain-softmax error floor, the Nishimori
identity, validation. Fixed seeds; statistical tolerances are 4 Monte Carlo standard errors."""

from __future__ import annotations

import doctest
import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import bayesslr as bs
from bayesslr.multihead import (
    MultiheadTask,
    attention_predict,
    attention_weights,
    bayes_predict,
    bayes_risk_mc,
    posterior,
    sample_multihead,
    teacher_heads_risk_mc,
)
from bayesslr.multihead import task as mh_task

SAMPLES = 50_000


# ---------------------------------------------------------------------------------------------
# (a) F = 1, discrete: the spiked one-head task
# ---------------------------------------------------------------------------------------------
@pytest.mark.parametrize("seed", [0, 7])
def test_f1_gaussian_teacher_is_sample_task_draw_for_draw(seed):
    """Same key -> the same teacher, tokens and locations as bayesslr.sample_task, bit for bit;
    the labels up to float32 rounding of one dot product (the multi-head sampler is jitted and
    XLA orders the sum differently: measured differences <= 1.2e-7); the same oracle
    prediction (docs/multihead.md §1.3)."""
    L, nu, delta, D, n = 3, 2.0, 0.01, 24, 300
    mh = MultiheadTask(L=L, F=1, nu=nu, delta=delta, D=D, theta="discrete",
                       teacher="gaussian")
    one = bs.make_task("spiked", L=L, nu=nu, delta=delta, D=D)
    key = jax.random.key(seed)
    teacher, data = sample_multihead(key, mh, n)
    t1, d1, _ = bs.sample_task(key, one, n)
    np.testing.assert_array_equal(teacher.K[0], t1.k)
    np.testing.assert_array_equal(teacher.V[0], t1.v)
    np.testing.assert_array_equal(data.X, d1.X)
    np.testing.assert_array_equal(data.eps, d1.eps)
    np.testing.assert_allclose(data.y, d1.y, rtol=0, atol=1e-6)
    assert bool(jnp.all(data.f == 0))
    # the oracle of the one-head task: softmax(sqrt(nu) chi*) . z*
    chi = mh_task.head_fields(d1.X, t1.k[None], "K")[..., 0]
    z = mh_task.head_fields(d1.X, t1.v[None], "V")[..., 0]
    P1 = bs.core.task.location_posterior(one, chi, d1.mask)
    np.testing.assert_allclose(bayes_predict(mh, teacher, data.X), jnp.sum(P1 * z, -1),
                               rtol=1e-5, atol=1e-6)


def test_f1_orthonormal_teacher_bayes_risk_matches_population():
    """With the orthonormal teacher (|k*|^2 = D exactly, another finite-D teacher law) the
    population law at F = 1 is the spiked one: the MC Bayes risk agrees with
    bayesslr.bayes_risk within 4 combined standard errors."""
    for L, nu in ((2, 5.0), (3, 2.0)):
        r = bayes_risk_mc(MultiheadTask(L=L, F=1, nu=nu, D=2), SAMPLES, seed=3)
        ref = bs.bayes_risk(bs.make_task("spiked", L=L, nu=nu), samples=SAMPLES, seed=11)
        se = math.hypot(r.stderr, ref.stderr)
        assert abs(r.excess_risk - ref.excess_risk) < 4 * se, (L, nu, r, ref)


def test_f1_finite_d_risk_matches_population():
    """Finite-D data of the orthonormal teacher at F = 1: the oracle's empirical excess error
    equals the population Bayes risk within 4 standard errors."""
    task = MultiheadTask(L=3, F=1, nu=2.0, D=8)
    teacher, data = sample_multihead(jax.random.key(5), task, 40_000)
    err = np.asarray((data.y - bayes_predict(task, teacher, data.X)) ** 2, np.float64)
    ref = bs.bayes_risk(bs.make_task("spiked", L=3, nu=2.0), samples=SAMPLES, seed=2)
    se = math.hypot(err.std(ddof=1) / math.sqrt(err.size), ref.stderr)
    assert abs(err.mean() - ref.excess_risk) < 4 * se


# ---------------------------------------------------------------------------------------------
# (b) bayes_softmax with the teacher's heads is the Bayes predictor
# ---------------------------------------------------------------------------------------------
@pytest.mark.parametrize("teacher_law", ["orthonormal", "gaussian"])
@pytest.mark.parametrize("F", [1, 3])
def test_bayes_softmax_on_teacher_heads_is_bayes_predict(F, teacher_law):
    task = MultiheadTask(L=4, F=F, nu=3.0, delta=0.1, D=16, teacher=teacher_law)
    teacher, data = sample_multihead(jax.random.key(F), task, 500)
    bias = -task.nu * jnp.sum(teacher.K ** 2, axis=1) / (2 * task.D)
    y_att = attention_predict(data.X, math.sqrt(task.nu) * teacher.K, teacher.V,
                              "bayes_softmax", bias=bias)
    np.testing.assert_allclose(y_att, bayes_predict(task, teacher, data.X), rtol=1e-5,
                               atol=1e-5)
    # the weights are the joint posterior P(eps*, f* | X)
    P, M = posterior(task, teacher, data.X)
    w = attention_weights(data.X, math.sqrt(task.nu) * teacher.K, "bayes_softmax", bias)
    np.testing.assert_allclose(w, P[..., None] * M, atol=1e-6)
    if teacher_law == "orthonormal":  # equal norms: the offsets cancel
        w0 = attention_weights(data.X, math.sqrt(task.nu) * teacher.K, "bayes_softmax")
        np.testing.assert_allclose(w0, w, atol=1e-6)


def test_plain_softmax_is_bayes_at_f1():
    task = MultiheadTask(L=3, F=1, nu=3.0, D=8)
    teacher, data = sample_multihead(jax.random.key(0), task, 300)
    y = attention_predict(data.X, math.sqrt(task.nu) * teacher.K, teacher.V, "softmax")
    np.testing.assert_allclose(y, bayes_predict(task, teacher, data.X), rtol=1e-5, atol=1e-5)


# ---------------------------------------------------------------------------------------------
# (c) the error floor of plain softmax at F >= 2
# ---------------------------------------------------------------------------------------------
@pytest.mark.parametrize("F", [2, 3])
def test_plain_softmax_has_an_error_floor(F):
    """Measured: plain softmax on the teacher's heads is worse than the Bayes predictor
    (= bayes_softmax) by more than 4 paired standard errors, at the teacher temperature and at
    the best of a temperature grid, and never below the bound (F-1)/(L+F-1) of
    docs/multihead.md §4.3."""
    L, nu = 3, 4.0
    task = MultiheadTask(L=L, F=F, nu=nu, D=2 * F)
    at_teacher = teacher_heads_risk_mc(task, "softmax", samples=SAMPLES, seed=1)
    assert at_teacher.gap > 4 * at_teacher.gap_stderr
    grid = [teacher_heads_risk_mc(task, "softmax", c=c * math.sqrt(nu), samples=SAMPLES, seed=1)
            for c in (0.25, 0.5, 1.0, 2.0)]
    best = min(grid, key=lambda r: r.excess_risk)
    assert best.gap > 4 * best.gap_stderr
    floor = (F - 1) / (L + F - 1)
    assert all(r.excess_risk > floor - 4 * r.stderr for r in grid)
    # softmax1 with the mean-field offset (docs/multihead.md §4.3) sits between the two
    s1 = teacher_heads_risk_mc(task, "softmax1", bias=-nu / 2 - math.log((F - 1) * L),
                               samples=SAMPLES, seed=1)
    assert at_teacher.excess_risk - s1.excess_risk > 4 * math.hypot(at_teacher.stderr,
                                                                    s1.stderr)
    assert s1.gap > 4 * s1.gap_stderr


def test_softmax_floor_finite_d():
    """The floor on finite-D data: plain softmax minus the Bayes predictor, paired errors."""
    task = MultiheadTask(L=3, F=2, nu=4.0, D=16)
    teacher, data = sample_multihead(jax.random.key(9), task, 20_000)
    c = math.sqrt(task.nu)
    e_s = (data.y - attention_predict(data.X, c * teacher.K, teacher.V, "softmax")) ** 2
    e_b = (data.y - bayes_predict(task, teacher, data.X)) ** 2
    d = np.asarray(e_s - e_b, np.float64)
    assert d.mean() > 4 * d.std(ddof=1) / math.sqrt(d.size)


# ---------------------------------------------------------------------------------------------
# (d) Nishimori identity
# ---------------------------------------------------------------------------------------------
@pytest.mark.parametrize("theta", ["discrete", "gaussian"])
@pytest.mark.parametrize("F", [1, 2, 3])
def test_nishimori_identity(F, theta):
    """E[P_eps* theta . M_eps*] = E[sum_l P_l^2 |M_l|^2] (discrete: E[P(eps*, f*|X)] =
    E[sum P^2]) within 4 paired standard errors, so the direct and the Nishimori form of the
    Bayes risk agree."""
    r = bayes_risk_mc(MultiheadTask(L=3, F=F, nu=4.0, D=2 * F, theta=theta), SAMPLES, seed=4)
    assert abs(r.nishimori_gap) < 4 * r.nishimori_gap_stderr, r


@pytest.mark.parametrize("theta", ["discrete", "gaussian"])
def test_finite_d_bayes_error_matches_population(theta):
    """Orthonormal teacher: the population law is exact at any D, so the oracle's empirical
    excess error on sampled data matches bayes_risk_mc within 4 combined standard errors."""
    task = MultiheadTask(L=3, F=2, nu=4.0, D=12, theta=theta)
    teacher, data = sample_multihead(jax.random.key(6), task, 40_000)
    err = np.asarray((data.y - bayes_predict(task, teacher, data.X)) ** 2, np.float64)
    r = bayes_risk_mc(task, SAMPLES, seed=8)
    se = math.hypot(err.std(ddof=1) / math.sqrt(err.size), r.stderr)
    assert abs(err.mean() - r.excess_risk) < 4 * se


def test_bayes_predictor_beats_the_attention_students_on_data():
    """Gaussian latent: the Bayes predictor has quadratic scores (docs/multihead.md §3.2), and
    bayes_softmax with linear scores is not it: measured worse by more than 4 se."""
    task = MultiheadTask(L=3, F=2, nu=4.0, D=12, theta="gaussian")
    teacher, data = sample_multihead(jax.random.key(3), task, 20_000)
    e_b = (data.y - bayes_predict(task, teacher, data.X)) ** 2
    y_att = attention_predict(data.X, math.sqrt(task.nu) * teacher.K, teacher.V,
                              "bayes_softmax")
    d = np.asarray((data.y - y_att) ** 2 - e_b, np.float64)
    assert d.mean() > 4 * d.std(ddof=1) / math.sqrt(d.size)


# ---------------------------------------------------------------------------------------------
# (e) validation
# ---------------------------------------------------------------------------------------------
@pytest.mark.parametrize("kwargs, name", [
    ({"L": 0}, "L"), ({"F": 0}, "F"), ({"F": 1.5}, "F"), ({"nu": -1}, "nu"),
    ({"nu": "inf"}, "nu"), ({"delta": -0.1}, "delta"), ({"D": 0}, "D"),
    ({"D": 3, "F": 2}, "D"), ({"theta": "beta"}, "theta"), ({"teacher": "haar"}, "teacher"),
    ({"variant": "spiked"}, "variant"), ({"L": True}, "L"), ({"nu": "abc"}, "nu"),
])
def test_bad_parameters_one_line_config_error(kwargs, name):
    with pytest.raises(bs.ConfigError) as ex:
        MultiheadTask(**kwargs)
    msg = str(ex.value)
    assert msg.startswith(f"{name}=") and "allowed" in msg and "\n" not in msg


def test_bad_arguments_of_the_functions():
    task = MultiheadTask(L=3, F=2, D=8)
    teacher, data = sample_multihead(jax.random.key(0), task, 4)
    cases = [
        (lambda: attention_predict(data.X, teacher.K, teacher.V, "relu"), "sigma="),
        (lambda: attention_predict(data.X, teacher.K[:, :4], teacher.V, "softmax"), "K has"),
        (lambda: attention_predict(data.X, teacher.K, teacher.V[:1], "softmax"), "V has"),
        (lambda: attention_weights(data.X, teacher.K, "softmax", bias=jnp.zeros(3)),
         "bias has"),
        (lambda: sample_multihead(jax.random.key(0), task, 0), "n="),
        (lambda: bayes_risk_mc(task, samples=1), "samples="),
        (lambda: bayes_risk_mc(task, seed=-1), "seed="),
        (lambda: teacher_heads_risk_mc(task, "softmax", c="x", samples=10), "c="),
    ]
    for fn, start in cases:
        with pytest.raises(bs.ConfigError) as ex:
            fn()
        assert str(ex.value).startswith(start) and "\n" not in str(ex.value)


def test_weights_normalisations():
    """softmax: each head sums to 1; softmax1: each head < 1; bayes_softmax: all sum to 1."""
    X = jax.random.normal(jax.random.key(0), (50, 4, 8))
    K = 3.0 * jax.random.normal(jax.random.key(1), (3, 8))
    np.testing.assert_allclose(attention_weights(X, K, "softmax").sum(-2), 1.0, rtol=1e-5)
    assert bool(jnp.all(attention_weights(X, K, "softmax1").sum(-2) < 1.0))
    np.testing.assert_allclose(attention_weights(X, K, "bayes_softmax").sum((-2, -1)), 1.0,
                               rtol=1e-5)


def test_doctests():
    finder = doctest.DocTestFinder()
    runner = doctest.DocTestRunner(optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE)
    for t in finder.find(mh_task, "bayesslr.multihead.task"):
        runner.run(t)
    res = runner.summarize(verbose=False)
    assert res.failed == 0 and res.attempted >= 8
