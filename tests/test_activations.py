"""The activation registry (docs/model.md §2): formulas, masks, prediction."""

from __future__ import annotations

import jax
import numpy as np
import pytest
from scipy.special import erf, softmax

from bayesslr.core.activations import ACTIVATIONS, get_activation, predict
from bayesslr.core.task import ConfigError

RNG = np.random.default_rng(0)
CHI = RNG.normal(size=(6, 4)) * 2.0
THETA = {"erf": np.array([0.3])}


def _reference(name, chi, c=0.3):
    if name == "softmax":
        return softmax(chi, axis=-1)
    if name == "linear":
        return 1.0 + chi
    if name == "erf":
        return 1.0 + erf(c + chi)
    sp = np.log1p(np.exp(chi))
    return sp / sp.sum(-1, keepdims=True)


@pytest.mark.parametrize("name", list(ACTIVATIONS))
def test_formula_matches_independent_numpy(name):
    act = get_activation(name)
    got = np.asarray(act(CHI, None, THETA.get(name)))
    np.testing.assert_allclose(got, _reference(name, CHI), rtol=2e-6, atol=2e-6)
    if act.normalised:
        np.testing.assert_allclose(got.sum(-1), 1.0, rtol=1e-6)


@pytest.mark.parametrize("name", list(ACTIVATIONS))
def test_masked_form_equals_the_truncated_sequence(name):
    act = get_activation(name)
    lengths = np.array([1, 2, 3, 4, 2, 3])
    mask = np.arange(4)[None, :] < lengths[:, None]
    got = np.asarray(act(CHI, mask, THETA.get(name)))
    assert np.all(got[~mask] == 0.0)
    for i, L in enumerate(lengths):
        ref = _reference(name, CHI[i : i + 1, :L])[0]
        np.testing.assert_allclose(got[i, :L], ref, rtol=2e-6, atol=2e-6)


@pytest.mark.parametrize("name", list(ACTIVATIONS))
def test_predict_matches_explicit_sum(name):
    act = get_activation(name)
    D = 16
    X = RNG.normal(size=(5, 3, D))
    X[0, 2] = 0.0
    mask = np.ones((5, 3), bool)
    mask[0, 2] = False
    k, v = RNG.normal(size=D), RNG.normal(size=D)
    f = np.asarray(predict(act, X, mask, k, v, THETA.get(name)))
    for i in range(5):
        Li = int(mask[i].sum())
        chi = X[i, :Li] @ k / np.sqrt(D)
        z = X[i, :Li] @ v / np.sqrt(D)
        assert f[i] == pytest.approx(float(_reference(name, chi[None])[0] @ z), rel=1e-5, abs=1e-5)


def test_unknown_activation_names_the_choices():
    with pytest.raises(ConfigError, match="activation='relu'.*softmax"):
        get_activation("relu")


def test_activations_are_jittable_with_masks():
    act = get_activation("softplus")
    f = jax.jit(lambda c, m: act(c, m, None))
    out = np.asarray(f(CHI, CHI > -10))
    assert np.isfinite(out).all()
