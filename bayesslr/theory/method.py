"""Registry entries of the theory families (one cell = one ``alpha``).

* ``theory_erm:<activation>``: the ERM replica fixed point (:mod:`bayesslr.theory.erm`) at
  ``cell.alpha`` and ``cell.lam`` (a real, or ``"optimal"``: the theory's own optimal ``lam``,
  :mod:`bayesslr.theory.lam_opt`).
* ``theory_bayes``: the Bayes-optimal state evolution (:mod:`bayesslr.theory.bayes`) from both
  starts with the free-entropy verdict.

``cell.seed`` seeds the channel's common random numbers; ``cell.D`` does not apply
(``D -> inf``). ``stderr`` of a theory cell is the total standard error, ``stderr_test`` (the
test formula's Monte Carlo) and ``stderr_channel`` (the channel Monte Carlo, delta method) its
parts.

Continuation and branches are options, so the CLI (``bayesslr theory erm|bayes``) and a sweep
compute the same thing: with ``path`` (a list of ``alpha`` containing the cell's own), the point
is found by continuation along that path, exactly as the curve functions do it
(:func:`bayesslr.theory.erm.erm_curve`, :func:`bayesslr.theory.bayes.bayes_curve`); without it,
every start is solved cold at the cell's ``alpha``. Cells sharing a path (and everything else)
run as one unit of work (:attr:`bayesslr.registry.MethodSpec.batch`): the path is solved once,
and each cell gets what it would get alone (the continuation up to an ``alpha`` only depends on
the path below it, and down to it on the path above it).
"""

from __future__ import annotations

import dataclasses
import functools
import json
import math
import time
from collections.abc import Callable, Hashable, Mapping
from typing import Any

from bayesslr.core.cputime import add_restored
from bayesslr.core.lam import LAM_OPTIMAL, parse_lam
from bayesslr.core.options import Opt, Schema, schema_of
from bayesslr.core.task import ConfigError, LengthLaw
from bayesslr.registry import (
    Cell,
    Checkpoints,
    PlotStyle,
    Recompute,
    ReportRole,
    Resources,
    common,
    outputs,
    register,
)
from bayesslr.theory.bayes import (
    BAYES_STARTS,
    BayesCurvePoint,
    BayesTheoryOptions,
    bayes_curve,
    state_evolution_trajectory,
)
from bayesslr.theory.checkpoint import CHECKPOINT_ENV, PathCheckpoint
from bayesslr.theory.erm import (
    ERM_CONFIRM,
    EXACT_CACHE_SIZE,
    REPLICA_ACTIVATIONS,
    STARTS,
    ErmTheoryOptions,
    ErmTheoryResult,
    default_tol,
    erm_curve,
    unknown_channel_error,
)
from bayesslr.theory.lam_opt import REPLICA_LAM_GRID, optimal_lambda, optimal_lambda_curve
from bayesslr.theory.presentation import BAYES_FACE, ERM_FACE
from bayesslr.theory.solver import SOLVER_KEYS, SolverOptions

BRANCHES: tuple[str, ...] = ("best", *BAYES_STARTS)
MAX_PATH = 200

_SOLVER = {o.name: o for o in schema_of(SolverOptions).opts}


def _solver_opts(**defaults: Any) -> tuple[Opt, ...]:
    """The solver options of :data:`~bayesslr.theory.solver.SOLVER_KEYS`, with this family's
    defaults."""
    return tuple(dataclasses.replace(_SOLVER[k], default=defaults.get(k, _SOLVER[k].default))
                 for k in SOLVER_KEYS)


PATH = Opt("path", None, "reals", low=0.0, low_open=True, nullable=True, max_len=MAX_PATH,
           doc="continuation path: the alphas solved in order (must contain the cell's alpha); "
               "none: each start solved cold at the cell's alpha")

