"""The ``multihead`` family: the multi-head model's estimators as sweep cells
(docs/multihead.md section 8).

One family, its members the estimators compared on the same data:

* ``multihead:softmax``, ``multihead:softmax1``, ``multihead:bayes_softmax``: the ``H``-head
  attention student trained by regularised ERM (L-BFGS,
  :func:`bayesslr.multihead.erm.multihead_erm`), then pruned head by head
  (:func:`bayesslr.multihead.erm.prune_heads`, no retraining);
* ``multihead:bayes_sampling``: the Bayes-optimal estimator at finite ``alpha``, the posterior
  mean by sampling the teacher-unknown model (NUTS by default, or parallel tempering with
  ``sampler = "pt"``: :func:`bayesslr.multihead.sampling.bayes_optimal_by_sampling`), with its
  convergence verdict on permutation-invariant quantities (for PT also the swap rates and
  round trips, reported as ``swap_rate_min`` and ``round_trips``).

Every cell has the task variant ``"multihead"``; the task's own settings that a one-head cell
does not have (``F``, ``theta``, ``teacher``) are options, as is the student's ``H`` (default
``F``). A cell's seed gives the teacher, the training data and the test set exactly as
:func:`bayesslr.multihead.sample_multihead` splits its key (``seed_key(seed)``), so the four
members of one seed see the same teacher, training set and test set: their
``excess_over_oracle`` (test error minus the teacher-known Bayes predictor's, paired on the
same test rows) are comparable, and the difference of two of them is the difference of their
test errors exactly.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from functools import partial
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from bayesslr.core.jaxconfig import Array
from bayesslr.core.lam import LAM_MODES
from bayesslr.core.metrics import TestErrors, score_given
from bayesslr.core.options import Opt, Schema, schema_of
from bayesslr.core.task import ConfigError, LengthLaw, algorithm_key, seed_key
from bayesslr.multihead.erm import (
    PRUNE_RULES,
    MultiheadERMOptions,
    MultiheadParams,
    multihead_erm,
    prune_heads,
    pruned_predict,
    specialisation,
)
from bayesslr.multihead.sampling import (
    MultiheadSamplingOptions,
    bayes_optimal_by_sampling,
    check_sampling_task,
    sample_train_test,
)
from bayesslr.multihead.task import (
    SIGMAS,
    TEACHERS,
    THETA_LAWS,
    MultiheadTask,
    joint_posterior,
)
from bayesslr.registry import Cell, CliFace, Output, PlotStyle, ReportRole, Resources

# isort: split
from bayesslr.registry import common, outputs, register

VARIANT = "multihead"
SAMPLING = "bayes_sampling"
MEMBERS: tuple[str, ...] = (*SIGMAS, SAMPLING)

TASK_SCHEMA = Schema("multihead", (
    Opt("F", 2, "int", low=1, high=64, doc="hidden directions of the teacher"),
    Opt("theta", "discrete", "choice", choices=THETA_LAWS,
        doc="law of the per-sample latent: one active direction (discrete) or N(0, I/F)"),
    Opt("teacher", "orthonormal", "choice", choices=TEACHERS,
        doc="law of the teacher's directions (docs/multihead.md section 1.1)"),
    Opt("n_test", 10_000, "int", low=2, high=10**8,
        doc="fresh test inputs (the same rows for every member of a seed)"),
))
ERM_SCHEMA = Schema("multihead", (
    Opt("H", None, "int", low=1, high=256, nullable=True,
        doc="student heads (default: F)"),
    Opt("prune", "output", "choice", choices=PRUNE_RULES,
        doc="rule ranking the heads for pruning (docs/multihead.md section 6.3)"),
)) + schema_of(MultiheadERMOptions, exclude=("n_test",))
SAMPLING_SCHEMA = schema_of(MultiheadSamplingOptions)
SCHEMA = TASK_SCHEMA + ERM_SCHEMA + SAMPLING_SCHEMA
_ERM_ONLY = frozenset(o.name for o in ERM_SCHEMA.opts)
_SAMPLING_ONLY = frozenset(o.name for o in SAMPLING_SCHEMA.opts)


def task_of(cell: Cell, opts: Mapping[str, Any]) -> MultiheadTask:
    """The validated :class:`MultiheadTask` of a cell (a one-line :class:`ConfigError` names
    a bad field)."""
    law = LengthLaw.parse(cell.L, name="L")
    if len(law.values) != 1:
        raise ConfigError(f"L={cell.L!r} is a length law; allowed: one fixed length (integer "
                          ">= 1) for the multihead task")
    if math.isinf(float(cell.nu)):
        raise ConfigError(f"nu={cell.nu} is out of range; allowed: finite real >= 0 for the "
                          "multihead task")
    return MultiheadTask(L=law.values[0], F=opts["F"], nu=cell.nu, delta=cell.delta,
                         D=cell.dimension(), theta=opts["theta"], teacher=opts["teacher"])


def heads_of(opts: Mapping[str, Any]) -> int:
    """The student's ``H`` (option ``H``, default ``F``)."""
    return int(opts["H"]) if opts["H"] is not None else int(opts["F"])


