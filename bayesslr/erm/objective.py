"""The regularised empirical risk of attention predictors, overlaps and test errors
(docs/model.md §2-3, docs/estimators.md).

Conventions fixed here, used by every ERM protocol of :mod:`bayesslr.erm`:

* Parameters are a dict ``{"k": (D,), "v": (D,), "theta": (P,)}``; ``theta`` holds the
  activation's own scalars (erf's offset ``c``) and is never penalised.
* The spec's objective (section 4) is
  ``S = sum_mu 1/2 (y_mu - f(X_mu))^2 + lam_k/2 |k|^2 + lam_v/2 |v|^2``. Solvers minimise the
  per-sample objective ``F = S / N`` (same minimiser, values of order one).
* The gradient test of convergence is on ``|grad S| / sqrt(D) = N |grad F| / sqrt(D)``, the
  root-mean-square gradient component of ``S``: it is of order one far from a minimiser at any
  ``D`` and ``alpha``, so one tolerance serves every size.
* Test errors are the suite's one measurement (:mod:`bayesslr.core.metrics`): the Rao-Blackwellised
  excess error on fresh test data, the oracle on the same test set, the noisy ``risk``.
"""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp

from bayesslr.core.activations import Activation
from bayesslr.core.activations import predict as act_predict
from bayesslr.core.jaxconfig import Array
from bayesslr.core.task import Data

Params = dict[str, Array]


def predict_params(act: Activation, params: Params, X: Array, mask: Array) -> Array:
    """``f(X) = sigma(chi) . z`` of a parameter dict (docs/model.md §2); ``(n,)``."""
    return act_predict(act, X, mask, params["k"], params["v"], params["theta"])


def train_loss(act: Activation, params: Params, data: Data, weight: Array | None = None) -> Array:
    """Training loss per sample ``1/(2N) sum_mu (y_mu - f(X_mu))^2``.

    ``weight`` (``(n,)``, zeros and ones) selects the training samples when part of ``data`` is
    held out for validation; ``N`` is then ``sum(weight)``.
    """
    r = data.y - predict_params(act, params, data.X, data.mask)
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


# training data per chunk of value_and_grad_batch; None: the whole data in one chunk (two dense
# passes over X), faster than chunks at the paper's size and below (measurements:
# benchmarks/README.md, ERM): a chunk's copy of its slice of X and its dozen small kernels
# cost more than the second read of X they save.
CHUNK_BYTES: float | None = None
# cap on the (rows, L, 2G) fields of one chunk: the whole-data form holds a few arrays of that
# shape, which for a batch of many members (restarts x lam grid) could outgrow the data
FIELD_BYTES = 2**24
STREAMS = 1  # independent chunk loops of value_and_grad_batch


def _chunk_loss(act: Activation, H: Array, y: Array, mask: Array, w: Array,
                theta: Array) -> Array:
    """``1/2 sum_mu w_mu (y_mu - f_mu)^2`` of ``G`` members from their fields ``H`` ``(B, L, 2G)``
    (``chi`` the first ``G`` columns, ``z`` the last ``G``); ``(G,)``."""
    G = theta.shape[0]
    chi = jnp.moveaxis(H[..., :G], -1, 0)  # (G, B, L)
    z = jnp.moveaxis(H[..., G:], -1, 0)
    s = jax.vmap(lambda c, th: act(c, mask, th))(chi, theta)
    r = y[None, :] - jnp.sum(s * z, axis=-1)  # (G, B)
    return 0.5 * jnp.sum(w * r * r, axis=-1)


