"""NUTS finds the SLR posterior (docs/model.md §6): reference checks, alpha ladder, CLI contract.

The importance-sampling reference runs by default; the alpha ladder, the CLI run with both
starts and the comparisons with ERM are marked ``slow`` (run with ``pytest -m ''``).
Compiled NUTS functions are shared: every run of one module-scoped fixture has the same shapes
(nested data sets are selected by 0/1 sample weights), and the CLI test uses the ladder's shapes.
Tolerances are ``4 *`` the combined Monte Carlo standard errors.
"""

from __future__ import annotations

import io
import json
from contextlib import redirect_stderr, redirect_stdout

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from bayesslr.bayes import arviz_adapter
from bayesslr.bayes.model import log_lik_samples, model_spec, token_log_weights
from bayesslr.bayes.predict import posterior_overlaps, posterior_predict
from bayesslr.bayes.sampler import SamplerOptions, init_params, run_nuts
from bayesslr.cli import main
from bayesslr.core.metrics import test_errors as excess_errors
from bayesslr.core.task import Teacher, make_task, sample_data, sample_task
from bayesslr.population.method import bayes_risk
from conftest import run_cli

# data in one compiled call per shape (eager generation compiles op by op)
sample_task = jax.jit(sample_task, static_argnums=(1, 2, 3))
sample_data = jax.jit(sample_data, static_argnums=(1, 3))


# ------------------------------------------------------------------------------------------
# 1. importance sampling from the prior at tiny D: an independent reference
# ------------------------------------------------------------------------------------------
def _per_draw_pred_terms(spec, K, V, X, mask):
    """``u_s = sum_l exp(a_sl) z_sl`` and ``d_s = sum_l exp(a_sl)`` per draw and test input."""
    D = X.shape[-1]

    def one(k, v):
        chi, z = X @ k / jnp.sqrt(D), X @ v / jnp.sqrt(D)
        a = token_log_weights(spec.variant, spec.nu, chi, mask, k @ k / D)
        e = jnp.where(mask, jnp.exp(a), 0.0)
        return jnp.sum(e * z, -1), jnp.sum(e, -1)

    return jax.jit(jax.vmap(one))(K, V)


@pytest.fixture(scope="module")
def tiny():
    D, N, M = 3, 6, 400_000
    task = make_task("spiked", L=2, nu=1.0, delta=0.5, D=D)
    teacher, data, test = sample_task(jax.random.key(0), task, N, 4)
    spec = model_spec(task)
    # self-normalised importance sampling with the prior as proposal
    kk, kv = jax.random.split(jax.random.key(7))
    K, V = jax.random.normal(kk, (M, D)), jax.random.normal(kv, (M, D))
    ll = jax.jit(jax.vmap(lambda k, v: jnp.sum(
        log_lik_samples(spec, k, v, data.X, data.y, data.mask))))(K, V)
    ll = np.asarray(ll, np.float64)
    w = np.exp(ll - ll.max())
    w /= w.sum()
    u, d = (np.asarray(a, np.float64) for a in _per_draw_pred_terms(spec, K, V, test.X,
                                                                    test.mask))
    # NUTS from random prior starts; 4 chains > 2 host devices: 'parallel' must fall back
    opts = SamplerOptions(chains=4, warmup=200, draws=600, chain_method="parallel")
    start = init_params(jax.random.key(1), "random", 4, D)
    res = run_nuts(jax.random.key(2), spec, data, opts, start=start, init="random")
    return {"task": task, "spec": spec, "test": test, "K": np.asarray(K, np.float64),
            "V": np.asarray(V, np.float64), "w": w, "u": u, "d": d, "res": res}


def test_posterior_mean_of_k_v_matches_importance_sampling(tiny):
    w, res = tiny["w"], tiny["res"]
    assert 1.0 / np.sum(w ** 2) > 1000  # the reference itself is usable
    ref_draws = np.concatenate([tiny["K"], tiny["V"]], axis=1)
    mu = w @ ref_draws
    se_is = np.sqrt((w ** 2) @ (ref_draws - mu) ** 2)
    nuts = np.concatenate([res.k, res.v], axis=-1)
    se_nuts = arviz_adapter.mcse_mean(nuts)
    z = (nuts.mean(axis=(0, 1)) - mu) / np.hypot(se_is, se_nuts)
    assert np.all(np.abs(z) < 4), z


def test_posterior_predictive_matches_importance_sampling(tiny):
    w, u, d, res, spec, test = (tiny[n] for n in ("w", "u", "d", "res", "spec", "test"))
    y_is = (w @ u) / (w @ d)
    se_is = np.sqrt((w ** 2) @ (u - y_is * d) ** 2) / (w @ d)
    kf, vf = res.flat()
    y_nuts = np.asarray(posterior_predict(spec, kf, vf, test.X, test.mask).exact, np.float64)
    un, dn = (np.asarray(a, np.float64) for a in _per_draw_pred_terms(spec, kf, vf, test.X,
                                                                      test.mask))
    infl = (un - y_nuts * dn) / dn.mean(axis=0)  # linearised ratio estimator, per draw
    se_nuts = arviz_adapter.mcse_mean(infl.reshape(res.k.shape[0], res.k.shape[1], -1))
    z = (y_nuts - y_is) / np.hypot(se_is, se_nuts)
    assert np.all(np.abs(z) < 4), z


