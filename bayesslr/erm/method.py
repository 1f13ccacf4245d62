"""Registry entries of the ERM protocols: ``erm:<activation>`` and ``gd:<activation>``.

* ``erm:<softmax|linear|erf|softplus>``: one cell is one L-BFGS ERM protocol
  (:func:`bayesslr.erm.protocol.run_erm_protocol`) over ``seeds`` consecutive seeds starting
  at the cell's ``seed``; the outputs are means over seeds, with ``stderr`` the standard error of
  ``test_error`` over seeds (:meth:`bayesslr.erm.protocol.ERMResult.summary`). ``lam`` is a
  real ``>= 0``, ``"validation"`` (grid search on held-out training data) or ``"replica"``
  (the replica theory's optimal ``lam`` at the cell's task and ``alpha``, :func:`replica_lam`,
  computed once and cached on disk; the outputs record the ``lam`` used and the theory's test
  error there). Cells that differ only in ``lam`` share their teacher, data and starts, and
  run as one unit: one batched fit per seed (:func:`_erm_batch`).
* ``gd:<activation>``: gradient descent or Adam from a random or informed start
  (:func:`bayesslr.erm.gd.gd_trajectory`), one seed per cell; the overlaps, losses and test error
  are recorded every ``record_every`` steps (list outputs along the dataset dimension ``step``)
  and the final values are scalars.

The CLI verb ``bayesslr erm``, the sweep runner and the Python API all go through
:func:`bayesslr.registry.run_cell`.
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import json
import math
from collections.abc import Hashable, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from bayesslr.core.activations import ACTIVATIONS
from bayesslr.core.files import StoreError, env_dir, exclusive_lock, write_json_atomic
from bayesslr.core.options import Opt, schema_of
from bayesslr.core.task import OVERLAP_NAMES, ConfigError, LengthLaw
from bayesslr.erm.gd import GDOptions, gd_trajectory
from bayesslr.erm.protocol import ERMOptions, parse_erm_lam, run_erm_protocol_grid
from bayesslr.registry import (
    Cell,
    CliFace,
    Output,
    PlotStyle,
    Prerequisites,
    ReportRole,
    Resources,
    common,
    get_method,
    outputs,
    register,
)

ERM_ACTIVATIONS: tuple[str, ...] = tuple(ACTIVATIONS)

SCHEMA = schema_of(ERMOptions, "erm") + (
    Opt("seeds", 1, "int", low=1, high=10_000,
        doc="consecutive seeds from the cell's seed; outputs are means over them"),
    Opt("replica_samples", 20_000, "int", low=100, high=10**8,
        doc="channel samples of the replica theory that lam='replica' asks for its optimal lam"),
    Opt("replica_path", True, "bool",
        doc="lam='replica': solve the theory point by continuation along REPLICA_PATH below "
            "the cell's alpha (false: on its own)"),
)
# lam = "replica": the replica points are solved by continuation in alpha from 0.5 along these
# values (the paper preset's ERM alphas) and the cell's own alpha, each lam of the theory's
# grid warm-started from the neighbouring alpha (bayesslr.theory.lam_opt.optimal_lambda_curve).
# A point depends only on the path below it, so the answer at an alpha does not depend on
# which other cells a sweep holds; one solve of the whole path caches every point on it.
REPLICA_PATH: tuple[float, ...] = (0.5, 1.0, 2.0, 3.0, 5.0, 8.0, 12.0, 16.0, 20.0)
GD_SCHEMA = schema_of(GDOptions, "gd")

FLOPS_PER_S = 2e9  # sustained rate assumed for one core by the GD cost model


def _check(cell: Cell, opts: Mapping[str, Any]) -> None:
    lam = parse_erm_lam(cell.lam)
    if lam == "validation" and cell.n_train() < 2:
        raise ConfigError(f"alpha*D={cell.alpha * cell.dimension():g} gives fewer than 2 "
                          "training samples; lam='validation' needs at least 2")
    if lam == "replica":
        from bayesslr.theory.erm import REPLICA_ACTIVATIONS

        if cell.activation not in REPLICA_ACTIVATIONS:
            raise ConfigError(f"lam='replica' needs the replica theory of {cell.activation!r}; "
                              f"allowed activations: {', '.join(REPLICA_ACTIVATIONS)}")
        from bayesslr.registry import validate_cell

        validate_cell(replica_cell(cell, opts))  # task, alpha and theory options, no work


def _sizes(cell: Cell) -> tuple[int, int, int]:
    return cell.dimension(), cell.n_train(), LengthLaw.parse(cell.L).L_max


def _members(cell: Cell, opts: Mapping[str, Any]) -> int:
    return opts["restarts"] * (len(opts["lam_grid"]) if cell.lam == "validation" else 1)


def _memory(cell: Cell, opts: Mapping[str, Any]) -> Resources:
    D, N, L = _sizes(cell)
    # one seed's training tokens at a time, drawn chunk by chunk (erm.stream: 1.25x the data
    # at the peak, measured with XLA's memory analysis); the test set is streamed through the
    # scoring (its (n_test, L) terms only)
    data = 1.25 * 4.0 * N * L * D + 4.0 * 8 * opts["n_test"] * L
    state = _members(cell, opts) * 2 * D * 4 * (2 * opts["memory"] + 8)  # L-BFGS histories
    return Resources(data + state, f"training data N={N} x L={L} x D={D} float32, one seed "
                     "at a time", "D (or sqrtND) or alpha")


# ----------------------------------------------------------------------------------------------
# cost model (calibrated on measured cells: benchmarks/README.md, section "Cost model")
# ----------------------------------------------------------------------------------------------
ERM_COST = {  # process CPU seconds; the measurements: benchmarks/README.md, "Cost model"
    "overhead_s": 3.0,  # compilation of a new shape, amortised over the seeds sharing it
    "draw_s_per_element": 2.0e-8,  # tokens drawn (Threefry + erfinv), per N L D element
    "pass_s_per_element": 8.0e-10,  # one evaluation (forward + backward), G = 1
    "member_cost": 0.3,  # each further member of a batch adds this fraction of a pass
    "evals_fixed": 150,  # evaluations of one fit at a fixed lam
    "evals_replica": 60,  # at the replica's optimal lam (a well-conditioned fit)
    "grid_passes_per_max_iter": 0.6,  # the validation search's single-member passes, per
    # max_iter: its slowest member (lam = 1e-3) sets the batch's length
}


def _cost(cell: Cell, opts: Mapping[str, Any]) -> float:
    """Core-seconds of one cell: ``seeds x (fit + draw)`` plus the amortised compilation.

    A fixed ``lam`` costs ``evals_fixed`` passes over the ``N L D`` training tokens, the replica
    theory's optimal ``lam`` (``replica``; the theory point itself is counted apart, once per
    sweep, :func:`bayesslr.sweep.cost.prerequisites`) ``evals_replica``: the fit converges fast
    at a well-tuned penalty; ``validation`` adds its grid search
    (``grid_passes_per_max_iter x max_iter`` passes: the smallest penalty of the grid sets the
    batch's length, the others ride along in the shrinking batch) and a second draw of the
    training set. Restarts multiply the members of every batch.
    """
    D, N, L = _sizes(cell)
    c = ERM_COST
    R = opts["restarts"]
    one_pass = c["pass_s_per_element"] * N * L * D * (1 + c["member_cost"] * (R - 1))
    fit = c["evals_replica" if cell.lam == "replica" else "evals_fixed"] * one_pass
    n_draw = N + opts["n_test"]
    if cell.lam == "validation":
        fit += c["grid_passes_per_max_iter"] * opts["max_iter"] * one_pass
        n_draw += N
    draw = c["draw_s_per_element"] * n_draw * L * D
    return c["overhead_s"] + opts["seeds"] * (fit + draw)


ERM_OUTPUTS = common("test_error", "stderr", "stderr_test", "risk", "oracle_error",
                     "oracle_error_stderr", "excess_over_oracle", "excess_over_oracle_stderr",
                     "train_loss", *OVERLAP_NAMES, "lam", "converged", "iterations",
                     "runtime_s") + outputs(
    ("objective", "training objective per sample S/N at the solution"),
    ("converged_fraction", "fraction of seeds whose L-BFGS met the gradient tolerance"),
    ("grad_norm", "largest final |grad S|/sqrt(D) over seeds"),
    ("evaluations", "function and gradient evaluations, summed over seeds"),
    ("lam_mode", "fixed, validation or replica", ""),
    ("lam_grid", "grid searched by lam='validation' (JSON list)", ""),
    ("val_risk", "validation risk per grid value (JSON list)", ""),
    Output("replica_test_error", "replica theory's test error at the lam of lam='replica'",
           "1", "replica_test_error_stderr"),
    ("replica_test_error_stderr", "standard error of replica_test_error"),
    ("replica_converged", "the replica theory's fixed point at that lam converged", ""),
    ("replica_lam_at_boundary", "lam='replica': the theory's optimum sits at an end of its "
                                "lam grid", ""),
    ("time_data_s", "wall time drawing the training data and starts", "s"),
    ("time_fit_s", "wall time of the L-BFGS fits (lam selection included)", "s"),
    ("time_score_s", "wall time drawing the test data and scoring", "s"),
)


# ----------------------------------------------------------------------------------------------
# lam = "replica": the replica theory's optimal lam, computed once per (task, alpha, activation,
# theory options) and kept on disk
# ----------------------------------------------------------------------------------------------
REPLICA_CACHE_ENV = "BAYESSLR_REPLICA_CACHE"
_REPLICA_MEMO: dict[str, dict[str, Any]] = {}


def replica_cache_dir() -> Path | None:
    """Directory of the cache of ``lam='replica'``: ``$BAYESSLR_REPLICA_CACHE``, or
    ``~/.cache/bayesslr/replica_lam``; ``None`` when the variable is ``off`` (or empty, ``0``,
    ``none``, ``false``)."""
    return env_dir(REPLICA_CACHE_ENV, Path.home() / ".cache" / "bayesslr" / "replica_lam")


def _path_below(alpha: float) -> list[float]:
    """The continuation path of a replica point: :data:`REPLICA_PATH` below ``alpha``, then
    ``alpha``."""
    return [a for a in REPLICA_PATH if a < alpha and not math.isclose(a, alpha)] + [alpha]


def replica_cell(cell: Cell, opts: Mapping[str, Any]) -> Cell:
    """The ``theory_erm:<activation>`` cell whose ``lam='optimal'`` answers ``lam='replica'`` for
    an ERM cell: same task and ``alpha``, channel seed 0 (the theory's common random numbers,
    not the ERM data seed), ``samples = replica_samples``, every other theory option at its
    default; with ``replica_path``, the continuation path :func:`_path_below` (it depends on
    ``alpha`` alone, so the value does not depend on which other cells a sweep holds)."""
    alpha = float(cell.alpha)
    options = _point_options(opts["replica_samples"], alpha, opts.get("replica_path", True))
    return Cell(method=f"theory_erm:{cell.activation}", variant=cell.variant, L=cell.L,
                nu=cell.nu, delta=cell.delta, alpha=alpha, lam="optimal", seed=0,
                options=options)


def _point_options(samples: int, alpha: float, on_path: bool) -> dict[str, Any]:
    """Theory options of the replica point at ``alpha``: ``samples``, and the continuation path
    below it when ``on_path`` and there is one."""
    options: dict[str, Any] = {"samples": samples}
    path = _path_below(alpha) if on_path else [alpha]
    if len(path) > 1:
        options["path"] = path
    return options


def _lock_name(tcell: Cell) -> str:
    """Lock of a replica solve: per point, or per path (every point on a path is solved by one
    process; the others wait for it instead of solving the same path again)."""
    if not tcell.options.get("path"):
        return _replica_key(tcell)
    whole = dataclasses.replace(tcell, alpha=None, options={**tcell.options, "path": None})
    return "path-" + hashlib.sha1(whole.to_json().encode()).hexdigest()[:20]


def _replica_key(tcell: Cell) -> str:
    spec = get_method(tcell.method)
    opts = spec.schema.validate(tcell.options)
    text = json.dumps({"cell": json.loads(tcell.to_json()), "options": repr(sorted(
        opts.items())), "version": spec.version}, sort_keys=True)
    return hashlib.sha1(text.encode()).hexdigest()[:20]


def replica_lam(cell: Cell, opts: Mapping[str, Any]) -> dict[str, Any]:
    """The replica theory's optimal ``lam`` for an ERM cell (docs/theory.md), with its test error.

    Runs :func:`replica_cell` through the registry (:func:`bayesslr.registry.run_cell`: the
    theory family's own ``lam='optimal'`` search, :func:`bayesslr.theory.lam_opt.optimal_lambda`)
    once per ``(task, alpha, activation, theory options, theory code version)``: the answer is
    kept in memory and in :func:`replica_cache_dir` (one JSON file per key, written atomically;
    concurrent workers wait on a lock file instead of solving the same point or path twice;
    on a continuation path, :func:`_solve_replica` keeps every point of the path), so the
    seeds and sizes of a sweep share it.

    Returns
    -------
    dict
        ``lam``, ``test_error``, ``stderr``, ``converged``, ``at_boundary``, ``reason``, and the
        theory cell (``cell``, JSON).

    Raises
    ------
    RuntimeError
        When the theory's search did not converge (no usable ``lam``): the ERM cell is then
        recorded as failed with this reason.
    """
    tcell = replica_cell(cell, opts)
    key = _replica_key(tcell)
    if key in _REPLICA_MEMO:
        return _REPLICA_MEMO[key]
    root = replica_cache_dir()
    path = root / f"{key}.json" if root is not None else None
    rec = _read_json(path) if path is not None else None
    if rec is None and path is not None:
        rec = _solve_locked(tcell, path, root / f"{_lock_name(tcell)}.lock")
    if rec is None:
        rec = _solve_replica(tcell)
    if not (rec["converged"] and math.isfinite(rec["lam"])):
        raise RuntimeError(f"lam='replica': the replica theory's optimal lam at {tcell.variant} "
                           f"L={tcell.L} nu={tcell.nu:g} delta={tcell.delta:g} alpha="
                           f"{tcell.alpha:g} ({tcell.method}) did not converge "
                           f"({rec.get('reason', '')}); use lam='validation' or a number")
    _REPLICA_MEMO[key] = rec
    return rec


def replica_pending(cell: Cell, opts: Mapping[str, Any]) -> tuple[str, Cell] | None:
    """``(key, theory cell)`` of the replica ``lam`` this ERM cell needs, or ``None`` when it
    needs none or the answer is already cached (the cost estimate counts each key once)."""
    if parse_erm_lam(cell.lam) != "replica":
        return None
    tcell = replica_cell(cell, opts)
    key = _replica_key(tcell)
    root = replica_cache_dir()
    if key in _REPLICA_MEMO or (root is not None and (root / f"{key}.json").exists()):
        return None
    return key, tcell


def _replica_prerequisites(cells: Sequence[Cell]) -> dict[str, Cell]:
    """The replica points that ``lam='replica'`` cells need and that are not cached yet."""
    needed: dict[str, Cell] = {}
    for c in cells:
        pending = replica_pending(c, get_method(c.method).schema.validate(c.options))
        if pending is not None:
            needed.setdefault(*pending)
    return needed


def _replica_waits_on(cell: Cell) -> str | None:
    """The replica solve (its lock: a whole continuation path, or a lone point) that an ERM
    cell with ``lam='replica'`` waits on while another process solves it; ``None`` when the
    cell needs none or its answer is cached."""
    pending = replica_pending(cell, get_method(cell.method).schema.validate(cell.options))
    return None if pending is None else _lock_name(pending[1])


REPLICA_PREREQUISITES = Prerequisites("replica lam", _replica_prerequisites, _replica_waits_on)


def _record(tcell: Cell, out: Mapping[str, Any]) -> dict[str, Any]:
    return {"lam": float(out["lam"]), "test_error": float(out["test_error"]),
            "stderr": float(out["stderr"]), "converged": bool(out["converged"]),
            "at_boundary": bool(out.get("lam_at_boundary", False)),
            "reason": str(out.get("reason", "")), "runtime_s": float(out.get("runtime_s", 0)),
            "cell": tcell.to_json()}


def _solve_replica(tcell: Cell) -> dict[str, Any]:
    """Solve a replica point. On a continuation path, the whole of :data:`REPLICA_PATH` is
    solved (with the point's own ``alpha`` inserted), and every point whose path below it is
    the canonical one is remembered (memory and disk) under its own key: the other cells of a
    sweep then find theirs solved."""
    from bayesslr.registry import run_cell, run_unit

    path = tcell.options.get("path")
    if not path:
        return _record(tcell, run_cell(tcell))
    alpha = float(tcell.alpha)
    full = sorted({*REPLICA_PATH, alpha})
    on_grid = any(math.isclose(alpha, a) for a in REPLICA_PATH)
    cells = [dataclasses.replace(tcell, alpha=a, options={**tcell.options, "path": full})
             for a in full]
    outs = run_unit(cells)
    mine = None
    for a, out in zip(full, outs, strict=True):
        if a > alpha and not on_grid:
            break  # above an off-grid alpha the path is not the canonical one
        own = dataclasses.replace(tcell, alpha=a, options=_point_options(
            tcell.options["samples"], a, True))
        rec = _record(own, out)
        if math.isclose(a, alpha):
            mine = rec
        else:
            _remember(own, rec)
    assert mine is not None
    return mine


def _remember(tcell: Cell, rec: dict[str, Any]) -> None:
    """Keep a solved replica point in memory and, when the cache is on, on disk (atomic)."""
    key = _replica_key(tcell)
    _REPLICA_MEMO.setdefault(key, rec)
    root = replica_cache_dir()
    if root is None:
        return
    path = root / f"{key}.json"
    try:
        root.mkdir(parents=True, exist_ok=True)
        if not path.exists():
            write_json_atomic(rec, path, sort_keys=True)
    except (OSError, StoreError):
        pass


def _read_json(path: Path) -> dict[str, Any] | None:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None


def _solve_locked(tcell: Cell, path: Path, lock: Path) -> dict[str, Any] | None:
    """Solve and store under the lock ``lock`` (:func:`_lock_name`;
    :func:`bayesslr.core.files.exclusive_lock`: a process that solves the same point holds it,
    the others wait and read its answer); ``None`` when the directory cannot be written."""
    with contextlib.ExitStack() as stack:
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            stack.enter_context(exclusive_lock(lock))
        except OSError:
            return None
        rec = _read_json(path)  # solved while we waited for the lock
        if rec is None:
            rec = _solve_replica(tcell)
            write_json_atomic(rec, path, sort_keys=True)
        return rec


# ----------------------------------------------------------------------------------------------
# erm:<activation>: cells sharing their data (all but lam) are fitted as one batch
# ----------------------------------------------------------------------------------------------
def _batch_key(cell: Cell, opts: Mapping[str, Any]) -> Hashable:
    """Cells equal in everything but ``lam`` share teacher, data and starts: one unit."""
    rest = dataclasses.replace(cell, lam=None, options={})
    return (rest.to_json(), tuple(sorted((k, repr(v)) for k, v in opts.items())))


def _erm_batch(cells: list[Cell], opts_list: list[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Cells of one :func:`_batch_key`: every ``lam`` fitted in one batch per seed
    (:func:`bayesslr.erm.protocol.run_erm_protocol_grid`); each cell gets what it gets alone."""
    cell, opts = cells[0], opts_list[0]
    task = cell.task()
    lams: list[float | str] = []
    replica: dict[int, dict[str, Any]] = {}
    for i, (c, o) in enumerate(zip(cells, opts_list, strict=True)):
        lam = parse_erm_lam(c.lam)
        if lam == "replica":
            replica[i] = replica_lam(c, o)
            lam = replica[i]["lam"]
        lams.append(lam)
    results = run_erm_protocol_grid(task, cell.activation, cell.n_train(), lams,
                           seeds=np.arange(cell.seed, cell.seed + opts["seeds"]),
                           opts=ERMOptions.from_options(opts))
    outs = []
    for i, (c, res) in enumerate(zip(cells, results, strict=True)):
        out = res.summary()
        mode = parse_erm_lam(c.lam)
        out.update({"D": task.D, "N": cell.n_train(),
                    "lam_mode": mode if isinstance(mode, str) else "fixed"})
        if i in replica:
            r = replica[i]
            out.update({"replica_test_error": r["test_error"],
                        "replica_test_error_stderr": r["stderr"],
                        "replica_converged": r["converged"],
                        "replica_lam_at_boundary": r["at_boundary"]})
        for key in ("lam_grid", "val_risk"):
            if key in out:
                out[key] = json.dumps([x if math.isfinite(x) else None for x in out[key]])
        outs.append(out)
    return outs


@register("erm", schema=SCHEMA, activations=ERM_ACTIVATIONS, needs=("alpha", "lam", "D"),
          description="regularised ERM by L-BFGS on the data (docs/estimators.md)",
          outputs=ERM_OUTPUTS, cost=_cost, memory=_memory, check=_check,
          plot=PlotStyle(kind="marker", label="{activation} (ERM)", marker="o"),
          version="4", batch=_erm_batch, batch_key=_batch_key,
          prerequisites=REPLICA_PREREQUISITES, report=ReportRole(finite_sample=3, leaderboard=2),
          cli=CliFace(
              fields={"alpha": "5", "lam": "0.1", "activation": "softmax", "D": None,
                      "sqrtND": None, "seed": "0"},
              help={"lam": "Ridge penalty lam >= 0 on k and v, 'validation' (grid search on "
                           "held-out training data) or 'replica' (the replica theory's optimal "
                           "lam at this task and alpha, cached on disk).",
                    "seed": "First seed; the seeds are seed, seed+1, ..."},
              header=("variant", "L", "nu", "delta", "alpha", "activation"),
              decode=("lam_grid", "val_risk"),
              doc="Fit (k, v) by L-BFGS on sum 1/2 (y - f)^2 + lam/2 (|k|^2 + |v|^2) and report "
                  "the test excess error on fresh data (mean over seeds), its standard error, "
                  "the training loss and the overlaps"))
def erm_cell(cell: Cell, opts: Mapping[str, Any]) -> dict[str, Any]:
    """Registered method ``erm:<activation>`` (see the module docstring; options
    :data:`SCHEMA`)."""
    return _erm_batch([cell], [opts])[0]


# ----------------------------------------------------------------------------------------------
# gd:<activation>
# ----------------------------------------------------------------------------------------------
TRAJECTORY_VARS: tuple[str, ...] = (*OVERLAP_NAMES, "train_loss", "objective", "test_error")


def _gd_memory(cell: Cell, opts: Mapping[str, Any]) -> Resources:
    D, N, L = _sizes(cell)
    return Resources(4.0 * 4 * (N + opts["n_test"]) * L * D,
                     f"training and test data (N={N}, n_test={opts['n_test']}) x L={L} x D={D}",
                     "D, alpha or n_test")


def _gd_cost(cell: Cell, opts: Mapping[str, Any]) -> float:
    D, N, L = _sizes(cell)
    return 5.0 + opts["steps"] * 3 * N * D * L * 4 / FLOPS_PER_S


@register("gd", schema=GD_SCHEMA, activations=ERM_ACTIVATIONS, needs=("alpha", "lam", "D"),
          description="gradient descent / Adam trajectories of the overlaps (docs/estimators.md)",
          outputs=common(*OVERLAP_NAMES, "train_loss", "test_error", "runtime_s") + outputs(
              ("objective", "training objective per sample S/N at the last step"),
              Output("step", "optimiser step of each record", "1", None, "step"),
              *(Output(f"trajectory_{v}", f"{v} at each record", "1", None, "step")
                for v in TRAJECTORY_VARS)),
          cost=_gd_cost, memory=_gd_memory, check=lambda c, o: _check_fixed_lam(c),
          plot=PlotStyle(kind="line", label="{activation} (GD)", linestyle="--"),
          report=ReportRole(trajectories=True), version="1")
def gd_cell(cell: Cell, opts: Mapping[str, Any]) -> dict[str, Any]:
    """Registered method ``gd:<activation>``: one GD / Adam trajectory (options
    :data:`GD_SCHEMA`); final values as scalars, the records as lists along ``step``."""
    task = cell.task()
    ds = gd_trajectory(task, cell.activation, cell.n_train(), float(cell.lam),
                       seeds=(cell.seed,), opts=GDOptions.from_options(opts)).isel(seed=0)
    out: dict[str, Any] = {v: float(ds[v].values[-1]) for v in TRAJECTORY_VARS}
    out["step"] = ds["step"].values.tolist()
    for v in TRAJECTORY_VARS:
        out[f"trajectory_{v}"] = ds[v].values.tolist()
    out.update({"N": cell.n_train(), "D": task.D, "runtime_s": ds.attrs["runtime_s"]})
    return out


def _check_fixed_lam(cell: Cell) -> None:
    if not isinstance(parse_erm_lam(cell.lam), float):
        raise ConfigError(f"lam={cell.lam!r} is not allowed for gd; allowed: real >= 0")
