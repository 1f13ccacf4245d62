"""The registered family ``inference``: one cell -> one budgeted inference run, scored.

A method is ``inference:<algorithm>-<start>-<budget>`` (e.g. ``inference:nuts-random-1e5``):
the sweep's dataset indexes results by method, not by options, so every configuration compared
on the leaderboard is its own method. Algorithms (one record each,
:data:`bayesslr.inference.algorithms.ALGORITHMS`): ``nuts``, ``hmc``, ``gibbs``, ``dgibbs``
(:mod:`bayesslr.inference.mcmc`), ``advi``, ``lowrank``, ``map`` (:mod:`bayesslr.inference.vi`)
``smc`` (BlackJAX's adaptive tempered SMC, :mod:`bayesslr.inference.smc`, optional extra) and
``pt`` (parallel tempering with HMC moves, :mod:`bayesslr.bayes.pt`).
Starts: ``teacher``, ``random``, ``anneal`` (samplers), ``teacher``, ``random`` (VI, MAP),
``prior`` (SMC). Budgets: the tiers of :data:`BUDGET_TIERS`, in gradient evaluations.

All share one model definition (:mod:`bayesslr.bayes.model`), one data contract
(``sample_task`` on ``seed_key(seed)``, algorithm randomness from
``algorithm_key(key, "sampler")``), one error measurement (:mod:`bayesslr.inference.evaluate`)
and one ground truth (:mod:`bayesslr.inference.reference`, built by :mod:`bayesslr.ground_truth`).

Every cell is given ``budget`` gradient evaluations of the full-data log density (all chains,
particles or ELBO particles together) and reports what it used (``grad_evals``), the
compilation time apart from the run (``compile_s``, ``run_s``; the prediction ``predict_s``),
the test error, ``excess_over_oracle``, ``excess_over_reference`` (paired with the stored
reference predictions where the task is in the reference set), its own diagnostics, and
``converged`` with the ``reason``, against these documented thresholds:

* samplers (``nuts``, ``hmc``, ``gibbs``): split R-hat ``<= INFERENCE_RHAT_MAX``, bulk ESS
  ``>= ESS_MIN`` (:data:`bayesslr.core.thresholds.CONVERGENCE` ``"inference"``), no
  divergence, warm-up completed (teacher starts cannot reveal trapping through R-hat: compare
  with ``random`` / ``anneal`` starts, and with the reference);
* ``advi``, ``lowrank``: the negative ELBO has reached a plateau (:mod:`bayesslr.inference.vi`);
* ``map``: RMS gradient per coordinate ``< gtol``;
* ``smc``: ``lambda = 1`` reached and the smallest mutation acceptance ``>= SMC_ACCEPT_MIN``;
* ``pt``: the samplers' R-hat and ESS rule on the ``b = 1`` draws, and every neighbouring swap
  rate ``>= PT_SWAP_RATE_MIN``.
"""

from __future__ import annotations

import math
import time
from typing import Any

import numpy as np

from bayesslr.bayes.model import model_spec
from bayesslr.core.options import Opt, Schema
from bayesslr.core.task import ConfigError, algorithm_key
from bayesslr.inference import reference as ref
from bayesslr.inference.algorithms import ALGORITHMS
from bayesslr.inference.evaluate import score_draws_on_data, task_data
from bayesslr.registry import Cell, PlotStyle, ReportRole, Resources, common, outputs, register

BUDGET_TIERS: tuple[str, ...] = ("1e3", "3e3", "1e4", "3e4", "1e5", "3e5", "1e6", "3e6")

# one method per (algorithm, start, budget tier): the sweep's dataset indexes results by method
# (options are not a dimension), so each configuration compared is its own method
METHODS: tuple[str, ...] = tuple(f"{a.name}-{i}-{b}" for a in ALGORITHMS.values()
                                 for i in a.starts for b in BUDGET_TIERS)


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
    alg = ALGORITHMS[parse_method(cell.member)[0]]
    extra = sorted(set(cell.options) - set(alg.options))
    if extra:
        raise ConfigError(f"options {extra} do not apply to {cell.method!r}; allowed: "
                          + ", ".join(alg.options))
    if alg.require is not None:
        alg.require()
    task = cell.task()
    if task.delta <= 0.0 or math.isinf(task.nu):
        model_spec(task)  # raises the model's one-line refusal


def _sizes(cell: Cell, opts: dict[str, Any]) -> tuple[int, int, int, int]:
    D = cell.dimension()
    return D, cell.n_train(), opts["n_test"], int(cell.task(D=1).L_max)


def _memory(cell: Cell, opts: dict[str, Any]) -> Resources:
    D, N, n_test, L = _sizes(cell, opts)
    data = 4.0 * (N + n_test) * L * D
    state, what, lower = ALGORITHMS[parse_method(cell.member)[0]].state_memory(opts, D, N, L)
    pred = 4.0 * 6 * n_test * opts["chunk_predict"] * L
    return Resources(data + state + pred, f"data (N + n_test) x L x D float32 and {what}",
                     f"n_test, alpha, D or {lower}")


GRAD_SECONDS_PER_NLD = 2.5e-9  # measured: NUTS at D = 50, 100 (2 cores, shared; docs)


def _cost(cell: Cell, opts: dict[str, Any]) -> float:
    D, N, n_test, L = _sizes(cell, opts)
    alg, _, budget = parse_method(cell.member)
    run = budget * N * L * D * GRAD_SECONDS_PER_NLD
    draws = ALGORITHMS[alg].draws(opts)
    predict = draws * n_test * L * D * 4 * 1e-9
    return 20.0 + run + predict  # + compilation (a cold cache; ~1 s warm)


@register(
    "inference", schema=SCHEMA, activations=METHODS, member_kind="algorithm-start-budget",
    needs=("alpha", "D"),
    description="inference algorithms on the SLR posterior under a gradient budget, scored "
                "against the Bayes-optimal reference (docs/theory.md, docs/model.md §6)",
    outputs=OUTPUTS, cost=_cost, memory=_memory, check=_check,
    plot=PlotStyle(kind="marker", label="{member}", marker="o"), version="1",
    dims=("variant", "L", "nu", "delta", "alpha", "D"),
    report=ReportRole(leaderboard=1, reference=ref.stored_reference,
                      reference_data=ref.load_inference_reference))
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
    K, V, diag = ALGORITHMS[alg].run(kalg, alg, spec, data, opts, budget)
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