ERM_SCHEMA = schema_of(ErmTheoryOptions, "theory_erm", exclude=("seed",)) + _solver_opts(
    accel="anderson", max_iter=300, tol=None, confirm=ERM_CONFIRM) + (
    Opt("start", ("informed",), "choices", choices=STARTS,
        doc="named start(s) of the fixed point; several: the lowest training objective wins"),
    PATH,
    Opt("sweep", "both", "choice", choices=("both", "up"),
        doc="continuation directions along path (both: up and down, lowest objective kept)"),
    Opt("lam_grid", REPLICA_LAM_GRID, "reals", low=0.0, low_open=True, max_len=100,
        doc="coarse grid of lam='optimal' (then a parabolic search in log lam)"),
    Opt("refine_iter", 8, "int", low=0, high=100,
        doc="most evaluations of the parabolic search of lam='optimal'"),
    Opt("grid_stop", 2, "int", low=0, high=100,
        doc="lam='optimal': the grid sweep (large to small lam) stops after this many "
            "consecutive rises of the error past its best; 0: the whole grid"),
    Opt("lam_v", None, "real", low=0.0, nullable=True,
        doc="penalty on v if different from the cell's lam (a real lam only)"),
)
# tol: none means the channel-size tolerance 10/samples (default_tol)
ERM_SCHEMA = Schema("theory_erm", tuple(
    dataclasses.replace(o, nullable=True, doc="relative tolerance; none: 10/samples, above the "
                        "common-random-numbers floor") if o.name == "tol" else o
    for o in ERM_SCHEMA.opts))

BAYES_SCHEMA = schema_of(BayesTheoryOptions, "theory_bayes", exclude=("seed",)) + \
    _solver_opts(tol=1e-6, max_iter=2000) + (
    Opt("branch", "best", "choice", choices=BRANCHES,
        doc="branch reported: best (larger free entropy), informed or uninformed"),
    PATH,
    Opt("trajectory", 0, "int", low=0, high=10_000,
        doc="also return this many undamped state-evolution iterates from trajectory_start "
            "(the iteration GAMP follows) as lists trajectory_m_k, trajectory_m_v; 0: none"),
    Opt("trajectory_start", "uninformed", "choice", choices=BAYES_STARTS,
        doc="start of the returned trajectory (GAMP's init of the same name)"),
)


def parse_theory_lam(value: Any) -> float | str:
    """``lam`` of a replica cell: a real ``>= 0`` or ``"optimal"`` (``"opt"`` accepted)."""
    return parse_lam(value, (LAM_OPTIMAL,))


def _check_path(cell: Cell, opts: Mapping[str, Any]) -> None:
    path = opts["path"]
    if path is not None and not any(math.isclose(a, cell.alpha) for a in path):
        raise ConfigError(f"path={','.join(f'{a:g}' for a in path)} does not contain "
                          f"alpha={cell.alpha:g}; allowed: a list of alphas that contains it")


def _check_erm(cell: Cell, opts: Mapping[str, Any]) -> None:
    if parse_theory_lam(cell.lam) == LAM_OPTIMAL and opts["lam_v"] is not None:
        raise ConfigError("lam_v cannot be combined with lam='optimal' (one lam for k and v)")
    _check_path(cell, opts)


def _solver(opts: Mapping[str, Any], samples: int) -> SolverOptions:
    kw = {k: opts[k] for k in SOLVER_KEYS}
    if kw.get("tol") is None:
        kw["tol"] = default_tol(samples)
    return SolverOptions(**kw)


def erm_options(opts: Mapping[str, Any], seed: int) -> ErmTheoryOptions:
    """:class:`ErmTheoryOptions` from a cell's validated options."""
    base = ErmTheoryOptions.from_options({**opts, "seed": seed})
    return dataclasses.replace(base, solver=_solver(opts, base.samples))


def bayes_options(opts: Mapping[str, Any], seed: int) -> BayesTheoryOptions:
    """:class:`BayesTheoryOptions` from a cell's validated options."""
    base = BayesTheoryOptions.from_options({**opts, "seed": seed})
    return dataclasses.replace(base, solver=_solver(opts, base.samples))


def _path_key(cell: Cell, opts: Mapping[str, Any]) -> Hashable | None:
    """Cells sharing a continuation path and everything else but ``alpha`` form one unit."""
    if opts["path"] is None:
        return None
    rest = dataclasses.replace(cell, alpha=None, options={})
    return (rest.to_json(), tuple(sorted((k, repr(v)) for k, v in opts.items())))


# ----------------------------------------------------------------------------------------------
# resources
# ----------------------------------------------------------------------------------------------
def _L(cell: Cell) -> int:
    return LengthLaw.parse(cell.L).L_max


