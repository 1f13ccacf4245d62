"""Gradient-budgeted MCMC on the SLR posterior: NUTS, HMC and the explicit-location Gibbs sampler.

All target the posterior of docs/model.md §6 through the models of
:mod:`bayesslr.bayes.model` (one model definition) and the NUTS layer
:mod:`bayesslr.bayes.nuts` (NumPyro's functional HMC/NUTS kernel ``numpyro.infer.hmc.hmc``,
the one :mod:`bayesslr.bayes.sampler` runs too); this module is the layer's budgeted face:

* ``nuts``: NUTS on the marginal model (location summed out);
* ``hmc``: static HMC, a fixed trajectory length (step size adapted in warm-up, the number of
  leapfrog steps ``trajectory_length / step_size``);
* ``gibbs``: the formulation a user writes *without* marginalising: the enumerated model with
  the hidden locations ``eps_i`` kept as latent variables, sampled by blocked Gibbs (all
  ``eps_i`` at once from their exact conditional
  ``P(eps_i = l | k, v) ∝ exp(a_l(k)) N(y_i; z_l(v), Delta)``), alternating with one NUTS
  transition of ``(k, v)`` given the locations (the potential is the enumerated model's log
  density with ``eps`` conditioned). This is NumPyro's ``HMCGibbs`` scheme written with the
  functional kernel so that the data stay traced arguments (``HMCGibbs``'s ``gibbs_fn`` has no
  access to model arguments, so the data would be baked into each compiled function);
* ``dgibbs``: what NumPyro does with that model unaided: ``DiscreteHMCGibbs(NUTS(model),
  modified=True)`` on the explicit-location model (the enumerated model with enumeration
  switched off). Each iteration sweeps every ``eps_i`` with a Metropolised Gibbs proposal that
  evaluates the model's full log density once per alternative location (``n (L - 1)`` full
  evaluations per sweep, counted against the budget), then one NUTS move of ``(k, v)``.

**Budget.** A run is given ``budget`` gradient evaluations of the full-data log density, all
chains together; a full-data evaluation without gradient (the Gibbs conditional) counts as one
too. Chains run vectorised in compiled chunks of ``chunk`` iterations; after each chunk the
driver adds the leapfrog steps actually taken (``HMCState.num_steps``) and stops once the budget
is spent (the overshoot is at most one chunk; ``grad_evals`` reports what was used). Warm-up
(NumPyro's windowed adaptation of step size and diagonal mass matrix) runs ``warmup``
iterations or until ``warmup_fraction`` of the budget is spent, whichever comes first; sampling
then restarts the kernel with the adapted step size and mass matrix frozen. Draws are thinned
on the fly to at most ``max_draws`` per chain.

**Time.** Every compiled function is compiled ahead of time (``jit(...).lower(...).compile()``,
served by JAX's persistent cache when warm) and that time is reported apart (``compile_s``) from
the execution (``run_s``).
"""

from __future__ import annotations

import functools
import math
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax
from numpyro.handlers import condition, infer_config
from numpyro.infer.util import log_density

from bayesslr.bayes.model import LOG_2PI, MODELS, ModelSpec, token_log_weights
from bayesslr.bayes.nuts import (
    chain_diagnostics,
    kernel,
    model_args,
    over_chains,
    potential_fn_gen,
)
from bayesslr.core.jaxconfig import AOT_CACHE, Array, PRNGKey
from bayesslr.core.task import Data, fields

MCMC_ALGORITHMS: tuple[str, ...] = ("nuts", "hmc", "gibbs", "dgibbs")


