"""The SLR task: validation, sampler statistics and the exact location posterior
(docs/model.md §1)."""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.scipy.stats import norm

from bayesslr.core.task import (
    ConfigError,
    LengthLaw,
    location_posterior,
    make_task,
    sample_data,
    sample_task,
    sample_teacher,
    teacher_fields,
)


@pytest.mark.parametrize(
    ("kwargs", "name"),
    [
        ({"nu": -1.0}, "nu"),
        ({"delta": -0.5}, "delta"),
        ({"L": 0}, "L"),
        ({"L": 2.5}, "L"),
        ({"D": 10.5}, "D"),
        ({"D": 0}, "D"),
        ({"nu": math.nan}, "nu"),
        ({"delta": math.nan}, "delta"),
        ({"nu": math.inf}, "nu"),  # spiked
        ({"nu": "inf"}, "nu"),
        ({"variant": "min"}, "variant"),
        ({"L_dist": [1, 1]}, "L_dist"),
        ({"L_dist": []}, "L_dist"),
        ({"L_dist": "0,1"}, "L_dist"),
        ({"L": True}, "L"),
    ],
)
def test_invalid_task_is_rejected_naming_the_parameter(kwargs, name):
    with pytest.raises(ConfigError) as err:
        make_task(**kwargs)
    msg = str(err.value)
    assert msg.startswith(name) and "allowed" in msg


def test_valid_tasks_and_length_laws():
    t = make_task("max", L_dist="1,2,3", nu="inf", delta=0, D=7)
    assert math.isinf(t.nu) and t.c_nu == math.inf and t.L_max == 3
    assert t.length.probs == pytest.approx((1 / 3,) * 3)
    assert make_task("spiked", L=3, nu=4).c_nu == pytest.approx(2.0)
    law = LengthLaw.parse("3:0.75,1:0.25")
    assert law.values == (1, 3) and law.probs == pytest.approx((0.25, 0.75))
    assert LengthLaw.parse(law.label()) == law
    assert LengthLaw.parse("4").is_fixed


def _se(x):
    x = np.asarray(x, dtype=float)
    return x.std(ddof=1) / math.sqrt(x.size)


@pytest.fixture(scope="module")
def spiked_batch():
    task = make_task("spiked", L=3, nu=2.0, delta=0.25, D=200)
    teacher, data, _ = sample_task(jax.random.key(1), task, 20_000)
    return task, teacher, data


def test_spiked_sampler_statistics(spiked_batch):
    task, teacher, data = spiked_batch
    chi, z = (np.asarray(a) for a in teacher_fields(task, teacher, data))
    eps = np.asarray(data.eps)
    n = eps.size
    kk = float(teacher.k @ teacher.k) / task.D  # |k*|^2 / D
    at = chi[np.arange(n), eps]
    off = chi[np.arange(3)[None, :] != eps[:, None]]
    # hidden location: N(sqrt(nu) |k*|^2/D, |k*|^2/D); elsewhere N(0, |k*|^2/D)
    assert abs(at.mean() - math.sqrt(task.nu) * kk) < 4 * math.sqrt(kk / n)
    assert abs(off.mean()) < 4 * math.sqrt(kk / off.size)
    for x in (at, off):
        assert abs(x.var(ddof=1) - kk) < 4 * kk * math.sqrt(2 / (x.size - 1))
    # eps* uniform on {0, 1, 2}
    freq = np.bincount(eps, minlength=3) / n
    assert np.all(np.abs(freq - 1 / 3) < 4 * math.sqrt((1 / 3) * (2 / 3) / n))
    # label noise: y - z*_eps ~ N(0, Delta)
    r = np.asarray(data.y) - z[np.arange(n), eps]
    assert abs(r.mean()) < 4 * math.sqrt(task.delta / n)
    assert abs(r.var(ddof=1) - task.delta) < 4 * task.delta * math.sqrt(2 / (n - 1))


