"""GAMP's output and input functions for SLR (docs/amp.md).

* Output channel: for one sample, the per-token pre-activations ``omega_l = (omega_{k,l},
  omega_{v,l})`` with variances ``V = (V_k, V_v)`` enter through

      Z_out(y, omega, V) = (1/L) sum_eps c_eps(omega_k, V_k) N(y; omega_{v,eps}, Delta + V_v),

  the state evolution's own ``Z_out`` (:func:`bayesslr.theory.bayes.log_zout`, the same
  function and quadrature). :func:`output_functions` returns ``g_{a,l} = d log Z_out /
  d omega_{a,l}`` and the diagonal derivatives ``d g_{a,l} / d omega_{a,l}`` (automatic
  differentiation: ``2 L`` Hessian-vector products).
* Prior: Gaussian, per coordinate ``N(0, 1 / lam_a)``. For the spiked variant the tokens'
  likelihood carries ``exp(-nu |k|^2 / (2 D))`` per sample (docs/model.md §6), i.e.
  ``exp(-alpha nu |k|^2 / 2)`` over the data: a Gaussian factor on ``k`` that belongs to the
  prior, ``lam_k = 1 + nu N / D`` (:func:`prior_precision`); ``Z_out``'s ``k``-dependence is
  then ``exp(sqrt(nu) omega_k)`` (its constants do not matter). ``docs/amp.md`` derives why,
  and the per-iteration comparison with the state evolution confirms it.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from bayesslr.core.jaxconfig import Array
from bayesslr.core.task import TaskConfig
from bayesslr.theory.bayes import log_c, log_zout


def prior_precision(task: TaskConfig, n_train: int) -> tuple[float, float]:
    """Per-coordinate prior precisions ``(lam_k, lam_v)`` of GAMP's Gaussian denoiser.

    ``lam_v = 1``; ``lam_k = 1 + nu N / D`` for the spiked variant (the product over samples
    of ``exp(-nu |k|^2 / (2 D))``), ``1`` for max (its tokens carry no factor on ``|k|``).
    """
    if task.variant == "spiked":
        return 1.0 + task.nu * n_train / task.D, 1.0
    return 1.0, 1.0


def output_functions(st, quad, y: Array, omega_k: Array, omega_v: Array, V_k: Array,
                     V_v: Array, mask: Array, length: Array, derivatives: bool = True
                     ) -> tuple[Array, Array, Array, Array]:
    """``g_k, g_v`` and ``dg_k, dg_v`` (each ``(n, L_max)``, zero where masked).

    ``g_{a,l} = d log Z_out / d omega_{a,l}`` and ``dg_{a,l} = d g_{a,l} / d omega_{a,l}``
    (the diagonal of the per-sample Hessian that GAMP's Onsager coefficient sums; zeros when
    ``derivatives`` is False, which skips the ``2 L`` Hessian-vector products).
    """
    omega_k = jnp.where(mask, omega_k, 0.0)
    omega_v = jnp.where(mask, omega_v, 0.0)

    def total(ok, ov):
        return jnp.sum(log_zout(st, ok, ov, V_k, V_v, y, mask, length, quad))

    grad = jax.grad(total, argnums=(0, 1))
    g_k, g_v = grad(omega_k, omega_v)
    z = jnp.zeros_like(g_k)
    if not derivatives:
        return jnp.where(mask, g_k, z), jnp.where(mask, g_v, z), z, z
    L = omega_k.shape[1]
    eye = jnp.eye(L, dtype=omega_k.dtype)
    zero = jnp.zeros((L, *omega_k.shape), omega_k.dtype)
    onehot = jnp.broadcast_to(eye[:, None, :], (L, *omega_k.shape))
    tangents_k = jnp.concatenate([onehot, zero])
    tangents_v = jnp.concatenate([zero, onehot])

    def hvp(tk, tv):
        return jax.jvp(grad, (omega_k, omega_v), (tk, tv))[1]

    hk, hv = jax.vmap(hvp)(tangents_k, tangents_v)  # (2L, n, L) each
    idx = jnp.arange(L)
    dg_k = hk[idx, :, idx].T  # d g_{k,l} / d omega_{k,l}
    dg_v = hv[L + idx, :, idx].T
    return (jnp.where(mask, g_k, z), jnp.where(mask, g_v, z), jnp.where(mask, dg_k, z),
            jnp.where(mask, dg_v, z))


def output_functions_blocked(st, quad, y: Array, omega_k: Array, omega_v: Array, V_k: Array,
                             V_v: Array, mask: Array, length: Array, *, block: int = 4096,
                             derivatives: bool = True) -> tuple[Array, Array, Array, Array]:
    """:func:`output_functions` over blocks of ``block`` samples (``lax.map``): the memory of
    the quadratures stays ``O(block)`` however many samples there are."""
    n, L = omega_k.shape
    if n <= block:
        return output_functions(st, quad, y, omega_k, omega_v, V_k, V_v, mask, length,
                                derivatives)
    pad = (-n) % block
    padded = [jnp.concatenate([a, jnp.zeros((pad, *a.shape[1:]), a.dtype)])
              for a in (y, omega_k, omega_v, mask, length)]
    blocks = [a.reshape(-1, block, *a.shape[1:]) for a in padded]

    def one(args):
        yb, okb, ovb, mb, lb = args
        return output_functions(st, quad, yb, okb, ovb, V_k, V_v, mb, jnp.maximum(lb, 1),
                                derivatives)

    out = jax.lax.map(one, tuple(blocks))
    return tuple(o.reshape(-1, L)[:n] for o in out)


def attention_weights(st, quad, chi_hat: Array, V_k: Array, mask: Array,
                      length: Array) -> Array:
    """Bayes attention ``pi_l = c_l(chi_hat, V_k) / sum_l' c_l'`` on test inputs.

    With the Gaussian marginal ``k ~ N(k_hat, V_k I)`` a test input's key fields are
    ``chi ~ N(chi_hat, V_k I)`` (``chi_hat = X k_hat / sqrt(D)``), and the location posterior
    given the input is proportional to ``E_chi g_nu(l, chi) = c_l(chi_hat, V_k)``: the test
    tokens' own evidence on ``k`` included (spiked: ``pi = softmax(sqrt(nu) chi_hat)``).
    """
    lc = log_c(st, jnp.where(mask, chi_hat, 0.0), V_k, mask, length, quad)
    return jnp.where(mask, jax.nn.softmax(jnp.where(mask, lc, -jnp.inf), axis=-1), 0.0)
