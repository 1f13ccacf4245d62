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
* Test errors are the suite's one measurement (:mod:`bayesslr.metrics`): the Rao-Blackwellised
  excess error on fresh test data, the oracle on the same test set, the noisy ``risk``.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from bayesslr.activations import Activation
from bayesslr.activations import predict as act_predict
from bayesslr.jaxconfig import Array
from bayesslr.task import Data

Params = dict[str, Array]


def predict(act: Activation, params: Params, X: Array, mask: Array) -> Array:
    """``f(X) = sigma(chi) . z`` of a parameter dict (spec section 2); ``(n,)``."""
    return act_predict(act, X, mask, params["k"], params["v"], params["theta"])


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
