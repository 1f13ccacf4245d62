"""Models, predictor, refusals and the ArviZ adapter of ``bayesslr.bayes`` (docs/model.md §6).

No NUTS here: these are exact identities and cheap checks.
"""

from __future__ import annotations

import functools
import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from numpyro.infer.util import log_density

from bayesslr.bayes import arviz_adapter
from bayesslr.bayes.model import (
    ModelSpec,
    log_lik_bruteforce,
    log_lik_samples,
    marginal_model,
    model_spec,
)
from bayesslr.bayes.predict import posterior_overlaps, posterior_predict
from bayesslr.core.metrics import oracle_predict
from bayesslr.core.metrics import test_errors as excess_errors
from bayesslr.core.task import ConfigError, Teacher, make_task
from bayesslr.core.task import sample_task as _sample_task_eager
from bayesslr.registry import Cell, run_cell

# data in one compiled call per shape (eager generation compiles op by op)
sample_task = jax.jit(_sample_task_eager, static_argnums=(1, 2, 3))

CASES = [("spiked", "3"), ("spiked", "1,2,3"), ("max", "1,2,3")]


def _small(variant, L, D=6, n=7, delta=0.3, nu=1.5, seed=0):
    task = make_task(variant, L=L, nu=nu, delta=delta, D=D)
    teacher, data, _ = sample_task(jax.random.key(seed), task, n)
    k = 0.8 * teacher.k + 0.3 * jax.random.normal(jax.random.key(seed + 1), (D,))
    v = 1.1 * teacher.v + 0.2 * jax.random.normal(jax.random.key(seed + 2), (D,))
    return task, model_spec(task), data, k, v


@functools.cache
def _joint(variant):
    """Jitted joint log density of the marginal model (one compile per variant and shape)."""
    return jax.jit(lambda X, y, mask, w, nu, delta, k, v: log_density(
        marginal_model, (X, y, mask, w, nu, delta), {"variant": variant}, {"k": k, "v": v})[0])


def _prior_logp(k, v):
    D = k.shape[0]
    return -0.5 * (k @ k + v @ v) - D * math.log(2 * math.pi)


@pytest.mark.parametrize("variant,L", CASES)
def test_marginal_log_density_equals_bruteforce_location_sum(variant, L):
    task, spec, data, k, v = _small(variant, L)
    lp = _joint(variant)(data.X, data.y, data.mask, jnp.ones(data.n), spec.nu, spec.delta, k, v)
    brute = log_lik_bruteforce(spec, k, v, data.X, data.y, data.mask)
    np.testing.assert_allclose(log_lik_samples(spec, k, v, data.X, data.y, data.mask), brute,
                               rtol=2e-5, atol=2e-5)
    np.testing.assert_allclose(float(lp), float(brute.sum() + _prior_logp(k, v)), rtol=2e-5,
                               atol=2e-4)


def test_spiked_keeps_the_norm_term():
    """``-nu |k|^2 / (2D)`` per sample (docs/model.md §6): scaling ``k`` at zero tokens shows it."""
    task, spec, data, k, v = _small("spiked", "3")
    X0 = jnp.zeros_like(data.X)
    ll = log_lik_samples(spec, k, v, X0, data.y, data.mask)
    ll2 = log_lik_samples(spec, 2 * k, v, X0, data.y, data.mask)
    D = k.shape[0]
    np.testing.assert_allclose(ll2 - ll, -spec.nu * 3 * float(k @ k) / (2 * D), rtol=1e-5)


def test_weights_select_a_subset():
    task, spec, data, k, v = _small("spiked", "3")
    w = (jnp.arange(7) < 5).astype(jnp.float32)
    lp_w = _joint("spiked")(data.X, data.y, data.mask, w, spec.nu, spec.delta, k, v)
    lp_s = _joint("spiked")(data.X[:5], data.y[:5], data.mask[:5], jnp.ones(5), spec.nu,
                            spec.delta, k, v)
    assert float(lp_w) == pytest.approx(float(lp_s), rel=1e-5)


