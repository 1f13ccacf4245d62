"""Population results (docs/model.md §3): Bayes risk, activation risks, the paper's orderings."""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from bayesslr.core.activations import ACTIVATIONS, get_activation, predict
from bayesslr.core.task import ConfigError, Teacher, location_posterior, make_task, sample_data
from bayesslr.population.method import (
    ab_terms,
    bayes_risk,
    best_excess_risk,
    excess_risk,
    linear_spiked_closed_form,
    mc_fields,
)


def _z(a, b):
    """Distance of two independent estimates in units of their joint standard error."""
    return abs(a.excess_risk - b.excess_risk) / math.hypot(a.stderr, b.stderr)


@pytest.mark.parametrize("L,nu", [(2, 5.0), (3, 2.0)])
def test_linear_spiked_matches_closed_form(L, nu):
    task = make_task("spiked", L=L, nu=nu)
    res = best_excess_risk(task, "linear", samples=50_000, seed=3)
    assert abs(res.excess_risk - linear_spiked_closed_form(task)) < 4 * res.stderr
    # the optimum sits at q_k = m_k^2 and u = m_k sqrt(nu) = nu (L - 1) / L
    assert res.q_k == pytest.approx(res.m_k**2, abs=1e-3)
    assert res.m_k * math.sqrt(nu) == pytest.approx(nu * (L - 1) / L, rel=0.05)


def test_linear_closed_form_decays_like_one_over_nu():
    vals = [linear_spiked_closed_form(make_task("spiked", L=3, nu=nu)) for nu in (1e2, 1e3, 1e4)]
    # nu * E -> L (L - 1) / (L - 1) = L
    assert [v * nu for v, nu in zip(vals, (1e2, 1e3, 1e4), strict=True)][-1] == pytest.approx(
        3.0, rel=1e-3)


@pytest.mark.parametrize("variant", ["spiked", "max"])
def test_softmax_at_nishimori_point_equals_bayes_paired(variant):
    """At k = c_nu k*, v = v*: per-row difference of the two estimators has mean 0."""
    task = make_task(variant, L=3, nu=2.0)
    with jax.enable_x64(True):
        f = mc_fields(task, 40_000, seed=11)
        a, b = ab_terms(get_activation("softmax"), f, jnp.float64(task.c_nu), jnp.float64(0.0),
                        jnp.zeros(0))
        P = location_posterior(task, f.chi_star, f.mask)
        d = np.asarray((1.0 - 2.0 * a + b) - (1.0 - jnp.sum(P * P, axis=-1)))
    se = d.std(ddof=1) / math.sqrt(d.size)
    if variant == "max":
        np.testing.assert_allclose(d, 0.0, atol=1e-12)  # A = B row by row
    else:
        assert abs(d.mean()) < 4 * se


def test_softmax_at_nishimori_point_equals_bayes_quadrature():
    task = make_task("spiked", L=2, nu=5.0)
    bayes = bayes_risk(task, samples=24, method="gauss-hermite")
    soft = excess_risk(task, "softmax", math.sqrt(5.0), 5.0, 1.0, 1.0, samples=24,
                       method="gauss-hermite")
    tol = 4 * (bayes.stderr + soft.stderr) + 1e-10
    assert abs(bayes.excess_risk - soft.excess_risk) < tol


def test_quadrature_and_monte_carlo_agree():
    task = make_task("max", L=2, nu=3.0)
    gh = bayes_risk(task, samples=24, method="gauss-hermite")
    mc = bayes_risk(task, samples=100_000, seed=5)
    assert abs(gh.excess_risk - mc.excess_risk) < 4 * mc.stderr + 4 * gh.stderr


def test_bayes_risk_limits():
    assert bayes_risk(make_task("spiked", L=4, nu=0.0), samples=1000).excess_risk == (
        pytest.approx(0.75))
    assert bayes_risk(make_task("max", L=3, nu="inf"), samples=1000).excess_risk == 0.0
    assert bayes_risk(make_task("spiked", L=1, nu=3.0), samples=1000).excess_risk == 0.0
    r = bayes_risk(make_task("spiked", L=3, nu=2.0, delta=0.3), samples=1000)
    assert r.risk == pytest.approx(r.excess_risk + 0.3)