def _check(cell: Cell, opts: Mapping[str, Any]) -> None:
    task = task_of(cell, opts)  # the registry has checked that the variant is ours
    given = set(cell.options)
    if cell.member == SAMPLING:
        wrong = sorted(given & _ERM_ONLY)
        if wrong:
            takes = ", ".join(o.name for o in (TASK_SCHEMA + SAMPLING_SCHEMA).opts)
            raise ConfigError(f"options {wrong} apply to the attention students only; "
                              f"{cell.method} takes: {takes}")
        if cell.lam is not None:
            raise ConfigError(f"lam={cell.lam!r}: {cell.method} has no penalty; allowed: none")
        check_sampling_task(task)
        if opts["test_points"] > opts["n_test"]:
            raise ConfigError(f"test_points={opts['test_points']} is out of range; allowed: "
                              f"integer <= n_test = {opts['n_test']}")
        MultiheadSamplingOptions.from_options({k: opts[k] for k in _SAMPLING_ONLY})
        return
    wrong = sorted(given & _SAMPLING_ONLY)
    if wrong:
        takes = ", ".join(o.name for o in (TASK_SCHEMA + ERM_SCHEMA).opts)
        raise ConfigError(f"options {wrong} apply to {VARIANT}:{SAMPLING} only; {cell.method} "
                          f"takes: {takes}")
    if cell.lam is None or isinstance(cell.lam, str):
        modes = ", ".join(m for m in LAM_MODES)
        raise ConfigError(f"lam={cell.lam!r} is not a penalty of {cell.method}; allowed: real "
                          f">= 0 (the modes {modes} are one-head only)")
    if float(cell.lam) < 0 or not math.isfinite(float(cell.lam)):
        raise ConfigError(f"lam={cell.lam!r} is out of range; allowed: finite real >= 0")


def _n_train(cell: Cell) -> int:
    return cell.n_train()


# CPU-s per gradient evaluation of one PT replica per unit of N L F D: all replicas of all
# chains are one vectorised program; measured at L = 2, F = 2, D = 8, N = 400 (2 chains x 10
# replicas x 8 leapfrog steps x 2130 iterations, 341 k gradients: 12.6 s after 8.1 s of
# compilation, one core under a load of ~2.5; docs/multihead.md section 7.6)
PT_CPU_S_PER_GRAD_NLFD = 3e-9


