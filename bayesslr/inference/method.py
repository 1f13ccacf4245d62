"""The registered family ``inference``: one cell -> one budgeted inference run, scored.

A method is ``inference:<algorithm>-<start>-<budget>`` (e.g. ``inference:nuts-random-1e5``):
the sweep's dataset indexes results by method, not by options, so every configuration compared
on the leaderboard is its own method. Algorithms: ``nuts``, ``hmc``, ``gibbs``, ``dgibbs``
(:mod:`bayesslr.inference.mcmc`), ``advi``, ``lowrank``, ``map`` (:mod:`bayesslr.inference.vi`)
``smc`` (BlackJAX's adaptive tempered SMC, :mod:`bayesslr.inference.smc`, optional extra) and
``pt`` (parallel tempering with HMC moves, :mod:`bayesslr.bayes.pt`).
Starts: ``teacher``, ``random``, ``anneal`` (samplers), ``teacher``, ``random`` (VI, MAP),
``prior`` (SMC). Budgets: the tiers of :data:`BUDGET_TIERS`, in gradient evaluations.

All share one model definition (:mod:`bayesslr.bayes.model`), one data contract
(``sample_task`` on ``seed_key(seed)``, algorithm randomness from
``algorithm_key(key, "sampler")``), one error measurement (:mod:`bayesslr.inference.evaluate`)
and one ground truth (:mod:`bayesslr.inference.ground_truth`).

Every cell is given ``budget`` gradient evaluations of the full-data log density (all chains,
particles or ELBO particles together) and reports what it used (``grad_evals``), the
compilation time apart from the run (``compile_s``, ``run_s``; the prediction ``predict_s``),
the test error, ``excess_over_oracle``, ``excess_over_reference`` (paired with the stored
reference predictions where the task is in the reference set), its own diagnostics, and
``converged`` with the ``reason``, against these documented thresholds:

* samplers (``nuts``, ``hmc``, ``gibbs``): split R-hat ``<= INFERENCE_RHAT_MAX``, bulk ESS
  ``>= ESS_MIN``, no divergence, warm-up completed (teacher starts cannot reveal trapping
  through R-hat: compare with ``random`` / ``anneal`` starts, and with the reference);
* ``advi``, ``lowrank``: the negative ELBO has reached a plateau (:mod:`bayesslr.inference.vi`);
* ``map``: RMS gradient per coordinate ``< gtol``;
* ``smc``: ``lambda = 1`` reached and the smallest mutation acceptance ``>= SMC_ACCEPT_MIN``;
* ``pt``: the samplers' R-hat and ESS rule on the ``b = 1`` draws, and every neighbouring swap
  rate ``>= PT_SWAP_RATE_MIN``.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from bayesslr.bayes.model import model_spec
from bayesslr.bayes.sampler import init_params
from bayesslr.core.options import Opt, Schema
from bayesslr.core.task import ConfigError, algorithm_key
from bayesslr.core.thresholds import CONVERGENCE, PT_SWAP_RATE_MIN, num
from bayesslr.inference import ground_truth as ref
from bayesslr.inference.evaluate import score_draws_on_data, task_data
from bayesslr.inference.mcmc import MCMC_ALGORITHMS, MCMCSettings, run_mcmc
from bayesslr.inference.vi import VI_ALGORITHMS, run_vi
from bayesslr.registry import Cell, PlotStyle, ReportRole, Resources, common, outputs, register

SMC_ALGORITHMS: tuple[str, ...] = ("smc",)
PT_ALGORITHMS: tuple[str, ...] = ("pt",)  # parallel tempering, bayesslr.bayes.pt
ALGORITHMS: tuple[str, ...] = MCMC_ALGORITHMS + VI_ALGORITHMS + SMC_ALGORITHMS + PT_ALGORITHMS
BUDGET_TIERS: tuple[str, ...] = ("1e3", "3e3", "1e4", "3e4", "1e5", "3e5", "1e6", "3e6")
INFERENCE_RHAT_MAX = CONVERGENCE["inference"].r_hat_max  # bayesslr.core.thresholds: why looser
ESS_MIN = CONVERGENCE["inference"].ess_min
SMC_ACCEPT_MIN = 0.2

_COMMON_OPTS = ("n_test", "reference", "chunk_predict")
_MCMC_OPTS = ("chains", "warmup", "warmup_fraction", "target_accept", "chunk", "max_draws",
              "anneal_fractions", "anneal_share")
ALGO_OPTIONS: dict[str, tuple[str, ...]] = {  # options that apply (besides the name's)
    "nuts": _COMMON_OPTS + _MCMC_OPTS + ("max_tree_depth",),
    "hmc": _COMMON_OPTS + _MCMC_OPTS + ("trajectory_length",),
    "gibbs": _COMMON_OPTS + _MCMC_OPTS + ("max_tree_depth",),
    "dgibbs": _COMMON_OPTS + _MCMC_OPTS + ("max_tree_depth",),
    "advi": _COMMON_OPTS + ("lr", "num_particles", "init_scale", "predict_draws"),
    "lowrank": _COMMON_OPTS + ("lr", "num_particles", "init_scale", "predict_draws", "rank"),
    "map": _COMMON_OPTS + ("lr", "gtol"),
    "smc": _COMMON_OPTS + ("particles", "mcmc_steps", "integration_steps", "target_ess",
                           "expected_steps"),
    "pt": _COMMON_OPTS + ("pt_chains", "replicas", "beta_min", "pt_integration_steps",
                          "warmup_fraction", "chunk", "max_draws"),
}
ALGO_INITS: dict[str, tuple[str, ...]] = {
    **{a: ("teacher", "random", "anneal") for a in MCMC_ALGORITHMS},
    **{a: ("teacher", "random") for a in VI_ALGORITHMS},
    "smc": ("prior",),
    "pt": ("random",),
}
# one method per (algorithm, start, budget tier): the sweep's dataset indexes results by method
# (options are not a dimension), so each configuration compared is its own method
METHODS: tuple[str, ...] = tuple(f"{a}-{i}-{b}" for a in ALGORITHMS for i in ALGO_INITS[a]
                                 for b in BUDGET_TIERS)


def parse_method(suffix: str) -> tuple[str, str, int]:
    """``"nuts-random-1e5"`` -> ``("nuts", "random", 100000)``."""
    alg, start, tier = suffix.split("-")
    return alg, start, int(float(tier))

SCHEMA = Schema("inference", (
    Opt("n_test", 4000, "int", low=2, high=10**7,
        doc="fresh test inputs (the reference's 4000 for a paired comparison)"),
    Opt("reference", "auto", "choice", choices=("auto", "theory", "none"),
        doc="ground truth: the stored long-NUTS reference of this task, else the state "
            "evolution (auto); the state evolution only (theory); none"),
    Opt("chunk_predict", 128, "int", low=1, high=4096, doc="draws per prediction block"),
    Opt("chains", 4, "int", low=1, high=64, doc="chains (samplers)"),
    Opt("warmup", 300, "int", low=0, high=10**7,
        doc="warm-up (adaptation) iterations, rounded up to a multiple of chunk"),
    Opt("warmup_fraction", 0.5, "real", low=0.0, high=1.0, low_open=True,
        doc="largest share of the budget the warm-up may use"),
    Opt("target_accept", 0.8, "real", low=0.05, high=0.999, doc="target acceptance"),
    Opt("max_tree_depth", 10, "int", low=1, high=15, doc="NUTS tree depth"),
    Opt("trajectory_length", math.pi / 2, "real", low=0.0, low_open=True, high=100.0,
        doc="HMC integration time (adapted metric)"),
    Opt("chunk", 10, "int", low=1, high=10_000, doc="iterations per compiled call"),
    Opt("max_draws", 1000, "int", low=4, high=10**6, doc="kept draws per chain (thinned)"),
    Opt("anneal_fractions", (0.125, 0.25, 0.5), "reals", low=0.0, high=1.0, low_open=True,
        max_len=20, doc="nested data fractions of the anneal rungs before the full data"),
    Opt("anneal_share", 0.5, "real", low=0.0, high=1.0, low_open=True,
        doc="share of the budget spent on the anneal rungs before the full data"),
    Opt("lr", 0.01, "real", low=0.0, low_open=True, high=10.0,
        doc="peak Adam learning rate (cosine decay to lr/100)"),
    Opt("num_particles", 1, "int", low=1, high=1024, doc="ELBO particles per step"),
    Opt("init_scale", 0.1, "real", low=0.0, low_open=True, high=10.0,
        doc="initial guide standard deviation"),
    Opt("predict_draws", 1000, "int", low=1, high=10**6, doc="guide draws for prediction"),
    Opt("rank", 10, "int", low=1, high=1000, doc="rank of the low-rank guide"),
    Opt("gtol", 1e-2, "real", low=0.0, low_open=True, doc="MAP: RMS gradient threshold"),
    Opt("particles", 0, "int", low=0, high=10**6,
        doc="SMC particles (0: sized from the budget and expected_steps)"),
    Opt("mcmc_steps", 5, "int", low=1, high=1000, doc="SMC: HMC moves per tempering step"),
    Opt("integration_steps", 10, "int", low=1, high=1000, doc="SMC: leapfrog steps per move"),
    Opt("target_ess", 0.5, "real", low=0.0, high=1.0, low_open=True,
        doc="SMC: ESS fraction kept by each tempering step"),
    Opt("expected_steps", 60, "int", low=1, high=10_000,
        doc="SMC: tempering steps assumed when sizing the population"),
    Opt("pt_chains", 2, "int", low=1, high=64, doc="PT: independent replica systems"),
    Opt("replicas", 24, "int", low=1, high=1024, doc="PT: replicas (temperatures) per chain"),
    Opt("beta_min", 1e-3, "real", low=0.0, high=1.0, low_open=True, high_open=True,
        doc="PT: smallest likelihood temperature of the ladder"),
    Opt("pt_integration_steps", 5, "int", low=1, high=1000,
        doc="PT: leapfrog steps per HMC move"),
))

OUTPUTS = common("test_error", "stderr", "risk", "oracle_error", "oracle_error_stderr",
                 "excess_over_oracle", "excess_over_oracle_stderr", "m_k", "q_k", "m_v", "q_v",
                 "nishimori_gap", "r_hat_max", "ess_bulk_min", "ess_tail_min", "divergences",
                 "grad_evals", "converged", "reason", "iterations", "runtime_s") + outputs(
    ("excess_over_reference", "test_error minus the Bayes-optimal reference error (paired on "
     "the same test set when the reference stores its predictions)", "1",
     "excess_over_reference_stderr"),
    ("excess_over_reference_stderr", "standard error of excess_over_reference"),
    ("reference_error", "Bayes-optimal reference test error of the task", "1",
     "reference_error_stderr"),
    ("reference_error_stderr", "standard error of reference_error"),
    ("reference_source", "nuts_long (stored, this task), state_evolution or none", ""),
    ("reference_paired", "excess_over_reference is paired on the same test set", ""),
    ("reaches_reference", "excess_over_reference below 3 of its standard errors", ""),
    ("budget", "gradient evaluations allowed"),
    ("compile_s", "compilation wall time (apart from the run)", "s"),
    ("run_s", "execution wall time of the algorithm, compilation excluded", "s"),
    ("predict_s", "wall time of the prediction on the test set", "s"),
    ("test_error_plain", "test error of the plain average of per-draw predictions"),
    ("accept_prob", "mean acceptance statistic (samplers)"),
    ("step_size", "adapted step size (samplers, SMC)"),
    ("elbo", "final mean ELBO (VI; minus log joint at MAP)"),
    ("elbo_change", "mean ELBO change over the last tenth of the steps"),
    ("grad_rms", "RMS gradient of the log posterior per coordinate at the end (VI, MAP)"),
    ("particles", "SMC particles"),
    ("tempering_steps", "SMC tempering steps to lambda = 1"),
    ("final_lambda", "SMC tempering parameter reached"),
    ("acceptance_min", "SMC smallest mutation acceptance"),
    ("log_evidence", "SMC estimate of the log marginal likelihood"),
)


def _check(cell: Cell, opts: dict[str, Any]) -> None:
    alg = parse_method(cell.member)[0]
    extra = sorted(set(cell.options) - set(ALGO_OPTIONS[alg]))
    if extra:
        raise ConfigError(f"options {extra} do not apply to {cell.method!r}; allowed: "
                          + ", ".join(ALGO_OPTIONS[alg]))
    if alg == "smc":
        from bayesslr.inference.smc import require

        require()
    task = cell.task()
    if task.delta <= 0.0 or math.isinf(task.nu):
        model_spec(task)  # raises the model's one-line refusal


def _sizes(cell: Cell, opts: dict[str, Any]) -> tuple[int, int, int, int]:
    D = cell.dimension()
    return D, cell.n_train(), opts["n_test"], int(cell.task(D=1).L_max)


def _memory(cell: Cell, opts: dict[str, Any]) -> Resources:
    D, N, n_test, L = _sizes(cell, opts)
    data = 4.0 * (N + n_test) * L * D
    alg = parse_method(cell.member)[0]
    if alg in MCMC_ALGORITHMS:
        state = 8.0 * opts["chains"] * 2 * opts["max_draws"] * 2 * D + 40.0 * opts[
            "chains"] * N * L
        what, lower = "kept draws chains x max_draws x 2D", "max_draws or chains"
    elif alg == "smc":
        P = opts["particles"] or 4096
        state = 4.0 * P * (8 * N * L + 16 * D)
        what, lower = "particles x N x L likelihood terms", "particles"
    elif alg == "pt":
        state = 8.0 * opts["pt_chains"] * 2 * opts["max_draws"] * 2 * D + 40.0 * opts[
            "pt_chains"] * opts["replicas"] * N * L
        what, lower = "kept draws pt_chains x max_draws x 2D", "max_draws or replicas"
    else:
        state = 8.0 * opts["predict_draws"] * 2 * D + 40.0 * N * L
        what, lower = "guide draws predict_draws x 2D", "predict_draws"
    pred = 4.0 * 6 * n_test * opts["chunk_predict"] * L
    return Resources(data + state + pred, f"data (N + n_test) x L x D float32 and {what}",
                     f"n_test, alpha, D or {lower}")


GRAD_SECONDS_PER_NLD = 2.5e-9  # measured: NUTS at D = 50, 100 (2 cores, shared; docs)


def _cost(cell: Cell, opts: dict[str, Any]) -> float:
    D, N, n_test, L = _sizes(cell, opts)
    alg, _, budget = parse_method(cell.member)
    run = budget * N * L * D * GRAD_SECONDS_PER_NLD
    draws = (opts["chains"] * opts["max_draws"] if alg in MCMC_ALGORITHMS
             else opts["pt_chains"] * opts["max_draws"] if alg == "pt"
             else opts["predict_draws"])
    predict = draws * n_test * L * D * 4 * 1e-9
    return 20.0 + run + predict  # + compilation (a cold cache; ~1 s warm)


@register(
    "inference", schema=SCHEMA, activations=METHODS, member_kind="algorithm-start-budget",
    needs=("alpha", "D"),
    description="inference algorithms on the SLR posterior under a gradient budget, scored "
                "against the Bayes-optimal reference (docs/theory.md, docs/model.md §6)",
    outputs=OUTPUTS, cost=_cost, memory=_memory, check=_check,
    plot=PlotStyle(kind="marker", label="{member}", marker="o"), version="1",
    dims=("variant", "L", "nu", "delta", "alpha", "D"), report=ReportRole(leaderboard=1))
def inference_cell(cell: Cell, opts: dict[str, Any]) -> dict[str, Any]:
    """One budgeted run of ``cell.member`` on the task of ``cell`` (module docstring).

    Returns
    -------
    dict
        The outputs declared in :data:`OUTPUTS` and the algorithm's own diagnostics.
    """
    t0 = time.perf_counter()
    alg, start, budget = parse_method(cell.member)
    opts = {**opts, "init": start}
    task = cell.task()
    spec = model_spec(task)
    N = cell.n_train()
    data = task_data(task, cell.seed, N, opts["n_test"])
    kalg = algorithm_key(data.key, "sampler")
    out: dict[str, Any] = {"algorithm": alg, "budget": budget, "init": start, "N": N,
                           "n_test": opts["n_test"], **spec.to_dict()}
    K, V, diag = RUNNERS[alg](kalg, alg, spec, data, opts, budget)
    out.update(diag)
    reference = None
    if opts["reference"] != "none":
        reference = (ref.lookup(task, float(cell.alpha), cell.seed, opts["n_test"])
                     if opts["reference"] == "auto" else
                     ref.theory_reference(task.variant, task.length.label(), float(task.nu),
                                          float(task.delta), float(cell.alpha)))
    tp = time.perf_counter()
    scores, _ = score_draws_on_data(task, spec, data, K, V, reference, chunk=opts["chunk_predict"])
    out["predict_s"] = time.perf_counter() - tp
    out.update(scores)
    e, se = out["excess_over_reference"], out["excess_over_reference_stderr"]
    out["reaches_reference"] = bool(np.isfinite(e) and e <= 3.0 * se) if reference else False
    out["runtime_s"] = time.perf_counter() - t0
    return out


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
    why = []
    if not r.r_hat_max <= INFERENCE_RHAT_MAX:
        why.append(f"r_hat_max {num(r.r_hat_max, INFERENCE_RHAT_MAX)} > {INFERENCE_RHAT_MAX}")
    if not r.ess_bulk_min >= ESS_MIN:
        why.append(f"ess_bulk_min {r.ess_bulk_min:.0f} < {ESS_MIN:g}")
    return why


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


# one contract per algorithm: runner(key, alg, spec, data, opts, budget) -> (k draws, v draws,
# diagnostics); inference_cell looks the algorithm up here
RUNNERS: dict[str, Callable[..., tuple[np.ndarray, np.ndarray, dict[str, Any]]]] = {
    **dict.fromkeys(MCMC_ALGORITHMS, _run_mcmc), **dict.fromkeys(VI_ALGORITHMS, _run_vi),
    **dict.fromkeys(SMC_ALGORITHMS, _run_smc),
    **dict.fromkeys(PT_ALGORITHMS, _run_pt)}