@dataclass(frozen=True)
class MCMCSettings:
    """Static settings of a budgeted MCMC run (each distinct value compiles once).

    Attributes
    ----------
    algorithm : {"nuts", "hmc", "gibbs"}
    chains : int
    warmup : int
        Warm-up iterations (the adaptation schedule's length).
    target_accept : float
    max_tree_depth : int
        NUTS (and the Gibbs inner NUTS).
    trajectory_length : float
        HMC's integration time (in the metric of the adapted mass matrix).
    chunk : int
        Iterations per compiled call (budget granularity).
    """

    algorithm: str = "nuts"
    chains: int = 4
    warmup: int = 300
    target_accept: float = 0.8
    max_tree_depth: int = 10
    trajectory_length: float = math.pi / 2
    chunk: int = 10


class MCMCRun(NamedTuple):
    """Draws, cost and diagnostics of one budgeted run.

    Attributes
    ----------
    k, v : numpy.ndarray, shape (chains, draws, D)
        Kept (thinned) post-warm-up draws.
    grad_evals, grad_evals_warmup : int
        Gradient evaluations used (all chains; warm-up part).
    iterations, warmup_done : int
        Post-warm-up iterations per chain; warm-up iterations run.
    thin : int
        Thinning stride of the kept draws.
    step_size : float
        Mean adapted step size.
    divergences : int
        Post-warm-up divergent transitions.
    accept_prob : float
        Mean post-warm-up acceptance statistic.
    r_hat_max, ess_bulk_min, ess_tail_min : float
        ArviZ rank-normalised split R-hat (max) and ESS (min) over all coordinates.
    compile_s, run_s : float
        Compilation and execution wall time.
    budget_exhausted_in_warmup : bool
        The warm-up was cut short by ``warmup_fraction``.
    """

    k: np.ndarray
    v: np.ndarray
    grad_evals: int
    grad_evals_warmup: int
    iterations: int
    warmup_done: int
    thin: int
    step_size: float
    divergences: int
    accept_prob: float
    r_hat_max: float
    ess_bulk_min: float
    ess_tail_min: float
    compile_s: float
    run_s: float
    budget_exhausted_in_warmup: bool


# ------------------------------------------------------------------------------------------
# the explicit-location model (the enumerated model without enumeration, eps conditioned)
# ------------------------------------------------------------------------------------------
def _explicit(variant: str) -> Callable[..., None]:
    fn = functools.partial(MODELS["enumerated"], variant=variant)

    def no_enum(msg):
        return {"enumerate": None} if msg["name"] == "eps" else {}

    return infer_config(fn, config_fn=no_enum)


def gibbs_potential_fn_gen(variant: str) -> Callable[..., Callable[[dict], Array]]:
    """``(X, y, mask, weights, nu, delta, eps) -> (params -> potential)`` of the enumerated
    model with the locations ``eps`` given (docs/model.md §6, the un-marginalised form)."""
    model = _explicit(variant)

    def gen(X, y, mask, weights, nu, delta, eps):
        conditioned = condition(model, data={"eps": eps})
        args = (X, y, mask, weights, nu, delta)
        return lambda params: -log_density(conditioned, args, {}, params)[0]

    return gen


def location_conditional_logits(variant: str, k: Array, v: Array, X: Array, y: Array,
                                mask: Array, nu: Array, delta: Array) -> Array:
    """Log-weights ``a_l(k) + log N(y; z_l(v), Delta)`` of ``P(eps_i = l | k, v, data)``."""
    chi, z = fields(X, k, v)
    a = token_log_weights(variant, nu, chi, mask, jnp.sum(k * k) / X.shape[-1])
    log_n = -0.5 * (LOG_2PI + jnp.log(delta)) - 0.5 * (y[:, None] - z) ** 2 / delta
    return jnp.where(mask, a + log_n, -jnp.inf)


# ------------------------------------------------------------------------------------------
# compiled pieces, one set per static configuration
# ------------------------------------------------------------------------------------------
class _Compiled(NamedTuple):
    init: Any
    chunk: Any


