"""Full-batch L-BFGS for the regularised attention ERM (spec section 4), batch-native.

:func:`lbfgs_solve_batch` runs ``G`` independent L-BFGS fits that share one training set (starts,
restarts, a ``lam`` grid): each member has its own history, line search and stopping test, and
only the function evaluations are shared, as one matrix product over the data for all members
(:func:`bayesslr.erm.objective.objective_batch`), so the data matrix is read once per evaluation
for the whole batch. :func:`lbfgs_solve` is the one-member case. The protocols of
:mod:`bayesslr.erm.protocol` ``vmap`` the batch solver over seeds (each with its own data).

The solver is the textbook L-BFGS (Nocedal and Wright, Algorithm 7.4: two-loop recursion over the
last ``memory`` curvature pairs, initial Hessian ``gamma I`` with ``gamma = s.y / y.y``) with a
backtracking line search that tries the unit step first and accepts on the Armijo condition
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

from functools import partial
from typing import NamedTuple

import jax
import jax.numpy as jnp

from bayesslr.activations import Activation
from bayesslr.erm.objective import Params, grad_scale, objective_batch
from bayesslr.jaxconfig import Array
from bayesslr.task import Data

DEFAULT_MAX_ITER = 1000
DEFAULT_GTOL = 1e-4
DEFAULT_MEMORY = 10
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


class _State(NamedTuple):
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


def _direction(st: _State, memory: int) -> Array:
    """``-H g`` by the two-loop recursion; empty slots (``rho = 0``) contribute nothing."""
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
    gamma = jnp.where(st.rho[newest] > 0, sy / jnp.where(yy > 0, yy, 1.0), first)

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


def lbfgs_solve_batch(act: Activation, params0: Params, data: Data, lam_k: Array, lam_v: Array,
                      weight: Array | None = None, *, max_iter: int = DEFAULT_MAX_ITER,
                      gtol: float = DEFAULT_GTOL, memory: int = DEFAULT_MEMORY) -> SolverResult:
    """Minimise ``F = S / N`` for ``G`` independent members sharing ``data`` (spec section 4).

    Every member runs its own L-BFGS (own history, own line search, own stopping test); only the
    function evaluations are shared, as one matrix product over the data for all members
    (:func:`bayesslr.erm.objective.objective_batch`). A member that has stopped is frozen while
    the others continue, so each member's result is that of a run on its own.

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

    Returns
    -------
    SolverResult
        Leaves with leading axis ``G``.
    """
    n_samples, _, D = data.X.shape
    scale = grad_scale(n_samples if weight is None else jnp.sum(weight), D)
    x0 = _flatten(params0)
    G, n = x0.shape
    lam_k = jnp.broadcast_to(lam_k, (G,))
    lam_v = jnp.broadcast_to(lam_v, (G,))

    def fg(x: Array) -> tuple[Array, Array]:
        def total(z):
            f = objective_batch(act, _unflatten(z, D), data, lam_k, lam_v, weight)
            return jnp.sum(f), f

        g, f = jax.grad(total, has_aux=True)(x)  # members are independent: row i = grad F_i
        return f, g

    # the start is evaluated by the first pass of the loop (zero step from f = inf, g = 0), so
    # the objective is traced once: compiles are markedly faster
    zeros = jnp.zeros((G, memory, n), x0.dtype)
    izeros = jnp.zeros((G,), jnp.int32)
    st0 = _State(x0, jnp.full((G,), jnp.inf, x0.dtype), jnp.zeros_like(x0), zeros, zeros,
                 jnp.zeros((G, memory), x0.dtype), izeros, izeros, jnp.ones((G,), x0.dtype),
                 izeros, izeros, jnp.zeros((G,), bool))
    dot = jax.vmap(jnp.dot)

    def gnorm(st: _State) -> Array:
        return jnp.linalg.norm(st.g, axis=-1) * scale

    def active(st: _State) -> Array:
        # a NaN norm compares False and stops the member; it is then reported as not converged
        return (st.evals == 0) | (
            (st.it < max_iter) & (st.evals < MAX_EVALS_PER_ITER * max_iter)
            & (gnorm(st) >= gtol) & ~st.stalled & jnp.isfinite(st.f))

    def step(st: _State) -> _State:
        """One trial step per member: a single shared function evaluation per pass."""
        run = active(st)
        d = jax.vmap(partial(_direction, memory=memory))(st)
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
        return _State(
            jnp.where(ok[:, None], st.x + sv, st.x), jnp.where(ok, f_new, st.f),
            jnp.where(ok[:, None], g_new, st.g), S, Y, rho, head, st.it + (ok & (st.evals > 0)),
            jnp.where(ok, 1.0, jnp.where(failed, 0.5 * st.t, st.t)), backtracks,
            st.evals + run, st.stalled | (backtracks > MAX_LINESEARCH))

    st = jax.lax.while_loop(lambda st: jnp.any(active(st)), step, st0)
    err = gnorm(st)
    converged = (err < gtol) & jnp.isfinite(st.f)
    return SolverResult(_unflatten(st.x, D), st.f, err, st.it, converged, st.evals)


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