def _cost(cell: Cell, opts: Mapping[str, Any]) -> float:
    """Modelled core-seconds of a cell, fitted on this two-core machine.

    * NUTS: compilation plus ``chains (warmup + draws)`` iterations of ``N L F D`` each, times
      ``N^0.7`` (the tree grows as the posterior sharpens); least squares on the 18 sampling
      cells of the ``multihead`` preset at family version 2 (``D = 24``; ``N = 96, 384, 1536``:
      10-20, 54-65 and 207-240 CPU-s for 4 x 2500, 4 x 2500 and 4 x 1000 iterations, modelled
      12, 59 and 229). Only ``D = 24`` was measured.
    * PT: ``replicas * pt_integration_steps`` gradients an iteration per chain at
      :data:`PT_CPU_S_PER_GRAD_NLFD` (``D = 8, N = 400``: 21 CPU-s for 2 x 2130 iterations of
      10 replicas x 8 steps).
    * ERM: 1 s of fixed cost (pruning, scoring, the compilations a shape's cells share) and
      the equivalent of 120 evaluations a restart; least squares on the 216 fits of the same
      run (309 s of wall time in all, two workers on two cores; 1.09 s + 2.4e-6 s x
      ``N L H D``; 62-607 iterations on average by shape).
    """
    D, N, L = cell.dimension(), cell.n_train(), LengthLaw.parse(cell.L).L_max
    F = int(opts["F"])
    if cell.member == SAMPLING:
        iters = opts["chains"] * (opts["warmup"] + opts["draws"])
        if opts.get("sampler") == "pt":
            grads = iters * opts["replicas"] * opts["pt_integration_steps"]
            return 10.0 + PT_CPU_S_PER_GRAD_NLFD * grads * N * L * F * D
        # the tree grows with N (a sharper posterior): per iteration ~ N^1.7 at fixed D
        return 7.5 + 1.85e-7 * iters * N * L * F * D * (N / 1000.0) ** 0.7
    H = heads_of(opts)
    return 1.0 + 5e-9 * opts["restarts"] * 120 * N * L * H * D


def _memory(cell: Cell, opts: Mapping[str, Any]) -> Resources:
    D, N, L = cell.dimension(), cell.n_train(), LengthLaw.parse(cell.L).L_max
    data = 4.0 * (N + opts["n_test"]) * L * D
    if cell.member == SAMPLING:
        kept = (min(opts["draws"], opts["pt_max_draws"]) if opts.get("sampler") == "pt"
                else opts["draws"])
        draws = 4.0 * opts["chains"] * kept * 2 * opts["F"] * D
        if opts.get("sampler") == "pt":  # the cold slot of every sampling iteration, float32
            draws += 4.0 * opts["chains"] * opts["draws"] * 2 * opts["F"] * D
        return Resources(3 * data + 2 * draws, "data and draws", "n_test, draws or D")
    return Resources(3 * data * opts["restarts"], "data per restart", "n_test, restarts or D")


OUTPUTS = common("test_error", "stderr", "oracle_error", "oracle_error_stderr",
                 "excess_over_oracle", "excess_over_oracle_stderr", "converged", "reason",
                 "iterations", "r_hat_max", "ess_bulk_min", "ess_tail_min", "divergences",
                 "grad_evals", "runtime_s") + outputs(
    Output("overlap_K", "matched key overlap k.k*_f/D per teacher direction", "1", None,
           "direction"),
    Output("overlap_V", "matched value overlap v.v*_f/D per teacher direction", "1", None,
           "direction"),
    ("specialisation_K", "specialisation index of the keys (0 none, 1 one head per direction)"),
    ("specialisation_V", "specialisation index of the values"),
    ("objective", "training objective per sample S/N (attention students)"),
    ("grad_norm", "final |grad S| / sqrt(D) (attention students)"),
    ("n_heads", "student heads H (attention students)"),
    ("n_directions", "hidden directions F of the teacher (option F)"),
    ("latent", "law of the per-sample latent theta (option theta)", ""),
    ("teacher_law", "law of the teacher's directions (option teacher)", ""),
    Output("prune_excess_over_oracle", "excess over the oracle with the first m heads kept",
           "1", None, "heads_kept"),
    Output("prune_excess_over_oracle_stderr", "standard error of prune_excess_over_oracle",
           "1", None, "heads_kept"),
    ("mcmc_stderr", "Monte Carlo standard error of test_error from the finite chains"),
    ("test_error_plain", "test error of the plain average of per-draw Bayes predictors"),
    ("r_hat_raw_max", "R-hat over raw coordinates of K, V (not invariant, not judged)"),
    ("swap_rate_min", "smallest neighbour swap rate of parallel tempering"),
    ("round_trips", "round trips of parallel tempering, all chains"),
)


