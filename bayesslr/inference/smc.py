"""Adaptive tempered SMC (BlackJAX) on the SLR posterior: particles from the prior to the posterior.

Optional: needs the ``blackjax`` extra (``pip install -e '.[blackjax]'`` in a source
checkout); :func:`require` refuses with one line naming the extra when it is missing.

Target ``p_lambda(k, v) ∝ prior(k, v) * likelihood(k, v)^lambda`` with ``lambda`` going from 0
(the prior, sampled exactly) to 1 (the posterior of docs/model.md §6). Prior and likelihood are
the marginal NumPyro model's own (:mod:`bayesslr.bayes.model`): the log joint from
``numpyro.infer.util.log_density``, the unit-Gaussian prior subtracted. Each step picks the next
``lambda`` so that the importance weights keep an effective sample size of
``target_ess`` times the particles (BlackJAX's ``adaptive_tempered_smc``), resamples
(systematic) and moves every particle by ``mcmc_steps`` HMC transitions of
``integration_steps`` leapfrog steps. Between steps the HMC step size follows the acceptance
rate (multiplied by ``exp(acc - 0.65)``) and the diagonal inverse mass matrix is the particles'
variance (the usual SMC self-tuning). Tempering from the prior is the sampler built for
multimodal posteriors: at small ``lambda`` the tempered likelihood is that of fewer samples
(an annealing along ``alpha``, docs/model.md §6), and particles in several modes are weighed by
their mass.

**Budget.** One tempering step costs ``particles * (2 + mcmc_steps * integration_steps)``
gradient evaluations (the likelihood of every particle for the next ``lambda``, the gradient at
each mutation start, the leapfrog steps). ``particles="auto"`` sizes the population to finish
the schedule in about ``expected_steps`` steps; once ``lambda = 1`` the rest of the budget
rejuvenates the particles at ``lambda = 1`` (more HMC moves). A budget that ends before
``lambda = 1`` leaves a tempered posterior: reported as not converged.
"""

from __future__ import annotations

import functools
import math
import time
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from bayesslr.bayes.model import ModelSpec
from bayesslr.bayes.nuts import model_args, potential_fn_gen
from bayesslr.core.jaxconfig import AOT_CACHE, PRNGKey
from bayesslr.core.task import ConfigError, Data

EXTRA = "blackjax"


def require() -> Any:
    """Import BlackJAX or raise :class:`ConfigError` naming the extra that installs it."""
    try:
        import blackjax
    except ImportError:
        from bayesslr.core.extras import install_hint

        raise ConfigError("inference:smc needs BlackJAX; allowed: install the optional extra "
                          f"with {install_hint(EXTRA)}") from None
    return blackjax


class SMCRun(NamedTuple):
    """Particles, cost and diagnostics of one SMC run.

    Attributes
    ----------
    k, v : numpy.ndarray, shape (particles, D)
        Final particles (equally weighted after the last resampling).
    particles : int
    tempering_steps : int
        Steps to reach ``lambda = 1`` (or the steps run when it was not reached).
    rejuvenation_steps : int
        Extra mutation rounds at ``lambda = 1``.
    schedule : numpy.ndarray
        ``lambda`` after each tempering step.
    final_lambda : float
    acceptance_mean, acceptance_min : float
        HMC acceptance over the mutation rounds (mean of per-round means; smallest).
    log_evidence : float
        Sum of the log-likelihood increments (SMC estimate of the log marginal likelihood).
    grad_evals : int
    step_size : float
        Final HMC step size.
    compile_s, run_s : float
    """

    k: np.ndarray
    v: np.ndarray
    particles: int
    tempering_steps: int
    rejuvenation_steps: int
    schedule: np.ndarray
    final_lambda: float
    acceptance_mean: float
    acceptance_min: float
    log_evidence: float
    grad_evals: int
    step_size: float
    compile_s: float
    run_s: float


def step_cost(particles: int, mcmc_steps: int, integration_steps: int) -> int:
    """Gradient evaluations of one tempering step."""
    return particles * (2 + mcmc_steps * integration_steps)