@pytest.mark.parametrize("nu", [1.5, math.inf])
def test_max_sampler_location_law(nu):
    task = make_task("max", L=3, nu=nu, delta=0.0, D=100)
    teacher, data, _ = sample_task(jax.random.key(2), task, 20_000)
    chi, _ = teacher_fields(task, teacher, data)
    P = np.asarray(location_posterior(task, chi, data.mask))
    onehot = np.eye(3)[np.asarray(data.eps)]
    if math.isinf(nu):
        np.testing.assert_array_equal(np.asarray(data.eps), np.argmax(np.asarray(chi), axis=1))
    else:
        d = onehot - P  # E[1{eps=l} - softmax(nu chi*)_l] = 0
        assert np.all(np.abs(d.mean(0)) < 4 * d.std(0, ddof=1) / math.sqrt(d.shape[0]))
    # the token marginal is isotropic: every chi*_l ~ N(0, |k*|^2/D)
    kk = float(teacher.k @ teacher.k) / task.D
    c = np.asarray(chi)
    assert np.all(np.abs(c.mean(0)) < 4 * math.sqrt(kk / c.shape[0]))
    assert np.all(np.abs(c.var(0, ddof=1) - kk) < 4 * kk * math.sqrt(2 / (c.shape[0] - 1)))
    assert abs(np.asarray(data.y).var() - float(teacher.v @ teacher.v) / task.D) < 0.1


@pytest.mark.parametrize("variant", ["spiked", "max"])
def test_variable_length_padding(variant):
    task = make_task(variant, L_dist="1:0.2,2:0.3,4:0.5", nu=2.0, D=30)
    teacher, data, _ = sample_task(jax.random.key(3), task, 10_000)
    lengths = np.asarray(data.mask).sum(1)
    for L, p in zip(task.length.values, task.length.probs, strict=True):
        f = np.mean(lengths == L)
        assert abs(f - p) < 4 * math.sqrt(p * (1 - p) / lengths.size)
    assert np.all(np.asarray(data.eps) < lengths)
    X = np.asarray(data.X)
    assert np.all(X[~np.asarray(data.mask)] == 0.0)
    # every present token is used: eps* covers every position allowed by its length
    for L in task.length.values:
        sel = lengths == L
        assert set(np.unique(np.asarray(data.eps)[sel])) == set(range(L))


@pytest.mark.parametrize("variant", ["spiked", "max"])
def test_location_posterior_equals_brute_force_density(variant):
    """softmax(c_nu chi*) equals the posterior from the full Gaussian token densities."""
    with jax.enable_x64(True):
        task = make_task(variant, L=4, nu=1.7, delta=0.0, D=25)
        teacher = sample_teacher(jax.random.key(4), task)
        data = sample_data(jax.random.key(5), task, teacher, 50)
        X = data.X  # (n, L, D)
        chi, _ = teacher_fields(task, teacher, data)
        L, D = task.L_max, task.D
        base = jnp.sum(norm.logpdf(X), axis=(1, 2))  # log N(X; 0, I), all tokens
        logp = []
        for l in range(L):
            if variant == "spiked":
                # token l shifted by sqrt(nu/D) k*, all others standard
                shifted = X.at[:, l, :].add(-jnp.sqrt(task.nu / D) * teacher.k)
                logp.append(jnp.sum(norm.logpdf(shifted), axis=(1, 2)))
            else:
                # base measure reweighted by g = L exp(nu chi*_l) / sum exp(nu chi*)
                g = jnp.log(L) + task.nu * chi[:, l] - jax.nn.logsumexp(task.nu * chi, axis=1)
                logp.append(base + g)
        post = jax.nn.softmax(jnp.stack(logp, axis=1), axis=1)  # uniform prior on eps*
        ours = location_posterior(task, chi, data.mask)
        np.testing.assert_allclose(np.asarray(ours), np.asarray(post), rtol=1e-9, atol=1e-12)