def _matched(overlap: np.ndarray, heads: np.ndarray) -> list[float]:
    """The overlap of each teacher direction with its assigned head (NaN if none)."""
    return [float(overlap[h, f]) if h >= 0 else math.nan for f, h in enumerate(heads)]


@partial(jax.jit, static_argnames=("sigma",))
def _scores(P: Array, z: Array, y: Array, X: Array, K: Array, V: Array, bias: Array,
            keeps: Array, *, sigma: str) -> Array:
    """Scores of the student and of its pruned versions (one row of ``keeps`` each): the
    suite's one error measurement (:func:`bayesslr.core.metrics.score_given`)."""
    def one(keep):
        return jnp.stack(list(score_given(P, z, y, pruned_predict(
            X, MultiheadParams(K, V, bias), keep, sigma))))
    return jax.vmap(one)(keeps)


def _erm_cell(cell: Cell, opts: Mapping[str, Any], task: MultiheadTask) -> dict[str, Any]:
    key = seed_key(cell.seed)
    H, N = heads_of(opts), _n_train(cell)
    erm_opts = MultiheadERMOptions.from_options(
        {**{k: opts[k] for k in _ERM_ONLY if k not in ("H", "prune")}, "n_test": opts["n_test"]})
    fit = multihead_erm(key, task, H, cell.member, N, float(cell.lam), opts=erm_opts)
    ov = fit.overlaps
    sk = specialisation(ov.key, ov.key_norm)
    sv = specialisation(ov.value, ov.value_norm)
    pr = prune_heads(key, task, fit.params, cell.member, N, rule=opts["prune"],
                     n_test=opts["n_test"])
    out = {
        "test_error": fit.test_error, "stderr": fit.stderr,
        "oracle_error": fit.oracle_error, "oracle_error_stderr": fit.oracle_error_stderr,
        "excess_over_oracle": fit.bayes_gap, "excess_over_oracle_stderr": fit.bayes_gap_stderr,
        "prune_excess_over_oracle": [float(x) for x in pr.bayes_gap],
        "prune_excess_over_oracle_stderr": [float(x) for x in pr.bayes_gap_stderr],
    }
    if task.theta == "discrete":  # Rao-Blackwellised over (eps*, f*), as bayes_sampling
        teacher, _, test = sample_train_test(key, task, N, opts["n_test"])
        P, z = joint_posterior(task, teacher, test.X)
        keeps = np.argsort(pr.order)[None, :] < np.arange(H + 1)[:, None]
        sc = np.asarray(_scores(P, z, jnp.asarray(test.y), jnp.asarray(test.X),
                                *(jnp.asarray(a) for a in fit.params), jnp.asarray(keeps),
                                sigma=cell.member), dtype=np.float64)
        full = TestErrors(*(float(x) for x in sc[-1]))
        out.update(test_error=full.test_error, stderr=full.stderr,
                   oracle_error=full.oracle_error, oracle_error_stderr=full.oracle_error_stderr,
                   excess_over_oracle=full.excess_over_oracle,
                   excess_over_oracle_stderr=full.excess_over_oracle_stderr,
                   prune_excess_over_oracle=[float(x) for x in sc[:, 4]],
                   prune_excess_over_oracle_stderr=[float(x) for x in sc[:, 5]])
    out.update({
        "converged": bool(fit.converged),
        "reason": ("converged" if fit.converged else
                   f"grad_norm {fit.grad_norm:.3g} >= gtol {opts['gtol']:g}"
                   if math.isfinite(fit.objective) else "objective not finite"),
        "iterations": fit.iterations, "objective": fit.objective, "grad_norm": fit.grad_norm,
        "n_heads": H,
        "overlap_K": _matched(np.asarray(ov.key), sk.heads),
        "overlap_V": _matched(np.asarray(ov.value), sk.heads),
        "specialisation_K": sk.index, "specialisation_V": sv.index,
    })
    return out


