"""One record per inference algorithm of the ``inference`` family (docs/inference.md).

An :class:`Algorithm` holds everything the family knows about one algorithm, as BlackJAX
keeps one entry per algorithm: the starts it takes, the options that apply to it, its runner,
its memory model and how many draws its predictor averages (the cost model's prediction
term). :data:`ALGORITHMS` is the table; the method names ``inference:<algorithm>-<start>-
<budget>``, the option check, the memory and cost models and the cell
(:mod:`bayesslr.inference.method`) all read it, so a new algorithm is one record here.

Every runner has one contract: ``run(key, algorithm, spec, data, opts, budget) -> (k draws
(S, D), v draws (S, D), diagnostics)`` with ``diagnostics`` holding at least ``grad_evals``,
``converged`` and ``reason`` (the thresholds: :data:`bayesslr.core.thresholds.CONVERGENCE`
``"inference"``, :func:`bayesslr.core.thresholds.chain_failures`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from bayesslr.bayes.sampler import init_params
from bayesslr.core.thresholds import CONVERGENCE, PT_SWAP_RATE_MIN, chain_failures
from bayesslr.inference.mcmc import MCMCSettings, run_mcmc
from bayesslr.inference.vi import run_vi

INFERENCE_RHAT_MAX = CONVERGENCE["inference"].r_hat_max  # bayesslr.core.thresholds: why looser
ESS_MIN = CONVERGENCE["inference"].ess_min
SMC_ACCEPT_MIN = 0.2

Runner = Callable[..., tuple[np.ndarray, np.ndarray, dict[str, Any]]]
# (opts, D, N, L) -> (bytes of the algorithm's state, what they are, what to lower)
StateMemory = Callable[[dict[str, Any], int, int, int], tuple[float, str, str]]


@dataclass(frozen=True)
class Algorithm:
    """One inference algorithm: what the family needs to run, check, size and price it.

    Attributes
    ----------
    name : str
        The first part of the method's member, ``<name>-<start>-<budget>``.
    starts : tuple of str
        The starts it takes (``teacher``, ``random``, ``anneal``, ``prior``).
    options : tuple of str
        The family's options that apply to it (others given for its cells are refused).
    run : callable
        ``run(key, name, spec, data, opts, budget) -> (k draws, v draws, diagnostics)``.
    state_memory : callable
        ``state_memory(opts, D, N, L) -> (bytes, what, what to lower)``: its working state
        (kept draws, particles, guide draws), the data and the prediction counted apart.
    draws : callable
        ``draws(opts) -> int``: how many draws its predictor averages.
    require : callable, optional
        Called before any work: raises one line when an optional extra is missing.

    Examples
    --------
    >>> from bayesslr.inference.algorithms import ALGORITHMS
    >>> nuts = ALGORITHMS["nuts"]
    >>> nuts.starts, nuts.draws({"chains": 4, "max_draws": 1000})
    (('teacher', 'random', 'anneal'), 4000)
    """

    name: str
    starts: tuple[str, ...]
    options: tuple[str, ...]
    run: Runner
    state_memory: StateMemory
    draws: Callable[[dict[str, Any]], int]
    require: Callable[[], Any] | None = None


def _start(key, init: str, chains: int, D: int, teacher) -> dict[str, Any]:
    return init_params(key, init, chains, D, teacher)


def _run_mcmc(key, alg: str, spec, data, opts: dict[str, Any], budget: int
              ) -> tuple[np.ndarray, np.ndarray, dict[str, Any]]:
    chunk = opts["chunk"]
    warmup = -(-opts["warmup"] // chunk) * chunk
    s = MCMCSettings(alg, opts["chains"], warmup, opts["target_accept"],
                     opts["max_tree_depth"], float(opts["trajectory_length"]), chunk)
    D = data.train.X.shape[-1]
    k_init, k_run = jax.random.split(key)
    kw = {"warmup_fraction": opts["warmup_fraction"], "max_draws": opts["max_draws"]}
    rungs: list[dict[str, Any]] = []
    if opts["init"] == "anneal":
        start = _start(k_init, "random", s.chains, D, None)
        n = data.train.y.shape[0]
        fr = opts["anneal_fractions"]
        per = int(budget * opts["anneal_share"] / len(fr))
        compile_s = run_s = 0.0
        spent = 0
        for j, f in enumerate(fr):
            w = (jnp.arange(n) < max(1, int(round(f * n)))).astype(jnp.float32)
            r = run_mcmc(jax.random.fold_in(k_run, j), spec, data.train, s, start=start,
                         budget=per, weights=w, with_diagnostics=False, **kw)
            start = {"k": r.k[:, -1], "v": r.v[:, -1]}
            spent += r.grad_evals
            compile_s += r.compile_s
            run_s += r.run_s
            rungs.append({"fraction": f, "grad_evals": r.grad_evals})
        r = run_mcmc(jax.random.fold_in(k_run, len(fr)), spec, data.train, s, start=start,
                     budget=max(budget - spent, 1), **kw)
        r = r._replace(grad_evals=r.grad_evals + spent, compile_s=r.compile_s + compile_s,
                       run_s=r.run_s + run_s)
    else:
        start = _start(k_init, opts["init"], s.chains, D, data.teacher)
        r = run_mcmc(k_run, spec, data.train, s, start=start, budget=budget, **kw)
    why = []
    if r.budget_exhausted_in_warmup:
        why.append(f"warm-up cut at {r.warmup_done}/{s.warmup} iterations by the budget")
    why += _chain_checks(r)
    if r.divergences:
        why.append(f"{r.divergences} divergences")
    conv = not why
    reason = ("; ".join(why) if why else
              f"r_hat_max {r.r_hat_max:.3f} <= {INFERENCE_RHAT_MAX}, "
              f"ess_bulk_min {r.ess_bulk_min:.0f} >= {ESS_MIN:g}, no divergence")
    if opts["init"] == "teacher" and conv:
        reason += " (teacher start: R-hat cannot reveal trapping)"
    diag = {"grad_evals": r.grad_evals, "grad_evals_warmup": r.grad_evals_warmup,
            "compile_s": r.compile_s, "run_s": r.run_s, "iterations": r.iterations,
            "warmup_done": r.warmup_done, "thin": r.thin, "draws_kept": int(r.k.shape[1]),
            "chains": s.chains, "step_size": r.step_size, "divergences": r.divergences,
            "accept_prob": r.accept_prob, "r_hat_max": r.r_hat_max,
            "ess_bulk_min": r.ess_bulk_min, "ess_tail_min": r.ess_tail_min,
            "ess_per_grad": r.ess_bulk_min / max(r.grad_evals, 1),
            "converged": conv, "reason": reason,
            "anneal_rungs": ";".join(f"{x['fraction']:g}:{x['grad_evals']}" for x in rungs)}
    return r.k.reshape(-1, D), r.v.reshape(-1, D), diag


def _chain_checks(r) -> list[str]:
    """Why a sampler's chains fail the budgeted benchmark's convergence rule (too few draws for
    R-hat and ESS, R-hat above ``INFERENCE_RHAT_MAX``, bulk ESS below ``ESS_MIN``); empty when
    they pass."""
    if r.k.shape[1] < 4:
        return [f"{r.k.shape[1]} draws kept per chain (too few for R-hat and ESS)"]
    return chain_failures({"r_hat_max": r.r_hat_max, "ess_bulk_min": r.ess_bulk_min},
                          CONVERGENCE["inference"])


def _run_vi(key, alg: str, spec, data, opts: dict[str, Any], budget: int
            ) -> tuple[np.ndarray, np.ndarray, dict[str, Any]]:
    start = ({"k": data.teacher.k, "v": data.teacher.v} if opts["init"] == "teacher" else None)
    r = run_vi(key, spec, data.train, alg, budget=budget, start=start, lr=opts["lr"],
               num_particles=opts["num_particles"], rank=opts["rank"],
               init_scale=opts["init_scale"], predict_draws=opts["predict_draws"],
               gtol=opts["gtol"])
    diag = {"grad_evals": r.grad_evals, "compile_s": r.compile_s, "run_s": r.run_s,
            "iterations": r.steps, "elbo": -r.final_loss, "elbo_change": -r.loss_change,
            "elbo_change_stderr": r.loss_change_stderr, "grad_rms": r.grad_rms,
            "guide_scale_mean": r.scale_mean, "converged": r.converged, "reason": r.reason}
    return r.k, r.v, diag


def _run_smc(key, alg: str, spec, data, opts: dict[str, Any], budget: int
             ) -> tuple[np.ndarray, np.ndarray, dict[str, Any]]:
    from bayesslr.inference.smc import run_smc

    r = run_smc(key, spec, data.train, budget=budget, particles=opts["particles"] or None,
                mcmc_steps=opts["mcmc_steps"], integration_steps=opts["integration_steps"],
                target_ess=opts["target_ess"], expected_steps=opts["expected_steps"])
    why = []
    if r.final_lambda < 1.0:
        why.append(f"budget ended at lambda {r.final_lambda:.3f} < 1 after "
                   f"{r.tempering_steps} tempering steps")
    if not r.acceptance_min >= SMC_ACCEPT_MIN:
        why.append(f"smallest acceptance {r.acceptance_min:.2f} < {SMC_ACCEPT_MIN}")
    conv = not why
    reason = "; ".join(why) if why else (
        f"lambda = 1 in {r.tempering_steps} steps, {r.rejuvenation_steps} rejuvenation rounds, "
        f"acceptance >= {r.acceptance_min:.2f}")
    sched = ",".join(f"{x:.3g}" for x in r.schedule)
    diag = {"grad_evals": r.grad_evals, "compile_s": r.compile_s, "run_s": r.run_s,
            "iterations": r.tempering_steps + r.rejuvenation_steps, "particles": r.particles,
            "tempering_steps": r.tempering_steps, "rejuvenation_steps": r.rejuvenation_steps,
            "final_lambda": r.final_lambda, "acceptance_mean": r.acceptance_mean,
            "acceptance_min": r.acceptance_min, "log_evidence": r.log_evidence,
            "step_size": r.step_size, "schedule": sched, "converged": conv, "reason": reason}
    return r.k, r.v, diag


def _run_pt(key, alg, spec, data, opts: dict[str, Any], budget: int
            ) -> tuple[np.ndarray, np.ndarray, dict[str, Any]]:
    from bayesslr.bayes.pt import run_pt

    del alg  # one PT algorithm; the runners' contract passes it
    r = run_pt(key, spec, data.train, budget=budget, chains=opts["pt_chains"],
               replicas=opts["replicas"], beta_min=opts["beta_min"],
               integration_steps=opts["pt_integration_steps"],
               warmup_fraction=opts["warmup_fraction"], chunk=opts["chunk"],
               max_draws=opts["max_draws"])
    why = []
    why += _chain_checks(r)
    low = np.flatnonzero(~(r.swap_rates >= PT_SWAP_RATE_MIN))
    if low.size:
        why.append(f"swap rate below {PT_SWAP_RATE_MIN} at pairs {low.tolist()}")
    conv = not why
    reason = "; ".join(why) if why else (
        f"r_hat_max {r.r_hat_max:.3f} <= {INFERENCE_RHAT_MAX}, "
        f"ess_bulk_min {r.ess_bulk_min:.0f} >= {ESS_MIN:g}, swap rates >= "
        f"{np.nanmin(r.swap_rates):.2f}, {r.round_trips} round trips")
    D = r.k.shape[-1]
    diag = {"grad_evals": r.grad_evals, "grad_evals_warmup": r.grad_evals_warmup,
            "compile_s": r.compile_s, "run_s": r.run_s, "iterations": r.iterations,
            "warmup_done": r.warmup_done, "draws_kept": int(r.k.shape[1]),
            "chains": int(r.k.shape[0]),
            "step_size": float(r.step_size[0]), "accept_prob": float(r.accept[0]),
            "r_hat_max": r.r_hat_max, "ess_bulk_min": r.ess_bulk_min,
            "ess_tail_min": r.ess_tail_min, "divergences": 0,
            **r.tempering_summary(), "converged": conv, "reason": reason}
    return r.k.reshape(-1, D), r.v.reshape(-1, D), diag


def _require_smc() -> Any:
    from bayesslr.inference.smc import require

    return require()


def _chains_memory(opts: dict[str, Any], D: int, N: int, L: int) -> tuple[float, str, str]:
    return (8.0 * opts["chains"] * 2 * opts["max_draws"] * 2 * D + 40.0 * opts["chains"] * N * L,
            "kept draws chains x max_draws x 2D", "max_draws or chains")


def _guide_memory(opts: dict[str, Any], D: int, N: int, L: int) -> tuple[float, str, str]:
    return (8.0 * opts["predict_draws"] * 2 * D + 40.0 * N * L,
            "guide draws predict_draws x 2D", "predict_draws")


def _smc_memory(opts: dict[str, Any], D: int, N: int, L: int) -> tuple[float, str, str]:
    P = opts["particles"] or 4096
    return 4.0 * P * (8 * N * L + 16 * D), "particles x N x L likelihood terms", "particles"


def _pt_memory(opts: dict[str, Any], D: int, N: int, L: int) -> tuple[float, str, str]:
    return (8.0 * opts["pt_chains"] * 2 * opts["max_draws"] * 2 * D
            + 40.0 * opts["pt_chains"] * opts["replicas"] * N * L,
            "kept draws pt_chains x max_draws x 2D", "max_draws or replicas")


def _chain_draws(opts: dict[str, Any]) -> int:
    return opts["chains"] * opts["max_draws"]


def _guide_draws(opts: dict[str, Any]) -> int:
    return opts["predict_draws"]


COMMON_OPTIONS = ("n_test", "reference", "chunk_predict")
_MCMC = COMMON_OPTIONS + ("chains", "warmup", "warmup_fraction", "target_accept", "chunk",
                          "max_draws", "anneal_fractions", "anneal_share")
_VI = COMMON_OPTIONS + ("lr", "num_particles", "init_scale", "predict_draws")
_SAMPLER_STARTS = ("teacher", "random", "anneal")


def _mcmc(name: str, *extra: str) -> Algorithm:
    return Algorithm(name, _SAMPLER_STARTS, _MCMC + extra, _run_mcmc, _chains_memory,
                     _chain_draws)


def _vi(name: str, *extra: str) -> Algorithm:
    return Algorithm(name, ("teacher", "random"), _VI + extra, _run_vi, _guide_memory,
                     _guide_draws)


# the table: name -> record, in the leaderboard's order (bayesslr.inference.mcmc: nuts, hmc,
# gibbs, dgibbs; bayesslr.inference.vi: advi, lowrank, map; bayesslr.inference.smc;
# bayesslr.bayes.pt). SMC's predictor averages its particles, priced as predict_draws.
ALGORITHMS: dict[str, Algorithm] = {a.name: a for a in (
    _mcmc("nuts", "max_tree_depth"),
    _mcmc("hmc", "trajectory_length"),
    _mcmc("gibbs", "max_tree_depth"),
    _mcmc("dgibbs", "max_tree_depth"),
    _vi("advi"),
    _vi("lowrank", "rank"),
    Algorithm("map", ("teacher", "random"), COMMON_OPTIONS + ("lr", "gtol"), _run_vi,
              _guide_memory, _guide_draws),
    Algorithm("smc", ("prior",), COMMON_OPTIONS + (
        "particles", "mcmc_steps", "integration_steps", "target_ess", "expected_steps"),
        _run_smc, _smc_memory, _guide_draws, require=_require_smc),
    Algorithm("pt", ("random",), COMMON_OPTIONS + (
        "pt_chains", "replicas", "beta_min", "pt_integration_steps", "warmup_fraction", "chunk",
        "max_draws"), _run_pt, _pt_memory,
        lambda opts: opts["pt_chains"] * opts["max_draws"]),
)}
