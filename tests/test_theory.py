"""Finite-alpha theory (docs/theory.md): solver contract, Bayes state evolution, CLI, registry.

Tolerances come from Monte Carlo standard errors (``4 se``) or from closed forms. The ERM fixed
point (one multi-start proximal compile per activation) is tested in ``test_theory_erm.py``.
"""

from __future__ import annotations

import dataclasses
import json
import math
import time

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import scipy.stats
from typer.testing import CliRunner

from bayesslr.cli import app
from bayesslr.core.task import ConfigError, make_task
from bayesslr.population.method import bayes_risk
from bayesslr.population.teacher_channel import channel64
from bayesslr.registry import Cell, run_cell
from bayesslr.theory import bayes as tb
from bayesslr.theory.solver import SolverOptions, continuation, solve_fixed_point

SPIKED = make_task("spiked", 3, 2.0, 0.0, 1)


# ----------------------------------------------------------------------------------------------
# solver contract
# ----------------------------------------------------------------------------------------------
def test_solver_converges_on_a_contraction():
    r = solve_fixed_point(lambda x: (np.cos(x), {"k": 1}), [1.0], SolverOptions(tol=1e-10))
    assert r.converged and r.reason == "converged"
    assert abs(r.x[0] - 0.7390851332151607) < 1e-9
    assert r.history[-1] < 1e-10 and len(r.history) == r.iterations
    assert r.aux == {"k": 1}
    # converged means the residual stayed below tol over `confirm` consecutive iterations
    assert all(h < 1e-10 for h in r.history[-SolverOptions().confirm:])


def test_solver_one_residual_below_tol_is_not_convergence():
    """A map whose residual dips below the tolerance every other call (an oscillation, or an
    iteration sitting at a noise floor just above the tolerance) never stays below it: not
    converged. The first dip stopped the solver before the ``confirm`` rule."""
    calls = []

    def update(x):
        calls.append(1)
        eps = 1e-7 if len(calls) % 2 == 0 else 1e-3
        return x * (1.0 + eps), {}

    r = solve_fixed_point(update, [1.0, 2.0], SolverOptions(tol=1e-5, max_iter=20))
    assert not r.converged and r.reason == "max_iter" and np.all(np.isnan(r.x))
    assert min(r.history) < 1e-5  # it did dip below tol
    once = solve_fixed_point(update, [1.0, 2.0], SolverOptions(tol=1e-5, max_iter=20,
                                                               confirm=1))
    assert once.converged  # what the old rule reported


@pytest.mark.parametrize("accel", ["none", "anderson"])
def test_solver_verifies_an_approximate_map_with_the_exact_one(accel):
    """Iterations with a cheap approximate map (fixed point ``c + delta``) and the exact map
    (fixed point ``c``) as verifier: converged only at the exact map's fixed point, within
    the tolerance (contraction 1/2: error below ``2 tol``), with the aux of the exact call
    at the returned point."""
    c, delta, tol = np.array([1.0, 3.0]), 1e-2, 1e-8
    approx = lambda x: (0.5 * x + 0.5 * (c + delta), {"kind": "approx"})  # noqa: E731
    exact = lambda x: (0.5 * x + 0.5 * c, {"kind": "exact", "at": x.copy()})  # noqa: E731
    r = solve_fixed_point(approx, np.zeros(2), SolverOptions(tol=tol, max_iter=500,
                                                             accel=accel), exact=exact)
    assert r.converged and r.exact_calls >= 2  # the first verification fails (delta >> tol)
    np.testing.assert_allclose(r.x, c, rtol=2 * tol)
    assert r.aux["kind"] == "exact" and np.array_equal(r.aux["at"], r.x)
    assert r.residual < tol and len(r.history) == r.iterations
    # an approximate map that agrees with the exact one: a single verification call
    r2 = solve_fixed_point(exact, np.zeros(2), SolverOptions(tol=tol, max_iter=500,
                                                             accel=accel), exact=exact)
    assert r2.converged and r2.exact_calls == 1