@pytest.mark.parametrize("variant,L", [CASES[0], CASES[2]])
def test_enumerated_model_log_density_equals_marginal(variant, L):
    pytest.importorskip("funsor", reason="funsor (optional) enumerates the discrete location")
    from numpyro.contrib.funsor import enum
    from numpyro.contrib.funsor import log_density as enum_log_density

    from bayesslr.bayes.model import enumerated_model

    task, spec, data, k, v = _small(variant, L)
    args = (data.X, data.y, data.mask, jnp.ones(data.n), spec.nu, spec.delta)
    lm = _joint(variant)(*args, k, v)
    le, _ = enum_log_density(enum(enumerated_model, first_available_dim=-2), args,
                             {"variant": variant}, {"k": k, "v": v})
    assert float(le) == pytest.approx(float(lm), rel=1e-5, abs=1e-4)


# ------------------------------------------------------------------------------------------
# refusals and tempering
# ------------------------------------------------------------------------------------------
def test_refuses_delta_zero_and_nu_inf():
    with pytest.raises(ConfigError, match=r"delta=0.*tempered"):
        model_spec(make_task("spiked", L=3, nu=2.0, delta=0.0, D=5))
    with pytest.raises(ConfigError, match=r"nu=inf.*tempered"):
        model_spec(make_task("max", L=3, nu="inf", delta=0.1, D=5))


def test_tempered_substitutes_only_the_singular_values():
    spec = model_spec(make_task("max", L=3, nu="inf", delta=0.0, D=5), tempered=True,
                      tempered_delta=0.02, tempered_nu=8.0)
    assert (spec.nu, spec.delta, spec.tempered) == (8.0, 0.02, True)
    spec = model_spec(make_task("spiked", L=3, nu=2.0, delta=0.1, D=5), tempered=True)
    assert (spec.nu, spec.delta, spec.tempered) == (2.0, 0.1, False)


@pytest.mark.parametrize("variant,nu,delta,needle", [
    ("spiked", 2.0, 0.0, "delta=0"), ("max", math.inf, 0.1, "nu=inf")])
def test_cell_refuses_before_sampling(variant, nu, delta, needle):
    cell = Cell(method="bayes_sampling", variant=variant, L="3", nu=nu, delta=delta, alpha=2.0,
                D=10, options={"draws": 10, "warmup": 10})
    with pytest.raises(ConfigError, match=needle):
        run_cell(cell)


@pytest.mark.parametrize("options,needle", [
    ({"init": "teacher,bogus"}, "init="), ({"chain_method": "pmap"}, "chain_method="),
    ({"chains": 0}, "chains="), ({"nope": 1}, "nope"), ({"anneal_fractions": "0.5,0.2"},
                                                         "anneal_fractions=")])
def test_cell_option_errors_name_the_option(options, needle):
    cell = Cell(method="bayes_sampling", alpha=2.0, D=10, delta=0.1, options=options)
    with pytest.raises(ConfigError, match=needle):
        run_cell(cell)


# ------------------------------------------------------------------------------------------
# predictor
# ------------------------------------------------------------------------------------------
def _draws(D, S, seed=3):
    kk, kv = jax.random.split(jax.random.key(seed))
    return jax.random.normal(kk, (S, D)), jax.random.normal(kv, (S, D))


def _direct_exact(spec, K, V, X, mask):
    """Unstreamed joint softmax over (draws, locations), written out with explicit loops."""
    D = X.shape[-1]
    out = []
    for i in range(X.shape[0]):
        num = den = 0.0
        for s in range(K.shape[0]):
            chi = X[i] @ K[s] / np.sqrt(D)
            z = X[i] @ V[s] / np.sqrt(D)
            m = np.asarray(mask[i])
            if spec.variant == "spiked":
                a = np.sqrt(spec.nu) * chi - spec.nu * (K[s] @ K[s]) / (2 * D)
            else:
                a = spec.nu * chi - np.log(np.sum(np.exp(spec.nu * chi[m])))
            e = np.where(m, np.exp(a), 0.0)
            num, den = num + np.sum(e * z), den + np.sum(e)
        out.append(num / den)
    return np.array(out)


@pytest.mark.parametrize("variant,L", CASES)
def test_streamed_exact_predictor_matches_direct_formula(variant, L):
    task, spec, data, _, _ = _small(variant, L)
    K, V = _draws(task.D, 23)
    X, mask = np.asarray(data.X, np.float64), data.mask
    direct = _direct_exact(spec, np.asarray(K, np.float64), np.asarray(V, np.float64), X, mask)
    for chunk in (4, 23, 64):
        pred = posterior_predict(spec, K, V, data.X, mask, chunk=chunk)
        np.testing.assert_allclose(pred.exact, direct, rtol=1e-4, atol=1e-5)
    if variant == "max":  # per-draw weights already sum to one: both forms coincide
        np.testing.assert_allclose(pred.plain, pred.exact, rtol=1e-4, atol=1e-5)


