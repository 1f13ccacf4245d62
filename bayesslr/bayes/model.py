"""NumPyro models of SLR with Gaussian priors on ``k, v`` (docs/model.md §6).

Two forms of the same posterior:

* :func:`marginal_model` (the one the sampler uses): the hidden location is summed out
  analytically, ``log p(X, y | k, v) = logsumexp_l [a_l(k) + log N(y; z_l, Delta)] - log L``
  (a ``numpyro.factor``), with masks for variable ``L``;
* :func:`enumerated_model`: the location is an explicit discrete latent ``eps ~ Uniform{1..L}``
  enumerated in parallel by NumPyro's funsor backend (optional dependency), the token evidence
  ``a_eps(k)`` as a factor and ``y ~ N(z_eps, Delta)`` observed. Its log density equals the
  marginal one (tested).

``a_l(k)`` is the log-likelihood ratio of the tokens ``X`` against the Gaussian base measure
given the location ``l`` and the key ``k`` (section 6):

* spiked: ``a_l = sqrt(nu) chi_l - nu |k|^2 / (2 D)``. The second term is free of ``l`` but not
  of ``k``; summed over the data it is ``-alpha nu |k|^2 / 2`` and it stays in the model (without
  it ``|k|^2/D`` drifts far from 1 and the error rises; docs/model.md §6, measured);
* max: ``a_l = log L + nu chi_l - logsumexp_l' (nu chi_l')``; the tokens carry no information on
  ``k`` beyond the location (``log L`` is a constant that makes the two variants share one
  formula with the uniform location prior).

Every sample carries a weight ``w_i`` (1 by default) multiplying its log-likelihood: with 0/1
weights one compiled sampler serves nested data sets (annealing along ``alpha``, several
``alpha`` at one ``D``) without recompiling.

Data conventions are those of :mod:`bayesslr.core.task`: ``X`` is ``(n, L_max, D)`` padded with zero
tokens, ``mask`` ``(n, L_max)`` True where a token exists.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import numpyro
import numpyro.distributions as dist

from bayesslr.core.jaxconfig import Array
from bayesslr.core.task import ConfigError, TaskConfig, fields

LOG_2PI = math.log(2.0 * math.pi)


@dataclass(frozen=True)
class ModelSpec:
    """The likelihood the sampler targets (possibly a tempered version of the task's).

    Attributes
    ----------
    variant : {"spiked", "max"}
        SLR variant of the task.
    nu : float
        Signal strength used in the likelihood (finite).
    delta : float
        Label-noise variance used in the likelihood (``> 0``).
    tempered : bool
        True when ``nu`` or ``delta`` differ from the task's (``nu = inf`` or ``Delta = 0``
        replaced by the finite values below; docs/model.md §6).
    """

    variant: str
    nu: float
    delta: float
    tempered: bool = False

    def to_dict(self) -> dict[str, Any]:
        return {"variant": self.variant, "nu_model": self.nu, "delta_model": self.delta,
                "tempered": self.tempered}


def model_spec(task: TaskConfig, *, tempered: bool = False, tempered_delta: float = 1e-2,
               tempered_nu: float = 10.0) -> ModelSpec:
    """The likelihood for ``task``; refuse ``Delta = 0`` and ``nu = inf`` unless ``tempered``.

    Parameters
    ----------
    task : TaskConfig
        The SLR task.
    tempered : bool
        Accept ``Delta = 0`` (the likelihood uses ``tempered_delta`` instead: noise-free labels
        make it singular) and ``nu = inf`` (uses ``tempered_nu``: the hard argmax likelihood is
        discontinuous in ``k`` and NUTS needs a gradient). Spec section 6.
    tempered_delta, tempered_nu : float
        The finite substitutes (only used where the task's value is singular).

    Raises
    ------
    ConfigError
        ``Delta = 0`` or ``nu = inf`` without ``tempered``; non-positive substitutes.
    """
    delta, nu = float(task.delta), float(task.nu)
    if not tempered:
        if delta <= 0.0:
            raise ConfigError(
                f"delta={delta:g} makes the likelihood singular (noise-free labels); allowed for "
                "sampling: delta > 0, or tempered=true to sample with delta_model="
                f"{tempered_delta:g} (docs/model.md §6)")
        if math.isinf(nu):
            raise ConfigError(
                "nu=inf makes the likelihood discontinuous in k (hard argmax) and NUTS needs a "
                "gradient; allowed for sampling: finite nu >= 0, or tempered=true to sample with "
                f"nu_model={tempered_nu:g} (docs/model.md §6)")
        return ModelSpec(task.variant, nu, delta, False)
    if not tempered_delta > 0.0:
        raise ConfigError(f"tempered_delta={tempered_delta!r} is out of range; allowed: real > 0")
    if not (tempered_nu > 0.0 and math.isfinite(tempered_nu)):
        raise ConfigError(f"tempered_nu={tempered_nu!r} is out of range; allowed: finite real > 0")
    d_m = delta if delta > 0.0 else float(tempered_delta)
    n_m = nu if math.isfinite(nu) else float(tempered_nu)
    return ModelSpec(task.variant, n_m, d_m, (d_m != delta) or (n_m != nu))


# --------------------------------------------------------------------------------------------
# the likelihood, as pure functions (shared by the models and the predictor)
# --------------------------------------------------------------------------------------------
def token_log_weights(variant: str, nu: Array, chi: Array, mask: Array,
                      k_sq_over_D: Array) -> Array:
    """``a_l(k)`` of docs/model.md §6, ``-inf`` on masked positions.

    Parameters
    ----------
    variant : {"spiked", "max"}
    nu : float or Array
        Signal strength (finite).
    chi : Array, shape (..., L_max)
        ``x_l . k / sqrt(D)``.
    mask : Array, shape broadcastable to ``chi``
    k_sq_over_D : Array, shape broadcastable to ``chi[..., :1]``
        ``|k|^2 / D`` (used by the spiked variant only).
    """
    if variant == "spiked":
        a = jnp.sqrt(nu) * chi - 0.5 * nu * k_sq_over_D
    elif variant == "max":
        s = jnp.where(mask, nu * chi, -jnp.inf)
        n_tok = jnp.sum(mask, axis=-1, keepdims=True)
        a = jnp.log(n_tok) + s - jax.nn.logsumexp(s, axis=-1, keepdims=True)
    else:
        raise ConfigError(f"variant={variant!r} is unknown; allowed: spiked, max")
    return jnp.where(mask, a, -jnp.inf)


def log_lik_samples(spec: ModelSpec, k: Array, v: Array, X: Array, y: Array,
                    mask: Array) -> Array:
    """Per-sample marginal log-likelihood ``(n,)`` (docs/model.md §6).

    ``logsumexp_l [a_l(k) + log N(y; z_l, Delta)] - log L_i``; the base measure of the tokens is
    dropped (free of ``k, v``).
    """
    chi, z = fields(X, k, v)
    D = X.shape[-1]
    a = token_log_weights(spec.variant, spec.nu, chi, mask, jnp.sum(k * k) / D)
    log_n = -0.5 * (LOG_2PI + jnp.log(spec.delta)) - 0.5 * (y[:, None] - z) ** 2 / spec.delta
    n_tok = jnp.sum(mask, axis=-1)
    return jax.nn.logsumexp(jnp.where(mask, a + log_n, -jnp.inf), axis=-1) - jnp.log(n_tok)


def log_lik_bruteforce(spec: ModelSpec, k: Array, v: Array, X: Array, y: Array,
                       mask: Array) -> np.ndarray:
    """Per-sample log-likelihood by an explicit sum over locations, written independently.

    ``log (1/L) sum_{l <= L} [p(X | eps = l, k) / p_0(X)] N(y; z_l, Delta)`` in float64 NumPy,
    with the token likelihood ratio from its definition (spiked: the density ratio of
    ``N(sqrt(nu/D) k, I)`` to ``N(0, I)`` at ``x_l``; max: ``L exp(nu chi_l) / sum_l'
    exp(nu chi_l')``). A reference for tests, not for sampling.
    """
    k, v, X, y = (np.asarray(a, np.float64) for a in (k, v, X, y))
    mask = np.asarray(mask, bool)
    D = X.shape[-1]
    out = np.empty(X.shape[0])
    for i in range(X.shape[0]):
        L = int(mask[i].sum())
        toks = X[i, :L]
        if spec.variant == "spiked":
            mu = math.sqrt(spec.nu / D) * k
            ratio = np.exp(-0.5 * ((toks - mu) ** 2).sum(-1) + 0.5 * (toks ** 2).sum(-1))
        else:
            e = np.exp(spec.nu * toks @ k / math.sqrt(D))
            ratio = L * e / e.sum()
        z = toks @ v / math.sqrt(D)
        dens = np.exp(-0.5 * (y[i] - z) ** 2 / spec.delta) / math.sqrt(2 * math.pi * spec.delta)
        out[i] = math.log(float(np.sum(ratio * dens)) / L)
    return out


# --------------------------------------------------------------------------------------------
# NumPyro models
# --------------------------------------------------------------------------------------------
def _priors(D: int) -> tuple[Array, Array]:
    k = numpyro.sample("k", dist.Normal(0.0, 1.0).expand([D]).to_event(1))
    v = numpyro.sample("v", dist.Normal(0.0, 1.0).expand([D]).to_event(1))
    return k, v


def marginal_model(X: Array, y: Array, mask: Array, weights: Array, nu: Array, delta: Array,
                   *, variant: str) -> None:
    """SLR with the location summed out (docs/model.md §6); the sampler's default model.

    Parameters
    ----------
    X, y, mask : Array
        Data, ``(n, L_max, D)``, ``(n,)``, ``(n, L_max)``.
    weights : Array, shape (n,)
        Per-sample weights of the log-likelihood (0/1 to select a nested subset).
    nu, delta : Array
        Likelihood parameters (traced, so a sweep over them does not recompile).
    variant : {"spiked", "max"}
        Static.
    """
    k, v = _priors(X.shape[-1])
    ll = log_lik_samples(ModelSpec(variant, nu, delta), k, v, X, y, mask)
    numpyro.factor("log_lik", jnp.sum(weights * ll))


def enumerated_model(X: Array, y: Array, mask: Array, weights: Array, nu: Array, delta: Array,
                     *, variant: str) -> None:
    """SLR with the location as an enumerated discrete latent (needs funsor).

    ``eps_i ~ Categorical(uniform on the L_i tokens)`` (enumerated in parallel), the token
    evidence ``a_{eps_i}(k)`` as a factor, ``y_i ~ N(z_{eps_i}, Delta)`` observed. Weights scale
    each sample's sites (exact for 0/1 weights). Same arguments as :func:`marginal_model`.
    """
    from numpyro.ops.indexing import Vindex

    n, _, D = X.shape
    k, v = _priors(D)
    chi, z = fields(X, k, v)
    a = token_log_weights(variant, nu, chi, mask, jnp.sum(k * k) / D)
    prior = mask / jnp.sum(mask, axis=-1, keepdims=True)
    rows = jnp.arange(n)
    with numpyro.plate("data", n), numpyro.handlers.scale(scale=weights):
        eps = numpyro.sample("eps", dist.Categorical(probs=prior),
                             infer={"enumerate": "parallel"})
        numpyro.factor("tokens", Vindex(a)[rows, eps])
        numpyro.sample("y", dist.Normal(Vindex(z)[rows, eps], jnp.sqrt(delta)), obs=y)


MODELS = {"marginal": marginal_model, "enumerated": enumerated_model}
