"""Parallel tempering (replica exchange) on the SLR posterior, with HMC moves (issue 24).

``R`` replicas per chain sample the tempered posteriors ``p_b(k, v) ∝ prior(k, v) *
likelihood(k, v)^b`` on a ladder ``1 = b_0 > b_1 > ... > b_{R-1} = beta_min`` (the prior and
likelihood of the marginal model, :mod:`bayesslr.bayes.model`; at small ``b`` the tempered
likelihood is that of fewer samples, as in tempered SMC). Each iteration:

1. every replica makes one HMC transition of ``integration_steps`` leapfrog steps (step size
   jittered uniformly in ``[0.8, 1.2]`` times its own, diagonal mass matrix of its own) on its
   tempered target;
2. neighbours exchange states by the non-reversible DEO scheme (Okabe et al. 2001, Syed et al.
   2021): at even iterations the pairs ``(0, 1), (2, 3), ...``, at odd ones ``(1, 2), ...``;
   a swap of ``(i, i + 1)`` is accepted with probability
   ``min(1, exp((b_i - b_{i+1}) (l_{i+1} - l_i)))``, ``l`` the log-likelihoods.

The draws are those of replica 0 (``b = 1``, the posterior) after the warm-up, thinned to at
most ``max_draws`` per chain. ``chains`` independent replica systems run vectorised.

**Adaptation** (warm-up only, then frozen): rounds of doubling length. Within a round each
replica's step size follows its acceptance (``log eps += 0.05 (acc - 0.65)`` per iteration,
the mean over chains). After a round: each replica's inverse mass matrix is the variance of
its positions over the round (pooled over chains, regularised as Stan does), and the ladder
is re-placed by the round-trip-optimal rule of Syed et al. (2021): with ``r_i`` the rejection
rate of the pair ``(i, i + 1)``, the cumulative barrier ``Lambda(b)`` is piecewise linear
through ``(b_i, sum_{j < i} r_j)`` and the new ladder puts equal increments of ``Lambda``
between neighbours (endpoints ``beta_min`` and 1 fixed).

**Budget.** One iteration costs ``chains * replicas * integration_steps`` gradient
evaluations (the gradient at the start of a transition is carried from the last, and the
log-likelihood the swaps need comes with every gradient). Iterations run in compiled chunks of
``chunk``; the run stops at the first chunk that reaches the budget.

**Diagnostics.** The swap acceptance rate of every neighbouring pair (sampling phase), the
number of round trips (a replica's state travelling from ``b = 1`` to ``beta_min`` and back,
followed through the swaps), the final ladder, step sizes and HMC acceptance per replica, and
R-hat / ESS over the chains' ``b = 1`` draws.

**Targets.** The tempered likelihood is a hashable callable ``loglik(x, args)`` on a flat state
``x`` of any size (the compiled chunks are cached per target): :class:`OneHeadLogLik` for the
one-head marginal model (``x = (k, v)``, :func:`run_pt`), or the caller's own (the multi-head
model's, :mod:`bayesslr.multihead.sampling`), driven by :func:`run_pt_flat`, which returns the
flat ``b = 1`` draws and leaves the convergence diagnostics to the caller (the multi-head ones
are on permutation-invariant quantities). The prior is always the untempered standard normal on
the flat state.
"""

from __future__ import annotations

import functools
import math
import time
from collections.abc import Callable
from dataclasses import dataclass, fields
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from bayesslr.bayes import arviz_adapter
from bayesslr.bayes.model import ModelSpec, log_lik_samples
from bayesslr.core.jaxconfig import AOT_CACHE, PRNGKey
from bayesslr.core.task import ConfigError, Data

TARGET_ACCEPT = 0.65


