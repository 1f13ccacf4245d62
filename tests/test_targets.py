"""Named targets (issue 24): the front door's log density is the suite's NUTS model, names
round-trip, bad input is refused in one line, and draws made elsewhere are scored like the
built-in algorithms."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import bayesslr as bs
from bayesslr.bayes.model import log_lik_bruteforce
from bayesslr.bayes.nuts import potential_fn_gen
from bayesslr.core.task import ConfigError
from bayesslr.posteriors.target import parse_name, target_name

NAME = "slr_spiked_L3_nu2_delta0.01-D50_alpha2_seed1"
EPS32 = float(np.finfo(np.float32).eps)


@pytest.fixture(scope="module")
def tgt():
    return bs.target(NAME)


def _points(t):
    """Three points: the teacher, a prior draw, and a point far in the tails."""
    prior = t.init(jax.random.key(3), 2)
    return [t.teacher, {k: prior[k][0] for k in "kv"}, {k: 3.0 * prior[k][1] for k in "kv"}]


def test_log_density_equals_the_nuts_model_potential_at_three_points(tgt):
    d = tgt.data
    pot = potential_fn_gen("marginal", "spiked")(
        jnp.asarray(d["X"]), jnp.asarray(d["y"]), jnp.asarray(d["mask"]),
        jnp.ones(tgt.N, jnp.float32), jnp.asarray(2.0, jnp.float32),
        jnp.asarray(0.01, jnp.float32))
    for i, theta in enumerate(_points(tgt)):
        theta = {k: jnp.asarray(x) for k, x in theta.items()}
        ours = float(tgt.log_density(theta))
        nuts = -float(pot(theta))
        ll = np.asarray(_ll(tgt, theta), np.float64)
        k, v = (np.asarray(theta[c], np.float64) for c in "kv")
        prior = -0.5 * (k @ k + v @ v) - tgt.D * np.log(2 * np.pi)
        # float32 summation of N + 2 D terms: worst-case rounding bound (N + 2D) eps sum|terms|
        scale = (tgt.N + tgt.dim) * EPS32 * (np.abs(ll).sum() + abs(prior))
        assert abs(ours - nuts) <= scale, (i, ours, nuts)
        if i == 0:  # at the teacher, an independent float64 sum over locations by hand (it
            # underflows in the tails, where Delta = 0.01 makes every density ~0)
            exact = prior + log_lik_bruteforce(tgt.spec, theta["k"], theta["v"], d["X"],
                                               d["y"], d["mask"]).sum()
            assert abs(ours - exact) <= scale, (ours, exact)


def _ll(tgt, theta):
    from bayesslr.bayes.model import log_lik_samples

    d = tgt.data
    return log_lik_samples(tgt.spec, theta["k"], theta["v"], d["X"], d["y"], d["mask"])


def test_log_density_jits_differentiates_and_vmaps(tgt):
    pts = _points(tgt)
    batch = {k: jnp.stack([jnp.asarray(p[k]) for p in pts]) for k in "kv"}
    lp = jax.jit(tgt.log_density)
    vm = jax.vmap(tgt.log_density)(batch)
    for i, p in enumerate(pts):
        assert float(vm[i]) == pytest.approx(float(lp(p)), rel=1e-5)
    g = jax.grad(tgt.log_density)(pts[1])
    assert g["k"].shape == (tgt.D,) and np.isfinite(np.asarray(g["k"])).all()
    # the gradient is that of the value: a central difference along a random direction
    u = jax.random.normal(jax.random.key(5), (tgt.D,))
    h = 1e-2
    up = {"k": pts[1]["k"] + h * u, "v": pts[1]["v"]}
    dn = {"k": pts[1]["k"] - h * u, "v": pts[1]["v"]}
    fd = (float(tgt.log_density(up)) - float(tgt.log_density(dn))) / (2 * h)
    assert fd == pytest.approx(float(g["k"] @ u), rel=2e-2)
    # the teacher, an exact posterior draw, has far higher density than prior draws
    assert float(lp(pts[0])) > float(vm[1:].max())


def test_names_round_trip_and_list_the_stored_tasks(tgt):
    names = bs.targets()
    assert len(names) == 16 and NAME in names
    for n in names:
        assert target_name(**parse_name(n)) == n
    assert tgt.name == NAME and tgt.stored and tgt.dim == 2 * tgt.D == 100
    assert tgt.data["X"].shape == (100, 3, 50) and tgt.teacher["k"].shape == (50,)
    ref = tgt.reference
    assert ref["source"] == "nuts_long" and ref["paired"]
    assert ref["bayes_error"] == pytest.approx(0.3479, abs=5e-5)  # docs/inference.md table
    assert ref["state_evolution"] == pytest.approx(0.411, abs=1e-3)


def test_by_fields_any_setting_falls_back_to_the_state_evolution():
    t = bs.target(D=20, alpha=5, seed=7, delta=0.01, n_test=200)
    assert t.name == "slr_spiked_L3_nu2_delta0.01-D20_alpha5_seed7" and not t.stored
    assert t.reference["source"] == "state_evolution" and not t.reference["paired"]
    s = bs.score_draws(t, {k: t.teacher[k][None] for k in "kv"})
    assert not s["reference_paired"] and np.isnan(s["disagreement"])
    # unpaired: the two standard errors combined
    assert s["excess_over_reference_stderr"] == pytest.approx(
        np.hypot(s["stderr"], s["reference_error_stderr"]))


@pytest.mark.parametrize("bad,what", [
    ({"k": np.zeros(50)}, "keys 'k' and 'v'"),
    ({"k": np.zeros((4, 49)), "v": np.zeros((4, 49))}, "D=50"),
    ({"k": np.zeros(50), "v": np.zeros(50)}, "(n, D)"),
])
def test_bad_draws_are_refused_in_one_line(tgt, bad, what):
    with pytest.raises(ConfigError, match="draws") as ex:
        bs.score_draws(tgt, bad)
    assert what in str(ex.value) and "\n" not in str(ex.value)


def test_bad_names_and_settings_are_refused():
    with pytest.raises(ConfigError, match="malformed"):
        bs.target("eight_schools-eight_schools_centered")
    with pytest.raises(ConfigError, match="delta"):
        bs.target(delta=0.0, D=10)
    with pytest.raises(ConfigError, match="alpha"):
        bs.target(alpha=-1.0, D=10)


def test_score_draws_is_the_benchmarks_own_score(tgt):
    """Draws scored through the front door give the numbers the inference family computes
    from the same draws (one error measurement)."""
    from bayesslr.inference import reference as ref
    from bayesslr.inference.evaluate import score_draws_on_data as family_score
    from bayesslr.inference.evaluate import task_data

    draws = tgt.init(jax.random.key(11), 64)
    ours = bs.score_draws(tgt, draws)
    data = task_data(tgt.task, tgt.seed, tgt.N, tgt.n_test)
    look = ref.lookup(tgt.task, tgt.alpha, tgt.seed, tgt.n_test)
    theirs, y = family_score(tgt.task, tgt.spec, data, np.asarray(draws["k"]),
                             np.asarray(draws["v"]), look)
    for key in ("test_error", "excess_over_reference", "excess_over_reference_stderr"):
        assert ours[key] == theirs[key], key
    assert ours["disagreement"] == pytest.approx(float(np.mean((y - look["y_hat"]) ** 2)))
    # chains pooled: (chains, n, D) is the same draws
    pooled = bs.score_draws(tgt, {k: np.asarray(draws[k]).reshape(4, 16, -1) for k in "kv"})
    assert pooled["test_error"] == ours["test_error"]
