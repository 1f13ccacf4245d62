"""The NUTS layer (bayesslr.bayes.nuts): NumPyro's kernel as it is, under both faces.

The faces' own draws are checked bit for bit against the code before the layer by
``benchmarks/studies/nuts_identity.py``; here: the layer's kernel is NumPyro's ``hmc`` called
with the face's settings (same keys -> identical states), and its diagnostics refuse too few
draws.
"""

from __future__ import annotations

import math

import jax
import numpy as np
import pytest
from numpyro.infer.hmc import hmc

from bayesslr.bayes import nuts
from bayesslr.bayes.model import model_spec
from bayesslr.core.task import make_task, sample_task, seed_key


@pytest.fixture(scope="module")
def tiny():
    task = make_task("spiked", L=2, nu=1.0, delta=0.5, D=3)
    _, train, _ = sample_task(seed_key(0), task, 6, 2)
    return model_spec(task), train


@pytest.mark.parametrize("algo", ["NUTS", "HMC"])
def test_kernel_is_numpyro_hmc(tiny, algo):
    """``kernel`` = ``numpyro.infer.hmc.hmc`` with the settings passed through: the same keys
    give identical positions, energies and adapted step sizes through warm-up and sampling."""
    spec, train = tiny
    args = nuts.model_args(spec, train)
    gen = nuts.potential_fn_gen("marginal", spec.variant)
    z0 = {"k": np.full(3, 0.1, np.float32), "v": np.full(3, -0.2, np.float32)}
    layer = nuts.kernel(gen, 4, algo=algo, target_accept=0.9, max_tree_depth=5,
                        trajectory_length=1.0)
    init_kernel, sample_kernel = hmc(potential_fn_gen=gen, algo=algo)
    kw = {"max_tree_depth": 5} if algo == "NUTS" else {"trajectory_length": 1.0}
    key = jax.random.key(5)
    a = jax.jit(layer.init)(key, z0, args)
    b = jax.jit(lambda key, z0, args: init_kernel(z0, 4, target_accept_prob=0.9,
                                                  model_args=args, rng_key=key, **kw))(
        key, z0, args)
    step_a = jax.jit(layer.step)
    step_b = jax.jit(lambda st, args: sample_kernel(st, model_args=args))
    for _ in range(8):  # 4 warm-up (adapting) iterations, then 4 with the adaptation frozen
        a, b = step_a(a, args), step_b(b, args)
        for x, y in ((a.z["k"], b.z["k"]), (a.z["v"], b.z["v"]),
                     (a.potential_energy, b.potential_energy),
                     (a.adapt_state.step_size, b.adapt_state.step_size)):
            assert np.array_equal(np.asarray(x), np.asarray(y))


def test_model_args_cast_and_default_weights(tiny):
    spec, train = tiny
    X, y, mask, w, nu, delta = nuts.model_args(spec, train, np.float32)
    assert X.dtype == y.dtype == w.dtype == nu.dtype == np.float32 and mask.dtype == bool
    assert np.array_equal(np.asarray(w), np.ones(y.shape)) and float(delta) == 0.5
    w2 = nuts.model_args(spec, train, weights=np.arange(6.0))[3]
    assert np.array_equal(np.asarray(w2), np.arange(6.0, dtype=np.float32))


def test_diagnostics_need_enough_draws():
    draws = np.random.default_rng(0).normal(size=(2, 6, 4))
    assert all(math.isnan(x) for x in nuts.chain_diagnostics(draws, draws, 7).values())
    assert all(math.isnan(x) for x in nuts.chain_diagnostics(draws, draws, math.inf).values())
    assert nuts.chain_diagnostics(draws, draws, 6)["r_hat_max"] > 0.0