@dataclass(frozen=True)
class PTTempering:
    """The tempering diagnostics and cost of one parallel-tempering run, common to
    :class:`PTFlat` (what :func:`run_pt_flat` returns) and :class:`PTRun` (what :func:`run_pt`
    returns).

    Attributes
    ----------
    betas : numpy.ndarray, shape (replicas,)
        The final ladder (``betas[0] = 1``).
    swap_rates : numpy.ndarray, shape (replicas - 1,)
        Swap acceptance of each neighbouring pair in the sampling phase.
    round_trips : int
        Round trips ``b = 1 -> beta_min -> b = 1`` completed, all chains, sampling phase.
    accept : numpy.ndarray, shape (replicas,)
        Mean HMC acceptance per replica (sampling phase).
    step_size : numpy.ndarray, shape (replicas,)
    grad_evals, grad_evals_warmup, iterations, warmup_done : int
    compile_s, run_s : float
    thin : int
        Sampling iterations per kept draw (the kept draws are every ``thin``-th, the last
        included).
    """

    betas: np.ndarray
    swap_rates: np.ndarray
    round_trips: int
    accept: np.ndarray
    step_size: np.ndarray
    grad_evals: int
    grad_evals_warmup: int
    iterations: int
    warmup_done: int
    compile_s: float
    run_s: float
    thin: int

    def tempering_summary(self) -> dict[str, Any]:
        """The tempering diagnostics, JSON-ready: ``swap_rate_min``, ``swap_rate_mean``,
        ``round_trips``, ``replicas``, ``ladder`` and ``swap_rates`` (comma lists, hot end
        last), ``hmc_accept_min`` (the lowest replica's mean HMC acceptance)."""
        rates = self.swap_rates
        return {
            "swap_rate_min": float(np.nanmin(rates)) if rates.size else math.nan,
            "swap_rate_mean": float(np.nanmean(rates)) if rates.size else math.nan,
            "round_trips": int(self.round_trips), "replicas": int(self.betas.size),
            "ladder": ",".join(f"{b:.4g}" for b in self.betas),
            "swap_rates": ",".join(f"{a:.3f}" for a in rates),
            "hmc_accept_min": float(np.nanmin(self.accept)) if self.accept.size else math.nan,
        }


@dataclass(frozen=True)
class PTRun(PTTempering):
    """Draws, cost and diagnostics of one parallel-tempering run of the one-head model.

    Attributes
    ----------
    k, v : numpy.ndarray, shape (chains, draws, D)
        Draws of the ``b = 1`` replica after the warm-up.
    r_hat_max, ess_bulk_min, ess_tail_min : float
    betas, swap_rates, round_trips, accept, step_size, grad_evals, grad_evals_warmup,
    iterations, warmup_done, compile_s, run_s, thin :
        As in :class:`PTTempering`.
    """

    k: np.ndarray
    v: np.ndarray
    r_hat_max: float
    ess_bulk_min: float
    ess_tail_min: float


def geometric_ladder(replicas: int, beta_min: float) -> np.ndarray:
    """``1 > ... > beta_min``, geometric (the starting ladder)."""
    if replicas == 1:
        return np.ones(1)
    return np.geomspace(1.0, beta_min, replicas)


def optimal_ladder(betas: np.ndarray, rejection: np.ndarray) -> np.ndarray:
    """Re-place the ladder at equal increments of the cumulative rejection (Syed et al. 2021).

    ``betas`` decreasing from 1, ``rejection[i]`` the rejection rate of ``(i, i + 1)``; the
    endpoints stay. A pair with no rejection still gets a small share (``1e-3``) so that the
    barrier is strictly increasing.
    """
    R = betas.size
    if R < 3:
        return betas.copy()
    b = betas[::-1]  # increasing
    r = np.maximum(np.asarray(rejection, float)[::-1], 1e-3)
    lam = np.concatenate([[0.0], np.cumsum(r)])
    want = np.linspace(0.0, lam[-1], R)
    new = np.interp(want, lam, b)
    new[0], new[-1] = b[0], b[-1]
    return np.sort(new)[::-1].copy()


def round_trips(swapped: np.ndarray, R: int) -> int:
    """Round trips ``slot 0 -> slot R-1 -> slot 0`` of the replicas' labels, followed through
    the accepted swaps ``swapped`` of shape ``(iterations, chains, R - 1)`` (pair ``i`` is
    ``(i, i + 1)``)."""
    if R < 2 or swapped.size == 0:
        return 0
    T, C, _ = swapped.shape
    trips = 0
    for c in range(C):
        label = np.arange(R)  # label[slot]
        state = np.zeros(R, int)  # per label: 0 none, 1 has been at slot 0, 2 then at R-1
        state[label[0]] = 1
        for t in range(T):
            for i in np.flatnonzero(swapped[t, c]):
                label[i], label[i + 1] = label[i + 1], label[i]
            top, bottom = label[0], label[R - 1]
            if state[bottom] == 1:
                state[bottom] = 2
            if state[top] == 2:
                trips += 1
            state[top] = 1
    return trips


