"""NUTS on a flat parameter vector with a gradient-based warm-up (docs/model.md §6).

The transition is NumPyro's multinomial NUTS (``numpyro.infer.hmc_util.build_tree``, the same
trajectory builder as ``numpyro.infer.NUTS``); this module supplies what happens around it:

* **Warm-up** (:func:`run`): step size by dual averaging (Hoffman & Gelman 2014, target
  acceptance ``target_accept``), and a diagonal inverse mass matrix estimated from the draws
  *and their gradients*, ``M^-1_ii = sqrt(Var[z_i] / Var[dU/dz_i])``. For a Gaussian target
  ``Var[dU/dz_i] = 1 / Var[z_i]`` coordinate-wise when the covariance is diagonal, so the
  estimate is exact there and, unlike ``Var[z_i]`` alone, it is useful after a handful of draws
  (the idea behind nutpie's default adaptation; Seyboldt 2023). The estimate is refreshed after
  every warm-up draw from a running window of draws, restarted every ``switch`` draws from a
  background window (``switch = 10`` in the first 30% of the warm-up, 80 after), and frozen
  for the last 15% of the warm-up, where only the step size adapts; the final step size is the
  geometric mean of that last window's dual-averaging iterates.
* **Pooling across chains**: when the chains are batched (``vmap``/``pmap`` with an axis name)
  the variance estimates and the acceptance statistic are averaged over chains, so every chain
  uses the same mass matrix and step size, estimated from ``chains`` times more draws. Chains
  stay independent after the warm-up (the adaptation is frozen); the warm-up draws are
  discarded.
* **Draws**: fixed step size and mass matrix, in the same scan as the warm-up (:func:`run`).

Everything is a pure function of JAX arrays, traced once inside the sampler's single ``jit``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import NamedTuple

import jax
import jax.numpy as jnp
from jax import lax
from numpyro.infer.hmc_util import (
    IntegratorState,
    build_tree,
    dual_averaging,
    euclidean_kinetic_energy,
    velocity_verlet,
)

from bayesslr.core.jaxconfig import Array, PRNGKey

# window fractions and switch frequencies of the gradient-based warm-up (see module docstring)
EARLY_FRACTION = 0.3
FINAL_FRACTION = 0.15
EARLY_SWITCH = 10
LATE_SWITCH = 80
MAX_DELTA_ENERGY = 1000.0  # energy error that counts as a divergence (NumPyro's and Stan's)
_CLIP = (1e-10, 1e10)  # bounds of the inverse mass matrix entries


class Transition(NamedTuple):
    """One NUTS transition from a flat state.

    Attributes
    ----------
    z, pe, grad : Array
        New position ``(P,)``, its potential energy and gradient.
    accept : Array
        Mean Metropolis acceptance probability over the trajectory (the dual-averaging
        statistic).
    steps : Array
        Leapfrog steps (gradient evaluations).
    diverging : Array
        Whether the trajectory hit an energy error above :data:`MAX_DELTA_ENERGY`.
    """

    z: Array
    pe: Array
    grad: Array
    accept: Array
    steps: Array
    diverging: Array


def nuts_transition(potential: Callable[[Array], Array], z: Array, pe: Array, grad: Array,
                    step_size: Array, inv_mass: Array, key: PRNGKey,
                    max_tree_depth: int) -> Transition:
    """One multinomial NUTS transition with a diagonal inverse mass matrix ``inv_mass``."""
    k_mom, k_tree = jax.random.split(key)
    r = jax.random.normal(k_mom, z.shape, z.dtype) / jnp.sqrt(inv_mass)
    _, vv_update = velocity_verlet(potential, euclidean_kinetic_energy)
    tree = build_tree(vv_update, euclidean_kinetic_energy, IntegratorState(z, r, pe, grad),
                      inv_mass, step_size, k_tree, max_delta_energy=MAX_DELTA_ENERGY,
                      max_tree_depth=max_tree_depth)
    accept = tree.sum_accept_probs / jnp.maximum(tree.num_proposals, 1)
    return Transition(tree.z_proposal, tree.z_proposal_pe, tree.z_proposal_grad, accept,
                      tree.num_proposals, tree.diverging)


def initial_step_size(potential: Callable[[Array], Array], z: Array, pe: Array, grad: Array,
                      inv_mass: Array, key: PRNGKey,
                      step0: float = 1.0) -> tuple[Array, Array]:
    """A step size whose single leapfrog step has acceptance near 0.8 (Hoffman & Gelman 2014,
    algorithm 4): double or halve ``step0`` until ``exp(-dH)`` crosses 0.8, at most 60 times.
    Returns the step size and the number of gradient evaluations spent."""
    _, vv_update = velocity_verlet(potential, euclidean_kinetic_energy)
    r = jax.random.normal(key, z.shape, z.dtype) / jnp.sqrt(inv_mass)
    h0 = pe + euclidean_kinetic_energy(inv_mass, r)
    log_target = jnp.log(0.8)

    def log_accept(eps):
        s = vv_update(eps, inv_mass, IntegratorState(z, r, pe, grad))
        dh = s.potential_energy + euclidean_kinetic_energy(inv_mass, s.r) - h0
        return jnp.where(jnp.isfinite(dh), -dh, -jnp.inf)

    # one call site of the integrator (each site is compiled separately)
    def cond(c):
        _, _, i, done, _ = c
        return (~done) & (i < 60)

    def body(c):
        eps, direction, i, _, _ = c
        above = log_accept(eps) > log_target
        d = jnp.where(i == 0, jnp.where(above, 1.0, -1.0), direction).astype(eps.dtype)
        crossed = (i > 0) & jnp.where(d > 0, ~above, above)
        best = jnp.where(d > 0, eps / 2.0, eps)  # going up: the last step size above target
        return eps * 2.0 ** d, d, i + 1, crossed, best

    eps0 = jnp.asarray(step0, z.dtype)
    c0 = (eps0, jnp.ones((), z.dtype), jnp.zeros((), jnp.int32), jnp.array(False), eps0)
    _, _, n, _, eps = lax.while_loop(cond, body, c0)
    return eps, n


class _Moments(NamedTuple):
    """Running (Welford) mean and sum of squared deviations of draws and gradients."""

    n: Array
    mean_z: Array
    m2_z: Array
    mean_g: Array
    m2_g: Array


def _empty(P: int, dtype) -> _Moments:
    zero = jnp.zeros((P,), dtype)
    return _Moments(jnp.zeros((), dtype), zero, zero, zero, zero)


def _add(m: _Moments, z: Array, g: Array) -> _Moments:
    n = m.n + 1
    dz, dg = z - m.mean_z, g - m.mean_g
    mean_z, mean_g = m.mean_z + dz / n, m.mean_g + dg / n
    return _Moments(n, mean_z, m.m2_z + dz * (z - mean_z), mean_g, m.m2_g + dg * (g - mean_g))


def _pmean(x: Array, axis_name: str | None) -> Array:
    return x if axis_name is None else lax.pmean(x, axis_name)


def _estimate(m: _Moments, axis_name: str | None) -> Array:
    """``sqrt(Var z / Var g)`` per coordinate (within-chain variances, pooled over chains)."""
    var_z = _pmean(m.m2_z, axis_name) / jnp.maximum(m.n - 1, 1)
    var_g = _pmean(m.m2_g, axis_name) / jnp.maximum(m.n - 1, 1)
    est = jnp.sqrt(var_z / var_g)
    return jnp.clip(jnp.where(jnp.isfinite(est), est, 1.0), *_CLIP)


def schedule(num_warmup: int) -> tuple[list[bool], list[bool], int, int]:
    """Static warm-up schedule: per iteration, whether the background window becomes the
    foreground (``switch``) and whether the mass matrix is re-estimated (``change``); the first
    re-estimation and the start of the final step-size-only window."""
    n_final = max(1, int(FINAL_FRACTION * num_warmup)) if num_warmup >= 20 else num_warmup
    final_start = num_warmup - n_final
    early_end = int(EARLY_FRACTION * num_warmup)
    switch, change = [], []
    fg = bg = 0
    for t in range(num_warmup):
        sw = ch = False
        if t < final_start:
            fg, bg = fg + 1, bg + 1
            freq = EARLY_SWITCH if t < early_end else LATE_SWITCH
            if bg >= freq and t + freq <= final_start:
                fg, bg, sw = bg, 0, True
            ch = fg >= 3
        switch.append(sw)
        change.append(ch)
    first = change.index(True) if any(change) else -1
    return switch, change, first, final_start


class RunResult(NamedTuple):
    """Draws and statistics of :func:`run` (one chain).

    Attributes
    ----------
    z : Array, shape (draws, P)
        Positions after the warm-up.
    log_density : Array, shape (draws,)
        ``-U(z)``.
    diverging : Array of bool, shape (draws,)
    steps : Array of int, shape (draws,)
        Leapfrog steps per draw.
    steps_warmup : Array of int, shape ()
        Gradient evaluations of the warm-up (start and step-size searches included).
    step_size : Array, shape ()
        Adapted step size.
    inv_mass : Array, shape (P,)
        Adapted diagonal inverse mass matrix.
    """

    z: Array
    log_density: Array
    diverging: Array
    steps: Array
    steps_warmup: Array
    step_size: Array
    inv_mass: Array


def run_warmup(potential: Callable[[Array], Array], z0: Array, key: PRNGKey, num_warmup: int,
        num_draws: int, *, target_accept: float, max_tree_depth: int, adapt_mass: bool = True,
        axis_name: str | None = None) -> RunResult:
    """Gradient-based warm-up from ``z0`` then ``num_draws`` draws (module docstring).

    One ``lax.scan`` over warm-up and draws, so the NUTS transition is traced (and compiled)
    once; the adaptation runs under a branch on the iteration index, which is the same for
    every chain (a true branch under ``vmap``).

    Parameters
    ----------
    potential : callable
        ``z (P,) -> U(z)``, minus the log density.
    z0 : Array, shape (P,)
        Start.
    key : PRNGKey
    num_warmup, num_draws : int
        Warm-up iterations (``>= 1``) and kept draws (static).
    target_accept : float
        Target mean acceptance of the dual averaging.
    max_tree_depth : int
    adapt_mass : bool
        Adapt the diagonal mass matrix (else identity; step size only).
    axis_name : str, optional
        Batch axis of the chains: pool the adaptation over it.
    """
    P = z0.shape[0]
    dtype = z0.dtype
    pe0, g0 = jax.value_and_grad(potential)(z0)
    # first guess from the gradient at the start: |dU/dz_i| ~ 1/sd_i at a typical point
    # of a Gaussian, so 1/|g| is a geometric compromise between sd and variance
    if adapt_mass:
        inv0 = jnp.clip(1.0 / jnp.sqrt(_pmean(g0 * g0, axis_name)), 1e-3, 1e3)
        inv0 = jnp.where(jnp.isfinite(inv0), inv0, 1.0).astype(dtype)
    else:
        inv0 = jnp.ones((P,), dtype)
    da_init, da_update = dual_averaging()
    switch, change, first, final_start = schedule(num_warmup)
    n_final = num_warmup - final_start
    pad = [False] * num_draws
    xs = (jnp.arange(num_warmup + num_draws), jnp.asarray(switch + pad),
          jnp.asarray(change + pad))
    zero_steps = jnp.zeros((), jnp.result_type(int))

    def search(z, pe, g, inv, eps, key):
        new, n = initial_step_size(potential, z, pe, g, inv, key, eps)
        new = jnp.exp(_pmean(jnp.log(new), axis_name)).astype(dtype)
        return new, da_init(jnp.log(10.0 * new)), n.astype(zero_steps.dtype)

    def adapt(t, sw, ch, tr, ad):
        eps, da, inv, fg, bg, log_eps_sum = ad
        da = da_update(target_accept - _pmean(tr.accept, axis_name), da)
        eps = jnp.exp(da[0]).astype(dtype)
        if adapt_mass:
            in_window = t < final_start
            fg_new, bg_new = _add(fg, tr.z, tr.grad), _add(bg, tr.z, tr.grad)
            fg_new = jax.tree.map(lambda b, f: jnp.where(sw, b, f), bg_new, fg_new)
            bg_new = jax.tree.map(lambda e, b: jnp.where(sw, e, b), _empty(P, dtype), bg_new)
            fg = jax.tree.map(lambda a, b: jnp.where(in_window, a, b), fg_new, fg)
            bg = jax.tree.map(lambda a, b: jnp.where(in_window, a, b), bg_new, bg)
            inv = jnp.where(ch, _estimate(fg, axis_name), inv)
        log_eps_sum = log_eps_sum + jnp.where(t >= final_start, jnp.log(eps), 0.0)
        # end of the warm-up: the geometric mean of the final window's step sizes
        eps = jnp.where(t == num_warmup - 1, jnp.exp(log_eps_sum / n_final), eps).astype(dtype)
        return eps, da, inv, fg, bg, log_eps_sum

    def step(carry, x):
        t, sw, ch = x
        z, pe, g, key, ad = carry
        key, k_tr, k_eps = jax.random.split(key, 3)
        # step-size search at the start and once the first mass-matrix estimate replaces the
        # gradient guess (one call site: each site of the integrator is compiled apart);
        # t is not batched over chains, so these are true branches under vmap
        eps, da, extra = lax.cond((t == 0) | (t == first + 1), search,
                                  lambda *a: (ad[0], ad[1], zero_steps),
                                  z, pe, g, ad[2], ad[0], k_eps)
        ad = (eps, da, *ad[2:])
        tr = nuts_transition(potential, z, pe, g, eps, ad[2], k_tr, max_tree_depth)
        ad = lax.cond(t < num_warmup, adapt, lambda *a: ad, t, sw, ch, tr, ad)
        return (tr.z, tr.pe, tr.grad, key, ad), (tr.z, -tr.pe, tr.diverging,
                                                  tr.steps + extra.astype(tr.steps.dtype))

    eps0 = jnp.ones((), dtype)
    ad0 = (eps0, da_init(jnp.log(10.0 * eps0)), inv0, _empty(P, dtype), _empty(P, dtype),
           jnp.zeros((), dtype))
    carry, (z, logp, div, steps) = lax.scan(step, (z0, pe0, g0, key, ad0), xs)
    eps, _, inv, _, _, _ = carry[4]
    w = num_warmup
    steps_w = jnp.sum(steps[:w]) + 1  # + the gradient at the start
    return RunResult(z[w:], logp[w:], div[w:], steps[w:], steps_w, eps, inv)