@pytest.mark.parametrize("update, reason", [
    (lambda x: (x + 1.0, {}), "max_iter"),
    (lambda x: (np.full_like(x, np.nan), {}), "non-finite"),
    (lambda x: (_ for _ in ()).throw(FloatingPointError("overflow")), "error"),
])
def test_solver_failure_is_nan_with_flag_never_an_exception(update, reason):
    r = solve_fixed_point(update, [1.0, 2.0], SolverOptions(max_iter=5))
    assert not r.converged and r.reason.startswith(reason)
    assert np.all(np.isnan(r.x))
    assert np.all(np.isfinite(r.x_last))


def test_solver_watchdog_abandons_a_hung_update():
    def slow(x):
        time.sleep(5.0)
        return x, {}

    t0 = time.perf_counter()
    r = solve_fixed_point(slow, [0.5], SolverOptions(call_timeout_s=0.2))
    assert time.perf_counter() - t0 < 2.0
    assert not r.converged and r.reason == "watchdog" and np.isnan(r.x[0])


def _slow_linear_map():
    """``F(x) = A x + b`` with spectral radius 0.97: damped iteration crawls."""
    rng = np.random.default_rng(3)
    Q, _ = np.linalg.qr(rng.normal(size=(6, 6)))
    A = Q @ np.diag([0.97, 0.9, 0.5, -0.3, 0.2, 0.8]) @ Q.T
    b = rng.normal(size=6)
    return A, b, np.linalg.solve(np.eye(6) - A, b)


