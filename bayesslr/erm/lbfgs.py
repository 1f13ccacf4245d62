"""Full-batch L-BFGS for the regularised attention ERM (spec section 4), one fit at a time.

:func:`lbfgs_solve` fits one parameter vector; the protocols of :mod:`bayesslr.erm.protocol`
``vmap`` it over starts, restarts and a ``lam`` grid that share the same data (the data matrix is
then read once per function evaluation for the whole batch, see
:func:`bayesslr.erm.objective.fields`) and over seeds.

The solver is the textbook L-BFGS (Nocedal and Wright, Algorithm 7.4: two-loop recursion over the
last ``memory`` curvature pairs, initial Hessian ``gamma I`` with ``gamma = s.y / y.y``) with a
backtracking line search that tries the unit step first and accepts on the Armijo condition
or, near a minimiser where float32 cannot resolve the decrease, on Hager and Zhang's approximate
Armijo condition (the same safeguard as optax's zoom line search). Pairs with ``s.y <= 0`` are
skipped, so the direction is always a descent direction. It is written here rather than taken
from optax because optax's zoom line search branches with ``lax.cond`` on the function value:
under ``vmap`` both branches run for every member, which made a batched ``lam`` grid about three
times *slower* than the same fits one by one (measured). Here each iteration of a batch costs
the function evaluations of its slowest line search, usually one.

Stopping: the size-free gradient norm ``|grad S| / sqrt(D)`` (see :mod:`bayesslr.erm.objective`)
below ``gtol`` (converged), ``max_iter`` iterations, a line search that finds no decrease in
``max_linesearch`` halvings (float32 round-off near a minimiser), or a non-finite objective. Only
the first counts as ``converged``.
"""

from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp
from jax.flatten_util import ravel_pytree

from bayesslr.activations import Activation
from bayesslr.erm.objective import Params, grad_scale, objective
from bayesslr.jaxconfig import Array
from bayesslr.task import Data

DEFAULT_MAX_ITER = 1000
DEFAULT_GTOL = 1e-4
DEFAULT_MEMORY = 10
MAX_LINESEARCH = 30
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
        L-BFGS iterations used.
    converged : Array
        ``grad_norm < gtol`` with a finite objective.
    """

    params: Params
    objective: Array
    grad_norm: Array
    iterations: Array
    converged: Array


class _State(NamedTuple):
    x: Array
    f: Array
    g: Array
    S: Array  # (memory, n) steps s_i
    Y: Array  # (memory, n) gradient changes y_i
    rho: Array  # (memory,) 1 / s_i.y_i, 0 for empty or skipped slots
    head: Array  # slot of the next pair
    it: Array
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


def lbfgs_solve(act: Activation, params0: Params, data: Data, lam_k: Array, lam_v: Array,
                weight: Array | None = None, *, max_iter: int = DEFAULT_MAX_ITER,
                gtol: float = DEFAULT_GTOL, memory: int = DEFAULT_MEMORY) -> SolverResult:
    """Minimise ``F(params) = S / N`` from ``params0`` (spec section 4).

    Parameters
    ----------
    act : Activation
        The attention activation ``sigma``.
    params0 : dict
        Start ``{"k": (D,), "v": (D,), "theta": (P,)}``.
    data : Data
        Training data (``X`` of shape ``(N, L_max, D)``).
    lam_k, lam_v : Array
        Ridge penalties on ``k`` and ``v`` (scalars; traced, so a ``lam`` grid is a ``vmap``).
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
    """
    n_samples, _, D = data.X.shape
    scale = grad_scale(n_samples if weight is None else jnp.sum(weight), D)
    x0, unravel = ravel_pytree(params0)

    def fg(x: Array) -> tuple[Array, Array]:
        return jax.value_and_grad(
            lambda z: objective(act, unravel(z), data, lam_k, lam_v, weight))(x)

    f0, g0 = fg(x0)
    n = x0.shape[0]
    zeros = jnp.zeros((memory, n), x0.dtype)
    st0 = _State(x0, f0, g0, zeros, zeros, jnp.zeros((memory,), x0.dtype), jnp.asarray(0),
                 jnp.asarray(0), jnp.asarray(False))

    def gnorm(st: _State) -> Array:
        return jnp.linalg.norm(st.g) * scale

    def keep_going(st: _State) -> Array:
        # a NaN norm compares False and stops the loop; it is then reported as not converged
        return (st.it < max_iter) & (gnorm(st) >= gtol) & ~st.stalled & jnp.isfinite(st.f)

    def step(st: _State) -> _State:
        d = _direction(st, memory)
        slope = jnp.dot(st.g, d)
        # safeguard: fall back to a scaled steepest descent if d is not a descent direction
        bad = ~(slope < 0)
        d = jnp.where(bad, -st.g * FIRST_STEP_RMS * jnp.sqrt(n) / jnp.linalg.norm(st.g), d)
        slope = jnp.where(bad, jnp.dot(st.g, d), slope)

        def accept(t, f_new, g_new):
            armijo = f_new <= st.f + ARMIJO_C1 * t * slope
            # approximate Armijo (Hager and Zhang 2005): a decrease below float round-off is
            # accepted when the directional derivative has not turned strongly positive
            approx = ((f_new <= st.f + APPROX_DEC_RTOL * jnp.abs(st.f))
                      & (jnp.dot(g_new, d) <= (1.0 - 2.0 * ARMIJO_C1) * (-slope)))
            return jnp.isfinite(f_new) & (armijo | approx)

        def ls_cond(c):
            t, f_new, g_new, k = c
            return ~accept(t, f_new, g_new) & (k <= MAX_LINESEARCH)

        def ls_body(c):
            t, _, _, k = c
            t = 0.5 * t
            f_new, g_new = fg(st.x + t * d)
            return t, f_new, g_new, k + 1

        # the first pass of the loop tries t = 1 (one traced evaluation site: faster compiles)
        t, f_new, g_new, _ = jax.lax.while_loop(
            ls_cond, ls_body, (jnp.asarray(2.0, x0.dtype), jnp.asarray(jnp.inf, x0.dtype),
                               st.g, 0))
        ok = accept(t, f_new, g_new)
        s = t * d
        y = g_new - st.g
        sy = jnp.dot(s, y)
        good_pair = ok & (sy > 1e-10 * jnp.linalg.norm(s) * jnp.linalg.norm(y))
        S = jnp.where(good_pair, st.S.at[st.head].set(s), st.S)
        Y = jnp.where(good_pair, st.Y.at[st.head].set(y), st.Y)
        rho = jnp.where(good_pair, st.rho.at[st.head].set(1.0 / jnp.where(sy > 0, sy, 1.0)),
                        st.rho)
        head = jnp.where(good_pair, (st.head + 1) % memory, st.head)
        x = jnp.where(ok, st.x + s, st.x)
        return _State(x, jnp.where(ok, f_new, st.f), jnp.where(ok, g_new, st.g), S, Y, rho,
                      head, st.it + 1, ~ok)

    st = jax.lax.while_loop(keep_going, step, st0)
    err = gnorm(st)
    converged = (err < gtol) & jnp.isfinite(st.f)
    return SolverResult(unravel(st.x), st.f, err, st.it, converged)