def test_tiny_run_diagnostics_and_fallback(tiny):
    res = tiny["res"]
    assert res.chain_method == "vectorized"  # parallel needs 4 host devices; never the only path
    assert res.r_hat_max < 1.05 and res.divergences == 0
    assert res.ess_bulk_min > 400 and res.ess_tail_min > 200
    assert res.grad_evals > res.grad_evals_warmup > 0 and 0 < res.ess_per_grad < 1


# ------------------------------------------------------------------------------------------
# 2. an alpha ladder at D = 20 (nested data; one compiled sampler)
# ------------------------------------------------------------------------------------------
ALPHAS = (1, 2, 4, 8)
LADDER = SamplerOptions(chains=2, warmup=200, draws=300)


def _unit_teacher(key, D):
    """``|k*|^2 = |v*|^2 = D`` and ``k* . v* = 0``: the teacher fields then have exactly the
    population law at any ``D``, so the oracle error estimates the population Bayes risk."""
    k, v = jax.random.normal(key, (2, D))
    v = v - (v @ k) / (k @ k) * k
    return Teacher(k * jnp.sqrt(D / (k @ k)), v * jnp.sqrt(D / (v @ v)))


@pytest.fixture(scope="module")
def ladder():
    D = 20
    task = make_task("spiked", L=3, nu=2.0, delta=0.01, D=D)
    k0, k1, k2 = jax.random.split(jax.random.key(11), 3)
    teacher = _unit_teacher(k0, D)
    train = sample_data(k1, task, teacher, max(ALPHAS) * D)
    test = sample_data(k2, task, teacher, 4000)
    spec = model_spec(task)
    start = init_params(None, "teacher", LADDER.chains, D, teacher)
    runs = {}
    for j, a in enumerate(ALPHAS):
        w = (jnp.arange(train.n) < a * D).astype(jnp.float32)
        res = run_nuts(jax.random.key(100 + j), spec, train, LADDER, start=start,
                               init="teacher", weights=w)
        kf, vf = res.flat()
        pred = posterior_predict(spec, kf, vf, test.X, test.mask)
        runs[a] = (res, excess_errors(task, teacher, test, pred.exact),
                   excess_errors(task, teacher, test, pred.plain),
                   posterior_overlaps(teacher, kf.mean(0), vf.mean(0)))
    return task, runs


@pytest.mark.slow
def test_oracle_error_estimates_the_population_bayes_risk(ladder):
    task, runs = ladder
    pop = bayes_risk(task, samples=50_000, seed=0)
    err = runs[ALPHAS[0]][1]
    assert abs(err.oracle_error - pop.excess_risk) < 4 * np.hypot(err.oracle_error_stderr,
                                                                  pop.stderr)


@pytest.mark.slow
def test_test_error_decreases_with_alpha_towards_the_bayes_risk(ladder):
    _, runs = ladder
    errs = [runs[a][1] for a in ALPHAS]
    gaps = [e.excess_over_oracle for e in errs]
    for a, b in zip(errs, errs[1:], strict=False):
        assert a.test_error > b.test_error, [e.test_error for e in errs]
    for g_prev, g in zip(gaps, gaps[1:], strict=False):
        assert g < g_prev, gaps
    assert all(e.test_error >= e.oracle_error for e in errs)
    # the distance to the Bayes risk shrinks at least like 1/alpha from alpha = 1 to 8
    assert gaps[-1] < gaps[0] * ALPHAS[0] / ALPHAS[-1] * 2, gaps


@pytest.mark.slow
def test_exact_predictor_no_worse_than_plain_average(ladder):
    _, runs = ladder
    for a in ALPHAS:
        exact, plain = runs[a][1], runs[a][2]
        # same test set: compare the paired difference with its own scale
        assert exact.test_error <= plain.test_error + 4 * exact.excess_over_oracle_stderr


@pytest.mark.slow
def test_teacher_started_chains_converge_at_alpha_ge_2(ladder):
    _, runs = ladder
    for a in ALPHAS:
        res = runs[a][0]
        assert res.divergences <= 0.01 * res.k.shape[0] * res.k.shape[1]
        if a >= 2:
            assert res.r_hat_max < 1.05, (a, res.r_hat_max)


# ------------------------------------------------------------------------------------------
# 3. the CLI verb (same shapes as the ladder: no new compilation)
# ------------------------------------------------------------------------------------------
def _cli(argv, capsys):
    return run_cli(argv, capsys)


