"""ERM replica fixed point (spec section 5): consistency, the two ``Vh`` forms, failure flag,
orderings against the Bayes curve, and agreement with finite-``D`` L-BFGS ERM.

Every test here compiles the multi-start proximal solver (tens of seconds on a loaded CPU), so
the module is marked slow; all tests share one channel size (one compile per activation).
"""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
import scipy.stats
from typer.testing import CliRunner

from bayesslr.cli import app
from bayesslr.methods import Cell, run_cell
from bayesslr.task import make_task
from bayesslr.theory import bayes as tb
from bayesslr.theory.erm import ErmTheoryOptions, solve_erm
from bayesslr.theory.lam_opt import optimal_lambda

pytestmark = pytest.mark.slow

N_ERM = 2000  # channel samples of every ERM test (one compiled prox per activation)
SPIKED = make_task("spiked", 3, 2.0, 0.0, 1)
BAYES_OPT = tb.BayesTheoryOptions(samples=20_000, test_samples=100_000)


# ----------------------------------------------------------------------------------------------
# ERM replica fixed point
# ----------------------------------------------------------------------------------------------
ERM_OPT = ErmTheoryOptions(samples=N_ERM, test_samples=50_000)


@pytest.fixture(scope="module")
def erm_point():
    return solve_erm(SPIKED, "softmax", 5.0, 1.0, options=ERM_OPT)


def test_erm_fixed_point_is_consistent(erm_point):
    r = erm_point
    assert r.converged and r.residual < ERM_OPT.solver.tol
    # the prior part holds at the fixed point, up to the residual: the returned point is the
    # damped mix of the last iterate and its image, which the conjugates were computed from
    tol = ERM_OPT.solver.tol
    for a, lam in (("k", r.lam_k), ("v", r.lam_v)):
        V = 1 / (lam + getattr(r, f"Vh_{a}"))
        mh, qh = getattr(r, f"mh_{a}"), getattr(r, f"qh_{a}")
        assert getattr(r, f"V_{a}") == pytest.approx(V, rel=tol)
        assert getattr(r, f"m_{a}") == pytest.approx(mh * V, rel=tol)
        assert getattr(r, f"q_{a}") == pytest.approx((mh * mh + qh) * V * V, rel=tol)
        assert getattr(r, f"q_{a}") >= getattr(r, f"m_{a}") ** 2
    assert 0 < r.test_error < 1 and r.prox_unconverged == 0


def test_erm_vh_forms_agree_without_branch_jumps(erm_point):
    r = erm_point
    if r.off_branch > 0:
        pytest.skip(f"branch jumps at this point (off_branch={r.off_branch})")
    assert abs(r.vh_gap_k) < 4 * r.vh_gap_k_se
    assert abs(r.vh_gap_v) < 4 * r.vh_gap_v_se


def test_channel_error_predicts_the_spread_over_channel_seeds():
    """The delta-method channel standard error against the actual spread of the fixed point's
    test error over independent channel seeds (same point, ``K`` seeds). With ``K`` seeds the
    sample variance over the predicted one is ``chi2(K-1)/(K-1)`` if the prediction is right:
    the test accepts the 0.05%..99.95% range of that law (the prediction is also an estimate
    and the solver tolerance adds a little spread; both are far inside that range)."""
    K = 10
    rs = [solve_erm(SPIKED, "softmax", 5.0, 1.0, options=ErmTheoryOptions(
        samples=N_ERM, seed=100 + k, test_samples=50_000)) for k in range(K)]
    assert all(r.converged for r in rs)
    te = np.array([r.test_error for r in rs])
    pred_var = np.mean([r.stderr**2 for r in rs])
    ratio = te.var(ddof=1) / pred_var
    lo, hi = scipy.stats.chi2.ppf([0.0005, 0.9995], K - 1) / (K - 1)
    assert lo < ratio < hi, (ratio, te, pred_var)
    # the channel part dominates the test-formula part at these sizes
    assert all(r.channel_stderr > 2 * r.test_stderr for r in rs)
    # the order parameters' errors are reported and finite
    assert all(np.isfinite(list(r.order_stderr.values())).all() for r in rs)


def test_erm_non_convergence_is_nan_with_flag_through_the_registry():
    out = run_cell(Cell(method="theory_erm:softmax", alpha=5.0, lam=1.0,
                        options={"samples": N_ERM, "test_samples": 1000, "max_iter": 2}))
    assert out["converged"] is False and out["reason"] == "max_iter"
    assert math.isnan(out["test_error"]) and math.isnan(out["m_k"])
    assert out["iterations"] == 2


def test_cli_theory_erm_json_and_bad_input():
    res = CliRunner().invoke(app, ["theory", "erm", "--variant", "spiked", "--L", "3", "--nu",
                                   "2", "--delta", "0", "--alpha", "5", "--lam", "1",
                                   "--activation", "softmax", "--samples", str(N_ERM),
                                   "--test-samples", "1000", "--max-iter", "3", "--json"])
    assert res.exit_code == 0, res.output
    (p,) = json.loads(res.output)["points"]
    for key in ("test_error", "m_k", "q_k", "V_k", "m_v", "q_v", "V_v", "converged",
                "iterations"):
        assert key in p
    assert p["iterations"] <= 3
    bad = CliRunner().invoke(app, ["theory", "erm", "--alpha", "0:1:x"])
    assert bad.exit_code != 0



# ----------------------------------------------------------------------------------------------
# orderings (slow): Bayes < softmax ERM at optimal lam < linear ERM at optimal lam
# ----------------------------------------------------------------------------------------------
def test_bayes_below_softmax_below_linear_at_optimal_lam():
    alpha = 5.0
    opt = ErmTheoryOptions(samples=N_ERM, test_samples=50_000)
    grid = (1.0, 0.1)  # Bayes <= softmax holds at every lam, so the grid optimum is enough
    soft = optimal_lambda(SPIKED, "softmax", alpha, opt, lam_grid=grid, refine_iter=0)
    lin = optimal_lambda(SPIKED, "linear", alpha, opt, lam_grid=grid, refine_iter=0)
    bay = tb.solve_bayes(SPIKED, alpha, BAYES_OPT)
    assert soft.result.converged and lin.result.converged and bay.converged
    se_sb = math.hypot(soft.result.test_stderr, bay.test_stderr)
    se_ls = math.hypot(soft.result.test_stderr, lin.result.test_stderr)
    assert bay.test_error < soft.test_error + 4 * se_sb
    assert soft.test_error < lin.test_error + 4 * se_ls


def test_theory_agrees_with_finite_D_erm(erm_point):
    """Softmax, spiked, L = 3, nu = 2, alpha = 5 (spec section 5's checked setting, at lam = 1).

    L-BFGS ERM from the informed start at ``D = 400`` (3 seeds) against the fixed point; the
    theory's own Monte Carlo error is estimated from a second channel seed."""
    alpha, lam = erm_point.alpha, erm_point.lam_k
    other = solve_erm(SPIKED, "softmax", alpha, lam, options=ErmTheoryOptions(
        samples=N_ERM, seed=1, test_samples=50_000), x0=erm_point.x)
    th = [erm_point, other]
    assert all(r.converged for r in th)
    t_mean = 0.5 * (th[0].test_error + th[1].test_error)
    t_se = max(abs(th[0].test_error - th[1].test_error) / 2, th[0].test_stderr)
    sim = run_cell(Cell(method="erm:softmax", alpha=alpha, lam=lam, D=400, seed=0,
                        options={"seeds": 3, "n_test": 5_000}))
    assert abs(sim["test_error"] - t_mean) < 4 * math.hypot(sim["stderr"], t_se)
