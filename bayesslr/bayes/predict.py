"""Posterior-mean prediction of the sampled posterior (docs/model.md §1, §3, §6).

With posterior draws ``(k_s, v_s)``, ``s = 1..S``, and a test input ``X``:

* **exact** (the Bayes-optimal prediction; it conditions on the test tokens, which in the spiked
  case carry information on ``k``): one softmax over draws and locations jointly,
  ``y_hat(X) = sum_{s,l} exp(a_sl) z_l(v_s) / sum_{s,l} exp(a_sl)``, ``a_sl = a_l(k_s)`` on ``X``;
* **plain**: the average over draws of ``E[y | X, k_s, v_s] = sum_l softmax_l(a_l(k_s)) z_l(v_s)``
  (ignores the test tokens' evidence on ``k``; identical to *exact* for the max variant).

Both are streamed over chunks of draws with a running log-sum-exp, so memory stays flat in ``S``.

The predictions are scored by :func:`bayesslr.core.metrics.test_errors`, the suite's one error
measurement (Rao-Blackwellised excess error, the oracle on the same test set).
"""

from __future__ import annotations

import functools
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from bayesslr.bayes.model import ModelSpec, token_log_weights
from bayesslr.core.jaxconfig import Array
from bayesslr.core.task import Teacher
from bayesslr.core.task import overlaps as task_overlaps


class Predictions(NamedTuple):
    """Posterior-mean predictions on a test set.

    Attributes
    ----------
    exact : Array, shape (n,)
        Joint softmax over draws and locations (the Bayes-optimal prediction).
    plain : Array, shape (n,)
        Average over draws of the per-draw conditional mean.
    """

    exact: Array
    plain: Array


@functools.partial(jax.jit, static_argnames=("variant", "chunk"))
def _stream(variant: str, nu: Array, K: Array, V: Array, valid: Array, X: Array, mask: Array,
            chunk: int) -> tuple[Array, Array]:
    n, _, D = X.shape
    sqrt_d = jnp.sqrt(jnp.asarray(D, X.dtype))
    Kc = K.reshape(-1, chunk, D)
    Vc = V.reshape(-1, chunk, D)
    Wc = valid.reshape(-1, chunk)
    m_b = mask[:, None, :]

    def body(carry, inp):
        m, num, den, plain = carry
        k, v, ok = inp
        chi = jnp.einsum("nld,sd->nsl", X, k) / sqrt_d
        z = jnp.einsum("nld,sd->nsl", X, v) / sqrt_d
        ksq = (jnp.sum(k * k, axis=-1) / D)[None, :, None]
        a = token_log_weights(variant, nu, chi, m_b, ksq)            # (n, s, L)
        a = jnp.where(ok[None, :, None], a, -jnp.inf)
        new_m = jnp.maximum(m, jnp.max(a, axis=(1, 2)))
        scale = jnp.exp(m - new_m)
        e = jnp.exp(a - new_m[:, None, None])
        num = num * scale + jnp.sum(e * z, axis=(1, 2))
        den = den * scale + jnp.sum(e, axis=(1, 2))
        p = jax.nn.softmax(jnp.where(m_b, a, -jnp.inf), axis=-1)
        p = jnp.where(m_b & ok[None, :, None], p, 0.0)
        plain = plain + jnp.sum(p * z, axis=(1, 2))
        return (new_m, num, den, plain), None

    zeros = jnp.zeros((n,), X.dtype)
    init = (jnp.full((n,), -jnp.inf, X.dtype), zeros, zeros, zeros)
    (_, num, den, plain), _ = jax.lax.scan(body, init, (Kc, Vc, Wc))
    return num / den, plain / jnp.sum(valid)


def posterior_predict(spec: ModelSpec, k_draws: Array, v_draws: Array, X: Array, mask: Array,
                      *, chunk: int = 128) -> Predictions:
    """Exact and plain posterior-mean predictions (docs/model.md §6), streamed over draws.

    Parameters
    ----------
    spec : ModelSpec
        Likelihood whose ``a_l(k)`` weighs the draws (variant, ``nu``).
    k_draws, v_draws : Array, shape (S, D)
        Posterior draws (chains pooled).
    X, mask : Array
        Test inputs ``(n, L_max, D)`` and mask ``(n, L_max)``.
    chunk : int
        Draws per streamed block (memory ``~ n * chunk * L_max``).
    """
    K = jnp.asarray(k_draws)
    V = jnp.asarray(v_draws)
    S = K.shape[0]
    chunk = max(1, min(int(chunk), S))
    pad = (-S) % chunk
    valid = jnp.arange(S + pad) < S
    if pad:
        K = jnp.concatenate([K, jnp.zeros((pad, K.shape[1]), K.dtype)])
        V = jnp.concatenate([V, jnp.zeros((pad, V.shape[1]), V.dtype)])
    X = jnp.asarray(X, K.dtype)
    exact, plain = _stream(spec.variant, jnp.asarray(spec.nu, K.dtype), K, V, valid, X,
                           jnp.asarray(mask, bool), chunk)
    return Predictions(exact, plain)


def posterior_overlaps(teacher: Teacher, k_mean: Array, v_mean: Array) -> dict[str, float]:
    """Posterior-mean overlaps (docs/model.md §3) and the Nishimori gap ``max |m - q|``.

    Bayes-optimality implies ``E[k_mean . k*] = E[|k_mean|^2]`` (Nishimori identity), so
    ``m_a - q_a`` fluctuates around zero at ``O(D^-1/2)``; a large gap flags a sampler that has
    not found the posterior.
    """
    t = Teacher(np.asarray(teacher.k, np.float64), np.asarray(teacher.v, np.float64))
    out = {n: float(x) for n, x in task_overlaps(np.asarray(k_mean, np.float64),
                                                  np.asarray(v_mean, np.float64), t).items()}
    out["nishimori_gap"] = max(abs(out["m_k"] - out["q_k"]), abs(out["m_v"] - out["q_v"]))
    return out
