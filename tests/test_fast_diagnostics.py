"""The vectorised convergence diagnostics (:mod:`bayesslr.bayes.diagnostics`, issue 35) against
ArviZ itself, the reference: rank-normalised split R-hat, bulk ESS and tail ESS per parameter,
and the reduced ``r_hat_max`` / ``ess_bulk_min`` / ``ess_tail_min`` that every caller reads.

Tolerance: relative ``1e-10``. Both compute the same formulas; only the order of floating-point
operations differs. The largest difference seen is ~1e-13 relative, on tail ESS: ArviZ with
Numba (installed here) takes the variance of the chain means of the 95 % indicator by the
one-pass formula ``E[x^2] - E[x]^2``, whose rounding error is ``eps * mean^2 / var`` (means
~0.95, variance ~1e-3: ~1e-13 relative), and ``rho_t``'s error adds up over the lags summed.
With Numba disabled ArviZ agrees to ~1e-16. ``1e-10`` leaves a margin of 1000 over what is seen
at these sizes, and is far below any threshold a decision uses (R-hat 1.01, ESS 100s).
"""

from __future__ import annotations

import warnings

import numpy as np
import pytest

from bayesslr.bayes import arviz_adapter
from bayesslr.bayes.diagnostics import rank_diagnostics
from bayesslr.core.thresholds import CONVERGENCE

RTOL = 1e-10


@pytest.fixture(scope="module")
def az():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)
        import arviz
    return arviz


def _reference(az, x):
    """ArviZ's per-parameter values of ``x`` ``(chains, draws, params)``."""
    with warnings.catch_warnings(), np.errstate(invalid="ignore", divide="ignore"):
        warnings.simplefilter("ignore", RuntimeWarning)
        warnings.simplefilter("ignore", UserWarning)  # "more chains than draws"
        ds = az.convert_to_dataset({"x": x})
        return {"r_hat": az.rhat(ds, method="rank")["x"].values,
                "ess_bulk": az.ess(ds, method="bulk")["x"].values,
                "ess_tail": az.ess(ds, method="tail")["x"].values}


