"""Regularised ERM (docs/estimators.md): solver, batching, validation, GD, CLI contract.

Small fixed shapes (``D = 32``, ``N = 160``, two seeds) so that every fast test shares a handful of
compiled functions; the statistical claims of the paper live in ``test_erm_claims.py``.
"""

from __future__ import annotations

import json
import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from bayesslr.core.activations import get_activation
from bayesslr.core.task import OVERLAP_NAMES, ConfigError, Data, make_task, sample_task
from bayesslr.erm import ERMOptions, fit_seeds, gd_trajectory, run_erm_protocol, select_lam
from bayesslr.erm import protocol as P
from bayesslr.erm.objective import objective as _objective
from bayesslr.registry import Cell, run_cell
from conftest import run_cli

D, N, SEEDS = 32, 160, (0, 1)
GRID = (0.01, 0.1, 1.0)
OPTS = ERMOptions(n_test=2000, lam_grid=GRID)
objective = jax.jit(_objective, static_argnums=0)  # one compilation, not one per primitive


@pytest.fixture(scope="module")
def task():
    return make_task("spiked", L=3, nu=2.0, delta=0.0, D=D)


@pytest.fixture(scope="module")
def fits(task):
    """One fit per activation at lam = 0.1 (linear and softplus only when a test asks)."""
    cache = {}

    def get(act):
        if act not in cache:
            cache[act] = run_erm_protocol(task, act, N, 0.1, seeds=SEEDS, opts=OPTS)
        return cache[act]

    return get


@pytest.mark.parametrize("act", ["softmax", "erf", pytest.param("linear", marks=pytest.mark.slow),
                                 pytest.param("softplus", marks=pytest.mark.slow)])
def test_lbfgs_converges_to_a_stationary_point(fits, task, act):
    res = fits(act)
    assert res.converged.all() and (res.grad_norm < OPTS.gtol).all()
    assert res.start == "informed" and (res.iterations >= 1).all()
    assert set(res.overlaps) == set(OVERLAP_NAMES)
    assert set(res.theta) == set(get_activation(act).param_names)
    # the reported objective is the objective of the returned parameters on the training data
    teacher, train, _ = sample_task(P._seed_keys(np.array([SEEDS[0]]))[0], task, N)
    p = {k: jnp.asarray(v[0]) for k, v in res.params.items()}
    f = float(objective(get_activation(act), p, train, 0.1, 0.1))
    assert f == pytest.approx(float(res.objective[0]), rel=1e-5)
    assert float(res.train_loss[0]) <= f
    # no nearby point is lower (float32 objective: allow a few ulps)
    rng = np.random.default_rng(0)
    for _ in range(4):
        q = {k: v + 1e-2 * jnp.asarray(rng.standard_normal(v.shape), dtype=v.dtype)
             for k, v in p.items()}
        assert float(objective(get_activation(act), q, train, 0.1, 0.1)) >= f * (1 - 1e-6)


def test_test_error_is_the_noiseless_risk_and_oracle_is_bayes(fits):
    res = fits("softmax")
    # delta = 0: the noisy test risk and the Rao-Blackwellised excess error estimate the same
    # expectation; their difference has variance Var(noisy) - Var(RB) <= Var(noisy)
    assert np.all(np.abs(res.risk - res.test_error) < 4 * res.risk_stderr)
    # ERM cannot beat the teacher-known Bayes predictor on average
    assert np.all(res.test_error - res.oracle_error > -4 * res.excess_over_oracle_stderr)
    s = res.summary()
    assert s["test_error"] == pytest.approx(float(np.mean(res.test_error)))
    assert s["stderr"] == pytest.approx(float(np.std(res.test_error, ddof=1) / math.sqrt(2)))


