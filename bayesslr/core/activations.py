"""The attention activations ``sigma`` of docs/model.md §2, in one registry.

Every activation is called as ``sigma(chi, mask, theta)``:

* ``chi`` : array ``(..., L)`` of attention scores;
* ``mask`` : bool array broadcastable to ``chi`` (True where a token exists) or ``None``;
* ``theta`` : array ``(n_params,)`` of the activation's own trainable scalars (may be empty).

The output has the shape of ``chi`` and is exactly zero on masked positions, so padded tokens never
contribute to ``f(X) = sigma(chi) . z``. Adding an activation is adding one :class:`Activation`
to :data:`ACTIVATIONS`: every list of activations in the package (the method families', the
replica theory's, the report's colours, orders and claims) is derived from it.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import jax
import jax.numpy as jnp
from jax.scipy.special import erf

from bayesslr.core.jaxconfig import Array
from bayesslr.core.task import ConfigError, fields


def _full_mask(chi: Array, mask: Array | None) -> Array:
    return jnp.ones(chi.shape, dtype=bool) if mask is None else jnp.broadcast_to(mask, chi.shape)


def softmax(chi: Array, mask: Array | None = None, theta: Array | None = None) -> Array:
    """``exp(chi_l) / sum_l' exp(chi_l')`` over unmasked positions."""
    m = _full_mask(chi, mask)
    return jnp.where(m, jax.nn.softmax(jnp.where(m, chi, -jnp.inf), axis=-1), 0.0)


def linear(chi: Array, mask: Array | None = None, theta: Array | None = None) -> Array:
    """``1 + chi_l``: softmax linearised at 0 (up to the factor ``1/L``)."""
    return jnp.where(_full_mask(chi, mask), 1.0 + chi, 0.0)


def erf_act(chi: Array, mask: Array | None = None, theta: Array | None = None) -> Array:
    """``1 + erf(c + chi_l)``, component-wise, with the trained offset ``c = theta[0]``."""
    c = 0.0 if theta is None else theta[0]
    return jnp.where(_full_mask(chi, mask), 1.0 + erf(c + chi), 0.0)


def softplus_norm(chi: Array, mask: Array | None = None, theta: Array | None = None) -> Array:
    """``softplus(chi_l) / sum_l' softplus(chi_l')``: normalised, no exponential growth.

    A row whose every ``softplus(chi_l)`` underflows to 0 (all ``chi_l`` below about -745) is
    0/0 = NaN here; :func:`softplus_norm_limit` is the form that stays finite there."""
    m = _full_mask(chi, mask)
    sp = jnp.where(m, jax.nn.softplus(chi), 0.0)
    return sp / jnp.sum(sp, axis=-1, keepdims=True)


def softplus_norm_limit(chi: Array, mask: Array | None = None,
                        theta: Array | None = None) -> Array:
    """:func:`softplus_norm`, with a row whose every ``softplus(chi_l)`` underflows to 0 taken
    at its limit ``softmax(chi)`` (``softplus(x) ~ e^x`` as ``x -> -inf``) instead of 0/0, in
    value and in gradient. The population search (:mod:`bayesslr.population.method`) uses it:
    it runs to ``|m_k| = 1000``, where whole rows underflow, and a single NaN row made its
    objective NaN. The other families keep :func:`softplus_norm` (the same values where no row
    underflows, up to the last bits of a differently compiled program), so that their stored
    numbers do not move."""
    m = _full_mask(chi, mask)
    sp = jnp.where(m, jax.nn.softplus(chi), 0.0)
    total = jnp.sum(sp, axis=-1, keepdims=True)
    ok = total > 0
    limit = jax.nn.softmax(jnp.where(m, chi, -jnp.inf), axis=-1)
    return jnp.where(ok, sp / jnp.where(ok, total, 1.0), jnp.where(m, limit, 0.0))


@dataclass(frozen=True)
class Activation:
    """One registry entry.

    Attributes
    ----------
    name : str
        Registry key (the CLI's ``--activation``).
    fn : callable
        ``fn(chi, mask, theta) -> weights``, masked positions zero.
    param_names : tuple of str
        Names of the activation's own trainable scalars (``theta``).
    param_init : tuple of float
        Default values of ``theta``.
    normalised : bool
        Weights sum to one.
    exponential : bool
        Weights grow exponentially in ``chi``.
    description : str
        Formula, for tables and attrs.
    replica : bool
        The replica theory of ERM (:mod:`bayesslr.theory.erm`) covers it: its proximal problem
        is solved by the theory's generic multi-start scheme. Set False where the maths does
        not allow it; ``theory_erm`` and ERM's ``lam='replica'`` then refuse it by name.
    population_starts : tuple of tuple of float
        Extra starts ``(m_k, s_k, theta...)`` of the population optimiser, for an activation
        whose own scalars have several basins (erf's offset ``c``).
    """

    name: str
    fn: Callable[..., Array]
    param_names: tuple[str, ...]
    param_init: tuple[float, ...]
    normalised: bool
    exponential: bool
    description: str
    replica: bool = True
    population_starts: tuple[tuple[float, ...], ...] = ()

    @property
    def n_params(self) -> int:
        return len(self.param_names)

    def init_theta(self) -> Array:
        return jnp.asarray(self.param_init, dtype=jnp.result_type(float))

    def __call__(self, chi: Array, mask: Array | None = None, theta: Array | None = None) -> Array:
        return self.fn(chi, mask, theta)


ACTIVATIONS: dict[str, Activation] = {
    a.name: a
    for a in (
        Activation("softmax", softmax, (), (), True, True, "exp(chi_l)/sum exp(chi_l')"),
        Activation("linear", linear, (), (), False, False, "1 + chi_l"),
        Activation("erf", erf_act, ("c",), (0.0,), False, False, "1 + erf(c + chi_l)",
                   population_starts=tuple((m, 0.0, c) for m in (0.5, 2.0) for c in (-1.5, 1.5))),
        Activation("softplus", softplus_norm, (), (), True, False,
                   "softplus(chi_l)/sum softplus(chi_l')"),
    )
}


def replica_activations() -> tuple[str, ...]:
    """The activations the replica theory of ERM covers (:attr:`Activation.replica`)."""
    return tuple(n for n, a in ACTIVATIONS.items() if a.replica)


def get_activation(name: str) -> Activation:
    """Look an activation up by name, with a clear error for unknown names."""
    try:
        return ACTIVATIONS[name]
    except KeyError:
        raise ConfigError(
            f"activation={name!r} is unknown; allowed: one of {', '.join(ACTIVATIONS)}"
        ) from None


def predict(act: Activation, X: Array, mask: Array, k: Array, v: Array,
            theta: Array | None = None) -> Array:
    """Attention prediction ``f(X) = sigma(X k / sqrt(D)) . (X v / sqrt(D))`` (docs/model.md §2).

    ``X`` is ``(n, L_max, D)``, ``mask`` ``(n, L_max)``; returns ``(n,)``.
    """
    chi, z = fields(X, k, v)
    return jnp.sum(act(chi, mask, theta) * z, axis=-1)