@functools.lru_cache(maxsize=32)
def _functions(variant: str, s: MCMCSettings) -> _Compiled:
    """Jitted (not yet compiled) init and chunk functions of one kernel configuration.

    One kernel serves warm-up and sampling (NumPyro adapts while the iteration counter is below
    ``warmup``, as ``MCMC`` does), so each configuration compiles NUTS once.
    """
    if s.algorithm == "dgibbs":
        return _dgibbs_functions(variant, s)
    algo = "HMC" if s.algorithm == "hmc" else "NUTS"
    gibbs = s.algorithm == "gibbs"
    gen = gibbs_potential_fn_gen(variant) if gibbs else potential_fn_gen("marginal", variant)
    kern = kernel(gen, s.warmup, algo=algo, target_accept=s.target_accept,
                  max_tree_depth=s.max_tree_depth, trajectory_length=s.trajectory_length)

    def init_one(key, z0, args, eps):
        full = (*args, eps) if gibbs else args
        st = kern.init(key, z0, full)
        return (st, eps) if gibbs else st

    def step_one(carry, args):
        if gibbs:
            st, eps = carry
            key, k_eps = jax.random.split(st.rng_key)
            logits = location_conditional_logits(variant, st.z["k"], st.z["v"], *args[:3],
                                                 args[4], args[5])
            eps = jax.random.categorical(k_eps, logits, axis=-1).astype(jnp.int32)
            full = (*args, eps)
            pe, grad = jax.value_and_grad(gen(*full))(st.z)
            st = st._replace(potential_energy=pe, z_grad=grad, rng_key=key)
            st = kern.step(st, full)
            return (st, eps), st, 2  # + the conditional's forward pass and the new gradient
        st = kern.step(carry, args)
        return st, st, 0

    def chunk_one(carry, args):
        def body(c, _):
            c, st, extra = step_one(c, args)
            return c, (st.z["k"], st.z["v"], st.num_steps + extra, st.diverging,
                       st.accept_prob, st.adapt_state.step_size)

        return lax.scan(body, carry, None, length=s.chunk)

    return _Compiled(over_chains(init_one, (0, 0, None, 0)), over_chains(chunk_one, (0, None)))


def _dgibbs_functions(variant: str, s: MCMCSettings) -> _Compiled:
    """Init and chunk functions of NumPyro's ``DiscreteHMCGibbs`` (same signatures as
    :func:`_functions`; chains vectorised with ``jax.vmap``, as NumPyro advises for Gibbs)."""
    from numpyro.infer import NUTS, DiscreteHMCGibbs

    kernel = DiscreteHMCGibbs(NUTS(_explicit(variant), target_accept_prob=s.target_accept,
                                   max_tree_depth=s.max_tree_depth), modified=True)

    def init_one(key, z0, args, eps):
        return kernel.init(key, s.warmup, {"k": z0["k"], "v": z0["v"], "eps": eps}, args, None)

    def chunk_one(st, args):
        n_alt = args[0].shape[0] * (args[0].shape[1] - 1)  # n (L_max - 1) proposals per sweep

        def body(c, _):
            c = kernel.sample(c, args, None)
            h = c.block_states[1]
            # the sweep's proposals, the refreshed HMC-block gradient, the leapfrog steps
            return c, (c.z["k"], c.z["v"], h.num_steps + n_alt + 1, h.diverging,
                       h.accept_prob, h.adapt_state.step_size)

        return lax.scan(body, st, None, length=s.chunk)

    return _Compiled(over_chains(init_one, (0, 0, None, 0)), over_chains(chunk_one, (0, None)))




