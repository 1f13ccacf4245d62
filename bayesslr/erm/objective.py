"""The regularised empirical risk of attention predictors, overlaps and test errors (spec 2-4).

Conventions fixed here, used by every ERM protocol of :mod:`bayesslr.erm`:

* Parameters are a dict ``{"k": (D,), "v": (D,), "theta": (P,)}``; ``theta`` holds the
  activation's own scalars (erf's offset ``c``) and is never penalised.
* The spec's objective (section 4) is
  ``S = sum_mu 1/2 (y_mu - f(X_mu))^2 + lam_k/2 |k|^2 + lam_v/2 |v|^2``. Solvers minimise the
  per-sample objective ``F = S / N`` (same minimiser, values of order one).
* The gradient test of convergence is on ``|grad S| / sqrt(D) = N |grad F| / sqrt(D)``, the
  root-mean-square gradient component of ``S``: it is of order one far from a minimiser at any
  ``D`` and ``alpha``, so one tolerance serves every size.
* Test excess error (spec section 3): on fresh test data, ``mean_mu (z*_{eps*,mu} - f(X_mu))^2``,
  the squared distance to the noiseless target. Its expectation equals
  ``E[(y - f)^2] - Delta`` exactly (the label noise is independent of ``f``), with a smaller
  variance than subtracting ``Delta`` from the noisy test risk; the noisy ``risk`` is reported
  too. It is the finite-``D`` error of this teacher, not a population (``D -> inf``) value.
"""

from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp

from bayesslr.activations import Activation
from bayesslr.jaxconfig import Array
from bayesslr.task import Data, TaskConfig, Teacher, location_posterior

Params = dict[str, Array]

OVERLAP_NAMES: tuple[str, ...] = ("m_k", "q_k", "m_v", "q_v", "m_kv", "m_vk", "q_kv")


def fields(X: Array, k: Array, v: Array) -> tuple[Array, Array]:
    """``chi = X k / sqrt(D)`` and ``z = X v / sqrt(D)``, each ``(n, L)``, in one pass over ``X``.

    ``k`` and ``v`` are stacked so that, under ``vmap`` over many parameter vectors sharing ``X``,
    XLA sees a single contraction of ``X`` with a ``(batch, 2, D)`` block: the data matrix is
    read once for the whole batch.
    """
    h = jnp.einsum("nld,pd->nlp", X, jnp.stack([k, v])) / jnp.sqrt(X.shape[-1])
    return h[..., 0], h[..., 1]


def predict(act: Activation, params: Params, X: Array, mask: Array) -> Array:
    """``f(X) = sigma(chi) . z`` (spec section 2); ``(n,)``."""
    chi, z = fields(X, params["k"], params["v"])
    return jnp.sum(act(chi, mask, params["theta"]) * z, axis=-1)


def train_loss(act: Activation, params: Params, data: Data, weight: Array | None = None) -> Array:
    """Training loss per sample ``1/(2N) sum_mu (y_mu - f(X_mu))^2``.

    ``weight`` (``(n,)``, zeros and ones) selects the training samples when part of ``data`` is
    held out for validation; ``N`` is then ``sum(weight)``.
    """
    r = data.y - predict(act, params, data.X, data.mask)
    if weight is None:
        return 0.5 * jnp.mean(r * r)
    return 0.5 * jnp.sum(weight * r * r) / jnp.sum(weight)


def objective(act: Activation, params: Params, data: Data, lam_k: Array, lam_v: Array,
              weight: Array | None = None) -> Array:
    """Per-sample objective ``F = S / N`` with ``S`` the spec's regularised empirical risk."""
    n = data.y.shape[0] if weight is None else jnp.sum(weight)
    pen = lam_k * jnp.sum(params["k"] ** 2) + lam_v * jnp.sum(params["v"] ** 2)
    return train_loss(act, params, data, weight) + 0.5 * pen / n