def auto_particles(budget: int, mcmc_steps: int, integration_steps: int,
                   expected_steps: int) -> int:
    """Particles that finish about ``expected_steps`` tempering steps within ``budget``."""
    p = budget // (expected_steps * (2 + mcmc_steps * integration_steps))
    return int(min(max(p, 16), 4096))


@functools.lru_cache(maxsize=16)
def _step_fn(variant: str, mcmc_steps: int, integration_steps: int, target_ess: float):
    blackjax = require()
    from blackjax.smc.resampling import systematic

    pot_gen = potential_fn_gen("marginal", variant)

    def logprior(p):
        return -0.5 * (jnp.sum(p["k"] ** 2) + jnp.sum(p["v"] ** 2)) - p["k"].shape[0] * (
            math.log(2 * math.pi))

    def step(key, state, step_size, inv_mass, args):
        pot = pot_gen(*args)

        def loglik(p):
            return -pot(p) - logprior(p)

        kernel = blackjax.adaptive_tempered_smc(
            logprior, loglik, blackjax.hmc.build_kernel(), blackjax.hmc.init,
            {"step_size": step_size[None], "inverse_mass_matrix": inv_mass[None],
             "num_integration_steps": jnp.asarray([integration_steps])},
            systematic, target_ess, num_mcmc_steps=mcmc_steps)
        new, info = kernel.step(key, state)
        acc = jnp.mean(info.update_info.acceptance_rate)
        flat = jnp.concatenate([new.particles["k"], new.particles["v"]], axis=1)
        return new, acc, info.log_likelihood_increment, jnp.var(flat, axis=0)

    return jax.jit(step), blackjax


def run_smc(key: PRNGKey, spec: ModelSpec, data: Data, *, budget: int,
            particles: int | None = None, mcmc_steps: int = 5, integration_steps: int = 10,
            target_ess: float = 0.5, expected_steps: int = 40, step_size: float = 0.3,
            max_steps: int = 10_000) -> SMCRun:
    """Adaptive tempered SMC within ``budget`` gradient evaluations (see the module doc)."""
    step, blackjax = _step_fn(spec.variant, int(mcmc_steps), int(integration_steps),
                              float(target_ess))
    D = data.X.shape[-1]
    P = int(particles) if particles else auto_particles(budget, mcmc_steps, integration_steps,
                                                        expected_steps)
    cost = step_cost(P, mcmc_steps, integration_steps)
    args = model_args(spec, data)
    k0, key = jax.random.split(key)
    kk, kv = jax.random.split(k0)
    init = {"k": jax.random.normal(kk, (P, D)), "v": jax.random.normal(kv, (P, D))}
    state = blackjax.adaptive_tempered_smc.init(init)
    eps = jnp.asarray(step_size, jnp.float32)
    inv_mass = jnp.ones((2 * D,), jnp.float32)
    aot = AOT_CACHE
    c0 = aot.compile_s
    t0 = time.perf_counter()
    used, lam, sched, accs, logz, rejuv = P, 0.0, [], [], 0.0, 0
    n = 0
    while used + cost <= budget and n < max_steps:
        key, ks = jax.random.split(key)
        state, acc, inc, var = aot("smc", step, ks, state, eps, inv_mass, args)
        used += cost
        n += 1
        acc = float(acc)
        accs.append(acc)
        if lam < 1.0:
            logz += float(inc)
            lam = float(state.tempering_param)
            sched.append(lam)
        else:
            rejuv += 1
        eps = jnp.clip(eps * jnp.exp(acc - 0.65), 1e-4, 2.0)
        inv_mass = jnp.maximum(var, 1e-6)
        if lam >= 1.0 and n >= 1 and not math.isfinite(acc):
            break
    wall = time.perf_counter() - t0
    compile_s = aot.compile_s - c0
    k = np.asarray(state.particles["k"], np.float64)
    v = np.asarray(state.particles["v"], np.float64)
    return SMCRun(k, v, P, len(sched), rejuv, np.asarray(sched), float(lam),
                  float(np.mean(accs)) if accs else math.nan,
                  float(np.min(accs)) if accs else math.nan, float(logz), int(used), float(eps),
                  float(compile_s), float(wall - compile_s))