BASE = ["sample", "--variant", "spiked", "--L", "3", "--nu", "2", "--delta", "0.01", "--D", "20",
        "--alpha", "8", "--seed", "0", "--chains", "2", "--warmup", "200", "--draws", "300",
        "--n-test", "4000"]


@pytest.fixture(scope="module")
def cli_both(tmp_path_factory, ladder):
    """One ``bayesslr sample --init teacher,random --json`` run, shared by the tests below."""
    path = tmp_path_factory.mktemp("idata") / "post.nc"
    out, err = io.StringIO(), io.StringIO()
    with pytest.raises(SystemExit) as ex, redirect_stdout(out), redirect_stderr(err):
        main(BASE + ["--init", "teacher,random", "--save-idata", str(path), "--json"])
    assert ex.value.code == 0, err.getvalue()
    return json.loads(out.getvalue()), path


@pytest.mark.slow
def test_cli_json_contract_with_both_starts(cli_both):
    res, path = cli_both
    for key in ("test_error", "oracle_error", "r_hat_max", "ess_bulk_min", "ess_tail_min",
                "divergences", "nishimori_gap", "grad_evals", "runtime_s", "ess_per_grad",
                "disagreement", "random_test_error", "random_r_hat_max", "r_hat_max_pooled",
                "log_lik_gap", "stderr", "excess_over_oracle", "test_error_plain"):
        assert key in res, key
    assert res["init"] == "teacher" and res["chain_method_used"] == "vectorized"
    assert res["adapt_used"] == "grad,stan"  # adapt="auto": grad from the teacher only
    assert res["N"] == 160 and res["n_test"] == 4000 and res["tempered"] is False
    assert res["test_error"] >= res["oracle_error"] > 0 and res["disagreement"] >= 0
    assert res["r_hat_max"] < 1.05
    assert res["excess_over_oracle"] == pytest.approx(res["test_error"] - res["oracle_error"],
                                                      abs=1e-6)
    back = arviz_adapter.read_netcdf(path)
    assert back.posterior["k"].shape == (2, 300, 20)
    assert json.loads(back.posterior.attrs["cell"])["method"] == "bayes_sampling"


@pytest.mark.parametrize("extra,needle", [
    (["--delta", "0"], "delta=0"),
    (["--variant", "max", "--nu", "inf"], "nu=inf"),
    (["--init", "warm"], "init="),
    (["--chain-method", "threads"], "chain_method="),
])
def test_cli_refusals_exit_2_with_one_line(capsys, extra, needle):
    code, out, err = _cli(BASE + extra, capsys)
    assert code == 2 and out == ""
    assert needle in err and len(err.strip().splitlines()) == 1


@pytest.mark.slow
def test_bayes_error_below_softmax_and_linear_erm_on_the_same_data(cli_both):
    """Same seed, hence same teacher, training and test data (docs/estimators.md protocol)."""
    from bayesslr.registry import Cell, run_cell

    bayes, _ = cli_both
    for method in ("erm:softmax", "erm:linear"):
        erm = run_cell(Cell(method=method, variant="spiked", L="3", nu=2.0, delta=0.01,
                            alpha=8.0, D=20, lam=0.1, seed=0, options={"n_test": 4000}))
        assert bayes["test_error"] + 4 * bayes["stderr"] < erm["test_error"], method


@pytest.mark.slow
def test_anneal_start_through_the_registry(ladder):
    """``init="anneal"``: a rung on half the data, then the full data, one compiled sampler."""
    from bayesslr.registry import Cell, run_cell

    res = run_cell(Cell(method="bayes_sampling", variant="spiked", L="3", nu=2.0, delta=0.01,
                        alpha=8.0, D=20, seed=0,
                        options={"chains": 2, "warmup": 200, "draws": 300, "n_test": 4000,
                                 "init": "anneal", "anneal_fractions": "0.5"}))
    assert res["init"] == "anneal" and res["chain_method_used"] == "vectorized"
    for key in ("test_error", "r_hat_max", "ess_bulk_min", "nishimori_gap", "mean_log_lik"):
        assert np.isfinite(res[key]), key


def test_reason_prints_a_failing_value_apart_from_its_threshold():
    """The reference's one flagged NUTS cell read "r_hat_max 1.01 > 1.01": the reason now
    prints the digits that tell the value from the threshold."""
    from bayesslr.bayes.method import verdict

    ok, why = verdict({"r_hat_max": 1.0103, "ess_bulk_min": 399.6, "ess_tail_min": 900.0,
                       "divergences": 0, "r_hat_max_pooled": 1.01004}, chains=4)
    assert not ok
    assert "r_hat_max 1.0103 > 1.01" in why and "ess_bulk_min 399.6 < 400" in why
    assert "pooled r_hat 1.01004 > 1.01" in why
    assert verdict({"r_hat_max": 1.0042, "ess_bulk_min": 1000.0, "ess_tail_min": 900.0},
                   chains=4) == (True, "converged")