def _erm_memory(cell: Cell, opts: Mapping[str, Any]) -> Resources:
    L = _L(cell)
    S = 2 * L + 1  # starts of the proximal problem
    # every start of every sample a row; per row the LM state, a Hessian and its solve
    prox = opts["samples"] * S * (8 * L + 4 * L * L) * 8 * 3
    # the exploring map's results kept per order parameters (the tracked minima, float32)
    cache = EXACT_CACHE_SIZE * opts["samples"] * opts["n_keep"] * L * 4
    test = opts["test_samples"] * L * 8 * 21  # the population test formula
    return Resources(prox + cache + test, f"{opts['samples']} channel samples x {S} starts x "
                     f"L={L} (float64)", "samples, test_samples or L")


# CPU seconds of a replica point at lam = 'optimal' on a continuation path, a + b samples / 1e4,
# by activation ("default": any without its own calibration); the measurements behind each
# constant are in benchmarks/README.md, "Cost model" (linear's point is cheap: its proximal
# problem is quadratic)
THEORY_ERM_COST = {"overhead_s": 3.0, "point": {"linear": (3.2, 1.0), "default": (6.6, 30.6)},
                   "fixed_fraction": 1.0, "no_path_factor": 1.5}


def _erm_cost(cell: Cell, opts: Mapping[str, Any]) -> float:
    """Core-seconds of one replica point (:data:`THEORY_ERM_COST`), scaled by ``(L / 3)^2``."""
    c = THEORY_ERM_COST
    a, b = c["point"].get(str(cell.activation), c["point"]["default"])
    point = (a + b * opts["samples"] / 1e4) * (_L(cell) / 3.0) ** 2
    if parse_theory_lam(cell.lam) != LAM_OPTIMAL:
        point *= c["fixed_fraction"]
    if opts["path"] is None:
        point *= c["no_path_factor"]
    return c["overhead_s"] + point


def _bayes_memory(cell: Cell, opts: Mapping[str, Any]) -> Resources:
    L = _L(cell)
    nodes = 1 if cell.variant == "spiked" else opts["gh_nodes"]
    rows = max(opts["samples"], min(opts["test_samples"], 4096))
    return Resources(rows * nodes * L * 8 * 6 + opts["test_samples"] * L * 8 * 12,
                     f"{opts['samples']} channel rows x {nodes} quadrature nodes x L={L}",
                     "samples, test_samples, gh_nodes or L")


def _bayes_cost(cell: Cell, opts: Mapping[str, Any]) -> float:
    """Core-seconds of one state-evolution point: ~400 channel averages of ``samples x nodes
    x L`` rows; calibrated on the paper preset's max-SLR points (71 CPU-s each, model 68) and
    the reference run's spiked points (0.6 s each; benchmarks/README.md, "Cost model")."""
    L = _L(cell)
    nodes = 1 if cell.variant == "spiked" else opts["gh_nodes"]
    return 0.5 + 2 * 200 * opts["samples"] * nodes * L * 11 / 2e9


# ----------------------------------------------------------------------------------------------
# theory_erm:<activation>
# ----------------------------------------------------------------------------------------------
_ERM_OUT = ("m_k", "q_k", "V_k", "m_v", "q_v", "V_v", "mh_k", "qh_k", "Vh_k", "mh_v", "qh_v",
            "Vh_v", "Vh_k_stein", "Vh_v_stein", "Vh_k_hessian", "Vh_v_hessian", "vh_gap_k",
            "vh_gap_v", "vh_gap_k_stderr", "vh_gap_v_stderr", "train_loss", "objective",
            "off_branch", "prox_unconverged", "iterations", "update_calls", "exact_calls",
            "residual", "samples", "vh_form", "start", "reason")


def _erm_point(r: ErmTheoryResult, task_delta: float) -> dict[str, Any]:
    out: dict[str, Any] = {"test_error": r.test_error, "stderr": r.stderr,
                           "stderr_test": r.stderr_test, "stderr_channel": r.stderr_channel,
                           "risk": r.test_error + task_delta, "lam": r.lam_k,
                           "converged": r.converged}
    out.update({k: getattr(r, k) for k in _ERM_OUT})
    out.update({f"{k}_stderr": v for k, v in r.order_stderr.items()})
    return out


