"""The gradient-based warm-up of ``bayesslr.bayes.warmup`` on a Gaussian with a known answer.

Target: ``N(mu, diag(s^2))`` in ``P = 12`` dimensions with scales ``s`` spread over two decades,
the kind of spread the SLR posterior has between ``k`` and ``v`` (docs/model.md §6). For a
Gaussian the estimate ``sqrt(Var z / Var dU/dz)`` equals ``s^2`` exactly, so the adapted inverse
mass matrix must match ``s^2`` up to its sampling error, and the draws must have mean ``mu`` and
variance ``s^2`` up to their Monte Carlo standard errors.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from bayesslr.bayes import arviz_adapter
from bayesslr.bayes.sampler import SamplerOptions, resolve_adapt
from bayesslr.bayes.warmup import LATE_SWITCH, run_warmup, schedule
from bayesslr.core.task import ConfigError

P, CHAINS, WARMUP, DRAWS = 12, 2, 300, 1000
SCALES = np.geomspace(0.1, 10.0, P)
MU = np.linspace(-1.0, 1.0, P)


def _potential(z):
    return 0.5 * jnp.sum(((z - MU) / SCALES) ** 2)


@pytest.fixture(scope="module")
def gaussian():
    fn = jax.jit(jax.vmap(lambda key, z0: run_warmup(_potential, z0, key, WARMUP, DRAWS,
                                              target_accept=0.8, max_tree_depth=10,
                                              axis_name="chains"),
                          axis_name="chains"))
    keys = jax.random.split(jax.random.key(0), CHAINS)
    z0 = jnp.zeros((CHAINS, P)) + 3.0  # far from mu in the small-scale coordinates
    return jax.tree.map(np.asarray, fn(keys, z0))


def test_schedule_windows():
    switch, change, first, final_start = schedule(WARMUP)
    assert final_start == WARMUP - int(0.15 * WARMUP)
    assert first == 2 and not any(change[final_start:]) and all(change[first:final_start])
    assert not any(switch[final_start - LATE_SWITCH + 1:])  # no switch too late to fill
    assert schedule(1)[3] == 0 and not any(schedule(1)[1])  # one iteration: step size only


def test_adapted_mass_matrix_is_the_gaussian_variance(gaussian):
    # pooled over chains, one mass matrix and one step size
    np.testing.assert_array_equal(gaussian.inv_mass[0], gaussian.inv_mass[1])
    assert gaussian.step_size[0] == gaussian.step_size[1] > 0
    # the final foreground window holds n >= LATE_SWITCH draws per chain (2 chains pooled):
    # log of the variance ratio has standard error about sqrt(2/n + 2/n) / 2 = 1/sqrt(n) for
    # independent draws; NUTS draws of a Gaussian are close to independent. Tolerance 4 se.
    n = CHAINS * LATE_SWITCH
    err = np.log(gaussian.inv_mass[0]) - np.log(SCALES ** 2)
    assert np.all(np.abs(err) < 4.0 / np.sqrt(n)), err


def test_draws_have_the_target_moments(gaussian):
    z = gaussian.z  # (chains, draws, P)
    se = arviz_adapter.mcse_mean(z)
    assert np.all(np.abs(z.mean(axis=(0, 1)) - MU) < 4 * se)
    # variance: E[(z - mu)^2 / s^2] = 1, standard error from the MCSE of the squared draws
    u = ((z - MU) / SCALES) ** 2
    assert np.all(np.abs(u.mean(axis=(0, 1)) - 1.0) < 4 * arviz_adapter.mcse_mean(u))
    d = arviz_adapter.diagnostics({"z": z})
    assert d["r_hat_max"] < 1.02 and d["ess_bulk_min"] > 0.5 * CHAINS * DRAWS
    assert not gaussian.diverging.any()
    # the warm-up is cheap once the scales are known: a few gradients per draw
    assert gaussian.steps.mean() < 16 and np.all(gaussian.steps_warmup > WARMUP)


def test_dense_mass_needs_the_stan_warmup():
    assert SamplerOptions(adapt="stan", mass="dense").mass == "dense"
    with pytest.raises(ConfigError, match="mass=dense"):
        SamplerOptions(mass="dense")
    with pytest.raises(ConfigError, match="adapt="):
        SamplerOptions(adapt="nutpie")


def test_auto_warmup_follows_the_start():
    """``adapt="auto"``: the gradient-based warm-up from the teacher (at equilibrium from step
    0), Stan's windowed one from every other start; an explicit choice is kept."""
    assert SamplerOptions().adapt == "auto"
    assert [resolve_adapt("auto", i) for i in ("teacher", "random", "anneal", "custom")] == [
        "grad", "stan", "stan", "stan"]
    assert resolve_adapt("grad", "random") == "grad"
    assert resolve_adapt("stan", "teacher") == "stan"