def chunk_rows(n: int, L: int, D: int, chunk_bytes: float | None = CHUNK_BYTES,
               G: int = 1) -> int:
    """Samples per chunk of :func:`value_and_grad_batch` for ``G`` members: about
    ``chunk_bytes`` of data (``n`` when None), at most :data:`FIELD_BYTES` of fields, at
    least one, at most ``n``."""
    rows = n if chunk_bytes is None else chunk_bytes // (4 * L * D)
    rows = min(rows, FIELD_BYTES // (4 * L * 2 * G))
    return int(min(n, max(1, rows)))


def value_and_grad_batch(act: Activation, params: Params, data: Data, lam_k: Array,
                         lam_v: Array, weight: Array | None = None, *,
                         chunk: int | None = None, streams: int | None = None
                         ) -> tuple[Array, Params]:
    """:func:`objective_batch` and its gradient, all members in one pass (docs/estimators.md).

    The forward pass is one ``(N L, D) x (D, 2G)`` product (the fields ``X k`` and ``X v`` of
    every member), the residuals and the activation's part follow on the small ``(N, L, 2G)``
    fields (differentiated by ``jax.vjp``, so every activation of the registry works
    unchanged), and the backward pass is one ``(2G, N L) x (N L, D)`` product. The loss is a
    sum over samples, so the same can be done chunk by chunk of ``chunk`` samples, each chunk
    of ``X`` read from memory once for both products while it sits in cache; by default it is
    not (:data:`CHUNK_BYTES`: measured slower, the chunk's copy and per-chunk kernels cost more
    than the second read of ``X``).

    Parameters
    ----------
    act, params, data, lam_k, lam_v, weight :
        As for :func:`objective_batch` (``params`` with leading axis ``G``).
    chunk : int, optional
        Samples per chunk (default :func:`chunk_rows`: the whole data, unless the batch's
        fields would exceed :data:`FIELD_BYTES`).
    streams : int, optional
        Independent loops over contiguous ranges of chunks, summed at the end (default
        :data:`STREAMS`); XLA's CPU runtime may run them concurrently.

    Returns
    -------
    F : Array
        ``(G,)`` per-sample objectives.
    grad : dict
        ``{"k": (G, D), "v": (G, D), "theta": (G, P)}``, the gradient of each member's ``F``.
    """
    X, y, mask = data.X, data.y, data.mask
    n, L, D = X.shape
    G = params["k"].shape[0]
    B = chunk_rows(n, L, D, G=G) if chunk is None else int(min(max(chunk, 1), n))
    w = jnp.ones((n,), X.dtype) if weight is None else weight.astype(X.dtype)
    n_eff = jnp.asarray(n, X.dtype) if weight is None else jnp.sum(w)
    inv = 1.0 / math.sqrt(D)
    W = jnp.concatenate([params["k"], params["v"]], axis=0) * inv  # (2G, D)
    theta = params["theta"]

    def piece(carry, Xc, yc, mc, wc):
        f, gW, gth = carry
        x2 = Xc.reshape(B * L, D)
        H = (x2 @ W.T).reshape(B, L, 2 * G)
        fc, vjp = jax.vjp(lambda H_, th: _chunk_loss(act, H_, yc, mc, wc, th), H, theta)
        dH, dth = vjp(jnp.ones_like(fc))
        return f + fc, gW + dH.reshape(B * L, 2 * G).T @ x2, gth + dth

    def body(i, c):
        # the last chunk ends at n and overlaps the one before: its rows already counted get
        # weight 0 (one loop body for any n, so the objective is traced and compiled once)
        start = jnp.minimum(i * B, n - B)
        fresh = (start + jnp.arange(B)) >= i * B
        sl = lambda a: jax.lax.dynamic_slice_in_dim(a, start, B)  # noqa: E731
        return piece(c, sl(X), sl(y), sl(mask), jnp.where(fresh, sl(w), 0.0))

    carry = (jnp.zeros((G,), X.dtype), jnp.zeros((2 * G, D), X.dtype), jnp.zeros_like(theta))
    n_chunks = -(-n // B)
    if n_chunks == 1:  # the whole data: two dense products, no loop and no slicing
        f, gW, gth = piece(carry, X, y, mask, w)
        return _finish(f, gW, gth, params, lam_k, lam_v, n_eff, inv)
    S = max(1, min(STREAMS if streams is None else int(streams), n_chunks))
    # S independent loops over contiguous ranges of chunks: no data dependency between them,
    # so XLA's CPU runtime may run them on different cores
    ends = [round(n_chunks * (j + 1) / S) for j in range(S)]
    parts = [jax.lax.fori_loop(lo, hi, body, carry)
             for lo, hi in zip([0, *ends[:-1]], ends, strict=True)]
    f, gW, gth = jax.tree_util.tree_map(lambda *a: sum(a[1:], a[0]), *parts)
    return _finish(f, gW, gth, params, lam_k, lam_v, n_eff, inv)


def _finish(f: Array, gW: Array, gth: Array, params: Params, lam_k: Array, lam_v: Array,
            n_eff: Array, inv: float) -> tuple[Array, Params]:
    """Penalties and the ``1 / N`` of :func:`value_and_grad_batch` from the data sums."""
    G = params["k"].shape[0]
    k, v = params["k"], params["v"]
    F = (f + 0.5 * (lam_k * jnp.sum(k * k, -1) + lam_v * jnp.sum(v * v, -1))) / n_eff
    grad = {"k": (gW[:G] * inv + lam_k[:, None] * k) / n_eff,
            "v": (gW[G:] * inv + lam_v[:, None] * v) / n_eff,
            "theta": gth / n_eff}
    return F, grad


def grad_scale(n: int, D: int) -> float:
    """Factor turning ``|grad F|`` into the size-free ``|grad S| / sqrt(D)``."""
    return n / D**0.5
