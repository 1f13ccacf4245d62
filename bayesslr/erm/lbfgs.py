"""Full-batch L-BFGS for the regularised attention ERM (docs/estimators.md), batch-native.

:func:`lbfgs_solve_batch` runs ``G`` independent L-BFGS fits that share one training set (starts,
restarts, a ``lam`` grid): each member has its own history, line search and stopping test, and
only the function evaluations are shared, as matrix products over the data for all members
(:func:`bayesslr.erm.objective.value_and_grad_batch`), so one evaluation is one forward and
one backward pass over the data for the whole batch. :func:`lbfgs_solve` is the one-member
case. The protocols of :mod:`bayesslr.erm.protocol` ``vmap`` the batch solver over seeds (each
with its own data).

The solver is the textbook L-BFGS (Nocedal and Wright, Algorithm 7.4: two-loop recursion over the
last ``memory`` curvature pairs, initial inverse Hessian ``gamma = s.y / y.y`` of the newest
pair; by default one such ``gamma`` per parameter block ``k``, ``v``, ``theta``, since ``k``
acts through the attention weights and ``v`` linearly, ``scaling="scalar"`` for one ``gamma I``)
with a backtracking line search that tries the unit step first and accepts on the Armijo condition
or, near a minimiser where float32 cannot resolve the decrease, on Hager and Zhang's approximate
Armijo condition (the same safeguard as optax's zoom line search). The backtracking is spread
over the passes of the solver loop: each pass evaluates *one* trial point per member; a member
whose trial fails halves its step and retries from the same point at the next pass, while the
others move on. A batch therefore never pays a second evaluation for one member's backtracking,
and its cost is the largest per-member number of evaluations, not the sum over iterations of
the largest line search. Pairs with ``s.y <= 0`` are
skipped, so the direction is always a descent direction. It is written here rather than taken
from optax because, measured: optax's L-BFGS ``vmap``-ped over a ``lam`` grid was about three
times *slower* than the same fits one by one (its zoom line search branches with ``lax.cond``,
which under ``vmap`` runs both branches for every member), and a ``vmap`` of a one-member
objective did not turn the shared data into one dense matrix product.

Stopping, per member: the size-free gradient norm ``|grad S| / sqrt(D)`` (see
:mod:`bayesslr.erm.objective`) below ``gtol`` (converged), ``max_iter`` iterations, a line search
that finds no acceptable step in ``MAX_LINESEARCH`` halvings, ``MAX_EVALS_PER_ITER * max_iter``
evaluations, or a non-finite objective. Only the
first counts as ``converged``. A batch runs until its slowest member stops.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import partial
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from bayesslr.core.activations import Activation
from bayesslr.core.jaxconfig import Array
from bayesslr.core.task import Data
from bayesslr.erm.objective import Params, grad_scale, value_and_grad_batch

DEFAULT_MAX_ITER = 1000
DEFAULT_GTOL = 1e-4
DEFAULT_MEMORY = 10
SCALINGS = ("scalar", "block")
# initial inverse Hessian of the two-loop recursion: "scalar" (gamma I, the textbook choice) or
# "block" (one gamma per block k, v, theta); read at call time when a solver gets scaling=None.
# "block" measured on 10-lam x 4-seed grids (benchmarks/README.md, ERM): 45% fewer evaluations
# for softmax (spiked, D = 400), 64% linear, 53% softmax on max-SLR, 26% erf (D = 200), the
# slow small-lam fits cut most, every test error within 0.85 seed-to-seed standard errors
DEFAULT_SCALING = "block"
MAX_LINESEARCH = 30  # successive step halvings before a member is declared stalled
MAX_EVALS_PER_ITER = 4  # evaluation cap: MAX_EVALS_PER_ITER * max_iter
ARMIJO_C1 = 1e-4
APPROX_DEC_RTOL = 1e-6  # relative round-off allowance of the approximate Armijo test
FIRST_STEP_RMS = 0.01  # rms size of the very first step (no curvature known yet)


class SolverResult(NamedTuple):
    """Outcome of one L-BFGS run (leaves gain leading axes under ``vmap``).

    Attributes
    ----------
    params : dict
        Final ``{"k", "v", "theta"}``.
    objective : Array
        Final per-sample objective ``F = S / N``.
    grad_norm : Array
        Final size-free gradient norm ``|grad S| / sqrt(D)``.
    iterations : Array
        L-BFGS iterations used (accepted steps).
    converged : Array
        ``grad_norm < gtol`` with a finite objective.
    evaluations : Array
        Function and gradient evaluations (accepted and rejected trial steps, plus the start).
    """

    params: Params
    objective: Array
    grad_norm: Array
    iterations: Array
    converged: Array
    evaluations: Array


class LbfgsState(NamedTuple):
    x: Array
    f: Array
    g: Array
    S: Array  # (memory, n) steps s_i
    Y: Array  # (memory, n) gradient changes y_i
    rho: Array  # (memory,) 1 / s_i.y_i, 0 for empty or skipped slots
    head: Array  # slot of the next pair
    it: Array  # accepted steps (L-BFGS iterations)
    t: Array  # step length of the next trial
    backtracks: Array  # failed trials since the last accepted step
    evals: Array  # function evaluations
    stalled: Array


def two_loop_direction(st: LbfgsState, memory: int, blocks: tuple[int, ...] = ()) -> Array:
    """``-H g`` by the two-loop recursion; empty slots (``rho = 0``) contribute nothing.

    ``blocks``: the ends of the parameter blocks (``(D, 2 D)`` for ``k``, ``v``, ``theta``)
    for a block-diagonal initial inverse Hessian, one ``gamma = s.y / y.y`` of the newest pair
    per block (the whole vector's ``gamma`` where a block's ``s.y`` or ``y.y`` is not
    positive); empty: the textbook ``gamma I``.
    """
    order = (st.head - 1 - jnp.arange(memory)) % memory  # newest first

    def back(q, i):
        a = st.rho[i] * jnp.dot(st.S[i], q)
        return q - a * st.Y[i], a

    q, a = jax.lax.scan(back, st.g, order)
    newest = order[0]
    sy, yy = jnp.dot(st.S[newest], st.Y[newest]), jnp.dot(st.Y[newest], st.Y[newest])
    n = st.g.shape[0]
    gnorm = jnp.linalg.norm(st.g)
    first = FIRST_STEP_RMS * jnp.sqrt(n) / jnp.maximum(gnorm, jnp.finfo(st.g.dtype).tiny)
    gamma = sy / jnp.where(yy > 0, yy, 1.0)
    if blocks:
        s, y = st.S[newest], st.Y[newest]
        block = jnp.searchsorted(jnp.asarray(blocks), jnp.arange(n), side="right")
        sy_b = jax.ops.segment_sum(s * y, block, num_segments=len(blocks) + 1)
        yy_b = jax.ops.segment_sum(y * y, block, num_segments=len(blocks) + 1)
        ok = (sy_b > 0) & (yy_b > 0)
        gamma = jnp.where(ok, sy_b / jnp.where(ok, yy_b, 1.0), gamma)[block]
    gamma = jnp.where(st.rho[newest] > 0, gamma, first)

    def fwd(r, ia):
        i, ai = ia
        b = st.rho[i] * jnp.dot(st.Y[i], r)
        return r + (ai - b) * st.S[i], None

    r, _ = jax.lax.scan(fwd, gamma * q, (order[::-1], a[::-1]))
    return -r


def _unflatten(x: Array, D: int) -> Params:
    return {"k": x[..., :D], "v": x[..., D:2 * D], "theta": x[..., 2 * D:]}


def _flatten(p: Params) -> Array:
    return jnp.concatenate([p["k"], p["v"], p["theta"]], axis=-1)


def init_state(x0: Array, memory: int) -> LbfgsState:
    """Members before their first evaluation: the loop's first pass evaluates the start (a zero
    step from ``f = inf``), so the objective is traced once in the solver."""
    G, n = x0.shape
    zeros = jnp.zeros((G, memory, n), x0.dtype)
    izeros = jnp.zeros((G,), jnp.int32)
    return LbfgsState(x0, jnp.full((G,), jnp.inf, x0.dtype), jnp.zeros_like(x0), zeros, zeros,
                  jnp.zeros((G, memory), x0.dtype), izeros, izeros, jnp.ones((G,), x0.dtype),
                  izeros, izeros, jnp.zeros((G,), bool))


def scaled_grad_norm(st: LbfgsState, scale: Array) -> Array:
    return jnp.linalg.norm(st.g, axis=-1) * scale


def still_active(st: LbfgsState, max_iter: Array, gtol: Array, scale: Array) -> Array:
    # a NaN norm compares False and stops the member; it is then reported as not converged
    return (st.evals == 0) | (
        (st.it < max_iter) & (st.evals < MAX_EVALS_PER_ITER * max_iter)
        & (scaled_grad_norm(st, scale) >= gtol) & ~st.stalled & jnp.isfinite(st.f))


def lbfgs_step(st: LbfgsState, fg: Callable[[Array], tuple[Array, Array]], *,
               max_iter: Array, gtol: Array, scale: Array, memory: int,
               blocks: tuple[int, ...] = ()) -> LbfgsState:
    """One pass of the solver for every member of the batch ``st``: one trial step each, a
    single shared evaluation of ``fg`` (``(G, n) -> (G,), (G, n)``: objectives and gradients).
    Armijo or approximate Armijo acceptance, halving of the trial step on failure, curvature
    pairs kept only with ``s.y > 0``; members no longer active (:func:`still_active`) keep their
    state. The one-head ERM's passes and the multi-head student's
    (:mod:`bayesslr.multihead.erm`) are this step around their own objective."""
    n = st.x.shape[1]
    dot = jax.vmap(jnp.dot)
    run = still_active(st, max_iter, gtol, scale)
    d = jax.vmap(partial(two_loop_direction, memory=memory, blocks=blocks))(st)
    slope = dot(st.g, d)
    # safeguard: fall back to a scaled steepest descent if d is not a descent direction
    bad = ~(slope < 0)
    sd = -st.g * (FIRST_STEP_RMS * jnp.sqrt(n)
                  / jnp.maximum(jnp.linalg.norm(st.g, axis=-1), 1e-30))[:, None]
    d = jnp.where(bad[:, None], sd, d)
    slope = jnp.where(bad, dot(st.g, d), slope)
    sv = st.t[:, None] * d
    f_new, g_new = fg(st.x + sv)
    armijo = f_new <= st.f + ARMIJO_C1 * st.t * slope
    # approximate Armijo (Hager and Zhang 2005): a decrease below float round-off is
    # accepted when the directional derivative has not turned strongly positive
    approx = ((f_new <= st.f + APPROX_DEC_RTOL * jnp.abs(st.f))
              & (dot(g_new, d) <= (1.0 - 2.0 * ARMIJO_C1) * (-slope)))
    ok = run & jnp.isfinite(f_new) & (armijo | approx)
    failed = run & ~ok
    yv = g_new - st.g
    sy = dot(sv, yv)
    good = ok & (sy > 1e-10 * jnp.linalg.norm(sv, axis=-1) * jnp.linalg.norm(yv, axis=-1))
    slot = jax.nn.one_hot(st.head, memory, dtype=bool) & good[:, None]  # (G, memory)
    S = jnp.where(slot[..., None], sv[:, None, :], st.S)
    Y = jnp.where(slot[..., None], yv[:, None, :], st.Y)
    rho = jnp.where(slot, (1.0 / jnp.where(sy > 0, sy, 1.0))[:, None], st.rho)
    head = jnp.where(good, (st.head + 1) % memory, st.head)
    backtracks = jnp.where(ok, 0, st.backtracks + failed)
    return LbfgsState(
        jnp.where(ok[:, None], st.x + sv, st.x), jnp.where(ok, f_new, st.f),
        jnp.where(ok[:, None], g_new, st.g), S, Y, rho, head, st.it + (ok & (st.evals > 0)),
        jnp.where(ok, 1.0, jnp.where(failed, 0.5 * st.t, st.t)), backtracks,
        st.evals + run, st.stalled | (backtracks > MAX_LINESEARCH))


def _passes(act: Activation, st: LbfgsState, data: Data, lam_k: Array, lam_v: Array,
            weight: Array | None, max_iter: Array, gtol: Array, target: Array, *, memory: int,
            chunk: int | None, scaling: str = "scalar") -> LbfgsState:
    """Solver passes until no member is active, or at most ``target`` are (then the caller may
    move the active ones to a smaller batch)."""
    n_samples, _, D = data.X.shape
    scale = grad_scale(n_samples if weight is None else jnp.sum(weight), D)

    def fg(x: Array) -> tuple[Array, Array]:
        f, g = value_and_grad_batch(act, _unflatten(x, D), data, lam_k, lam_v, weight,
                                    chunk=chunk)
        return f, _flatten(g)

    blocks = (D, 2 * D) if scaling == "block" else ()
    step = partial(lbfgs_step, fg=fg, max_iter=max_iter, gtol=gtol, scale=scale, memory=memory,
                   blocks=blocks)

    def more(st: LbfgsState) -> Array:
        a = still_active(st, max_iter, gtol, scale)
        return jnp.any(a) & (jnp.sum(a) > target)

    return jax.lax.while_loop(more, step, st)


def _result(st: LbfgsState, data: Data, weight: Array | None, gtol: Array) -> SolverResult:
    n_samples, _, D = data.X.shape
    err = scaled_grad_norm(st, grad_scale(n_samples if weight is None else jnp.sum(weight), D))
    converged = (err < gtol) & jnp.isfinite(st.f)
    return SolverResult(_unflatten(st.x, D), st.f, err, st.it, converged, st.evals)


def lbfgs_solve_batch(act: Activation, params0: Params, data: Data, lam_k: Array, lam_v: Array,
                      weight: Array | None = None, *, max_iter: int = DEFAULT_MAX_ITER,
                      gtol: float = DEFAULT_GTOL, memory: int = DEFAULT_MEMORY,
                      chunk: int | None = None, scaling: str | None = None) -> SolverResult:
    """Minimise ``F = S / N`` for ``G`` independent members sharing ``data`` (docs/estimators.md).

    Every member runs its own L-BFGS (own history, own line search, own stopping test); only the
    function evaluations are shared, as one pass over the data for all members
    (:func:`bayesslr.erm.objective.value_and_grad_batch`). A member that has stopped is frozen
    while the others continue, so each member's result is that of a run on its own. This is the
    traceable form (usable under ``jit`` and ``vmap``): the batch runs until its slowest member
    stops, and stopped members still take part in the shared evaluations.
    :func:`lbfgs_solve_compact` drops them instead.

    Parameters
    ----------
    act : Activation
        The attention activation ``sigma``.
    params0 : dict
        Starts ``{"k": (G, D), "v": (G, D), "theta": (G, P)}``.
    data : Data
        Training data (``X`` of shape ``(N, L_max, D)``), shared by the members.
    lam_k, lam_v : Array
        ``(G,)`` ridge penalties on ``k`` and ``v``.
    weight : Array, optional
        ``(N,)`` zeros and ones: the samples fitted (the others are held out for validation).
    max_iter : int
        Iteration cap.
    gtol : float
        Tolerance on ``|grad S| / sqrt(D)``.
    memory : int
        L-BFGS history size.
    chunk : int, optional
        Samples per chunk of the evaluation (default:
        :data:`bayesslr.erm.objective.CHUNK_BYTES`, the whole data in one chunk).
    scaling : {"scalar", "block"}, optional
        Initial inverse Hessian of the two-loop recursion: ``gamma I`` with
        ``gamma = s.y / y.y`` of the newest pair (the textbook choice), or one such ``gamma``
        per block ``k``, ``v``, ``theta`` (``k`` acts through the attention weights and ``v``
        linearly, so their curvatures differ). Default :data:`DEFAULT_SCALING`.

    Returns
    -------
    SolverResult
        Leaves with leading axis ``G``.
    """
    x0 = _flatten(params0)
    G = x0.shape[0]
    lam_k = jnp.broadcast_to(lam_k, (G,))
    lam_v = jnp.broadcast_to(lam_v, (G,))
    max_iter, gtol = jnp.asarray(max_iter), jnp.asarray(gtol, x0.dtype)
    st = _passes(act, init_state(x0, memory), data, lam_k, lam_v, weight, max_iter, gtol,
                 jnp.asarray(0), memory=memory, chunk=chunk, scaling=_scaling(scaling))
    return _result(st, data, weight, gtol)


_passes_jit = jax.jit(_passes, static_argnames=("act", "memory", "chunk", "scaling"))


def _scaling(scaling: str | None) -> str:
    scaling = DEFAULT_SCALING if scaling is None else scaling
    if scaling not in SCALINGS:
        raise ValueError(f"scaling={scaling!r} is not allowed; allowed: {', '.join(SCALINGS)}")
    return scaling


_result_jit = jax.jit(_result)


def _bucket(n: int) -> int:
    """Batch size holding ``n`` active members: the next power of two (few compilations)."""
    return 1 << max(0, int(n) - 1).bit_length()


def lbfgs_solve_compact(act: Activation, params0: Params, data: Data, lam_k: Any, lam_v: Any,
                        weight: Array | None = None, *, max_iter: int = DEFAULT_MAX_ITER,
                        gtol: float = DEFAULT_GTOL, memory: int = DEFAULT_MEMORY,
                        chunk: int | None = None, compact: bool = True,
                        passes: dict[int, int] | None = None,
                        scaling: str | None = None) -> SolverResult:
    """:func:`lbfgs_solve_batch`, with the batch shrunk as its members stop (not traceable).

    The members run together until the active ones fit the next smaller power of two; they are
    then moved to a batch of that size (frozen copies pad it), and so on down to one member. A
    stopped member therefore stops costing evaluations: the batch costs about its slowest
    member's evaluations at the cost of a small batch, instead of at the cost of the full one.
    Each member's iterations are those of a run on its own (its history, line search and
    stopping test never depend on the others; only the rounding of the shared matrix products
    can differ with the batch size). Batch sizes are powers of two below ``G`` (and
    ``G`` itself), so a sweep compiles the solver at most ``1 + log2 G`` times per data shape.

    Parameters
    ----------
    act, params0, data, lam_k, lam_v, weight, max_iter, gtol, memory, chunk, scaling :
        As for :func:`lbfgs_solve_batch`.
    compact : bool
        Shrink the batch (False: run it whole, as :func:`lbfgs_solve_batch`).
    passes : dict, optional
        Receives, per batch size, the number of shared evaluations run at that size (what
        the batch cost: one pass over the data each).

    Returns
    -------
    SolverResult
        Leaves with leading axis ``G`` (device arrays).
    """
    x0 = _flatten(params0)
    G = x0.shape[0]
    lam_k = jnp.broadcast_to(jnp.asarray(lam_k, x0.dtype), (G,))
    lam_v = jnp.broadcast_to(jnp.asarray(lam_v, x0.dtype), (G,))
    max_iter, gtol = jnp.asarray(max_iter), jnp.asarray(gtol, x0.dtype)
    full = init_state(x0, memory)
    run = partial(_passes_jit, act, data=data, weight=weight, max_iter=max_iter, gtol=gtol,
                  memory=memory, chunk=chunk, scaling=_scaling(scaling))
    if not compact or G == 1:
        full = run(full, lam_k=lam_k, lam_v=lam_v, target=jnp.asarray(0))
        if passes is not None:
            passes[G] = passes.get(G, 0) + int(jnp.max(full.evals))
        return _result_jit(full, data, weight, gtol)
    n_samples, _, D = data.X.shape
    scale = grad_scale(n_samples if weight is None else jnp.sum(weight), D)
    members = np.arange(G)  # which member sits in each slot of the current batch
    real = np.ones(G, bool)  # slots holding a member (the others are frozen padding)
    cur, lk, lv = full, lam_k, lam_v
    while True:
        size = len(members)
        target = _bucket(size) // 2  # the next smaller power of two (0: run to the end)
        before = cur.evals
        cur = run(cur, lam_k=lk, lam_v=lv, target=jnp.asarray(target))
        if passes is not None:  # the member active longest in this stage counts its passes
            passes[size] = passes.get(size, 0) + int(jnp.max(cur.evals - before))
        slots = np.flatnonzero(real)
        at = members[slots]
        full = jax.tree_util.tree_map(lambda F, C, at=at, slots=slots: F.at[at].set(C[slots]),
                                      full, cur)
        active = np.asarray(still_active(cur, max_iter, gtol, scale)) & real
        n_active = int(active.sum())
        if n_active == 0:
            break
        keep = members[active]
        new = _bucket(n_active)
        members = np.concatenate([keep, np.full(new - n_active, keep[0])])
        real = np.arange(new) < n_active
        idx = jnp.asarray(members)
        cur = jax.tree_util.tree_map(lambda F, idx=idx: F[idx], full)
        cur = cur._replace(stalled=cur.stalled | jnp.asarray(~real))  # padding stays frozen
        lk, lv = lam_k[idx], lam_v[idx]
    return _result_jit(full, data, weight, gtol)


def lbfgs_solve(act: Activation, params0: Params, data: Data, lam_k: Array, lam_v: Array,
                weight: Array | None = None, *, max_iter: int = DEFAULT_MAX_ITER,
                gtol: float = DEFAULT_GTOL, memory: int = DEFAULT_MEMORY) -> SolverResult:
    """One fit: :func:`lbfgs_solve_batch` with a single member.

    ``params0`` is ``{"k": (D,), "v": (D,), "theta": (P,)}``; ``lam_k, lam_v`` are scalars.
    """
    p = jax.tree_util.tree_map(lambda a: jnp.asarray(a)[None], params0)
    res = lbfgs_solve_batch(act, p, data, jnp.reshape(lam_k, (1,)), jnp.reshape(lam_v, (1,)),
                            weight, max_iter=max_iter, gtol=gtol, memory=memory)
    return jax.tree_util.tree_map(lambda a: a[0], res)
