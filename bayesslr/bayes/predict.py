"""Posterior-mean prediction and its test errors (spec sections 1, 3 and 6).

With posterior draws ``(k_s, v_s)``, ``s = 1..S``, and a test input ``X``:

* **exact** (the Bayes-optimal prediction; it conditions on the test tokens, which in the spiked
  case carry information on ``k``): one softmax over draws and locations jointly,
  ``y_hat(X) = sum_{s,l} exp(a_sl) z_l(v_s) / sum_{s,l} exp(a_sl)``, ``a_sl = a_l(k_s)`` on ``X``;
* **plain**: the average over draws of ``E[y | X, k_s, v_s] = sum_l softmax_l(a_l(k_s)) z_l(v_s)``
  (ignores the test tokens' evidence on ``k``; identical to *exact* for the max variant).

Both are streamed over chunks of draws with a running log-sum-exp, so memory stays flat in ``S``.

Test errors are excess errors ``E[(y - y_hat)^2] - Delta`` on fresh test inputs, Rao-Blackwellised
over the hidden location: since ``P(eps* = l | X) = softmax(c_nu chi*)_l`` exactly (section 1),
``E[(y - y_hat)^2 | X] - Delta = sum_l P_l (z*_l - y_hat)^2``. The oracle (teacher known)
predicts ``sum_l P_l z*_l`` and its excess error is ``sum_l P_l z*_l^2 - (sum_l P_l z*_l)^2``;
the excess of a predictor over the oracle is ``mean (y_hat - y_oracle)^2`` on the same test set.
"""

from __future__ import annotations

import functools
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from bayesslr.bayes.model import ModelSpec, token_log_weights
from bayesslr.jaxconfig import Array
from bayesslr.task import Data, TaskConfig, Teacher, location_posterior, teacher_fields


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


class ExcessErrors(NamedTuple):
    """Excess test errors of one predictor and of the oracle on the same test set.

    Attributes
    ----------
    test_error : float
        Excess error (risk minus Delta) of the predictor, Rao-Blackwellised over ``eps*``.
    stderr : float
        Standard error of ``test_error`` over test inputs.
    oracle_error : float
        Excess error of the teacher-known Bayes predictor.
    oracle_stderr : float
        Its standard error.
    excess_over_oracle : float
        ``mean (y_hat - y_oracle)^2`` (= ``test_error - oracle_error``).
    excess_over_oracle_stderr : float
        Its standard error.
    """

    test_error: float
    stderr: float
    oracle_error: float
    oracle_stderr: float
    excess_over_oracle: float
    excess_over_oracle_stderr: float


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
    """Exact and plain posterior-mean predictions (spec section 6), streamed over draws.

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


def oracle_predict(task: TaskConfig, teacher: Teacher, data: Data) -> tuple[Array, Array, Array]:
    """Teacher-known Bayes prediction ``sum_l P_l z*_l`` with ``P = softmax(c_nu chi*)``.

    Returns ``(y_oracle (n,), P (n, L_max), z* (n, L_max))``.
    """
    chi_s, z_s = teacher_fields(task, teacher, data)
    P = location_posterior(task, chi_s, data.mask)
    z_s = jnp.where(data.mask, z_s, 0.0)
    return jnp.sum(P * z_s, axis=-1), P, z_s


@functools.partial(jax.jit, static_argnames=("task",))
def _error_terms(task: TaskConfig, teacher: Teacher, data: Data, y_hat: Array):
    y_or, P, z_s = oracle_predict(task, teacher, data)
    y_hat = jnp.asarray(y_hat, y_or.dtype)
    err = jnp.sum(P * (z_s - y_hat[:, None]) ** 2, axis=-1)
    err_or = jnp.sum(P * (z_s - y_or[:, None]) ** 2, axis=-1)
    return err, err_or, (y_hat - y_or) ** 2


def excess_errors(task: TaskConfig, teacher: Teacher, test: Data, y_hat: Array) -> ExcessErrors:
    """Excess test error of ``y_hat`` and of the oracle on ``test`` (Rao-Blackwellised)."""
    err, err_or, gap = _error_terms(task, teacher, test, y_hat)
    n = err.shape[0]

    def ms(x):
        x = np.asarray(x, np.float64)
        return float(x.mean()), float(x.std(ddof=1) / np.sqrt(n)) if n > 1 else float("nan")

    (e, se), (eo, seo), (g, sg) = ms(err), ms(err_or), ms(gap)
    return ExcessErrors(e, se, eo, seo, g, sg)


def overlaps(teacher: Teacher, k_mean: Array, v_mean: Array) -> dict[str, float]:
    """Posterior-mean overlaps (spec section 3) and the Nishimori gap ``max |m - q|``.

    Bayes-optimality implies ``E[k_mean . k*] = E[|k_mean|^2]`` (Nishimori identity), so
    ``m_a - q_a`` fluctuates around zero at ``O(D^-1/2)``; a large gap flags a sampler that has
    not found the posterior.
    """
    D = k_mean.shape[-1]
    ks, vs = np.asarray(teacher.k, np.float64), np.asarray(teacher.v, np.float64)
    k, v = np.asarray(k_mean, np.float64), np.asarray(v_mean, np.float64)
    out = {"m_k": k @ ks / D, "q_k": k @ k / D, "m_v": v @ vs / D, "q_v": v @ v / D,
           "m_kv": k @ vs / D, "m_vk": v @ ks / D, "q_kv": k @ v / D}
    out = {n: float(x) for n, x in out.items()}
    out["nishimori_gap"] = max(abs(out["m_k"] - out["q_k"]), abs(out["m_v"] - out["q_v"]))
    return out