def test_lam_grid_batched_equals_individual_fits(task):
    """A grid fitted in one vmap lands on the minimisers of the individual fits.

    Tolerance from the stopping rule: with ``H >= lam I`` near the minimiser (the data part is
    positive semi-definite there), ``|theta - theta*| <= |grad S| / lam``, so two runs stopped at
    size-free gradient norms ``g1, g2`` differ by at most ``(g1 + g2) / lam`` in rms component.
    """
    grid, _, _ = fit_seeds(task, "softmax", N, SEEDS, GRID, opts=OPTS)
    for j, lam in enumerate(GRID):
        one, _, _ = fit_seeds(task, "softmax", N, SEEDS, [lam], opts=OPTS)
        for s in range(len(SEEDS)):
            assert grid.converged[s, j] and one.converged[s, 0]
            bound = (grid.grad_norm[s, j] + one.grad_norm[s, 0]) / lam
            for name in ("k", "v"):
                diff = grid.params[name][s, j] - one.params[name][s, 0]
                rms = np.linalg.norm(diff) / math.sqrt(D)
                assert rms <= bound, (lam, name, rms, bound)


def test_auto_lam_never_touches_the_test_set(task, monkeypatch):
    auto = run_erm_protocol(task, "softmax", N, "validation", seeds=SEEDS, opts=OPTS)
    assert auto.lam in GRID and auto.val_risk.shape == (len(GRID),)
    assert auto.lam == GRID[int(np.argmin(auto.val_risk))]

    def forbidden(*args, **kwargs):
        raise AssertionError("the lam selection drew test data")

    drawn = []
    real_sample, real_stream = P.sample_task, P.stream_draw_train

    def spy(key, task_, n_train, n_test=0):
        drawn.append((int(n_train), int(n_test)))
        return real_sample(key, task_, n_train, n_test)

    def spy_stream(key, task_, n_train, chunk=None):
        drawn.append((int(n_train), 0))
        return real_stream(key, task_, n_train, chunk)

    for name in ("_score", "evaluate", "evaluate_grid", "stream_test"):
        monkeypatch.setattr(P, name, forbidden)
    monkeypatch.setattr(P, "sample_task", spy)
    monkeypatch.setattr(P, "stream_draw_train", spy_stream)
    P._draw_train.clear_cache()  # retrace so that the spy sees every draw
    lam, grid, val, _ = select_lam(task, "softmax", N, SEEDS, OPTS)
    P._draw_train.clear_cache()
    assert drawn and set(drawn) == {(N, 0)}  # training samples only, never a test set
    assert lam == auto.lam
    np.testing.assert_allclose(val, auto.val_risk, rtol=1e-5)
    # the held-out samples are the last val_frac of the training set
    n_val = round(OPTS.val_frac * N)
    one, _, v = fit_seeds(task, "softmax", N, SEEDS[:1], [lam], opts=OPTS, n_fit=N - n_val)
    teacher, train, _ = sample_task(P._seed_keys(np.array([SEEDS[0]]))[0], task, N)
    held = Data(*(a[N - n_val:] for a in train))
    p = {k: jnp.asarray(x[0, 0]) for k, x in one.params.items()}
    f = objective(get_activation("softmax"), p, held, 0.0, 0.0)  # 1/2 mean (y - f)^2
    assert float(v[0, 0]) == pytest.approx(2 * float(f), rel=1e-4)


def test_registry_cell_and_erf_scalar(task):
    out = run_cell(Cell(method="erm:erf", variant="spiked", L="3", nu=2.0, delta=0.0, alpha=5.0,
                        lam=0.1, D=D, seed=0, options={"seeds": 2, "n_test": 2000,
                                                       "lam_grid": GRID}))
    for key in ("test_error", "stderr", "train_loss", *OVERLAP_NAMES, "converged", "runtime_s",
                "lam", "iterations", "theta_c", "oracle_error"):
        assert key in out
    assert out["converged"] is True and out["lam"] == 0.1 and out["N"] == N
    with pytest.raises(ConfigError, match="restart"):
        run_cell(Cell(method="erm:softmax", alpha=5.0, lam=0.1, D=D,
                      options={"restarts": 0}))
    with pytest.raises(ConfigError, match="unknown to erm"):
        run_cell(Cell(method="erm:softmax", alpha=5.0, lam=0.1, D=D, options={"bogus": 1}))
    with pytest.raises(ConfigError, match="lam="):
        run_cell(Cell(method="erm:softmax", alpha=5.0, lam=-1.0, D=D))


