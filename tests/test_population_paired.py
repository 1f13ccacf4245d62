"""Population risks on common random numbers (issue 36, item 1): ``excess_over_bayes`` pairs an
activation with the Bayes predictor row by row, so its estimate is non-negative by construction,
and agrees with the unpaired difference of :func:`excess_risk` and :func:`bayes_risk` computed
on independent sets (within their combined Monte Carlo error)."""

from __future__ import annotations

import math

import pytest

import bayesslr as bs
from bayesslr.core.task import ConfigError

N = 20_000
TASKS = {"spiked L=3": dict(variant="spiked", L=3, nu=2.0),
         "max L=4": dict(variant="max", L=4, nu=1.0),
         "spiked law": dict(variant="spiked", L="2,3", nu=4.0)}


@pytest.mark.parametrize("name", sorted(TASKS))
def test_paired_excess_agrees_with_the_unpaired_difference(name):
    task = bs.make_task(**TASKS[name])
    # linear attention at fixed overlaps: a clear gap to Bayes, measured three ways
    m_v, q_v = 0.6, 0.5
    p = bs.excess_over_bayes(task, "linear", 0.0, 0.0, m_v, q_v, samples=N, seed=1)
    own = bs.excess_risk(task, "linear", 0.0, 0.0, m_v, q_v, samples=N, seed=2)
    bayes = bs.bayes_risk(task, samples=N, seed=3)
    diff = own.excess_risk - bayes.excess_risk
    se = math.sqrt(own.stderr**2 + bayes.stderr**2 + p.stderr**2)
    assert abs(p.excess_over_bayes - diff) < 4 * se, (p, diff, se)
    # the same rows' unpaired view is reported beside it
    assert p.excess_risk - p.bayes_risk == pytest.approx(p.excess_over_bayes,
                                                         abs=4 * math.hypot(
                                                             p.excess_risk_stderr,
                                                             p.bayes_risk_stderr))
    assert p.samples == N and p.seed == 1 and p.method == "mc"


def test_bayes_overlaps_have_no_excess_on_any_row():
    # on spiked SLR softmax at m_k = sqrt(nu), q_k = nu, m_v = q_v = 1 is the Bayes predictor
    task = bs.make_task("spiked", L=3, nu=4.0)
    p = bs.excess_over_bayes(task, "softmax", 2.0, 4.0, 1.0, 1.0, samples=N)
    assert 0.0 <= p.excess_over_bayes < 1e-12 and p.stderr < 1e-12
    # the unpaired estimates of the same predictor differ from Bayes only by noise
    assert abs(p.excess_risk - p.bayes_risk) < 4 * math.hypot(p.excess_risk_stderr,
                                                              p.bayes_risk_stderr)


def test_paired_excess_is_never_below_zero_where_unpaired_can_be():
    """Near its optimum softmax is within Monte Carlo noise of Bayes: the unpaired difference
    takes both signs over seeds, the paired excess none, and its error is far smaller."""
    task = bs.make_task("spiked", L=3, nu=2.0)
    m_k, q_k = math.sqrt(2.0) * 0.98, 2.0 * 0.98**2  # a little off the Bayes overlaps
    signs, ratio = set(), []
    for seed in range(6):
        p = bs.excess_over_bayes(task, "softmax", m_k, q_k, 1.0, 1.0, samples=N, seed=seed)
        assert p.excess_over_bayes >= 0.0
        signs.add(p.excess_risk - p.bayes_risk > 0)
        ratio.append(p.stderr / math.hypot(p.excess_risk_stderr, p.bayes_risk_stderr))
    assert signs == {True, False}, "the unpaired difference should take both signs here"
    assert max(ratio) < 0.05


def test_gauss_hermite_agrees_with_monte_carlo():
    task = bs.make_task("spiked", L=2, nu=3.0)
    mc = bs.excess_over_bayes(task, "linear", 0.0, 0.0, 0.5, 0.3, samples=N)
    gh = bs.excess_over_bayes(task, "linear", 0.0, 0.0, 0.5, 0.3, samples=30,
                              method="gauss-hermite")
    assert gh.method == "gauss-hermite"
    assert abs(gh.excess_over_bayes - mc.excess_over_bayes) < 4 * mc.stderr + gh.stderr


@pytest.mark.parametrize("kw, match", [
    (dict(q_v=0.1), r"q_v=0\.1 is below m_v\^2"),
    (dict(q_k=0.5, m_k=1.0), r"q_k=0\.5 is below m_k\^2"),
    (dict(activation="nope"), r"nope"),
    (dict(samples=1), r"samples=1"),
])
def test_bad_input_is_refused_in_one_line(kw, match):
    args = dict(activation="linear", m_k=0.0, q_k=0.0, m_v=0.5, q_v=0.3, samples=N)
    args.update(kw)
    task = bs.make_task("spiked", L=2, nu=3.0)
    with pytest.raises(ConfigError, match=match) as err:
        bs.excess_over_bayes(task, args.pop("activation"), args.pop("m_k"), args.pop("q_k"),
                             args.pop("m_v"), args.pop("q_v"), **args)
    assert "\n" not in str(err.value)