def _mixed(rng, chains, draws):
    """Parameters of every kind: iid, slow AR(1) mixing, a random walk, one chain elsewhere,
    constant, Cauchy tails, ties, one NaN draw, one inf draw, a chain stuck at one value."""
    cols = [rng.standard_normal((chains, draws))]
    e = rng.standard_normal((chains, draws))
    ar = np.zeros_like(e)
    for t in range(1, draws):
        ar[:, t] = 0.95 * ar[:, t - 1] + e[:, t]
    cols.append(ar)
    cols.append(np.cumsum(rng.standard_normal((chains, draws)), axis=1))
    off = rng.standard_normal((chains, draws))
    off[0] += 3.0
    cols.append(off)
    cols.append(np.full((chains, draws), 1.5))
    cols.append(rng.standard_cauchy((chains, draws)))
    cols.append(np.round(rng.standard_normal((chains, draws))))
    nan = rng.standard_normal((chains, draws))
    nan[-1, draws // 3] = np.nan
    cols.append(nan)
    inf = rng.standard_normal((chains, draws))
    inf[0, draws // 2] = np.inf
    cols.append(inf)
    stuck = rng.standard_normal((chains, draws))
    stuck[-1] = 0.25
    cols.append(stuck)
    cols.append(rng.standard_normal((chains, draws)) ** 3)
    return np.stack(cols, axis=-1)


def _assert_close(fast, ref):
    for name in ("r_hat", "ess_bulk", "ess_tail"):
        f, r = np.asarray(fast[name], float), np.asarray(ref[name], float)
        assert f.shape == r.shape, name
        np.testing.assert_array_equal(np.isnan(f), np.isnan(r), err_msg=name)
        ok = ~np.isnan(r)
        np.testing.assert_allclose(f[ok], r[ok], rtol=RTOL, atol=0, err_msg=name)


@pytest.mark.parametrize("chains,draws", [(4, 200), (2, 101), (4, 33), (2, 9), (4, 4), (2, 5),
                                          (4, 3), (1, 60), (3, 1001)])
def test_per_parameter_values_equal_arviz(az, chains, draws):
    rng = np.random.default_rng(chains * 10_000 + draws)
    x = _mixed(rng, chains, draws)
    _assert_close(rank_diagnostics(x), _reference(az, x))


def test_float32_and_trailing_shape(az):
    rng = np.random.default_rng(7)
    x = _mixed(rng, 4, 150).astype(np.float32)
    _assert_close(rank_diagnostics(x), _reference(az, x))
    y = rng.standard_normal((2, 40, 3, 5))  # trailing dimensions come back as they are
    fast = rank_diagnostics(y)
    ref = {n: v.reshape(3, 5) for n, v in _reference(az, y.reshape(2, 40, 15)).items()}
    _assert_close(fast, ref)


def test_more_parameters_than_one_block(az):
    from bayesslr.bayes import diagnostics

    rng = np.random.default_rng(3)
    x = np.concatenate([_mixed(rng, 4, 64) for _ in range(4)], axis=-1)  # 44 > BLOCK
    assert x.shape[-1] > diagnostics.BLOCK
    _assert_close(rank_diagnostics(x), _reference(az, x))


def test_edge_values(az):
    """Constant: R-hat NaN, ESS the split draw count; NaN draw: all NaN; too few draws."""
    x = _mixed(np.random.default_rng(1), 4, 50)
    fast = rank_diagnostics(x)
    assert np.isnan(fast["r_hat"][4]) and fast["ess_bulk"][4] == fast["ess_tail"][4] == 200
    assert all(np.isnan(fast[n][7]) for n in fast)
    assert all(np.isnan(rank_diagnostics(x[:, :3])[n]).all() for n in fast)
    assert np.isnan(rank_diagnostics(x[:1])["r_hat"]).all()


@pytest.mark.parametrize("chains,draws", [(4, 300), (2, 51), (4, 3)])
def test_reduced_diagnostics_equal_arviz(chains, draws):
    rng = np.random.default_rng(draws)
    draws_ = {"k": _mixed(rng, chains, draws), "v": rng.standard_normal((chains, draws, 7)),
              "s": rng.standard_normal((chains, draws))}
    fast = arviz_adapter.diagnostics(draws_)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # ArviZ: "more chains than draws"
        ref = arviz_adapter.diagnostics_arviz(draws_)
    assert fast.keys() == ref.keys()
    for name, r in ref.items():
        if np.isnan(r):
            assert np.isnan(fast[name]), name
        else:
            assert fast[name] == pytest.approx(r, rel=RTOL, abs=0), name


def test_flags_identical_on_sticky_chains():
    """The convergence decision (R-hat above, ESS below the bayes_sampling and inference
    thresholds) is ArviZ's, parameter by parameter, on chains that stick: a share of the
    coordinates have one chain in a slow AR(1) (phi 0.999) around another place."""
    rng = np.random.default_rng(11)
    chains, draws, d = 4, 400, 24
    x = rng.standard_normal((chains, draws, d))
    for j in range(0, d, 3):
        e = rng.standard_normal(draws)
        stick = np.zeros(draws)
        for t in range(1, draws):
            stick[t] = 0.999 * stick[t - 1] + 0.05 * e[t]
        x[j % chains, :, j] = stick + 0.5 * (j % 4)
    for j in range(1, d, 6):  # a stuck chain: the same value for long runs
        x[0, :, j] = np.repeat(rng.standard_normal(draws // 50), 50)
    fast = rank_diagnostics(x)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)
        import arviz as az
    ref = _reference(az, x)
    flagged = 0
    for row in CONVERGENCE.values():
        floor = row.ess_floor(chains)
        for name, above in (("r_hat", True), ("ess_bulk", False), ("ess_tail", False)):
            limit = row.r_hat_max if above else floor
            f = fast[name] > limit if above else fast[name] < limit
            r = ref[name] > limit if above else ref[name] < limit
            np.testing.assert_array_equal(f, r, err_msg=f"{name} vs {limit}")
            flagged += int(f.sum())
        run_fast = arviz_adapter.diagnostics({"k": x})
        assert (run_fast["r_hat_max"] > row.r_hat_max) == (np.nanmax(ref["r_hat"]) > row.r_hat_max)
        assert (run_fast["ess_bulk_min"] < floor) == (np.nanmin(ref["ess_bulk"]) < floor)
    assert flagged > 0 and not np.all(fast["r_hat"] > 1.01)  # both kinds present
