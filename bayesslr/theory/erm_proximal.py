"""The ERM proximal step on the teacher channel (docs/theory.md, channel part).

The channel samples are the population-level ones of
:mod:`bayesslr.population.teacher_channel` (common random numbers fixed by a seed: every
iteration of a fixed point, every ``alpha`` and every ``lam`` sees the same numbers, so the
fixed-point map is a deterministic function of the order parameters). :func:`prox_channel`
solves, per sample, the ``L``-dimensional non-convex proximal problem

    min_chi  |chi - w_k|^2 / (2 V_k) + (y - s.w_v)^2 / (2 (1 + V_v |s|^2)),  s = sigma(chi),

(the ``z`` part of the joint problem is eliminated in closed form: ``r = (y - s.w_v) /
(1 + V_v |s|^2)``, ``z = w_v + V_v s r``) by Levenberg-Marquardt Newton iterations from
``2 L + 1`` starts (``w_k`` and ``w_k +- shift e_l``) and keeps the lowest objective: a single
start biases the error low. Everything is ``vmap``-ed over samples and starts inside one
  ``jit``; the iteration count is fixed (no data-dependent loop), so a call cannot spin.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import partial
from typing import NamedTuple

import jax
import jax.numpy as jnp

from bayesslr.core.activations import Activation
from bayesslr.core.jaxconfig import Array
from bayesslr.population.teacher_channel import ChannelSamples


class ProxMoments(NamedTuple):
    """Sample means of the proximal step (docs/theory.md), the inputs of the conjugates.

    Attributes
    ----------
    ff_k, ff_v : Array
        ``E|f_k|^2``, ``E|f_v|^2``.
    fh_k, fh_v : Array
        ``E[f_k . chi*]``, ``E[f_v . z*]``.
    fx_k, fx_v : Array
        ``E[f_k . xi]``, ``E[f_v . zeta]`` (Stein-free ``Vh`` and the ``mh`` form).
    tr_k, tr_v : Array
        ``E[Tr_a(V^-1 (V^-1 + H)^-1 H)]``, ``H`` the Hessian of the loss in ``(chi, z)``.
    loss : Array
        ``E[1/2 (y - sigma(chi).z)^2]`` at the proximal point (training loss per sample).
    loss_se : Array
        Monte Carlo standard error of ``loss``.
    unconverged : Array
        Fraction of samples whose proximal gradient stays above ``1e-6 (1 + |f_k|)``.
    off_branch : Array
        Fraction of samples whose global minimum is not the one reached from ``w_k`` (objective
        lower by more than ``1e-9``): how often the single-start answer would be wrong.
    gap_k_se, gap_v_se : Array
        Monte Carlo standard error of the per-sample difference between the Hessian-trace and
        the Stein-free ``Vh`` integrands (``/alpha``): the scale of the gap's noise.
    cov : Array, shape (8, 8)
        Covariance of the sample means of the per-sample integrands in the order
        :data:`MOMENT_NAMES` (per-sample covariance ``/ n``; the stratification of lengths is
        ignored, which can only overstate it): the channel Monte Carlo noise that
        :mod:`bayesslr.theory.erm` propagates to the fixed point.
    """

    ff_k: Array
    ff_v: Array
    fh_k: Array
    fh_v: Array
    fx_k: Array
    fx_v: Array
    tr_k: Array
    tr_v: Array
    loss: Array
    loss_se: Array
    unconverged: Array
    off_branch: Array
    gap_k_se: Array
    gap_v_se: Array
    cov: Array


MOMENT_NAMES: tuple[str, ...] = ("ff_k", "ff_v", "fh_k", "fh_v", "fx_k", "fx_v", "tr_k", "tr_v")


def _gauss_jordan(A: Array, rhs: list[list[Array]]) -> tuple[list[list[Array]], list[Array],
                                                               Array]:
    """Unrolled Gauss-Jordan elimination of a batch of small systems, ``A`` ``(B, n, n)``, with
    right-hand sides ``rhs[i][c]`` (row ``i``, column ``c``, each ``(B,)``), no pivoting.

    Returns the reduced right-hand sides, the final diagonal of ``A`` (row ``i`` of the
    solution is ``rhs[i][c] / diag[i]``) and the smallest pivot: without pivoting the pivots
    are those of Gaussian elimination, the diagonal of ``A = L D L^T`` for a symmetric ``A``, so
    a symmetric ``A`` is positive definite exactly when the smallest pivot is positive.
    """
    n = A.shape[-1]
    a = [[A[:, i, j] for j in range(n)] for i in range(n)]
    r = [list(row) for row in rhs]
    pmin = a[0][0]
    for k in range(n):
        piv = a[k][k]
        pmin = jnp.minimum(pmin, piv)
        for i in range(n):
            if i == k:
                continue
            f = a[i][k] / piv
            for j in range(k, n):
                a[i][j] = a[i][j] - f * a[k][j]
            r[i] = [r[i][c] - f * r[k][c] for c in range(len(r[i]))]
    return r, [a[i][i] for i in range(n)], pmin


def _solve_small(A: Array, b: Array) -> tuple[Array, Array]:
    """Solve ``A x = b`` for a batch of small systems, ``A`` ``(B, n, n)``, by unrolled
    Gauss-Jordan elimination (:func:`_gauss_jordan`; a zero pivot gives non-finite entries,
    which the callers treat as a rejected step). Far faster on CPU than batched LAPACK calls at
    ``n <= 8``. Returns ``x`` and the smallest pivot (positive exactly when a symmetric ``A`` is
    positive definite).
    """
    n = b.shape[-1]
    r, diag, pmin = _gauss_jordan(A, [[b[:, i]] for i in range(n)])
    return jnp.stack([r[i][0] / diag[i] for i in range(n)], axis=-1), pmin


def _inv_diag_small(A: Array) -> Array:
    """Diagonal of ``A^-1`` for a batch of small symmetric positive definite ``A``
    (``(B, n, n)``): :func:`_gauss_jordan` with the identity on the right."""
    n = A.shape[-1]
    one, zero = jnp.ones_like(A[:, 0, 0]), jnp.zeros_like(A[:, 0, 0])
    r, diag, _ = _gauss_jordan(A, [[one if i == j else zero for j in range(n)]
                                   for i in range(n)])
    return jnp.stack([r[i][i] / diag[i] for i in range(n)], axis=-1)


def _row_grad_hess(fun: Callable[[Array], Array], x: Array) -> tuple[Array, Array]:
    """Per-row gradient and Hessian of a row-separable ``fun: (B, n) -> (B,)``.

    Rows are independent, so the gradient of ``sum(fun)`` is the stack of row gradients and its
    directional derivative along ``e_i`` (on every row at once) is the ``i``-th Hessian column.
    """
    grad = jax.grad(lambda u: jnp.sum(fun(u)))
    n = x.shape[-1]
    cols = []
    g = None
    eye = jnp.eye(n, dtype=x.dtype)
    for i in range(n):
        e = jnp.broadcast_to(eye[i], x.shape)  # (a scatter here is constant-folded: slow)
        g, col = jax.jvp(grad, (x,), (e,))
        cols.append(col)
    return g, jnp.stack(cols, axis=-1)


def _reduced_objective(act: Activation, theta, chi, w_k, w_v, y, mask, V_k, V_v):
    """Rows of ``|chi - w_k|^2/(2V_k) + (y - s.w_v)^2 / (2(1 + V_v |s|^2))`` (z eliminated)."""
    s = act(chi, mask, theta)
    res = y - jnp.sum(s * w_v, -1)
    return (0.5 * jnp.sum((chi - w_k) ** 2, -1) / V_k
            + 0.5 * res**2 / (1.0 + V_v * jnp.sum(s * s, -1)))


def _lm_newton(phi: Callable[[Array], Array], chi0: Array, n_iter: int, V_k,
               mu0: Array | None = None) -> tuple[Array, Array, Array]:
    """Levenberg-Marquardt Newton on every row of ``chi0`` (fixed ``n_iter``, monotone in phi).

    Where ``H + mu I`` is positive definite (its pivots, :func:`_solve_small`) the step is the
    Levenberg-Marquardt one, quadratically convergent near a minimum; elsewhere the damping is
    raised to a Gershgorin bound on ``-lambda_min(H)`` (plus ``1e-3 / V_k``), so the step still
    descends: from a small ``mu`` a plain step heads for a saddle where the reduced problem is
    non-convex and is rejected, and each rejection costs an iteration. Measured at the
    ``alpha = 1`` fixed point (softmax, spiked ``L = 3``, ``nu = 2``, 2e4 samples x 7 starts):
    after 6 steps the lowest start is in the wrong basin for 0.06% of the samples, against
    0.6% with the plain damping (0.5% after 10 steps).

    Returns the rows, their objective and their damping (to resume the iteration).
    """
    B, L = chi0.shape
    eye = jnp.eye(L, dtype=chi0.dtype)
    floor = 1e-3 / V_k

    def body(_, state):
        chi, val, mu = state
        g, H = _row_grad_hess(phi, chi)
        step, pmin = _solve_small(H + mu[:, None, None] * eye, -g)
        diag = jnp.diagonal(H, axis1=-2, axis2=-1)
        gersh = jnp.min(diag + jnp.abs(diag) - jnp.sum(jnp.abs(H), -1), -1)  # <= lambda_min
        m_safe = jnp.maximum(mu, floor - gersh)
        safe, _ = _solve_small(H + m_safe[:, None, None] * eye, -g)
        pd = pmin > 0
        step = jnp.where(pd[:, None], step, safe)
        m = jnp.where(pd, mu, m_safe)
        cand = chi + step
        cval = phi(cand)
        ok = jnp.isfinite(cval) & jnp.all(jnp.isfinite(cand), -1) & (cval <= val)
        chi = jnp.where(ok[:, None], cand, chi)
        val = jnp.where(ok, cval, val)
        mu = jnp.clip(jnp.where(ok, mu * 0.2, m * 10.0), 1e-10 / V_k, 1e10 / V_k)
        return chi, val, mu

    if mu0 is None:
        mu0 = jnp.full((B,), 1e-3, chi0.dtype) / V_k
    return jax.lax.fori_loop(0, n_iter, body, (chi0, phi(chi0), mu0))


def _newton_rows(act: Activation, theta, ch: ChannelSamples, w_k, w_v, V_k, V_v, chi0: Array,
                 n_iter) -> tuple[Array, Array]:
    """:func:`_lm_newton` from ``S`` starts per sample (``chi0``: ``(n, S, L)``, every start
    one row against its sample's ``w_k``, ``w_v``, ``y``); the minima ``(n, S, L)`` and their
    objective ``(n, S)``, a non-finite one set to ``inf`` (never the lowest)."""
    n, S, L = chi0.shape
    rep = lambda a: jnp.repeat(a, S, axis=0)  # noqa: E731
    phi = partial(_reduced_objective, act, theta, w_k=rep(w_k), w_v=rep(w_v), y=rep(ch.y),
                  mask=rep(ch.mask), V_k=V_k, V_v=V_v)
    chis, vals, _ = _lm_newton(phi, chi0.reshape(n * S, L), n_iter, V_k)
    return chis.reshape(n, S, L), jnp.where(jnp.isfinite(vals), vals, jnp.inf).reshape(n, S)


def _loss_rows(act: Activation, theta, u, y, mask):
    L = u.shape[-1] // 2
    s = act(u[..., :L], mask, theta)
    return 0.5 * (y - jnp.sum(s * u[..., L:], -1)) ** 2


class ProxResult(NamedTuple):
    """What one proximal step returns: the moments and the minima to track.

    Attributes
    ----------
    moments : ProxMoments
        Sample means at the global proximal points found.
    minima : Array, shape (n, n_keep, L_max)
        Per sample, the ``n_keep`` lowest distinct minima found, as offsets ``chi - w_k``
        (lowest first; a sample with fewer distinct minima repeats its lowest): the starts of
        a tracked step (:func:`tracked_starts`).
    """

    moments: ProxMoments
    minima: Array


def cold_starts(L: int, shift: float, dtype=jnp.float64) -> Array:
    """The ``2 L + 1`` start offsets of a cold step: ``0`` (the start ``w_k``) and
    ``+- shift e_l``."""
    eye = jnp.eye(L, dtype=dtype)
    return jnp.concatenate([jnp.zeros((1, L), dtype), shift * eye, -shift * eye])


def tracked_starts(minima: Array) -> Array:
    """Start offsets of a tracked step: ``0`` (the start ``w_k``) and the minima kept by the
    previous step, ``(n, 1 + n_keep, L)``."""
    return jnp.concatenate([jnp.zeros_like(minima[:, :1]), minima], axis=1)


def _distinct_lowest(chis: Array, vals: Array, first: Array, k: int) -> Array:
    """``first`` and the ``k - 1`` lowest rows of ``chis`` (``(n, S, L)``, objective ``vals``)
    farther than ``1e-3 (1 + |chi|)`` (max norm) from every row already kept."""
    def near(a, b):
        scale = 1.0 + jnp.max(jnp.abs(a), -1)
        return jnp.max(jnp.abs(a - b), -1) < 1e-3 * scale

    kept = [first]
    v = jnp.where(near(chis, first[:, None, :]), jnp.inf, vals)
    for _ in range(k - 1):
        j = jnp.argmin(v, axis=1)
        cand = jnp.take_along_axis(chis, j[:, None, None], axis=1)[:, 0]
        have = jnp.isfinite(jnp.min(v, axis=1))
        kept.append(jnp.where(have[:, None], cand, first))
        v = jnp.where(near(chis, cand[:, None, :]), jnp.inf, v)
    return jnp.stack(kept, axis=1)


@partial(jax.jit, static_argnames=("act", "n_best", "n_keep", "hessian"))
def prox_step(act: Activation, ch: ChannelSamples, m_k, q_k, V_k, m_v, q_v, V_v, theta,
              starts: Array, *, n_explore: int = 6, n_refine: int = 10, n_best: int = 2,
              n_keep: int = 2, hessian: bool = True) -> ProxResult:
    """Sample means of the proximal step at order parameters ``(m, q, V)_{k, v}`` (docs/theory.md).

    The global minimum of the reduced ``chi`` problem is searched from the starts
    ``w_k + starts`` (``starts``: ``(S, L)`` offsets shared by every sample, e.g.
    :func:`cold_starts`, or ``(n, S, L)`` per sample, e.g. :func:`tracked_starts`; the first
    offset must be zero: the start ``w_k``) with ``n_explore`` Levenberg-Marquardt steps each;
    the ``n_best`` lowest distinct rows and the row from ``w_k`` get ``n_refine`` more steps,
    and the lowest of those is the proximal point. ``off_branch`` counts the samples whose
    row from ``w_k``, refined, is another (higher) minimum.

    Parameters
    ----------
    act : Activation
        The attention activation (static).
    ch : ChannelSamples
        Common random numbers from :func:`bayesslr.population.teacher_channel.sample_channel`.
    m_k, q_k, V_k, m_v, q_v, V_v : scalar
        Order parameters; ``w_a = m_a h*_a + sqrt(q_a - m_a^2) xi_a``.
    theta : Array
        The activation's own scalars (held fixed).
    starts : Array
        Start offsets (see above).
    n_explore, n_refine : int
        Levenberg-Marquardt steps per start, and per refined row (traced: changing them
        does not recompile).
    n_best : int
        Lowest distinct rows refined besides the row from ``w_k``.
    n_keep : int
        Distinct minima returned per sample (:class:`ProxResult`).
    hessian : bool
        Compute the Hessian-form moments (``tr_k``, ``tr_v``; NaN otherwise): the iteration
        with the Stein-free ``Vh`` does not need them, only the diagnostics do.

    Returns
    -------
    ProxResult
    """
    s_k = jnp.sqrt(jnp.maximum(q_k - m_k**2, 0.0))
    s_v = jnp.sqrt(jnp.maximum(q_v - m_v**2, 0.0))
    w_k = jnp.where(ch.mask, m_k * ch.chi_star + s_k * ch.xi, 0.0)
    w_v = jnp.where(ch.mask, m_v * ch.z_star + s_v * ch.zeta, 0.0)

    # explore: every start of every sample as one row
    starts = jnp.asarray(starts, w_k.dtype)
    newton = partial(_newton_rows, act, theta, ch, w_k, w_v, V_k, V_v)
    chis, vals = newton(w_k[:, None, :] + starts, n_explore)
    best = jnp.argmin(vals, axis=1)
    lowest = _distinct_lowest(chis, vals, jnp.take_along_axis(
        chis, best[:, None, None], axis=1)[:, 0], n_best)

    # refine the start w_k and the n_best lowest distinct rows: ranking rows after a few
    # steps alone picks a wrong basin where the global one is still descending
    rch, rval = newton(jnp.concatenate([chis[:, :1], lowest], axis=1), n_refine)
    b = jnp.argmin(rval, axis=1)
    chi = jnp.take_along_axis(rch, b[:, None, None], axis=1)[:, 0]
    val = jnp.min(rval, axis=1)
    # off branch: the start w_k converged to another basin than the global minimum, higher
    far = jnp.max(jnp.abs(rch[:, 0] - chi), -1) > 1e-3 * (1.0 + jnp.max(jnp.abs(chi), -1))
    off_branch = far & (rval[:, 0] > val + 1e-9 * (1.0 + jnp.abs(val)))
    minima = _distinct_lowest(rch, rval, chi, n_keep) - w_k[:, None, :]
    phi = partial(_reduced_objective, act, theta, w_k=w_k, w_v=w_v, y=ch.y, mask=ch.mask,
                  V_k=V_k, V_v=V_v)
    return ProxResult(_moments(act, theta, ch, phi, chi, w_k, w_v, s_k, s_v, V_k, V_v,
                               off_branch, hessian), minima)


@partial(jax.jit, static_argnames=("act", "n_explore", "n_refine", "shift"))
def prox_channel(act: Activation, ch: ChannelSamples, m_k, q_k, V_k, m_v, q_v, V_v, theta,
                 *, n_explore: int = 6, n_refine: int = 10, shift: float = 4.0) -> ProxMoments:
    """The cold proximal step (:func:`prox_step` from the ``2 L + 1`` :func:`cold_starts`
    ``w_k`` and ``w_k +- shift e_l``): a deterministic function of the order parameters."""
    starts = cold_starts(ch.chi_star.shape[1], shift, ch.chi_star.dtype)
    return prox_step(act, ch, m_k, q_k, V_k, m_v, q_v, V_v, theta, starts,
                     n_explore=n_explore, n_refine=n_refine, n_keep=1).moments


def _moments(act, theta, ch, phi, chi, w_k, w_v, s_k, s_v, V_k, V_v, off_branch,
             hessian: bool = True) -> ProxMoments:
    """The sample means of docs/theory.md at the proximal points ``chi`` (``(n, L)``);
    without ``hessian`` the Hessian-form terms (``tr_k``, ``tr_v``, the gap errors and their
    covariance entries) are NaN."""
    n, L = chi.shape
    g = jax.grad(lambda c: jnp.sum(phi(c)))(chi)
    s = act(chi, ch.mask, theta)
    r = (ch.y - jnp.sum(s * w_v, -1)) / (1.0 + V_v * jnp.sum(s * s, -1))
    z = w_v + V_v * s * r[:, None]
    f_k = (chi - w_k) / V_k
    f_v = (z - w_v) / V_v
    u = jnp.concatenate([chi, z], axis=-1)
    if hessian:
        # once per evaluation: compact batched forms (short compile) rather than unrolled ones
        H = jax.vmap(jax.hessian(partial(_loss_rows, act, theta)))(u, ch.y, ch.mask)
        vinv = jnp.concatenate([jnp.full((L,), 1.0 / V_k), jnp.full((L,), 1.0 / V_v)])
        a_inv = _inv_diag_small(H + jnp.diag(vinv))
        # Tr_a(V^-1 (V^-1 + H)^-1 H) = sum_{i in a} (1/V_a - (A^-1)_ii / V_a^2), A = V^-1 + H
        terms = vinv - a_inv * vinv**2
    else:
        terms = jnp.full((n, 2 * L), jnp.nan, chi.dtype)
    loss = _loss_rows(act, theta, u, ch.y, ch.mask)
    bad = jnp.sqrt(jnp.sum(g**2, -1)) > 1e-6 * (1.0 + jnp.sqrt(jnp.sum(f_k**2, -1)))

    def mean(x):
        return jnp.mean(x)

    def se(x):
        return jnp.std(x) / jnp.sqrt(n)

    d_k = jnp.sum(terms[:, :L], -1) + jnp.sum(f_k * ch.xi, -1) / s_k
    d_v = jnp.sum(terms[:, L:], -1) + jnp.sum(f_v * ch.zeta, -1) / s_v

    per = jnp.stack([jnp.sum(f_k**2, -1), jnp.sum(f_v**2, -1), jnp.sum(f_k * ch.chi_star, -1),
                     jnp.sum(f_v * ch.z_star, -1), jnp.sum(f_k * ch.xi, -1),
                     jnp.sum(f_v * ch.zeta, -1), jnp.sum(terms[:, :L], -1),
                     jnp.sum(terms[:, L:], -1)], axis=-1)  # (n, 8) in MOMENT_NAMES order
    means = jnp.mean(per, axis=0)
    dev = per - means
    cov = dev.T @ dev / ((n - 1) * n)

    return ProxMoments(
        **dict(zip(MOMENT_NAMES, means, strict=True)),
        loss=mean(loss),
        loss_se=se(loss),
        unconverged=mean(bad),
        off_branch=mean(off_branch),
        gap_k_se=se(d_k),
        gap_v_se=se(d_v),
        cov=cov,
    )