def test_variable_length_averages_A_and_B_first():
    """With a length law the risk at fixed overlaps is the law's average of fixed-L risks."""
    args = ("softplus", 1.3, 2.0, 0.9, 1.0)
    mix = excess_risk(make_task("max", L_dist="2:0.25,3:0.75", nu=2.0), *args, samples=50_000)
    r2 = excess_risk(make_task("max", L=2, nu=2.0), *args, samples=50_000)
    r3 = excess_risk(make_task("max", L=3, nu=2.0), *args, samples=50_000)
    # same seed -> same strata draws: the mixture is exactly the weighted average
    assert mix.excess_risk == pytest.approx(0.25 * r2.excess_risk + 0.75 * r3.excess_risk,
                                            rel=1e-9)


@pytest.mark.parametrize(
    "kwargs",
    [{"q_k": 0.5, "m_k": 1.0}, {"q_v": 0.1, "m_v": 1.0}, {"samples": 5}, {"method": "simpson"}],
)
def test_bad_overlaps_are_rejected(kwargs):
    base = {"m_k": 1.0, "q_k": 2.0, "m_v": 1.0, "q_v": 1.0}
    base.update(kwargs)
    with pytest.raises(ConfigError):
        excess_risk(make_task("spiked"), "softmax", **base)


def _orthonormal_student(key, D, m_k, s_k, m_v, s_v):
    """Teacher with |k*|^2 = |v*|^2 = D, v* orthogonal to k*, and a student whose cross
    overlaps vanish exactly: k = m_k k* + s_k u1, v = m_v v* + s_v u2."""
    G = jax.random.normal(key, (4, D), dtype=jnp.float64)
    Q, _ = jnp.linalg.qr(G.T)
    kstar, vstar, u1, u2 = (math.sqrt(D) * Q[:, i] for i in range(4))
    return Teacher(kstar, vstar), m_k * kstar + s_k * u1, m_v * vstar + s_v * u2


@pytest.mark.slow
@pytest.mark.parametrize("variant", ["spiked", "max"])
@pytest.mark.parametrize("name", list(ACTIVATIONS))
def test_overlap_formula_matches_direct_simulation(variant, name):
    """The population formula at (m_k, q_k, m_v, q_v) equals the empirical risk of the actual
    predictor in D = 1000 dimensions, within Monte Carlo error."""
    D, n_batches, batch = 1000, 4, 5000
    rng = np.random.default_rng(hash((variant, name)) % 2**32)
    m_k, s_k = rng.uniform(0.5, 2.0), rng.uniform(0.0, 1.0)
    m_v, s_v = rng.uniform(0.3, 1.2), rng.uniform(0.0, 0.7)
    theta = np.array([rng.uniform(-1.0, 1.0)]) if name == "erf" else None
    task = make_task(variant, L_dist="2,3", nu=1.5, delta=0.0, D=D)
    act = get_activation(name)
    with jax.enable_x64(True):
        teacher, k, v = _orthonormal_student(jax.random.key(7), D, m_k, s_k, m_v, s_v)
        sq = []
        for i in range(n_batches):
            data = sample_data(jax.random.key(100 + i), task, teacher, batch)
            f = predict(act, data.X, data.mask, k, v, theta)
            sq.append(np.asarray((data.y - f) ** 2))
    sq = np.concatenate(sq)
    emp, emp_se = sq.mean() - task.delta, sq.std(ddof=1) / math.sqrt(sq.size)
    th = None if theta is None else {"c": float(theta[0])}
    pop = excess_risk(task, name, m_k, m_k**2 + s_k**2, m_v, m_v**2 + s_v**2, th,
                      samples=100_000, seed=1)
    assert abs(emp - pop.excess_risk) < 4 * math.hypot(emp_se, pop.stderr)


ORDER = ["softmax", "softplus", "erf", "linear"]


@pytest.mark.slow
@pytest.mark.parametrize(
    "variant,L,nu",
    [("spiked", 2, 5.0), ("spiked", 3, 1.0), ("spiked", 3, 2.0), ("max", 2, "inf"),
     ("max", 3, 2.0), ("max", "1,2,3", 2.0)],
)
def test_paper_ordering_bayes_softmax_softplus_erf_linear(variant, L, nu):
    """Bayes = softmax <= softplus-norm <= erf <= linear, each within joint Monte Carlo error."""
    task = make_task(variant, L=L, nu=nu)
    n = 40_000
    bayes = bayes_risk(task, samples=n, seed=21)
    res = {a: best_excess_risk(task, a, samples=n, seed=21) for a in ORDER}
    soft = res["softmax"]
    if soft.at_bound:  # optimum at |k| -> infinity (max-SLR, nu = inf): infimum is the Bayes risk
        assert soft.excess_risk >= bayes.excess_risk
        assert soft.excess_risk < 1e-3
    else:
        assert _z(soft, bayes) < 4
    for lo, hi in zip(ORDER, ORDER[1:], strict=False):
        diff = res[hi].excess_risk - res[lo].excess_risk
        assert diff > -4 * math.hypot(res[hi].stderr, res[lo].stderr), (lo, hi, res)