_Batch = Callable[[list[Cell], list[Mapping[str, Any]]], list[dict[str, Any]]]


_RESTORED_S = "_restored_s"  # set by a batch on its first output; not an output itself


def _share_runtime(batch: _Batch) -> _Batch:
    """``batch`` with each cell's ``runtime_s`` set to an equal share of the batch's wall
    time (the cells of a path are computed together), plus the time that points restored from
    a path checkpoint (:mod:`bayesslr.theory.checkpoint`) cost the run that solved them."""
    @functools.wraps(batch)
    def timed(cells: list[Cell], opts_list: list[Mapping[str, Any]]) -> list[dict[str, Any]]:
        t0 = time.perf_counter()
        outs = batch(cells, opts_list)
        restored = outs[0].pop(_RESTORED_S, 0.0) if outs else 0.0
        share = (time.perf_counter() - t0 + restored) / len(cells)
        for o in outs:
            o["runtime_s"] = share
        return outs
    return timed


@_share_runtime
def _erm_batch(cells: list[Cell], opts_list: list[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Cells sharing a path (or one cell): the curve once, each cell's point from it."""
    cell, opts = cells[0], opts_list[0]
    task = cell.task(D=1)
    opt = erm_options(opts, cell.seed)
    lam = parse_theory_lam(cell.lam)
    path = list(opts["path"]) if opts["path"] is not None else [cell.alpha]
    alphas = [c.alpha for c in cells]
    restored_s = 0.0  # wall time of points restored from a checkpoint (solved by an earlier run)
    if lam == LAM_OPTIMAL:
        # the search's settings: passed to it and, the same, into its checkpoint's key
        search = {"lam_grid": tuple(opts["lam_grid"]), "refine_iter": opts["refine_iter"],
                  "grid_stop": opts["grid_stop"]}
        if opts["path"] is not None:  # continuation of the top lam along the path upwards
            ckpt = PathCheckpoint.open(task=task, activation=cell.activation,
                                       path=sorted(path), options=opt, **search)
            res = optimal_lambda_curve(task, cell.activation, sorted(path), opt, **search,
                                       checkpoint=ckpt)
            if ckpt is not None:
                restored_s = ckpt.restored_s
                add_restored(ckpt.restored_cpu_s)  # the runner's cpu_s counts it
            by_alpha = dict(zip(sorted(path), res, strict=True))
            points = [by_alpha[_on_path(a, path)] for a in alphas]
        else:
            points = [optimal_lambda(task, cell.activation, a, opt, start=opts["start"][0],
                                     **search)
                      for a in alphas]
        outs = []
        for p in points:
            o = _erm_point(p.result, task.delta)
            o.update({"lam_at_boundary": p.at_boundary,
                      "lam_evaluations": [list(e) for e in p.evaluations]})
            outs.append(o)
        if restored_s:
            outs[0][_RESTORED_S] = restored_s
    else:
        lam_v = lam if opts["lam_v"] is None else opts["lam_v"]
        best, sweeps = erm_curve(task, cell.activation, path, lam, lam_v, opt,
                                 starts=opts["start"], both_directions=opts["sweep"] == "both",
                                 use_continuation=opts["path"] is not None,
                                 report=[_on_path(a, path) for a in alphas])
        outs = []
        for a in alphas:
            i = path.index(_on_path(a, path))
            o = _erm_point(best[i], task.delta)
            o["lam_v"] = lam_v
            o["branches"] = json.dumps({
                name: {"test_error": _finite_or_none(s_[i].test_error),
                       "objective": _finite_or_none(s_[i].objective),
                       "converged": s_[i].converged} for name, s_ in sweeps.items()})
            outs.append(o)
    return outs


def _finite_or_none(x: float) -> float | None:
    return x if math.isfinite(x) else None


PATHS_DIR = "theory_paths"  # OUT/theory_paths: the checkpoints of replica continuation paths


def unflagged_channel_error(cell: Cell, out: Mapping[str, Any]) -> bool:
    """A stored theory cell that says ``converged`` with a test error but no channel error
    (``stderr_channel`` NaN, its ``stderr`` the test formula's alone): written before such
    points were flagged (:func:`bayesslr.theory.erm.unknown_channel_error`). The family's
    code version did not change (every other point is bit for bit the same), so the resume
    recomputes it by this rule (:class:`bayesslr.registry.Recompute`). ``channel_error =
    false`` (ERM theory) asks for no channel error: those cells are as they should be."""
    if cell.options.get("channel_error", True) is False:  # the option's default: on
        return False
    conv, test, chan = (out.get(k) for k in ("converged", "test_error", "stderr_channel"))
    return (isinstance(conv, float) and conv == 1.0 and isinstance(test, float)
            and math.isfinite(test) and isinstance(chan, float) and not math.isfinite(chan))


UNFLAGGED_CHANNEL_ERROR = Recompute(
    unflagged_channel_error, "theory",
    "stored as converged with no channel error (stderr_channel NaN, so its stderr was too "
    "small)")


def _on_path(alpha: float, path: list[float]) -> float:
    return next(a for a in path if math.isclose(a, alpha))


@register("theory_erm", schema=ERM_SCHEMA, activations=REPLICA_ACTIVATIONS, needs=("alpha", "lam"),
          description="replica-symmetric ERM fixed point at finite alpha (docs/theory.md)",
          outputs=common("test_error", "stderr", "stderr_test", "stderr_channel", "risk",
                         "m_k", "q_k", "m_v", "q_v", "lam", "converged", "reason",
                         "iterations", "runtime_s") + outputs(
              ("V_k", "response V_k"), ("V_v", "response V_v"),
              ("train_loss", "training loss per sample at the fixed point"),
              ("objective", "training objective per sample (ranks branches)"),
              ("off_branch", "fraction of channel samples whose global proximal minimum is "
                             "not the one reached from w_k"),
              ("prox_unconverged", "fraction of channel samples whose proximal solve stayed "
                                   "unconverged"),
              ("update_calls", "fixed-point map calls spent on the point (every sweep or lam "
                               "solve that found it, and the channel error)"),
              ("exact_calls", "how many of update_calls explored from the cold starts"),
              ("vh_gap_k", "Hessian minus Stein-free Vh_k", "1", "vh_gap_k_stderr"),
              ("vh_gap_k_stderr", "Monte Carlo standard error of vh_gap_k"),
              ("vh_gap_v", "Hessian minus Stein-free Vh_v", "1", "vh_gap_v_stderr"),
              ("vh_gap_v_stderr", "Monte Carlo standard error of vh_gap_v"),
              ("start", "start of the branch reported", ""),
              ("branches", "every continuation sweep's test_error, objective and converged "
                           "at this alpha (JSON)", ""),
              ("lam_at_boundary", "lam='optimal' stopped at an end of its grid", "")),
          cost=_erm_cost, memory=_erm_memory,
          check=lambda c, o: _check_erm(c, o),
          plot=PlotStyle(kind="line", label="{activation} (theory)"), version="4",
          dims=("variant", "L", "nu", "delta", "alpha", "lam"), cli=ERM_FACE,
          report=ReportRole(finite_sample=2),
          batch=_erm_batch, batch_key=_path_key,
          checkpoints=Checkpoints(PATHS_DIR, CHECKPOINT_ENV), recompute=UNFLAGGED_CHANNEL_ERROR)
def theory_erm_cell(cell: Cell, opts: Mapping[str, Any]) -> dict[str, Any]:
    """One ``alpha`` of the ERM replica theory (options :data:`ERM_SCHEMA`)."""
    return _erm_batch([cell], [opts])[0]


# ----------------------------------------------------------------------------------------------
# theory_bayes
# ----------------------------------------------------------------------------------------------
def _bayes_point(p: BayesCurvePoint, branch: str, delta: float) -> dict[str, Any]:
    # a branch whose channel error failed is reported unconverged with stderr NaN (applied
    # here, after the branches were compared: the comparison and every other point stand)
    b = {"best": p.best, "informed": p.informed, "uninformed": p.uninformed}[branch]
    which = "informed" if b is p.informed else "uninformed"
    p = dataclasses.replace(p, informed=unknown_channel_error(p.informed),
                            uninformed=unknown_channel_error(p.uninformed))
    b = p.informed if which == "informed" else p.uninformed
    out: dict[str, Any] = {
        "test_error": b.test_error, "stderr": b.stderr, "stderr_test": b.stderr_test,
        "stderr_channel": b.stderr_channel, "risk": b.test_error + delta,
        "m_k": b.m_k, "q_k": b.m_k, "V_k": 1.0 - b.m_k, "m_v": b.m_v, "q_v": b.m_v,
        "V_v": 1.0 - b.m_v, "mh_k": b.mh_k, "mh_v": b.mh_v, "free_entropy": b.free_entropy,
        "nishimori_gap": b.nishimori_gap, "clipped": b.clipped,
        "converged": b.converged, "reason": b.reason,
        "iterations": p.informed.iterations + p.uninformed.iterations,
        "residual": b.residual,
        "branch": which,
        "branches_differ": p.branches_differ, "hard_phase": p.hard_phase,
        "samples": b.samples, "quadrature": b.quadrature,
        "quadrature_error": b.quadrature_error,
    }
    for name, r in (("informed", p.informed), ("uninformed", p.uninformed)):
        out.update({f"test_error_{name}": r.test_error, f"free_entropy_{name}": r.free_entropy,
                    f"m_k_{name}": r.m_k, f"m_v_{name}": r.m_v,
                    f"converged_{name}": r.converged, f"iterations_{name}": r.iterations})
    return out


@_share_runtime
def _bayes_batch(cells: list[Cell], opts_list: list[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Cells sharing a path (or the cells of one batch): the curve once, each cell's point
    (and trajectory, where asked) from it."""
    cell, opts = cells[0], opts_list[0]
    task = cell.task(D=1)
    opt = bayes_options(opts, cell.seed)
    path = list(opts["path"]) if opts["path"] is not None else [c.alpha for c in cells]
    points = bayes_curve(task, path, opt, use_continuation=opts["path"] is not None)
    by_alpha = dict(zip(path, points, strict=True))
    outs = [_bayes_point(by_alpha[_on_path(c.alpha, path)], o["branch"], task.delta)
            for c, o in zip(cells, opts_list, strict=True)]
    for c, o, out in zip(cells, opts_list, outs, strict=True):
        if o["trajectory"] > 0:  # the iterates GAMP is compared with (docs/amp.md)
            tr = state_evolution_trajectory(task, c.alpha, o["trajectory_start"],
                                            o["trajectory"], opt)
            out["trajectory_m_k"], out["trajectory_m_v"] = list(tr.m_k), list(tr.m_v)
    return outs


@register("theory_bayes", schema=BAYES_SCHEMA, needs=("alpha",),
          description="Bayes-optimal state evolution at finite alpha, both starts (docs/theory.md)",
          outputs=common("test_error", "stderr", "stderr_test", "stderr_channel", "risk",
                         "m_k", "q_k", "m_v", "q_v", "nishimori_gap", "converged", "reason",
                         "iterations", "runtime_s") + outputs(
              ("free_entropy", "replica-symmetric free entropy of the reported branch"),
              ("branch", "branch reported (informed or uninformed)", ""),
              ("branches_differ", "the two starts reach different fixed points", ""),
              ("hard_phase", "the uninformed start misses the Bayes-optimal branch", ""),
              ("clipped", "an overlap sits at the clip 1 - m_clip", ""),
              ("quadrature_error", "test-error change against a coarser quadrature"),
              ("test_error_informed", "test error of the informed branch"),
              ("test_error_uninformed", "test error of the uninformed branch"),
              ("trajectory_m_k", "state-evolution m_k per iteration from trajectory_start",
               "1", None, "iteration"),
              ("trajectory_m_v", "state-evolution m_v per iteration from trajectory_start",
               "1", None, "iteration")),
          cost=_bayes_cost, memory=_bayes_memory, check=lambda c, o: _check_path(c, o),
          plot=PlotStyle(kind="line", label="Bayes-optimal (theory)", color="k"),
          version="3", dims=("variant", "L", "nu", "delta", "alpha"), cli=BAYES_FACE,
          report=ReportRole(finite_sample=1),
          batch=_bayes_batch, batch_key=_path_key, recompute=UNFLAGGED_CHANNEL_ERROR)
def theory_bayes_cell(cell: Cell, opts: Mapping[str, Any]) -> dict[str, Any]:
    """One ``alpha`` of the state evolution from both starts (options :data:`BAYES_SCHEMA`);
    the ``branch`` option picks what is reported (default: the larger free entropy)."""
    return _bayes_batch([cell], [opts])[0]
