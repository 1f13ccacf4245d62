"""The paper's finite-sample ERM claims at small size (docs/paper.md).

All marked slow. Shared shapes (``D = 64``, six seeds, ``n_test = 4000``) keep the number of
compilations small. Every tolerance is a multiple of a standard error over seeds (teacher, data
and test set all vary with the seed); comparisons are paired over seeds where both sides use the
same teacher.
"""

from __future__ import annotations

import math

import jax
import numpy as np
import pytest

from bayesslr.core.task import make_task, sample_teacher
from bayesslr.erm import ERMOptions, fit_seeds, run_erm_protocol
from bayesslr.population.method import bayes_risk, best_excess_risk

pytestmark = pytest.mark.slow

D, SEEDS = 64, tuple(range(6))
OPTS = ERMOptions(n_test=4000, lam_grid=(0.01, 0.1, 1.0))
POP_SAMPLES = 50_000


def _mean_se(x: np.ndarray) -> tuple[float, float]:
    return float(np.mean(x)), float(np.std(x, ddof=1) / math.sqrt(len(x)))


@pytest.mark.parametrize("variant,nu", [("spiked", 2.0), ("spiked", 1.0), ("max", "inf")])
def test_softmax_beats_linear_at_tuned_lam(variant, nu):
    task = make_task(variant, L=3, nu=nu, delta=0.0, D=D)
    soft = run_erm_protocol(task, "softmax", 10 * D, "validation", seeds=SEEDS, opts=OPTS)
    lin = run_erm_protocol(task, "linear", 10 * D, "validation", seeds=SEEDS, opts=OPTS)
    assert soft.converged.all() and lin.converged.all()
    diff, se = _mean_se(lin.test_error - soft.test_error)  # same teachers and test sets
    assert diff > 4 * se, (diff, se, soft.lam, lin.lam)


@pytest.fixture(scope="module")
def large_alpha():
    task = make_task("spiked", L=3, nu=2.0, delta=0.0, D=D)
    alphas = (10, 40)
    fits = {act: [run_erm_protocol(task, act, a * D, 0.01, seeds=SEEDS, opts=OPTS) for a in alphas]
            for act in ("softmax", "linear")}
    return task, alphas, fits


def _extrapolate(alphas, values):
    """Per seed, the ``alpha -> inf`` intercept of a line in ``1/alpha`` through two alphas.

    ERM's excess over its population optimum decays like ``1/alpha`` at large ``alpha``.
    """
    a1, a2 = alphas
    return (a2 * values[1] - a1 * values[0]) / (a2 - a1)


def test_softmax_erm_approaches_bayes_as_alpha_grows(large_alpha):
    task, alphas, fits = large_alpha
    r = fits["softmax"]
    assert all(x.converged.all() for x in r)
    gaps = [x.test_error - x.oracle_error for x in r]  # paired with the teacher-known Bayes
    g_lo, se_lo = _mean_se(gaps[0])
    g_hi, se_hi = _mean_se(gaps[1])
    assert g_lo - g_hi > 4 * math.hypot(se_lo, se_hi)  # the gap closes ...
    g_inf, se_inf = _mean_se(_extrapolate(alphas, gaps))
    assert abs(g_inf) < 4 * se_inf, (g_inf, se_inf)  # ... to zero
    pop = bayes_risk(task, samples=POP_SAMPLES)
    e_inf, se_e = _mean_se(_extrapolate(alphas, [x.test_error for x in r]))
    assert abs(e_inf - pop.excess_risk) < 4 * math.hypot(se_e, pop.stderr), (e_inf, pop)


def test_linear_erm_approaches_linear_population_optimum(large_alpha):
    task, alphas, fits = large_alpha
    r = fits["linear"]
    assert all(x.converged.all() for x in r)
    pop = best_excess_risk(task, "linear", samples=POP_SAMPLES)
    e_lo, se_lo = _mean_se(r[0].test_error)
    assert e_lo - pop.excess_risk > 4 * math.hypot(se_lo, pop.stderr)  # finite alpha is worse
    e_inf, se_e = _mean_se(_extrapolate(alphas, [x.test_error for x in r]))
    assert abs(e_inf - pop.excess_risk) < 4 * math.hypot(se_e, pop.stderr), (e_inf, pop)
    # and stays above softmax's limit: linear attention cannot reach the Bayes risk
    soft_inf, se_s = _mean_se(_extrapolate(alphas, [x.test_error for x in fits["softmax"]]))
    paired, se_p = _mean_se(_extrapolate(alphas, [a.test_error - b.test_error for a, b in
                                                  zip(r, fits["softmax"], strict=True)]))
    assert paired > 4 * se_p, (e_inf, soft_inf)


def test_cross_overlaps_shrink_like_inverse_sqrt_D():
    """At the minimiser ``m_kv, m_vk, q_kv = O(D^-1/2)``: their mean square goes like ``1/D``.

    Weighted least squares of ``log c2(D)`` on ``log D``, with ``se(log c2) = se(c2)/c2`` over
    seeds; the slope must be ``-1`` within 4 standard errors, and the test must be able to tell
    it from ``0`` (no shrinkage).
    """
    Ds, seeds = (16, 256), tuple(range(12))
    logs, ws = [], []
    for d in Ds:
        task = make_task("spiked", L=3, nu=2.0, delta=0.0, D=d)
        res, _, _ = fit_seeds(task, "softmax", 4 * d, seeds, [0.1], opts=OPTS)
        assert res.converged.all()
        k, v = res.params["k"][:, 0], res.params["v"][:, 0]
        teachers = [sample_teacher(jax.random.split(jax.random.key(s), 3)[0], task)
                    for s in seeds]
        ks = np.stack([np.asarray(t.k) for t in teachers])
        vs = np.stack([np.asarray(t.v) for t in teachers])
        cross = [np.sum(k * vs, -1) / d, np.sum(v * ks, -1) / d, np.sum(k * v, -1) / d]
        c2 = np.mean(np.square(cross), axis=0)  # per seed: mean square of m_kv, m_vk, q_kv
        m, se = _mean_se(c2)
        logs.append(math.log(m))
        ws.append((m / se) ** 2)
    x, y, w = np.log(Ds), np.asarray(logs), np.asarray(ws)
    xb = np.sum(w * x) / np.sum(w)
    sxx = np.sum(w * (x - xb) ** 2)
    slope = np.sum(w * (x - xb) * y) / sxx
    se_slope = 1.0 / math.sqrt(sxx)
    assert 4 * se_slope < 1.0, se_slope
    assert abs(slope + 1.0) < 4 * se_slope, (slope, se_slope, logs)
