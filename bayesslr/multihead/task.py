"""Multi-head SLR: the task, its JAX sampler, H-head attention and the Bayes predictor
(docs/multihead.md).

Conventions fixed here (docs/multihead.md §1, each stated once):

* teacher: ``F`` key directions ``K*`` (rows ``k*_f``) and ``F`` value directions ``V*``
  (rows ``v*_f``), each of squared norm ``D``; ``teacher="orthonormal"`` (default) makes the
  ``2F`` rows of ``[K*; V*]`` exactly orthogonal (a uniformly random orthonormal frame scaled by
  ``sqrt(D)``, needs ``D >= 2F``); ``teacher="gaussian"`` draws every row ``N(0, I_D)``
  independently, as the one-head task draws ``k*, v*``;
* per sample: location ``eps* ~ U{1..L}``, latent ``theta`` in ``R^F`` (``"discrete"``:
  ``theta = e_{f*}``, ``f* ~ U{1..F}``; ``"gaussian"``: ``theta ~ N(0, I_F / F)``), tokens
  ``N(0, I_D)`` with ``x_{eps*} += sqrt(nu / D) K*^T theta``;
* label ``y = theta . z*_{eps*} + sqrt(Delta) xi`` with ``z*_l = V* x_l / sqrt(D)`` in ``R^F``
  (discrete: ``y = x_{eps*} . v*_{f*} / sqrt(D) + sqrt(Delta) xi``);
* at ``F = 1``, ``theta="discrete"``, ``teacher="gaussian"`` the sampler *is*
  :func:`bayesslr.sample_task` of the spiked task: the same key gives the same teacher, tokens,
  locations and labels (the random streams are split the same way; tested).
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from functools import partial
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from bayesslr.core.jaxconfig import Array, PRNGKey
from bayesslr.core.task import ConfigError, check_int, check_real, sample_count

# The public names, re-exported by :mod:`bayesslr.multihead` (one list, used there too).
__all__ = [
    "SIGMAS",
    "BayesRiskMC",
    "MultiheadData",
    "MultiheadTask",
    "MultiheadTeacher",
    "PopulationRiskMC",
    "attention_predict",
    "attention_weights",
    "bayes_predict",
    "bayes_risk_mc",
    "posterior",
    "sample_multihead",
    "teacher_heads_risk_mc",
]

THETA_LAWS: tuple[str, ...] = ("discrete", "gaussian")
TEACHERS: tuple[str, ...] = ("orthonormal", "gaussian")
SIGMAS: tuple[str, ...] = ("softmax", "softmax1", "bayes_softmax")


def check_choice(name: str, value: Any, allowed: tuple[str, ...]) -> str:
    """``value`` if it is one of ``allowed``, else a one-line :class:`ConfigError` naming
    ``name`` and the allowed values (the multihead modules' one check of a choice)."""
    if not isinstance(value, str) or value not in allowed:
        raise ConfigError(f"{name}={value!r} is unknown; allowed: one of {', '.join(allowed)}")
    return value


# --------------------------------------------------------------------------------------------
# task
# --------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class MultiheadTask:
    """A validated multi-head SLR task (docs/multihead.md §1).

    Construction validates every field (a bad one raises a one-line
    :class:`bayesslr.ConfigError` naming it and its allowed range) and stores it normalised
    (ints as ``int``, reals as ``float``).

    Attributes
    ----------
    variant : {"multihead"}
        The model's name (the one-head variants are ``"spiked"`` and ``"max"``).
    L : int
        Sequence length, ``>= 1`` (fixed; no length law yet).
    F : int
        Number of hidden directions, ``>= 1``.
    nu : float
        Signal strength, finite and ``>= 0``.
    delta : float
        Label-noise variance ``Delta >= 0``.
    D : int
        Token dimension, ``>= 1`` (``>= 2F`` for the orthonormal teacher).
    theta : {"discrete", "gaussian"}
        Law of the per-sample latent: one active direction ``e_{f*}``, or ``N(0, I_F / F)``.
    teacher : {"orthonormal", "gaussian"}
        How ``(K*, V*)`` is drawn (module docstring; docs/multihead.md §1).

    Examples
    --------
    >>> from bayesslr.multihead import MultiheadTask
    >>> task = MultiheadTask(L=3, F=2, nu="4", D=20)
    >>> task.variant, task.L, task.F, task.nu, task.theta, task.teacher
    ('multihead', 3, 2, 4.0, 'discrete', 'orthonormal')
    >>> try:
    ...     MultiheadTask(F=0)
    ... except ValueError as exc:
    ...     print(exc)
    F=0 is out of range; allowed: integer >= 1
    """

    variant: str = "multihead"
    L: int = 3
    F: int = 2
    nu: float = 2.0
    delta: float = 0.0
    D: int = 100
    theta: str = "discrete"
    teacher: str = "orthonormal"

    def __post_init__(self) -> None:
        check_choice("variant", self.variant, ("multihead",))
        L = check_int("L", self.L, low=1)
        F = check_int("F", self.F, low=1)
        nu = check_real("nu", self.nu, low=0.0)
        delta = check_real("delta", self.delta, low=0.0)
        D = check_int("D", self.D, low=1)
        theta = check_choice("theta", self.theta, THETA_LAWS)
        teacher = check_choice("teacher", self.teacher, TEACHERS)
        if teacher == "orthonormal" and D < 2 * F:
            raise ConfigError(f"D={D} is out of range; allowed: integer >= 2F = {2 * F} "
                              "(teacher='orthonormal' needs 2F orthogonal directions)")
        for name, value in (("L", L), ("F", F), ("nu", nu), ("delta", delta), ("D", D)):
            object.__setattr__(self, name, value)
        object.__setattr__(self, "theta", theta)
        object.__setattr__(self, "teacher", teacher)

    def to_dict(self) -> dict[str, Any]:
        """Flat JSON-friendly dict of the fields (what a dataset would record)."""
        return asdict(self)


# --------------------------------------------------------------------------------------------
# sampler
# --------------------------------------------------------------------------------------------
class MultiheadTeacher(NamedTuple):
    """Teacher directions (docs/multihead.md §1).

    Attributes
    ----------
    K : Array, shape (F, D)
        Key directions ``k*_f`` (rows).
    V : Array, shape (F, D)
        Value directions ``v*_f`` (rows).

    Examples
    --------
    >>> import jax
    >>> from bayesslr.multihead import MultiheadTask, sample_multihead
    >>> teacher, _ = sample_multihead(jax.random.key(0), MultiheadTask(F=2, D=8), 1)
    >>> teacher.K.shape, teacher.V.shape
    ((2, 8), (2, 8))
    """

    K: Array
    V: Array


class MultiheadData(NamedTuple):
    """A batch of multi-head SLR samples.

    Attributes
    ----------
    X : Array, shape (n, L, D)
        Tokens.
    y : Array, shape (n,)
        Labels.
    eps : Array, shape (n,)
        Hidden location (0-based).
    f : Array, shape (n,)
        Active direction (0-based) for ``theta="discrete"``; -1 for ``"gaussian"``.
    theta : Array, shape (n, F)
        The latent (``e_f`` for discrete).

    Examples
    --------
    >>> import jax
    >>> from bayesslr.multihead import MultiheadTask, sample_multihead
    >>> _, data = sample_multihead(jax.random.key(0), MultiheadTask(L=3, F=2, D=8), 5)
    >>> data.X.shape, data.y.shape, data.theta.shape
    ((5, 3, 8), (5,), (5, 2))
    """

    X: Array
    y: Array
    eps: Array
    f: Array
    theta: Array

    n = property(sample_count, doc="Number of samples (the length of ``y``).")


@partial(jax.jit, static_argnames=("task",))
def sample_teacher(key: PRNGKey, task: MultiheadTask) -> MultiheadTeacher:
    """Draw ``(K*, V*)`` (docs/multihead.md §1.1).

    Every row is first drawn ``N(0, I_D)`` (keys split as :func:`bayesslr.core.task.
    sample_teacher` splits them, so at ``F = 1`` the gaussian teacher is its ``(k*, v*)``);
    ``teacher="orthonormal"`` then replaces the ``2F`` rows by their Gram-Schmidt
    orthonormalisation (QR with a positive diagonal, a uniformly random orthonormal frame)
    times ``sqrt(D)``.
    """
    kk, kv = jax.random.split(key)
    K = jax.random.normal(kk, (task.F, task.D))
    V = jax.random.normal(kv, (task.F, task.D))
    if task.teacher == "orthonormal":
        Q, R = jnp.linalg.qr(jnp.concatenate([K, V]).T)          # (D, 2F)
        Q = Q * jnp.where(jnp.diag(R) < 0, -1.0, 1.0)[None, :]
        W = math.sqrt(task.D) * Q.T
        K, V = W[:task.F], W[task.F:]
    return MultiheadTeacher(K, V)


def sample_data(key: PRNGKey, task: MultiheadTask, teacher: MultiheadTeacher,
                n: Any) -> MultiheadData:
    """Draw ``n`` samples ``(X, y, eps*, f*, theta)`` given the teacher (docs/multihead.md §1.2).

    The key is split into ``(latent, tokens, location, noise)`` exactly as the one-head sampler
    splits it into ``(length, tokens, location, noise)``; the one-head length key (unused at
    fixed ``L``) draws the latent here, so at ``F = 1`` (where ``theta = 1``) every other draw
    coincides with :func:`bayesslr.core.task.sample_data`.
    """
    return draw_data(key, task, teacher, check_int("n", n, low=1))


@partial(jax.jit, static_argnames=("task", "n"))
def draw_data(key: PRNGKey, task: MultiheadTask, teacher: MultiheadTeacher,
              n: int) -> MultiheadData:
    """:func:`sample_data` without its checks (jitted; for callers that have checked)."""
    kt, kx, ke, kn = jax.random.split(key, 4)
    L, F, D = task.L, task.F, task.D
    if task.theta == "discrete":
        uf = jax.random.uniform(kt, (n,))
        f = jnp.minimum(jnp.floor(uf * F).astype(jnp.int32), F - 1)
        theta = jax.nn.one_hot(f, F)
    else:
        f = jnp.full((n,), -1, jnp.int32)
        theta = jax.random.normal(kt, (n, F)) / math.sqrt(F)
    X = jax.random.normal(kx, (n, L, D))
    lengths = jnp.full((n,), L, dtype=jnp.int32)
    u = jax.random.uniform(ke, (n,))
    eps = jnp.minimum(jnp.floor(u * lengths).astype(jnp.int32), lengths - 1)
    spike = jnp.sqrt(task.nu / D) * (theta @ teacher.K)          # (n, D)
    X = X + jax.nn.one_hot(eps, L)[:, :, None] * spike[:, None, :]
    z_star = jnp.einsum("nld,fd->nlf", X, teacher.V) / jnp.sqrt(D)
    z_eps = jnp.take_along_axis(z_star, eps[:, None, None], axis=1)[:, 0, :]
    y = jnp.sum(z_eps * theta, axis=-1) if F > 1 else z_eps[:, 0] * theta[:, 0]
    y = y + jnp.sqrt(task.delta) * jax.random.normal(kn, (n,))
    return MultiheadData(X, y, eps, f, theta)


def sample_multihead(key: PRNGKey, task: MultiheadTask,
                     n: Any) -> tuple[MultiheadTeacher, MultiheadData]:
    """Teacher and ``n`` samples from one key (docs/multihead.md §1).

    ``key`` is split into three, as :func:`bayesslr.sample_task` splits it into
    ``(teacher, train, test)``: the teacher comes from the first, the data from the second.

    Parameters
    ----------
    key : PRNGKey
        A JAX key.
    task : MultiheadTask
        The task.
    n : int
        Number of samples, ``>= 1``.

    Returns
    -------
    (MultiheadTeacher, MultiheadData)

    Examples
    --------
    >>> import jax
    >>> from bayesslr.multihead import MultiheadTask, sample_multihead
    >>> task = MultiheadTask(L=3, F=2, nu=4.0, D=16)
    >>> teacher, data = sample_multihead(jax.random.key(0), task, 4)
    >>> data.X.shape, [int(v) for v in data.f]
    ((4, 3, 16), [1, 0, 0, 0])
    >>> G = teacher.K @ teacher.V.T / task.D      # orthonormal teacher: K* and V* orthogonal
    >>> bool(abs(G).max() < 1e-5)
    True
    """
    kt, kd, _ = jax.random.split(key, 3)
    teacher = sample_teacher(kt, task)
    return teacher, sample_data(kd, task, teacher, n)


# --------------------------------------------------------------------------------------------
# H-head attention
# --------------------------------------------------------------------------------------------
def head_fields(X: Array, W: Array, name: str) -> Array:
    """``x_l . w_h / sqrt(D)``, shape (..., L, H)."""
    return jnp.einsum("...ld,hd->...lh", X, W) / math.sqrt(X.shape[-1])


def attention_weights(X: Array, K: Array, sigma: str, bias: Array | None = None) -> Array:
    """Attention weights ``sigma_{l,h}`` of an H-head student (docs/multihead.md §2).

    Scores ``s_{l,h} = x_l . k_h / sqrt(D) + b_h``; then

    * ``softmax``: ``exp(s_{l,h}) / sum_l' exp(s_{l',h})`` (each head's weights sum to 1);
    * ``softmax1``: ``exp(s_{l,h}) / (1 + sum_l' exp(s_{l',h}))`` (each head may attend to
      nothing);
    * ``bayes_softmax``: ``exp(s_{l,h}) / sum_{l',h'} exp(s_{l',h'})`` (one normalisation
      shared by all heads: all weights together sum to 1).

    Parameters
    ----------
    X : Array, shape (..., L, D)
        Tokens.
    K : Array, shape (H, D)
        Key vector of each head.
    sigma : {"softmax", "softmax1", "bayes_softmax"}
        The attention.
    bias : Array, shape (H,), optional
        Per-head score offset ``b_h`` (default 0).

    Returns
    -------
    Array, shape (..., L, H)

    Examples
    --------
    >>> import jax.numpy as jnp
    >>> from bayesslr.multihead import attention_weights
    >>> X = jnp.eye(2)[None]                       # L = 2 tokens in D = 2
    >>> K = jnp.zeros((3, 2))                      # H = 3 heads, all scores 0
    >>> [round(float(attention_weights(X, K, s).sum()), 3) for s in
    ...  ("softmax", "softmax1", "bayes_softmax")]
    [3.0, 2.0, 1.0]
    """
    sigma = check_choice("sigma", sigma, SIGMAS)
    X, K = jnp.asarray(X), jnp.asarray(K)
    _check_heads(X, K, "K")
    return _weights(X, K, _check_bias(bias, K.shape[0]), sigma)


def _check_heads(X: Array, W: Array, name: str) -> None:
    if W.ndim != 2 or W.shape[-1] != X.shape[-1]:
        raise ConfigError(f"{name} has shape {tuple(W.shape)}; allowed: (H, {X.shape[-1]}), "
                          "one row per head")


def _check_bias(bias: Array | None, H: int) -> Array:
    if bias is None:
        return jnp.zeros((H,))
    bias = jnp.asarray(bias)
    if bias.shape != (H,):
        raise ConfigError(f"bias has shape {tuple(bias.shape)}; allowed: ({H},), one offset "
                          "per head")
    return bias


def normalise_weights(r: Array, bias: Array, sigma: str) -> Array:
    """Weights from raw scores ``r`` (..., L, H) and per-head offsets ``bias`` (H,), the scores
    being ``s = r + bias`` (docs/multihead.md §2).

    ``softmax1`` never forms ``r + bias``: an ERM fit can send ``b_h`` to the thousands (the
    sink switched off, the head a plain softmax), where float32 keeps ``r + b_h`` to about
    ``|b_h| 6e-8`` only, and the solver stalls on that round-off (docs/multihead.md §6.1).
    With ``M = max_l r_l`` (its gradient stopped, as in ``jax.nn.softmax``) the weights are
    ``exp(r_l - M - log(exp(-b - M) + sum_l' exp(r_l' - M)))``, every term of order one."""
    if sigma == "softmax1":
        top = jax.lax.stop_gradient(jnp.max(r, axis=-2, keepdims=True))
        rel = r - top
        log_norm = jnp.logaddexp(-(bias + top), jax.nn.logsumexp(rel, axis=-2, keepdims=True))
        return jnp.exp(rel - log_norm)
    s = r + bias  # softmax and bayes_softmax: a score of -inf drops its weight
    if sigma == "softmax":
        return jax.nn.softmax(s, axis=-2)
    flat = s.reshape(*s.shape[:-2], -1)
    return jax.nn.softmax(flat, axis=-1).reshape(s.shape)


@partial(jax.jit, static_argnames=("sigma",))
def _weights(X: Array, K: Array, bias: Array, sigma: str) -> Array:
    return normalise_weights(head_fields(X, K, "K"), bias, sigma)


@partial(jax.jit, static_argnames=("sigma",))
def student_predict(X: Array, K: Array, V: Array, bias: Array, sigma: str) -> Array:
    """:func:`attention_predict` without its checks (jitted; ``bias`` given)."""
    w = normalise_weights(head_fields(X, K, "K"), bias, sigma)
    return jnp.sum(w * head_fields(X, V, "V"), axis=(-2, -1))


def attention_predict(X: Array, K: Array, V: Array, sigma: str,
                      bias: Array | None = None) -> Array:
    """Prediction ``sum_h sum_l sigma_{l,h}(X K) (x_l . v_h) / sqrt(D)`` of an H-head student
    (docs/multihead.md §2).

    Parameters
    ----------
    X : Array, shape (..., L, D)
        Tokens.
    K, V : Array, shape (H, D)
        Key and value vector of each head.
    sigma : {"softmax", "softmax1", "bayes_softmax"}
        The attention (:func:`attention_weights`).
    bias : Array, shape (H,), optional
        Per-head score offset.

    Returns
    -------
    Array, shape (...)

    Examples
    --------
    With the teacher's directions as heads, ``sqrt(nu) K*`` as keys and the offsets
    ``-nu |k*_h|^2 / (2D)``, ``bayes_softmax`` is the Bayes predictor (docs/multihead.md §3):

    >>> import jax, jax.numpy as jnp, math
    >>> from bayesslr.multihead import (MultiheadTask, attention_predict, bayes_predict,
    ...                                 sample_multihead)
    >>> task = MultiheadTask(L=3, F=2, nu=4.0, D=16, teacher="gaussian")
    >>> teacher, data = sample_multihead(jax.random.key(1), task, 64)
    >>> b = -task.nu * jnp.sum(teacher.K ** 2, axis=1) / (2 * task.D)
    >>> y_att = attention_predict(data.X, math.sqrt(task.nu) * teacher.K, teacher.V,
    ...                           "bayes_softmax", bias=b)
    >>> bool(jnp.allclose(y_att, bayes_predict(task, teacher, data.X), atol=1e-5))
    True
    """
    sigma = check_choice("sigma", sigma, SIGMAS)
    X, K, V = jnp.asarray(X), jnp.asarray(K), jnp.asarray(V)
    _check_heads(X, K, "K")
    if V.shape != K.shape:
        raise ConfigError(f"V has shape {tuple(V.shape)}; allowed: {tuple(K.shape)}, "
                          "the shape of K")
    return student_predict(X, K, V, _check_bias(bias, K.shape[0]), sigma)


# --------------------------------------------------------------------------------------------
# Bayes predictor with the teacher known
# --------------------------------------------------------------------------------------------
def _posterior_fields(task: MultiheadTask, chi: Array, G: Array) -> tuple[Array, Array]:
    """``(P_l, M_l)`` from the teacher scores ``chi`` (..., L, F) and the Gram matrix
    ``G = K* K*^T / D`` (docs/multihead.md §3.1-3.2)."""
    nu = task.nu
    if task.theta == "discrete":
        a = math.sqrt(nu) * chi - 0.5 * nu * jnp.diagonal(G)
        P = jax.nn.softmax(jax.scipy.special.logsumexp(a, axis=-1), axis=-1)
        M = jax.nn.softmax(a, axis=-1)
        return P, M
    A = task.F * jnp.eye(task.F, dtype=chi.dtype) + nu * G
    M = math.sqrt(nu) * jnp.linalg.solve(A, jnp.moveaxis(chi, -1, 0).reshape(task.F, -1))
    M = jnp.moveaxis(M.reshape(task.F, *chi.shape[:-1]), 0, -1)
    score = 0.5 * math.sqrt(nu) * jnp.sum(chi * M, axis=-1)
    return jax.nn.softmax(score, axis=-1), M


def posterior(task: MultiheadTask, teacher: MultiheadTeacher, X: Array) -> tuple[Array, Array]:
    """Posterior of the hidden location and the latent given the tokens and the teacher
    (docs/multihead.md §3).

    Returns ``P`` (..., L), ``P_l = P(eps* = l | X)``, and ``M`` (..., L, F),
    ``M_l = E[theta | X, eps* = l]``. For ``theta="discrete"``,
    ``M_{l,f} = P(f* = f | X, eps* = l)`` and ``P_l M_{l,f} = P(eps* = l, f* = f | X)``
    ``∝ exp(sqrt(nu) chi*_{l,f} - nu |k*_f|^2 / (2D))``; for ``"gaussian"``,
    ``P_l ∝ exp(nu chi*_l^T A^-1 chi*_l / 2)`` and ``M_l = sqrt(nu) A^-1 chi*_l`` with
    ``A = F I + nu K* K*^T / D``.

    Examples
    --------
    >>> import jax, jax.numpy as jnp
    >>> from bayesslr.multihead import MultiheadTask, posterior, sample_multihead
    >>> task = MultiheadTask(L=4, F=3, nu=9.0, D=32)
    >>> teacher, data = sample_multihead(jax.random.key(2), task, 500)
    >>> P, M = posterior(task, teacher, data.X)
    >>> P.shape, M.shape, bool(jnp.allclose(P.sum(-1), 1.0))
    ((500, 4), (500, 4, 3), True)
    >>> joint = P[:, :, None] * M                   # P(eps*, f* | X)
    >>> hit = joint.reshape(500, -1).argmax(-1) == data.eps * 3 + data.f
    >>> bool(hit.mean() > 0.8)
    True
    """
    X, K = jnp.asarray(X), jnp.asarray(teacher.K)
    _check_heads(X, K, "teacher.K")
    return _posterior(task, K, X)


@partial(jax.jit, static_argnames=("task",))
def _posterior(task: MultiheadTask, K: Array, X: Array) -> tuple[Array, Array]:
    return _posterior_fields(task, head_fields(X, K, "K"), K @ K.T / X.shape[-1])


@partial(jax.jit, static_argnames=("task",))
def bayes_predict_kv(task: MultiheadTask, K: Array, V: Array, X: Array) -> Array:
    """:func:`bayes_predict` from the teacher's directions ``K, V`` (rows) as arrays, so that
    a sampler can evaluate it on drawn directions."""
    P, M = _posterior(task, K, X)
    return jnp.sum(P * jnp.sum(M * head_fields(X, V, "V"), axis=-1), axis=-1)


def bayes_predict(task: MultiheadTask, teacher: MultiheadTeacher, X: Array) -> Array:
    """Bayes-optimal prediction ``E[y | X]`` with the teacher known (docs/multihead.md §3).

    ``E[y | X] = sum_l P_l M_l . z*_l`` with ``z*_l = V* x_l / sqrt(D)``
    (:func:`posterior`); for ``theta="discrete"`` this is
    ``sum_{l,f} P(eps* = l, f* = f | X) z*_{l,f}``.

    Examples
    --------
    >>> import jax, jax.numpy as jnp
    >>> from bayesslr.multihead import MultiheadTask, bayes_predict, sample_multihead
    >>> task = MultiheadTask(L=3, F=2, nu=4.0, D=64)
    >>> teacher, data = sample_multihead(jax.random.key(0), task, 2000)
    >>> err = jnp.mean((data.y - bayes_predict(task, teacher, data.X)) ** 2)
    >>> bool(0.2 < err < 0.5)      # Bayes excess risk about 0.34 at L=3, F=2, nu=4
    True
    """
    X, K, V = jnp.asarray(X), jnp.asarray(teacher.K), jnp.asarray(teacher.V)
    _check_heads(X, K, "teacher.K")
    _check_heads(X, V, "teacher.V")
    return bayes_predict_kv(task, K, V, X)


def joint_posterior(task: MultiheadTask, teacher: MultiheadTeacher,
                    X: Array) -> tuple[Array, Array]:
    """The teacher-known posterior of ``(eps*, f*)`` and the teacher's value fields, both
    flattened to ``(n, L F)`` (discrete latent only): ``P[i, l F + f] = P(eps* = l, f* = f |
    X_i)`` and ``z[i, l F + f] = z*_{l,f}``. With them
    :func:`bayesslr.core.metrics.score_given` scores any predictor as the one-head suite does
    (the excess error Rao-Blackwellised over the location and the direction, and the
    teacher-known Bayes predictor ``sum P z`` on the same rows).

    Examples
    --------
    >>> import jax, jax.numpy as jnp
    >>> from bayesslr.multihead import MultiheadTask, bayes_predict, sample_multihead
    >>> from bayesslr.multihead.task import joint_posterior
    >>> task = MultiheadTask(L=3, F=2, nu=4.0, D=16)
    >>> teacher, data = sample_multihead(jax.random.key(0), task, 50)
    >>> P, z = joint_posterior(task, teacher, data.X)
    >>> P.shape, bool(jnp.allclose(jnp.sum(P * z, -1), bayes_predict(task, teacher, data.X),
    ...                            atol=1e-5))
    ((50, 6), True)
    """
    if task.theta != "discrete":
        raise ConfigError(f"theta={task.theta!r}: the joint posterior over (eps*, f*) needs "
                          "the discrete latent; allowed: theta='discrete'")
    X, K, V = jnp.asarray(X), jnp.asarray(teacher.K), jnp.asarray(teacher.V)
    _check_heads(X, K, "teacher.K")
    _check_heads(X, V, "teacher.V")
    P, M = _posterior(task, K, X)
    n = X.shape[0]
    return (P[..., None] * M).reshape(n, -1), head_fields(X, V, "V").reshape(n, -1)


# --------------------------------------------------------------------------------------------
# population (D -> inf, or any D with the orthonormal teacher) by Monte Carlo
# --------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class BayesRiskMC:
    """Monte Carlo estimate of the Bayes excess risk (docs/multihead.md §4).

    Attributes
    ----------
    excess_risk, stderr : float
        ``1 - E[sum_l P_l^2 |M_l|^2]`` (discrete: ``1 - E[sum_{l,f} P_{l,f}^2]``) and its
        standard error.
    excess_risk_direct, stderr_direct : float
        ``E[(z*_{eps*} . theta - y_hat)^2]`` averaged over the values exactly, without the
        Nishimori identity: ``1 - 2 E[P_eps* theta . M_eps*] + E[sum_l P_l^2 |M_l|^2]``.
    overlap, overlap_stderr : float
        ``E[P_eps* theta . M_eps*]`` (discrete: ``E[P(eps*, f* | X)]``).
    nishimori_gap, nishimori_gap_stderr : float
        ``overlap - E[sum_l P_l^2 |M_l|^2]`` (0 by the Nishimori identity) and its paired
        standard error.
    samples, seed : int
    """

    excess_risk: float
    stderr: float
    excess_risk_direct: float
    stderr_direct: float
    overlap: float
    overlap_stderr: float
    nishimori_gap: float
    nishimori_gap_stderr: float
    samples: int
    seed: int


@dataclass(frozen=True)
class PopulationRiskMC:
    """Population excess risk of an H = F student on the teacher's directions
    (docs/multihead.md §4), with the Bayes risk on the same Monte Carlo draws.

    Attributes
    ----------
    excess_risk, stderr : float
        Excess risk and its standard error (delta method when ``m_v`` is optimised).
    A, B : float
        ``E[sum_h sigma_{eps*,h} theta_h]`` and ``E[sum_{l,h} sigma_{l,h}^2]``.
    m_v : float
        Value scale used (``A / B`` when optimised, else 1).
    bayes_excess_risk : float
        :class:`BayesRiskMC` ``excess_risk`` on the same draws.
    gap, gap_stderr : float
        Excess risk minus the Bayes predictor's on the same draws (its direct form, no
        Nishimori identity used) and the paired standard error.
    samples, seed : int
    """

    excess_risk: float
    stderr: float
    A: float
    B: float
    m_v: float
    bayes_excess_risk: float
    gap: float
    gap_stderr: float
    samples: int
    seed: int


def _population_fields(task: MultiheadTask, samples: int, seed: int):
    """``(eps*, theta, chi*)`` of the population law: ``chi* = g + sqrt(nu) e_eps* theta^T``,
    ``g ~ N(0, I_{L x F})`` (exact at any ``D`` for the orthonormal teacher; the values
    ``z*`` are independent standard Gaussians and are integrated out)."""
    ke, kt, kg = jax.random.split(jax.random.key(seed), 3)
    L, F = task.L, task.F
    eps = jax.random.randint(ke, (samples,), 0, L)
    if task.theta == "discrete":
        theta = jax.nn.one_hot(jax.random.randint(kt, (samples,), 0, F), F,
                               dtype=jnp.float64)
    else:
        theta = jax.random.normal(kt, (samples, F), jnp.float64) / math.sqrt(F)
    g = jax.random.normal(kg, (samples, L, F), jnp.float64)
    onehot = jax.nn.one_hot(eps, L, dtype=jnp.float64)
    chi = g + math.sqrt(task.nu) * onehot[:, :, None] * theta[:, None, :]
    return onehot, theta, chi


@partial(jax.jit, static_argnames=("task", "samples", "seed"))
def _bayes_population(task: MultiheadTask, samples: int, seed: int) -> tuple[Array, Array]:
    return _bayes_terms(task, *_population_fields(task, samples, seed))


@partial(jax.jit, static_argnames=("task", "sigma", "samples", "seed"))
def _student_population(task: MultiheadTask, sigma: str, c: Array, bias: Array, samples: int,
                        seed: int) -> tuple[Array, Array, Array, Array]:
    onehot, theta, chi = _population_fields(task, samples, seed)
    ab, bb = _bayes_terms(task, onehot, theta, chi)
    w = normalise_weights(c * chi, bias, sigma)
    a = jnp.sum(onehot * jnp.sum(w * theta[:, None, :], axis=-1), axis=-1)
    b = jnp.sum(w ** 2, axis=(-2, -1))
    return a, b, ab, bb


def _bayes_terms(task: MultiheadTask, onehot: Array, theta: Array, chi: Array):
    P, M = _posterior_fields(task, chi, jnp.eye(task.F, dtype=chi.dtype))
    a = jnp.sum(onehot * P * jnp.sum(M * theta[:, None, :], axis=-1), axis=-1)
    b = jnp.sum(P ** 2 * jnp.sum(M ** 2, axis=-1), axis=-1)
    return a, b


def _mean_se(x: Array) -> tuple[float, float]:
    x = np.asarray(x, dtype=np.float64)
    return float(x.mean()), float(x.std(ddof=1) / math.sqrt(x.size))


def _check_mc(samples: Any, seed: Any) -> tuple[int, int]:
    return check_int("samples", samples, low=2), check_int("seed", seed, low=0)


def bayes_risk_mc(task: MultiheadTask, samples: Any = 200_000, seed: Any = 0) -> BayesRiskMC:
    """Bayes excess risk (teacher known, ``D -> inf``) by Monte Carlo, with its standard error
    and the Nishimori check (docs/multihead.md §4).

    Exact at any ``D`` for ``teacher="orthonormal"``; the limit ``D -> inf`` of the finite-``D``
    risk for ``teacher="gaussian"``. Float64 throughout.

    Parameters
    ----------
    task : MultiheadTask
    samples : int
        Monte Carlo draws, ``>= 2``.
    seed : int
        Seed of the draws, ``>= 0``.

    Returns
    -------
    BayesRiskMC

    Examples
    --------
    At ``F = 1`` it is the spiked one-head Bayes risk (``bayesslr.bayes_risk``, 0.0848 +- 0.001
    at ``L = 2, nu = 5``):

    >>> from bayesslr.multihead import MultiheadTask, bayes_risk_mc
    >>> r = bayes_risk_mc(MultiheadTask(L=2, F=1, nu=5.0, D=2), samples=20_000)
    >>> round(r.excess_risk, 3), round(r.stderr, 3)
    (0.085, 0.001)
    >>> abs(r.nishimori_gap) < 4 * r.nishimori_gap_stderr
    True
    """
    samples, seed = _check_mc(samples, seed)
    with jax.enable_x64(True):
        a, b = _bayes_population(task, samples, seed)
        e, se = _mean_se(1.0 - b)
        ed, sed = _mean_se(1.0 - 2.0 * a + b)
        ov, sov = _mean_se(a)
        gap, sgap = _mean_se(a - b)
    return BayesRiskMC(e, se, ed, sed, ov, sov, gap, sgap, samples, seed)


def teacher_heads_risk_mc(task: MultiheadTask, sigma: str, *, c: Any = None,
                          bias: Any = 0.0, optimal_value_scale: bool = True,
                          samples: Any = 200_000, seed: Any = 0) -> PopulationRiskMC:
    """Population excess risk of the H = F student with keys ``c k*_h``, values ``m_v v*_h``
    and score offsets ``b_h = bias`` (docs/multihead.md §4).

    ``excess = 1 - 2 m_v A + m_v^2 B`` with ``A = E[sum_h sigma_{eps*,h} theta_h]`` and
    ``B = E[sum_{l,h} sigma_{l,h}^2]``; ``m_v = A / B`` (giving ``1 - A^2 / B``) when
    ``optimal_value_scale``, else 1. The Bayes risk is computed on the same draws and the gap
    has a paired standard error.

    Parameters
    ----------
    task : MultiheadTask
    sigma : {"softmax", "softmax1", "bayes_softmax"}
    c : float, optional
        Key scale (inverse temperature); default ``sqrt(nu)``.
    bias : float
        Score offset shared by every head (the Bayes value is ``-nu / 2``; for plain softmax
        it has no effect).
    optimal_value_scale : bool
        Optimise ``m_v`` (default) or use ``m_v = 1``.
    samples, seed : int
        Monte Carlo draws (``>= 2``) and their seed (``>= 0``).

    Returns
    -------
    PopulationRiskMC

    Examples
    --------
    >>> from bayesslr.multihead import MultiheadTask, teacher_heads_risk_mc
    >>> task = MultiheadTask(L=3, F=2, nu=4.0, D=4)
    >>> r = teacher_heads_risk_mc(task, "bayes_softmax", bias=-2.0,
    ...                           optimal_value_scale=False, samples=20_000)
    >>> abs(r.gap) < 1e-12                          # the Bayes predictor itself
    True
    >>> s = teacher_heads_risk_mc(task, "softmax", samples=20_000)
    >>> bool(s.gap > 10 * s.gap_stderr)             # plain softmax: an error floor
    True
    """
    sigma = check_choice("sigma", sigma, SIGMAS)
    samples, seed = _check_mc(samples, seed)
    c = math.sqrt(task.nu) if c is None else check_real("c", c)
    bias = check_real("bias", bias)
    with jax.enable_x64(True):
        a, b, ab, bb = _student_population(task, sigma, jnp.float64(c), jnp.float64(bias),
                                           samples, seed)
        A, B = float(jnp.mean(a)), float(jnp.mean(b))
        m_v = A / B if optimal_value_scale else 1.0
        per = 1.0 - 2.0 * m_v * a + m_v ** 2 * b
        e, se = _mean_se(per)
        eb, _ = _mean_se(1.0 - bb)
        # paired with the Bayes predictor's own per-sample error (the direct form
        # 1 - 2a + b, which needs no Nishimori identity)
        gap, sgap = _mean_se(per - (1.0 - 2.0 * ab + bb))
    return PopulationRiskMC(e, se, A, B, m_v, eb, gap, sgap, samples, seed)