def test_single_teacher_draw_recovers_the_oracle():
    """At ``k = k*``, ``v = v*`` the per-draw prediction is the teacher-known Bayes prediction."""
    task = make_task("spiked", L=3, nu=1.5, delta=0.3, D=6)
    teacher, _, test = sample_task(jax.random.key(4), task, 7, 7)
    spec = model_spec(task)
    pred = posterior_predict(spec, teacher.k[None], teacher.v[None], test.X, test.mask)
    y_or = oracle_predict(task, teacher, test)
    np.testing.assert_allclose(pred.plain, y_or, rtol=1e-4, atol=1e-5)
    err = excess_errors(task, teacher, test, pred.plain)
    assert err.excess_over_oracle < 1e-8
    assert err.test_error == pytest.approx(err.oracle_error, abs=1e-6)


def test_rao_blackwellised_error_matches_noisy_labels():
    """``sum_l P_l (z*_l - y_hat)^2`` is ``E[(y - y_hat)^2] - Delta``: compare with raw labels."""
    task = make_task("spiked", L=3, nu=1.5, delta=0.3, D=6)
    teacher, _, test = sample_task(jax.random.key(5), task, 7, 20_000)
    y_hat = 0.5 * oracle_predict(task, teacher, test)
    err = excess_errors(task, teacher, test, y_hat)
    raw = np.asarray((test.y - y_hat) ** 2 - task.delta, np.float64)
    se = raw.std() / np.sqrt(raw.size)
    assert abs(err.test_error - raw.mean()) < 4 * np.hypot(se, err.stderr)
    assert err.test_error - err.oracle_error == pytest.approx(err.excess_over_oracle, abs=1e-6)


def test_overlaps_and_nishimori_gap():
    t = Teacher(jnp.ones(4), jnp.asarray([1.0, -1.0, 1.0, -1.0]))
    o = posterior_overlaps(t, 0.5 * np.ones(4), np.zeros(4))
    assert (o["m_k"], o["q_k"], o["m_v"], o["q_v"]) == (0.5, 0.25, 0.0, 0.0)
    assert o["nishimori_gap"] == 0.25


# ------------------------------------------------------------------------------------------
# ArviZ adapter
# ------------------------------------------------------------------------------------------
def test_arviz_diagnostics_on_iid_and_stuck_chains():
    rng = np.random.default_rng(0)
    iid = rng.standard_normal((4, 500, 3))
    d = arviz_adapter.diagnostics({"k": iid})
    assert d["r_hat_max"] < 1.02 and d["ess_bulk_min"] > 1000 and d["ess_tail_min"] > 1000
    stuck = iid + np.arange(4)[:, None, None] * 3.0  # chains in different places
    assert arviz_adapter.diagnostics({"k": stuck})["r_hat_max"] > 2.0


def test_inference_data_round_trip(tmp_path):
    from bayesslr.bayes.sampler import SampleResult, SamplerOptions

    rng = np.random.default_rng(1)
    k, v = rng.standard_normal((2, 2, 30, 5))
    res = SampleResult(k, v, rng.standard_normal((2, 30)), np.zeros((2, 30), bool),
                       np.full((2, 30), 7), np.array([0.3, 0.4]), "random", "vectorized",
                       420, 0, 1.0, 60.0, 60.0, 0, 0.1, SamplerOptions())
    idata = arviz_adapter.to_inference_data(res, attrs={"seed": 3})
    path = arviz_adapter.write_netcdf(idata, tmp_path / "sub" / "post.nc")
    back = arviz_adapter.read_netcdf(path)
    np.testing.assert_allclose(back.posterior["k"].values, k)
    assert back.sample_stats["n_steps"].values.sum() == 420
    assert int(back.posterior.attrs["seed"]) == 3


def test_model_spec_is_recorded():
    spec = ModelSpec("spiked", 2.0, 0.1)
    assert spec.to_dict() == {"variant": "spiked", "nu_model": 2.0, "delta_model": 0.1,
                              "tempered": False}