@dataclass(frozen=True)
class OneHeadLogLik:
    """The one-head marginal model's summed log-likelihood at the flat state ``x = (k, v)``
    (``2D`` entries), ``args = (X, y, mask, nu, delta)``: the tempered target of
    :func:`run_pt` (hashable, so that its compiled chunks are cached and shared)."""

    variant: str

    def __call__(self, x: jax.Array, args: tuple) -> jax.Array:
        X, y, mask, nu, delta = args
        D = X.shape[-1]
        return jnp.sum(log_lik_samples(ModelSpec(self.variant, nu, delta), x[:D], x[D:], X, y,
                                       mask))


@functools.lru_cache(maxsize=16)
def _chunk_fn(loglik: Callable[[jax.Array, tuple], jax.Array], n_steps: int, chunk: int,
              adapt: bool):
    """``chunk`` PT iterations of all chains and replicas in one compiled call, on the target
    ``prior(x) * loglik(x, args)^beta`` with ``prior`` standard normal on the flat ``x``
    (``loglik`` hashable: :class:`OneHeadLogLik` or the caller's)."""

    vg = jax.value_and_grad(loglik)

    def hmc(key, x, ll, g, beta, eps, inv_mass, args):
        """One HMC transition on ``prior * lik^beta`` (gradient carried)."""
        kp, kj, ku = jax.random.split(key, 3)
        p = jax.random.normal(kp, x.shape) / jnp.sqrt(inv_mass)
        h = eps * jax.random.uniform(kj, minval=0.8, maxval=1.2)

        def grad_logp(x_, g_):
            return -x_ + beta * g_

        def energy(x_, ll_, p_):
            return 0.5 * jnp.sum(x_ * x_) - beta * ll_ + 0.5 * jnp.sum(inv_mass * p_ * p_)

        def body(_, c):
            x_, p_, ll_, g_ = c
            p_ = p_ + 0.5 * h * grad_logp(x_, g_)
            x_ = x_ + h * inv_mass * p_
            ll_, g_ = vg(x_, args)
            p_ = p_ + 0.5 * h * grad_logp(x_, g_)
            return x_, p_, ll_, g_

        x1, p1, ll1, g1 = lax.fori_loop(0, n_steps, body, (x, p, ll, g))
        dH = energy(x1, ll1, p1) - energy(x, ll, p)
        acc = jnp.where(jnp.isfinite(dH), jnp.minimum(1.0, jnp.exp(-dH)), 0.0)
        take = jax.random.uniform(ku) < acc
        return (jnp.where(take, x1, x), jnp.where(take, ll1, ll), jnp.where(take, g1, g), acc)

    # vmap over replicas (own beta, eps, mass) then over chains
    hmc_r = jax.vmap(hmc, in_axes=(0, 0, 0, 0, 0, 0, 0, None))
    hmc_cr = jax.vmap(hmc_r, in_axes=(0, 0, 0, 0, None, None, None, None))

    def swap(key, t, x, ll, g, betas):
        """DEO swaps of one chain: pairs (i, i+1) with i = t mod 2, 2 + t mod 2, ..."""
        R = betas.shape[0]
        i = jnp.arange(R - 1)
        active = (i % 2) == (t % 2)
        la = (betas[:-1] - betas[1:]) * (ll[1:] - ll[:-1])
        a = jnp.minimum(1.0, jnp.exp(jnp.minimum(la, 0.0)))
        acc = active & (jax.random.uniform(key, (R - 1,)) < a)
        # permutation: slot i takes i+1 and i+1 takes i where pair i is accepted
        up = jnp.concatenate([acc, jnp.zeros(1, bool)])        # slot i swaps with i+1
        down = jnp.concatenate([jnp.zeros(1, bool), acc])      # slot i swaps with i-1
        idx = jnp.arange(R) + up.astype(int) - down.astype(int)
        return x[idx], ll[idx], g[idx], acc, jnp.where(active, a, jnp.nan)

    swap_c = jax.vmap(swap, in_axes=(0, None, 0, 0, 0, None))

    def run(key, t0, x, ll, g, betas, log_eps, inv_mass, args):
        C, R, _ = x.shape

        def it(c, j):
            x, ll, g, log_eps, s1, s2 = c
            kh, ks = jax.random.split(jax.random.fold_in(key, j))
            keys = jax.random.split(kh, C * R).reshape(C, R)
            x, ll, g, acc = hmc_cr(keys, x, ll, g, betas, jnp.exp(log_eps), inv_mass, args)
            if adapt:
                log_eps = log_eps + 0.05 * (jnp.mean(acc, axis=0) - TARGET_ACCEPT)
            x, ll, g, sw, a_sw = swap_c(jax.random.split(ks, C), t0 + j, x, ll, g, betas)
            s1 = s1 + jnp.sum(x, axis=0)
            s2 = s2 + jnp.sum(x * x, axis=0)
            return (x, ll, g, log_eps, s1, s2), (x[:, 0], acc, sw, a_sw)

        z = jnp.zeros(x.shape[1:], x.dtype)
        (x, ll, g, log_eps, s1, s2), (x0, acc, sw, a_sw) = lax.scan(
            it, (x, ll, g, log_eps, z, z), jnp.arange(chunk))
        return x, ll, g, log_eps, s1, s2, x0, acc, sw, a_sw

    init = jax.vmap(jax.vmap(vg, in_axes=(0, None)), in_axes=(0, None))
    return jax.jit(run), jax.jit(init)