def objective_batch(act: Activation, params: Params, data: Data, lam_k: Array, lam_v: Array,
                    weight: Array | None = None) -> Array:
    """:func:`objective` of ``G`` parameter vectors at once (leading axis ``G``); ``(G,)``.

    Written as one ``(N L, D) x (D, 2 G)`` matrix product rather than a ``vmap`` of
    :func:`objective`: XLA then reads ``X`` once for all members and uses a dense GEMM
    (measured about twice faster than the ``vmap``-ped form at ``G = 10``).
    """
    X = data.X
    n, L, D = X.shape
    G = params["k"].shape[0]
    W = jnp.concatenate([params["k"], params["v"]], axis=0)  # (2G, D)
    h = (X.reshape(n * L, D) @ W.T).reshape(n, L, 2 * G) / jnp.sqrt(D)
    chi = jnp.moveaxis(h[..., :G], -1, 0)  # (G, n, L)
    z = jnp.moveaxis(h[..., G:], -1, 0)
    s = jax.vmap(lambda c, th: act(c, data.mask, th))(chi, params["theta"])
    r = data.y[None, :] - jnp.sum(s * z, axis=-1)  # (G, n)
    if weight is None:
        loss, n_eff = 0.5 * jnp.mean(r * r, axis=-1), n
    else:
        n_eff = jnp.sum(weight)
        loss = 0.5 * jnp.sum(weight * r * r, axis=-1) / n_eff
    pen = lam_k * jnp.sum(params["k"] ** 2, -1) + lam_v * jnp.sum(params["v"] ** 2, -1)
    return loss + 0.5 * pen / n_eff


def grad_scale(n: int, D: int) -> float:
    """Factor turning ``|grad F|`` into the size-free ``|grad S| / sqrt(D)``."""
    return n / D**0.5


def overlaps(params: Params, teacher: Teacher) -> dict[str, Array]:
    """The seven overlaps of spec section 3, all divided by ``D``.

    ``m_k = k.k*``, ``q_k = k.k``, ``m_v = v.v*``, ``q_v = v.v``, ``m_kv = k.v*``,
    ``m_vk = v.k*``, ``q_kv = k.v``.
    """
    k, v = params["k"], params["v"]
    D = k.shape[-1]
    dot = lambda a, b: jnp.sum(a * b, axis=-1) / D  # noqa: E731
    return {"m_k": dot(k, teacher.k), "q_k": dot(k, k), "m_v": dot(v, teacher.v),
            "q_v": dot(v, v), "m_kv": dot(k, teacher.v), "m_vk": dot(v, teacher.k),
            "q_kv": dot(k, v)}


class TestErrors(NamedTuple):
    """Errors of one predictor on one fresh test set.

    Attributes
    ----------
    test_error : Array
        ``mean (z*_{eps*} - f)^2``: the test excess error (expectation ``E(y - f)^2 - Delta``).
    test_se : Array
        Its Monte Carlo standard error over the test samples.
    risk : Array
        ``mean (y - f)^2`` with the noisy labels.
    oracle_error : Array
        ``mean (z*_{eps*} - f_Bayes)^2`` of the teacher-known Bayes predictor
        ``sum_l P(eps* = l | X) z*_l`` on the same test set (spec section 3).
    gap_se : Array
        Standard error of the paired difference ``test_error - oracle_error``.
    """

    test_error: Array
    test_se: Array
    risk: Array
    oracle_error: Array
    gap_se: Array


def test_errors(act: Activation, task: TaskConfig, params: Params, teacher: Teacher,
                test: Data) -> TestErrors:
    """Test errors of ``params`` on the fresh test set ``test`` (spec sections 1 and 3)."""
    chi_s, _ = fields(test.X, teacher.k, teacher.v)
    return test_errors_given(act, params, teacher, test, location_posterior(task, chi_s,
                                                                             test.mask))


def test_errors_given(act: Activation, params: Params, teacher: Teacher, test: Data,
                      posterior: Array) -> TestErrors:
    """:func:`test_errors` with the exact location posterior ``(n, L)`` given.

    Free of the task configuration, so one compiled function serves every ``(variant, nu)``.
    """
    _, z_s = fields(test.X, teacher.k, teacher.v)
    target = jnp.take_along_axis(z_s, test.eps[:, None], axis=1)[:, 0]
    f = predict(act, params, test.X, test.mask)
    e = (target - f) ** 2
    e_bayes = (target - jnp.sum(posterior * z_s, axis=-1)) ** 2
    n = e.shape[0]
    se = lambda a: jnp.std(a, ddof=1) / jnp.sqrt(n)  # noqa: E731
    return TestErrors(jnp.mean(e), se(e), jnp.mean((test.y - f) ** 2), jnp.mean(e_bayes),
                      se(e - e_bayes))


def tree_norm(tree: Params) -> Array:
    """Euclidean norm of a parameter dict."""
    return jnp.sqrt(sum(jnp.sum(x * x) for x in jax.tree_util.tree_leaves(tree)))