@pytest.mark.slow
def test_linear_on_hard_max_tends_to_one_with_L_softmax_stays_at_zero():
    vals = []
    for L in (2, 4, 8, 16):
        task = make_task("max", L=L, nu="inf")
        lin = best_excess_risk(task, "linear", samples=20_000, seed=4)
        soft = best_excess_risk(task, "softmax", samples=20_000, seed=4)
        assert soft.excess_risk < 0.01
        vals.append(lin)
    for a, b in zip(vals, vals[1:], strict=False):
        assert b.excess_risk - a.excess_risk > 4 * math.hypot(a.stderr, b.stderr)
    assert vals[-1].excess_risk > 0.6


def test_softplus_limit_form_stays_finite_where_every_score_underflows():
    """At |m_k| in the hundreds (max-SLR, nu = inf) whole rows of softplus underflow to 0 and
    the ratio is 0/0: one such row made the population objective NaN and four of five starts
    of the reference's softplus cells ended there. The limit form is softmax on those rows, in
    value and gradient, and the plain ratio elsewhere."""
    from bayesslr.core.activations import softplus_norm, softplus_norm_limit

    with jax.enable_x64(True):
        chi = jnp.array([[0.3, -1.0, 2.0], [-900.0, -901.0, -905.0], [-800.0, 1.0, 0.0]])
        mask = jnp.array([[True, True, True]] * 2 + [[True, True, False]])
        assert np.isnan(np.asarray(softplus_norm(chi, mask))[1]).all()
        out = np.asarray(softplus_norm_limit(chi, mask))
        np.testing.assert_allclose(out[1], np.asarray(jax.nn.softmax(chi[1])), rtol=1e-12)
        np.testing.assert_allclose(out[[0, 2]], np.asarray(softplus_norm(chi, mask))[[0, 2]],
                                   rtol=1e-15)
        assert out[2, 2] == 0.0  # masked
        grad = jax.grad(lambda c: jnp.sum(softplus_norm_limit(c, mask) ** 2))(chi)
        assert np.isfinite(np.asarray(grad)).all()


def test_best_start_never_takes_a_nan_objective_and_accepts_a_line_search_at_the_optimum():
    """Three defects of the multi-start search, measured on the reference: (1) starts ending on a
    NaN objective compared as 'not better' with `<`, so a NaN first start was kept and the one
    converged start thrown away (max-SLR softplus L = 2); (2) the best start, 1 ulp below the
    others, had given up in its line search at the same optimum, and the cell was flagged
    (spiked softmax L = 6)."""
    from types import SimpleNamespace as R

    from bayesslr.population.method import _best_start

    nan_first = [R(fun=math.nan, success=False, message="ABNORMAL", x=1),
                 R(fun=-0.95, success=True, message="CONVERGENCE", x=2),
                 R(fun=math.nan, success=False, message="ABNORMAL", x=3)]
    best, why = _best_start(nan_first)
    assert best.x == 2 and why == "converged"
    ulp = [R(fun=-0.7364894054995180, success=True, message="CONVERGENCE", x=1),
           R(fun=-0.7364894054995181, success=False, message="ABNORMAL", x=2)]
    best, why = _best_start(ulp)
    assert best.x == 2 and why == "converged"
    apart = [R(fun=-0.70, success=True, message="CONVERGENCE", x=1),
             R(fun=-0.74, success=False, message="ABNORMAL", x=2)]
    best, why = _best_start(apart)
    assert best.x == 2 and "no other start came within 1e-09 relative" in why
    # (3) a flat direction (max-SLR softplus L = 4: normalised ReLU at large m_k): every start
    # stops on the same objective at a different m_k, none reporting success
    flat = [R(fun=-0.8246119736384413, success=False, message="ABNORMAL", x=m)
            for m in (208.1, 189.9, 192.8)]
    best, why = _best_start(flat)
    assert why == "converged"
    best, why = _best_start([R(fun=math.nan, success=False, message="ABNORMAL", x=1)])
    assert "not finite at the end of any of 1 starts" in why