@dataclass(frozen=True)
class PTFlat(PTTempering):
    """Flat ``b = 1`` draws and tempering diagnostics of :func:`run_pt_flat` (no R-hat / ESS:
    the caller diagnoses its own quantities).

    Attributes
    ----------
    x : numpy.ndarray, shape (chains, draws, dim), float32
        Draws of the ``b = 1`` replica after the warm-up, thinned (every ``thin``-th sampling
        iteration, the last included); with no sampling iteration, the last state ``(C, 1,
        dim)``.
    betas, swap_rates, round_trips, accept, step_size, grad_evals, grad_evals_warmup,
    iterations, warmup_done, compile_s, run_s, thin :
        As in :class:`PTTempering`.
    cold_rejects : int
        Sampling-phase HMC transitions of the ``b = 1`` replica (all chains, every iteration,
        kept or not) whose acceptance probability was exactly 0: a non-finite energy error, or
        one so large that ``exp(-dH)`` underflows in float32 (``dH`` above about 87): the PT
        analogue of NUTS's divergent transitions.
    """

    x: np.ndarray
    cold_rejects: int


def check_pt_settings(*, budget: int, chains: int, replicas: int, integration_steps: int,
                      chunk: int, beta_min: float) -> None:
    """Refuse (:class:`ConfigError`, one line naming the setting) what :func:`run_pt_flat`
    cannot run."""
    for nm, val, lo in (("chains", chains, 1), ("replicas", replicas, 1),
                        ("integration_steps", integration_steps, 1), ("chunk", chunk, 1)):
        if int(val) < lo:
            raise ConfigError(f"{nm}={val} is out of range; allowed: integer >= {lo}")
    if not 0.0 < beta_min < 1.0:
        raise ConfigError(f"beta_min={beta_min!r} is out of range; allowed: 0 < beta_min < 1")
    per_iter = int(chains) * int(replicas) * int(integration_steps)
    if budget < per_iter * chunk:
        raise ConfigError(f"budget={budget} is below one chunk ({chunk} iterations x {per_iter}"
                          " gradient evaluations); allowed: a larger budget, or fewer chains, "
                          "replicas or integration_steps")