def _run(argv, capsys):
    return run_cli(argv, capsys)


def test_cli_json_contract(capsys):
    code, out, _ = _run(["erm", "--variant", "spiked", "--L", "3", "--nu", "2", "--delta", "0",
                         "--alpha", "5", "--lam", "0.1", "--activation", "softmax", "--D",
                         str(D), "--seeds", "2", "--init", "informed", "--n-test", "2000",
                         "--json"], capsys)
    assert code == 0
    res = json.loads(out)
    for key in ("test_error", "stderr", "train_loss", "m_k", "q_k", "m_v", "q_v", "runtime_s",
                "lam"):
        assert isinstance(res[key], float), key
    assert res["converged"] is True and res["seeds"] == 2 and res["init"] == "informed"


@pytest.mark.parametrize("argv,needle", [
    (["--lam", "-1"], "lam="),
    (["--lam", "often"], "lam="),
    (["--lam", "auto"], "lam='auto'"),
    (["--activation", "relu"], "activation="),
    (["--init", "lucky"], "init="),
    (["--seeds", "0"], "seeds="),
    (["--alpha", "0"], "alpha="),
    (["--D", "10", "--sqrtND", "100"], "--D"),
])
def test_cli_bad_input_is_one_line_exit_2(capsys, argv, needle):
    base = ["erm", "--nu", "2", "--alpha", "5"]
    if "--D" not in argv:
        base += ["--D", "16"]
    code, _, err = _run(base + argv, capsys)
    assert code == 2 and needle in err and len(err.strip().splitlines()) == 1


def test_gd_trajectory_dataset():
    task = make_task("spiked", L=3, nu=2.0, delta=0.0, D=D)
    ds = gd_trajectory(task, "softmax", N, 0.1, seeds=SEEDS, optimizer="gd", lr=0.05,
                       steps=400, record_every=40, init_scale=0.01, n_test=500)
    assert dict(ds.sizes) == {"seed": 2, "step": 11}
    assert set(OVERLAP_NAMES) <= set(ds.data_vars)
    obj = ds["objective"].values
    # small-step GD descends the objective monotonically (float32: a few ulps of slack)
    assert np.all(np.diff(obj, axis=1) <= 1e-6 * np.abs(obj[:, :-1]))
    # it starts near the origin and learns the value direction
    assert np.all(np.abs(ds["q_k"].isel(step=0)) < 1e-3)
    assert np.all(ds["m_v"].isel(step=-1) > 0.3)
    with pytest.raises(ConfigError, match="optimizer"):
        gd_trajectory(task, "softmax", N, 0.1, optimizer="newton")


@pytest.mark.slow
def test_restarts_keep_the_lowest_objective(task):
    """Restart 0 of ``restarts = 3`` is the single start of ``restarts = 1`` (same key)."""
    opts1 = ERMOptions(n_test=2000, lam_grid=GRID, init_noise=0.5, restarts=1)
    opts3 = ERMOptions(n_test=2000, lam_grid=GRID, init_noise=0.5, restarts=3)
    one, _, _ = fit_seeds(task, "softmax", N, SEEDS, [0.1], opts=opts1)
    three, _, _ = fit_seeds(task, "softmax", N, SEEDS, [0.1], opts=opts3)
    assert np.all(three.objective <= one.objective * (1 + 1e-6))
    # random starts, and an iteration cap reported honestly (max_iter is traced: no recompile)
    rnd, _, _ = fit_seeds(task, "softmax", N, SEEDS, [0.1],
                          opts=ERMOptions(init="random", max_iter=5))
    assert np.all(rnd.iterations <= 5) and not rnd.converged.any()