def run_mcmc(key: PRNGKey, spec: ModelSpec, data: Data, settings: MCMCSettings, *,
             start: dict[str, Array], budget: int, warmup_fraction: float = 0.5,
             max_draws: int = 1000, weights: Array | None = None,
             with_diagnostics: bool = True) -> MCMCRun:
    """Run ``settings.algorithm`` on the posterior of ``data`` within ``budget`` gradient
    evaluations (all chains), from ``start`` (``{"k": (chains, D), "v": (chains, D)}``).

    Parameters
    ----------
    key, spec, data, start, weights :
        As for :func:`bayesslr.bayes.sampler.run_nuts`, the NUTS layer's other face (sampler
        randomness, likelihood, training data, starting points, per-sample log-likelihood
        weights for annealing on nested data sets).
    settings : MCMCSettings
        Static settings.
    budget : int
        Gradient evaluations allowed (all chains together).
    warmup_fraction : float
        Largest share of the budget the warm-up may use.
    max_draws : int
        Kept draws per chain at most (thinning doubles when exceeded).
    with_diagnostics : bool
        Compute R-hat and ESS (ArviZ) of the kept draws.
    """
    s = settings
    fns = _functions(spec.variant, s)
    aot = AOT_CACHE
    c0 = aot.compile_s
    C = s.chains
    args = model_args(spec, data, jnp.float32, weights)
    mask = args[2]
    z0 = {nm: jnp.asarray(start[nm], jnp.float32).reshape(C, -1) for nm in ("k", "v")}
    k_warm, k_eps = jax.random.split(key)
    eps0 = jax.vmap(lambda kk: jax.random.categorical(
        kk, jnp.where(mask, 0.0, -jnp.inf), axis=-1).astype(jnp.int32))(
        jax.random.split(k_eps, C))
    t_start = time.perf_counter()
    used = C  # each chain's start: one gradient
    warm_cap = max(1, int(warmup_fraction * budget))
    state = aot("init", fns.init, jax.random.split(k_warm, C), z0, args, eps0)
    warm_done, it, thin, kept, divs = 0, 0, 1, 0, 0
    used_warm = used
    cut = False
    ks, vs, accs, step_size = [], [], [], np.nan
    while used < budget:
        in_warmup = warm_done < s.warmup and not cut
        if in_warmup and used >= warm_cap:
            in_warmup = False
            cut = True  # the rest of the schedule runs as (still adapting) sampling iterations
        state, (kc, vc, steps, div, acc, ss) = aot("chunk", fns.chunk, state, args)
        used += int(np.asarray(steps).sum())
        step_size = float(np.asarray(ss)[:, -1].mean())
        if in_warmup and not cut:
            warm_done += s.chunk
            used_warm = used
            continue
        divs += int(np.asarray(div).sum())
        accs.append(float(np.asarray(acc).mean()))
        idx = np.arange(it, it + s.chunk)
        sel = np.flatnonzero(idx % thin == 0)
        ks.append(np.asarray(kc)[:, sel])
        vs.append(np.asarray(vc)[:, sel])
        it += s.chunk
        kept += sel.size
        if kept > max_draws:
            kall, vall = np.concatenate(ks, 1)[:, ::2], np.concatenate(vs, 1)[:, ::2]
            ks, vs, kept, thin = [kall], [vall], kall.shape[1], thin * 2
    hmc_state = (state[0] if s.algorithm == "gibbs" else
                 state.block_states[1] if s.algorithm == "dgibbs" else state)
    wall = time.perf_counter() - t_start
    compile_s = aot.compile_s - c0
    if ks:
        k = np.concatenate(ks, 1).astype(np.float64)
        v = np.concatenate(vs, 1).astype(np.float64)
    else:  # the budget ended in warm-up: the current state is the only draw
        k = np.asarray(hmc_state.z["k"], np.float64)[:, None]
        v = np.asarray(hmc_state.z["v"], np.float64)[:, None]
    diag = chain_diagnostics(k, v, min_draws=4 if with_diagnostics else math.inf)
    return MCMCRun(k, v, int(used), int(used_warm), int(it), int(warm_done), int(thin),
                   float(step_size), int(divs),
                   float(np.mean(accs)) if accs else math.nan, diag["r_hat_max"],
                   diag["ess_bulk_min"], diag["ess_tail_min"], float(compile_s),
                   float(wall - compile_s), bool(cut))