def run_pt_flat(key: PRNGKey, loglik: Callable[[jax.Array, tuple], jax.Array], args: tuple,
                x0: jax.Array, *, budget: int, beta_min: float = 1e-3,
                integration_steps: int = 10, step_size: float = 0.05,
                warmup_fraction: float = 0.5, chunk: int = 10, max_draws: int = 1000,
                warmup_budget: int | None = None) -> PTFlat:
    """Parallel tempering of ``N(0, I)(x) * exp(beta * loglik(x, args))`` on a flat state
    within ``budget`` gradient evaluations (the module doc: moves, swaps, adaptation, budget).

    Parameters
    ----------
    key : PRNGKey
        Key of the transitions and swaps (the starts are the caller's).
    loglik : callable
        ``loglik(x, args) -> scalar``, hashable (a frozen dataclass): the compiled chunks are
        cached per ``(loglik, integration_steps, chunk)`` and, through
        :data:`bayesslr.core.jaxconfig.AOT_CACHE`, per argument shapes.
    args : tuple of arrays
        The target's data (traced).
    x0 : Array, shape (chains, replicas, dim), float32
        Every replica's start.
    budget, beta_min, integration_steps, step_size, warmup_fraction, chunk, max_draws,
    warmup_budget :
        As in :func:`run_pt`.

    Returns
    -------
    PTFlat
    """
    x = jnp.asarray(x0, jnp.float32)
    if x.ndim != 3:
        raise ConfigError(f"x0 has shape {tuple(x.shape)}; allowed: (chains, replicas, dim)")
    C, R, dim = (int(a) for a in x.shape)
    check_pt_settings(budget=budget, chains=C, replicas=R, integration_steps=integration_steps,
                      chunk=chunk, beta_min=beta_min)
    n_steps = int(integration_steps)
    per_iter = C * R * n_steps
    aot = AOT_CACHE
    c0 = aot.compile_s
    t_start = time.perf_counter()
    run_w, init = _chunk_fn(loglik, n_steps, int(chunk), True)
    run_s, _ = _chunk_fn(loglik, n_steps, int(chunk), False)
    ll, g = aot("pt_init", init, x, args)
    betas = geometric_ladder(R, float(beta_min))
    log_eps = jnp.full((R,), math.log(step_size), jnp.float32)
    inv_mass = jnp.ones((R, dim), jnp.float32)
    used = per_iter  # the starting gradients
    t = 0
    # warm-up: rounds of doubling length (in chunks), ladder and mass re-placed after each
    warm_budget = int(warmup_fraction * budget) if warmup_budget is None else int(warmup_budget)
    round_len = 1
    while used + per_iter * chunk <= warm_budget:
        n_chunks = 0
        rej_num = np.zeros(R - 1)
        rej_den = np.zeros(R - 1)
        s1 = np.zeros((R, dim))
        s2 = np.zeros((R, dim))
        while n_chunks < round_len and used + per_iter * chunk <= warm_budget:
            key, kc = jax.random.split(key)
            out = aot("pt_warm", run_w, kc, jnp.asarray(t, jnp.int32), x, ll, g,
                      jnp.asarray(betas, jnp.float32), log_eps, inv_mass, args)
            x, ll, g, log_eps, c1, c2, _, _, _, a_sw = out
            a_sw = np.asarray(a_sw)
            rej_num += np.nansum(1.0 - a_sw, axis=(0, 1))
            rej_den += np.sum(np.isfinite(a_sw), axis=(0, 1))
            s1 += np.asarray(c1)
            s2 += np.asarray(c2)
            used += per_iter * chunk
            t += chunk
            n_chunks += 1
        n = n_chunks * chunk * C
        if n >= 20:
            var = np.maximum(s2 / n - (s1 / n) ** 2, 1e-6)
            # Stan's regularisation of the windowed variance estimate
            inv_mass = jnp.asarray((n / (n + 5.0)) * var + 1e-3 * (5.0 / (n + 5.0)),
                                   jnp.float32)
        if R > 2 and np.all(rej_den > 0):
            betas = optimal_ladder(betas, rej_num / rej_den)
        round_len *= 2
    warm_used, warm_iters = used, t
    # sampling: everything frozen
    total = max(0, (budget - used) // (per_iter * chunk)) * chunk
    thin = max(1, -(-total // int(max_draws)))
    keep, accs, sws, a_sum, a_cnt = [], [], [], np.zeros(R - 1), np.zeros(R - 1)
    cold_rejects = 0
    while used + per_iter * chunk <= budget:
        key, kc = jax.random.split(key)
        out = aot("pt_run", run_s, kc, jnp.asarray(t, jnp.int32), x, ll, g,
                  jnp.asarray(betas, jnp.float32), log_eps, inv_mass, args)
        x, ll, g, _, _, _, x0_, acc, sw, a_sw = out
        keep.append(np.asarray(x0_))
        acc = np.asarray(acc)
        accs.append(acc.mean(axis=(0, 1)))
        cold_rejects += int(np.sum(acc[:, :, 0] == 0.0))
        sws.append(np.asarray(sw))
        a_sw = np.asarray(a_sw)
        a_sum += np.nansum(a_sw, axis=(0, 1))
        a_cnt += np.sum(np.isfinite(a_sw), axis=(0, 1))
        used += per_iter * chunk
        t += chunk
    wall = time.perf_counter() - t_start
    compile_s = aot.compile_s - c0
    if keep:
        xs = np.concatenate(keep, axis=0)[::-1][::thin][::-1]  # (draws, C, dim), the last kept
        xs = np.transpose(xs, (1, 0, 2))
        swapped = np.concatenate(sws, axis=0)
        acc_r = np.mean(accs, axis=0)
    else:
        xs = np.asarray(x[:, :1])  # (C, 1, dim): the last state of b = 1
        swapped = np.zeros((0, C, max(R - 1, 0)), bool)
        acc_r = np.full(R, np.nan)
    rates = np.where(a_cnt > 0, a_sum / np.maximum(a_cnt, 1), np.nan)
    return PTFlat(betas=np.asarray(betas), swap_rates=rates,
                  round_trips=round_trips(swapped, R), accept=acc_r,
                  step_size=np.exp(np.asarray(log_eps)), grad_evals=int(used),
                  grad_evals_warmup=int(warm_used), iterations=int(t),
                  warmup_done=int(warm_iters), compile_s=float(compile_s),
                  run_s=float(wall - compile_s), thin=int(thin), x=xs,
                  cold_rejects=int(cold_rejects))


def run_pt(key: PRNGKey, spec: ModelSpec, data: Data, *, budget: int,
           start: dict[str, Any] | None = None, chains: int = 2, replicas: int = 10,
           beta_min: float = 1e-3, integration_steps: int = 10, step_size: float = 0.05,
           warmup_fraction: float = 0.5, chunk: int = 10, max_draws: int = 1000,
           warmup_budget: int | None = None) -> PTRun:
    """Parallel tempering within ``budget`` gradient evaluations (see the module doc).

    The one-head model's run: :func:`run_pt_flat` on :class:`OneHeadLogLik` with the flat
    state ``(k, v)``, then R-hat / ESS over the ``b = 1`` draws of ``k`` and ``v``.

    Parameters
    ----------
    start : dict, optional
        ``{"k": (chains, replicas, D), "v": ...}``; default: every replica of every chain from
        its own prior draw (a random start).
    warmup_budget : int, optional
        Gradient evaluations of the warm-up (the starting gradients included); default
        ``warmup_fraction * budget``.
    """
    check_pt_settings(budget=budget, chains=chains, replicas=replicas,
                      integration_steps=integration_steps, chunk=chunk, beta_min=beta_min)
    C, R = int(chains), int(replicas)
    D = data.X.shape[-1]
    args = (jnp.asarray(data.X, jnp.float32), jnp.asarray(data.y, jnp.float32),
            jnp.asarray(data.mask, bool), jnp.asarray(spec.nu, jnp.float32),
            jnp.asarray(spec.delta, jnp.float32))
    k0, key = jax.random.split(key)
    if start is None:
        x = jax.random.normal(k0, (C, R, 2 * D), jnp.float32)
    else:
        x = jnp.concatenate([jnp.asarray(start["k"], jnp.float32).reshape(C, R, D),
                             jnp.asarray(start["v"], jnp.float32).reshape(C, R, D)], axis=-1)
    f = run_pt_flat(key, OneHeadLogLik(spec.variant), args, x, budget=budget,
                    beta_min=beta_min, integration_steps=integration_steps,
                    step_size=step_size, warmup_fraction=warmup_fraction, chunk=chunk,
                    max_draws=max_draws, warmup_budget=warmup_budget)
    xs = f.x.astype(np.float64)
    k, v = xs[..., :D], xs[..., D:]
    if k.shape[1] >= 4:
        diag = arviz_adapter.diagnostics({"k": k, "v": v})
    else:
        diag = {"r_hat_max": math.nan, "ess_bulk_min": math.nan, "ess_tail_min": math.nan}
    tempering = {fl.name: getattr(f, fl.name) for fl in fields(PTTempering)}
    return PTRun(**tempering, k=k, v=v, r_hat_max=float(diag["r_hat_max"]),
                 ess_bulk_min=float(diag["ess_bulk_min"]),
                 ess_tail_min=float(diag["ess_tail_min"]))