def test_anderson_reaches_the_same_fixed_point_in_fewer_calls():
    A, b, x_star = _slow_linear_map()
    update = lambda x: (A @ x + b, {})  # noqa: E731
    plain = solve_fixed_point(update, np.zeros(6), SolverOptions(tol=1e-9, max_iter=5000))
    acc = solve_fixed_point(update, np.zeros(6), SolverOptions(tol=1e-9, max_iter=5000,
                                                               accel="anderson"))
    assert plain.converged and acc.converged
    # residual tol 1e-9 with contraction 0.97 / (1 - 0.97): error below ~1e-7 relative
    np.testing.assert_allclose(acc.x, x_star, rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(plain.x, x_star, rtol=1e-6, atol=1e-6)
    # a linear map in 6 dimensions: Anderson(5) is GMRES-like, a few tens of calls at most
    assert acc.iterations < plain.iterations / 10


def test_anderson_safeguard_abandons_a_non_finite_extrapolation():
    """An update defined only for x > 0 (the ERM map needs q >= m^2, V > 0): an extrapolated
    point outside the domain is abandoned, the solve still converges to the fixed point."""
    calls = []

    def update(x):
        calls.append(x.copy())
        if np.any(x <= 0):
            return np.full_like(x, np.nan), {}
        return np.sqrt(x) + 0.0 * x, {}  # fixed point x = 1 from any positive start

    r = solve_fixed_point(update, [4.0, 1e-4], SolverOptions(tol=1e-10, max_iter=500,
                                                             accel="anderson", damping=0.0))
    assert r.converged
    np.testing.assert_allclose(r.x, [1.0, 1.0], rtol=1e-8)
    bad = [c for c in calls if np.any(c <= 0)]
    assert bad, "the start was chosen so that an extrapolation leaves the domain"
    assert len(r.history) == r.iterations == len(calls)
    assert sum(math.isinf(h) for h in r.history) == len(bad)


def test_solver_rejects_an_unknown_acceleration():
    with pytest.raises(ConfigError, match="accel"):
        SolverOptions(accel="broyden")


@pytest.mark.parametrize("descending", [False, True])
def test_continuation_warm_starts_from_the_converged_neighbour(descending):
    seen = []

    class R:
        def __init__(self, x, converged):
            self.x, self.converged = x, converged

    def solve_at(alpha, x0):
        seen.append((alpha, None if x0 is None else float(x0[0])))
        # alpha = 2 never reaches a fixed point (NaN): its neighbour is skipped; alpha = 4
        # reaches one that fails a diagnostic (flagged, finite): it still serves as a start
        return R(np.array([math.nan if alpha == 2.0 else alpha]), alpha not in (2.0, 4.0))

    out = continuation(solve_at, [3.0, 1.0, 2.0, 4.0, 5.0], None, descending=descending)
    assert [o.x[0] for o in out][:2] == [3.0, 1.0]  # input order
    expected = ([(1.0, None), (2.0, 1.0), (3.0, 1.0), (4.0, 3.0), (5.0, 4.0)]
                if not descending else
                [(5.0, None), (4.0, 5.0), (3.0, 4.0), (2.0, 3.0), (1.0, 3.0)])
    assert seen == expected


# ----------------------------------------------------------------------------------------------
# Bayes-optimal state evolution
# ----------------------------------------------------------------------------------------------
BAYES_OPT = tb.BayesTheoryOptions(samples=20_000, test_samples=100_000)


def test_bayes_L1_matches_the_closed_form():
    """L = 1: the key is a Gaussian mean problem, ``m_k = alpha nu / (1 + alpha nu)`` exactly;
    the value is Bayes linear regression, ``m_v (Delta + 1 - m_v) = alpha (1 - m_v)``, whose
    only Monte Carlo input is a chi-square mean (relative se ``sqrt(2/n)``)."""
    nu, delta, alpha = 2.0, 0.5, 3.0
    task = make_task("spiked", 1, nu, delta, 1)
    r = tb.solve_bayes(task, alpha, BAYES_OPT)
    assert r.converged
    assert abs(r.m_k - alpha * nu / (1 + alpha * nu)) < 1e-5

    def m_of(a):
        b = delta + 1 + a
        return (b - math.sqrt(b * b - 4 * a)) / 2

    dm = (m_of(alpha * 1.001) - m_of(alpha * 0.999)) / 0.002  # d m / d log alpha
    se = math.sqrt(2 / BAYES_OPT.samples) * abs(dm)
    assert abs(r.m_v - m_of(alpha)) < 4 * se + 1e-5


def test_bayes_state_evolution_converges_only_when_the_residual_stays_below_tol():
    """The plain damped iteration (the algorithm the state evolution describes; no
    acceleration) is converged when its residual stays below the tolerance over ``confirm``
    consecutive iterations; before, the first residual under it stopped the iteration."""
    opt = tb.BayesTheoryOptions(samples=2000, test_samples=2000)
    r = tb.solve_bayes(SPIKED, 2.0, opt, start="uninformed")
    k = opt.solver.confirm
    assert r.converged and opt.solver.accel == "none" and k >= 2
    assert all(h < opt.solver.tol for h in r.history[-k:])
    assert r.history[-k - 1] >= opt.solver.tol  # the run stopped as soon as the rule held
    strict = tb.solve_bayes(SPIKED, 2.0, dataclasses.replace(opt, solver=dataclasses.replace(
        opt.solver, max_iter=r.iterations - 1)), start="uninformed")
    assert not strict.converged and strict.reason == "max_iter" and math.isnan(strict.m_k)


@pytest.fixture(scope="module")
def spiked_curve():
    alphas = [0.5, 1.0, 2.0, 5.0, 20.0, 100.0]
    return alphas, tb.bayes_curve(SPIKED, alphas, BAYES_OPT)


def test_bayes_curve_decreases_and_converges_to_the_bayes_risk(spiked_curve):
    alphas, pts = spiked_curve
    assert all(p.best.converged for p in pts)
    err = np.array([p.best.test_error for p in pts])
    se = np.array([p.best.stderr_test for p in pts])
    # common random numbers: differences are far more precise than se; 4 se is conservative
    assert np.all(np.diff(err) < 4 * np.hypot(se[1:], se[:-1]))
    br = bayes_risk(SPIKED, samples=200_000)
    assert np.all(err > br.excess_risk - 4 * np.hypot(se, br.stderr))
    # on the same test samples the m -> 1 limit is the Bayes risk: the gap shrinks to zero
    tch = channel64(SPIKED, BAYES_OPT.test_samples, BAYES_OPT.seed + 1)
    with jax.enable_x64(True):
        limit = float(tb.test_terms(tb._make_static(SPIKED), tch, 1.0, 1.0,
                                    tb._quad(SPIKED, BAYES_OPT))["test_error"])
    assert abs(limit - br.excess_risk) < 4 * math.hypot(se[-1], br.stderr)
    gap = err - limit
    assert np.all(gap > 0) and np.all(np.diff(gap) < 0)
    assert gap[-1] < 0.1 * gap[2]


def test_bayes_both_starts_and_free_entropy_verdict(spiked_curve):
    _, pts = spiked_curve
    for p in pts:
        assert p.informed.converged and p.uninformed.converged
        assert p.best is (p.informed if p.informed.free_entropy > p.uninformed.free_entropy
                          else p.uninformed)
        assert p.hard_phase == (p.branches_differ and p.best is p.informed)
        assert abs(p.best.nishimori_gap) < 4 * p.best.stderr_test + 1e-3


def test_free_entropy_derivative_is_the_state_evolution_conjugate():
    """``2 alpha dPsi_out/dm_a = alpha E|g_a|^2`` (what makes Phi stationary at the fixed
    point), checked per sample on common random numbers at a non-fixed point."""
    task = make_task("spiked", 3, 2.0, 0.3, 1)
    ch = channel64(task, 20_000, 3)
    st = tb._make_static(task)
    m = np.array([0.4, 0.6])
    h = 1e-5
    with jax.enable_x64(True):
        quad = tb._quad(task, BAYES_OPT)

        def rows(mk, mv):
            w_k, w_v = tb._fields(ch, mk, mv)
            return np.asarray(tb._log_zout(st, w_k, w_v, 1 - mk, 1 - mv, ch.y, ch.mask,
                                           ch.length, quad))

        def g2(mk, mv):
            w_k, w_v = tb._fields(ch, mk, mv)

            def tot(a, b):
                return jnp.sum(tb._log_zout(st, a, b, 1 - mk, 1 - mv, ch.y, ch.mask, ch.length,
                                            quad))
            gk, gv = jax.grad(tot, argnums=(0, 1))(w_k, w_v)
            return np.sum(np.asarray(gk) ** 2, -1), np.sum(np.asarray(gv) ** 2, -1)

        gk2, gv2 = g2(*m)
        d_k = (rows(m[0] + h, m[1]) - rows(m[0] - h, m[1])) / (2 * h)
        d_v = (rows(m[0], m[1] + h) - rows(m[0], m[1] - h)) / (2 * h)
    for d, g in ((d_k, gk2), (d_v, gv2)):
        diff = 2 * d - g
        assert abs(diff.mean()) < 4 * diff.std() / math.sqrt(len(diff))


@pytest.mark.slow
def test_bayes_channel_error_predicts_the_spread_over_channel_seeds():
    """Delta-method channel error of the state evolution against the spread of the test error
    over ``K`` independent channel seeds (spiked, ``Delta = 0.5``: no clip). Sample variance
    over predicted is ``chi2(K-1)/(K-1)`` if right; accepted in its 0.05%..99.95% range.
    Measured with 40 seeds: spread/predicted 1.08 at 8e3 samples, 1.18 at 2e3 (the
    linearisation is asymptotic in the sample size)."""
    task = make_task("spiked", 3, 2.0, 0.5, 1)
    K = 16
    rs = [tb.solve_bayes(task, 2.0, tb.BayesTheoryOptions(samples=8000, test_samples=50_000,
                                                          seed=100 + k), start="informed")
          for k in range(K)]
    assert all(r.converged and not r.clipped for r in rs)
    te = np.array([r.test_error for r in rs])
    ratio = te.var(ddof=1) / np.mean([r.stderr**2 for r in rs])
    lo, hi = scipy.stats.chi2.ppf([0.0005, 0.9995], K - 1) / (K - 1)
    assert lo < ratio < hi, (ratio, te)
    assert all(r.stderr_channel > 2 * r.stderr_test for r in rs)


@pytest.mark.slow
def test_bayes_max_argmax_curve():
    """Max-SLR at ``nu = inf`` (Bayes risk 0): decreasing to zero, both starts converge.

    2000 channel samples (the iteration's cost is linear in them): the tolerances are the test
    formula's standard errors (20000 test samples), and the gaps checked (0.25-0.5 between the
    alphas, 0.1 above zero at alpha = 10) are tens of the fixed point's channel error."""
    task = make_task("max", 3, math.inf, 0.1, 1)
    opt = tb.BayesTheoryOptions(samples=2000, test_samples=20_000)
    pts = tb.bayes_curve(task, [1.0, 3.0, 10.0], opt)
    err = np.array([p.best.test_error for p in pts])
    se = np.array([p.best.stderr_test for p in pts])
    assert all(p.best.converged for p in pts)
    assert np.all(np.diff(err) < 4 * np.hypot(se[1:], se[:-1]))
    assert np.all(err > -4 * se)


@pytest.mark.slow
def test_bayes_max_finite_nu_curve_and_quadrature():
    """Max-SLR at finite ``nu`` (the 1-d Gumbel-max integral, the default ``c_eps`` rule):
    the rule agrees with plain Monte Carlo on ``c_eps``, the curve decreases and stays at or
    above the population Bayes risk, and the recorded quadrature error is small at ``nu = 2``.
    2000 channel samples, as in the ``nu = inf`` test: the gaps checked (0.14-0.32 between the
    alphas, 0.06 above the Bayes risk at alpha = 10) are tens of the fixed point's channel
    error; the quadrature error is measured on the test samples."""
    task = make_task("max", 3, 2.0, 0.1, 1)
    opt = tb.BayesTheoryOptions(samples=2000, test_samples=20_000)
    st = tb._make_static(task)
    rng = np.random.default_rng(0)
    n, V, draws = 20, 0.6, 200_000
    w = rng.normal(size=(n, 3))
    with jax.enable_x64(True):
        # one compiled call (eagerly, log_c dispatches op by op: ~10 s more CPU, same numbers)
        c = np.exp(np.asarray(jax.jit(tb.log_c, static_argnums=0)(
            st, jnp.asarray(w), V, jnp.ones((n, 3), bool), jnp.full((n,), 3),
            tb._quad(task, opt)))) / 3
    z = task.nu * (w[:, None, :] + math.sqrt(V) * rng.normal(size=(draws, 3))[None])
    p = np.exp(z - z.max(-1, keepdims=True))
    p /= p.sum(-1, keepdims=True)
    mc, se = p.mean(1), p.std(1) / math.sqrt(draws)
    assert np.all(np.abs(c - mc) < 4.5 * se + 1e-12)  # 60 entries: 4.5 se keeps it honest
    pts = tb.bayes_curve(task, [1.0, 3.0, 10.0], opt)
    err = np.array([p.best.test_error for p in pts])
    ses = np.array([p.best.stderr_test for p in pts])
    assert all(p.best.converged for p in pts)
    assert np.all(np.diff(err) < 4 * np.hypot(ses[1:], ses[:-1]))
    br = bayes_risk(task, samples=100_000)
    assert np.all(err > br.excess_risk - 4 * np.hypot(ses, br.stderr))
    assert all(p.best.quadrature_error < 2e-3 for p in pts)
    assert "Gumbel-max" in pts[0].best.quadrature


# ----------------------------------------------------------------------------------------------
# CLI and registry
# ----------------------------------------------------------------------------------------------
def test_cli_theory_bayes_json():
    res = CliRunner().invoke(app, ["theory", "bayes", "--variant", "spiked", "--L", "3", "--nu",
                                   "2", "--delta", "0", "--alpha", "1,2", "--samples", "2000",
                                   "--test-samples", "2000", "--json"])
    assert res.exit_code == 0, res.output
    d = json.loads(res.output)
    assert [p["alpha"] for p in d["points"]] == [1.0, 2.0]
    for p in d["points"]:
        for key in ("test_error", "m_k", "q_k", "V_k", "m_v", "q_v", "V_v", "converged",
                    "iterations", "free_entropy", "hard_phase"):
            assert key in p
    assert d["samples"] == 2000 and "hard_phase_alpha" in d


def test_registry_theory_bayes_cell():
    out = run_cell(Cell(method="theory_bayes", alpha=2.0,
                        options={"samples": 2000, "test_samples": 2000}))
    assert out["converged"] and 0 < out["test_error"] < 1
    assert out["q_k"] == out["m_k"] and "hard_phase" in out


def _fake_erm_result():
    """A reached, converged replica point with every number 1 (the lam searches' fakes)."""
    import dataclasses as dc

    from bayesslr.theory.erm import ErmTheoryResult

    return ErmTheoryResult(**{
        **{f.name: 1.0 for f in dc.fields(ErmTheoryResult)}, "activation": "softmax",
        "start": "informed", "order_stderr": {}, "converged": True, "iterations": 5,
        "reason": "converged", "history": (), "samples": 100, "seed": 0, "vh_form": "stein",
        "update_calls": 4, "exact_calls": 1})


def test_optimal_lambda_search_finds_the_minimum(monkeypatch):
    """The grid + parabolic search logic of lam_opt on known objectives (no channel needed):
    a parabola in ``log10 lam`` is found in one evaluation past the grid, a non-parabolic
    minimum within the stopping tolerance; every solve is warm-started from the nearest one;
    the reported point counts the search's work."""
    import dataclasses as dc

    import bayesslr.theory.lam_opt as lo

    template = _fake_erm_result()
    objective = {"f": lambda t: 0.3 + (t + 1.3) ** 2}
    starts = []

    def fake_solve(task, activation, alpha, lam_k, lam_v, options, *, start, x0=None):
        starts.append((lam_k, None if x0 is None else float(x0[0])))
        return dc.replace(template, lam_k=lam_k, lam_v=lam_v, m_k=lam_k,
                          test_error=objective["f"](math.log10(lam_k)))

    monkeypatch.setattr(lo, "solve_erm", fake_solve)
    monkeypatch.setattr(lo, "with_channel_error", lambda task, r, opt: r)
    grid = (10, 1, 0.1, 0.01, 0.001)
    r = lo.optimal_lambda(SPIKED, "softmax", 2.0, lam_grid=grid, refine_iter=12)
    assert abs(math.log10(r.lam) + 1.3) < 1e-9 and not r.at_boundary
    assert r.test_error == pytest.approx(0.3, abs=1e-12)
    assert len(r.solves) == len(grid) + 1  # the vertex, then the stopping rule
    assert r.result.iterations == 5 * len(r.solves) and r.result.update_calls == 4 * len(r.solves)
    # each solve starts from the nearest lam solved before it (the first cold)
    assert starts[0] == (10, None) and starts[1] == (1, 10.0) and starts[-1][1] == 0.1
    objective["f"] = lambda t: 0.3 + abs(t + 1.3) ** 1.5  # not a parabola
    r = lo.optimal_lambda(SPIKED, "softmax", 2.0, lam_grid=grid, refine_iter=12)
    assert abs(math.log10(r.lam) + 1.3) < 0.1 and len(r.solves) <= len(grid) + 12
    edge = lo.optimal_lambda(SPIKED, "softmax", 2.0, lam_grid=(10, 1), refine_iter=0)
    assert edge.lam == 1 and edge.at_boundary


def test_lam_search_stops_the_grid_past_its_best(monkeypatch):
    """The grid sweep (large to small lam) stops after grid_stop consecutive rises past the
    best: on a single-minimum error it skips only the grid points below them and returns the
    same optimum as the whole grid (same grid neighbours, same parabolic steps, same starts);
    a grid point without a fixed point counts as an infinite error; grid_stop = 0 sweeps the
    whole grid, and finds a second minimum that the stop does not look for."""
    import dataclasses as dc

    import bayesslr.theory.lam_opt as lo

    template = _fake_erm_result()
    f = {"f": lambda t: 0.3 + (t + 0.2) ** 2}
    solved = []

    def fake_solve(task, activation, alpha, lam_k, lam_v, options, *, start, x0=None):
        solved.append(lam_k)
        e = f["f"](math.log10(lam_k))
        if e is None:  # no fixed point
            return dc.replace(template, lam_k=lam_k, lam_v=lam_v, m_k=lam_k,
                              test_error=math.nan, reached=False, converged=False)
        return dc.replace(template, lam_k=lam_k, lam_v=lam_v, m_k=lam_k, test_error=e)

    monkeypatch.setattr(lo, "solve_erm", fake_solve)
    monkeypatch.setattr(lo, "with_channel_error", lambda task, r, opt: r)
    grid = lo.REPLICA_LAM_GRID  # 10, 3, 1, 0.3, 0.1, 0.03, 0.01, 0.001
    whole = lo.optimal_lambda(SPIKED, "softmax", 4.0, lam_grid=grid, grid_stop=0)
    n_whole = len(solved)
    solved.clear()
    short = lo.optimal_lambda(SPIKED, "softmax", 4.0, lam_grid=grid)
    assert (short.lam, short.test_error) == (whole.lam, whole.test_error)
    assert abs(math.log10(short.lam) + 0.2) < 1e-9
    # best grid point 1 (t = 0), rises at 0.3 and 0.1: 0.03, 0.01, 0.001 are skipped
    assert {0.03, 0.01, 0.001}.isdisjoint(solved) and len(solved) == n_whole - 3
    assert [lam for lam, _ in short.evaluations][:2] == [0.1, 0.3]
    solved.clear()
    f["f"] = lambda t: None if t < -1.2 else 0.3 + (t + 0.2) ** 2  # no fixed point below 0.1
    lo.optimal_lambda(SPIKED, "softmax", 4.0, lam_grid=grid)
    assert 0.001 not in solved and 0.01 not in solved
    solved.clear()
    f["f"] = lambda t: 0.5 + 0.1 * t * t if t > -1.6 else 0.2  # a second, lower minimum
    past = lo.optimal_lambda(SPIKED, "softmax", 4.0, lam_grid=grid, refine_iter=0)
    assert past.lam == 1.0  # past two rises it is not looked for: the rule assumes one minimum
    every = lo.optimal_lambda(SPIKED, "softmax", 4.0, lam_grid=grid, refine_iter=0,
                              grid_stop=0)
    assert every.lam == 0.01 and every.test_error == 0.2


@pytest.mark.parametrize("n", [1, 3, 8])
def test_small_batched_solves_match_lapack(n):
    """The unrolled Gauss-Jordan helpers of the proximal channel (no pivoting, n <= 8): the
    solution, the diagonal of the inverse, and the smallest pivot's sign (positive exactly for
    a positive definite matrix), against numpy on random systems (float64: rounding only)."""
    from bayesslr.theory.erm_proximal import _inv_diag_small, _solve_small

    rng = np.random.default_rng(n)
    M = rng.standard_normal((32, n, n))
    A = M @ M.transpose(0, 2, 1) + n * np.eye(n)
    b = rng.standard_normal((32, n))
    with jax.enable_x64(True):
        x, pmin = _solve_small(jnp.asarray(A), jnp.asarray(b))
        inv = _inv_diag_small(jnp.asarray(A))
        _, pneg = _solve_small(jnp.asarray(A - 2 * n * np.eye(n) - np.abs(A).sum(-1)[..., None]
                                           * np.eye(n)), jnp.asarray(b))
    np.testing.assert_allclose(np.asarray(x), np.linalg.solve(A, b[..., None])[..., 0],
                               rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(np.asarray(inv), np.diagonal(np.linalg.inv(A), axis1=1, axis2=2),
                               rtol=1e-10, atol=1e-12)
    assert np.all(np.asarray(pmin) > 0) and np.all(np.asarray(pneg) < 0)