def _sampling_cell(cell: Cell, opts: Mapping[str, Any], task: MultiheadTask) -> dict[str, Any]:
    key = seed_key(cell.seed)
    teacher, train, test = sample_train_test(key, task, _n_train(cell), opts["n_test"])
    s_opts = MultiheadSamplingOptions.from_options({k: opts[k] for k in _SAMPLING_ONLY})
    r = bayes_optimal_by_sampling(algorithm_key(key, "sampler"), task, teacher, train, test,
                                  s_opts)
    out = {
        "test_error": r.test_error, "stderr": r.stderr, "mcmc_stderr": r.mcmc_stderr,
        "oracle_error": r.oracle_error, "oracle_error_stderr": r.oracle_error_stderr,
        "excess_over_oracle": r.excess_over_oracle,
        "excess_over_oracle_stderr": r.excess_over_oracle_stderr,
        "test_error_plain": r.test_error_plain,
        "overlap_K": list(r.overlap_K), "overlap_V": list(r.overlap_V),
        "r_hat_max": r.r_hat_max, "ess_bulk_min": r.ess_bulk_min,
        "ess_tail_min": r.ess_tail_min, "r_hat_raw_max": r.r_hat_raw_max,
        "divergences": r.divergences, "grad_evals": r.grad_evals,
        "converged": bool(r.converged), "reason": r.reason,
    }
    if hasattr(r, "swap_rate_min"):  # sampler = "pt"
        out["swap_rate_min"] = float(r.swap_rate_min)
        out["round_trips"] = int(r.round_trips)
    return out


@register("multihead", schema=SCHEMA, activations=MEMBERS, member_kind="estimator",
          needs=("alpha", "D"), variants=(VARIANT,),
          description="multi-head SLR: H-head attention ERM (softmax, softmax1, bayes_softmax) "
                      "and the Bayes-optimal estimator by sampling (docs/multihead.md)",
          outputs=OUTPUTS, cost=_cost, memory=_memory, check=_check,
          plot=PlotStyle(kind="marker", label="{activation} (multi-head)", marker="s"),
          version="2", report=ReportRole(),
          dims=("variant", "L", "nu", "delta", "alpha", "lam", "D"),
          cli=CliFace(
              verb=("multihead",),
              fields={"activation": "softmax", "alpha": "4", "lam": None, "D": "20",
                      "seed": "0"},
              task={"variant": VARIANT, "delta": "0.01"},
              help={"activation": "The estimator: softmax, softmax1, bayes_softmax (ERM of the "
                                  "H-head student) or bayes_sampling (posterior mean).",
                    "lam": "Ridge penalty >= 0 of the attention students (none for "
                           "bayes_sampling).",
                    "L": "Sequence length (integer >= 1; a length law is not a multi-head "
                         "task).",
                    "nu": "Signal strength nu >= 0 of the location (finite)."}))
def multihead_cell(cell: Cell, opts: Mapping[str, Any]) -> dict[str, Any]:
    """Registered method ``multihead:<estimator>`` (module docstring): one seed of one
    estimator on the multi-head task."""
    task = task_of(cell, opts)
    run = _sampling_cell if cell.member == SAMPLING else _erm_cell
    return {**run(cell, opts, task), "n_directions": task.F, "latent": task.theta,
            "teacher_law": task.teacher}
