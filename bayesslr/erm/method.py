"""Registry entries of the ERM protocols: ``erm:<activation>`` and ``gd:<activation>``.

* ``erm:<softmax|linear|erf|softplus>``: one cell is one L-BFGS ERM protocol
  (:func:`bayesslr.erm.protocol.run_erm_protocol`) over ``seeds`` consecutive seeds starting
  at the cell's ``seed``; the outputs are means over seeds, with ``stderr`` the standard error of
  ``test_error`` over seeds (:meth:`bayesslr.erm.protocol.ERMResult.summary`). ``lam`` is a
  real ``>= 0``, ``"validation"`` (grid search on held-out training data) or ``"replica"``
  (the replica theory's optimal ``lam`` at the cell's task and ``alpha``,
  :func:`bayesslr.theory.replica_lam.replica_lam`, the one service that computes it once and
  keeps it; the outputs record the ``lam`` used and the theory's test
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

import dataclasses
import json
import math
from collections.abc import Hashable, Mapping
from typing import Any

import numpy as np

from bayesslr.core.activations import ACTIVATIONS
from bayesslr.core.options import Opt, schema_of
from bayesslr.core.task import OVERLAP_NAMES, ConfigError
from bayesslr.erm.gd import GDOptions, gd_trajectory
from bayesslr.erm.protocol import ERMOptions, parse_erm_lam, run_erm_protocol_grid
from bayesslr.registry import Cell, CliFace, Output, PlotStyle, ReportRole, Resources

# isort: split
from bayesslr.registry import common, outputs, register
from bayesslr.theory.replica_lam import REPLICA_PREREQUISITES, replica_cell, replica_lam

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


def _members(cell: Cell, opts: Mapping[str, Any]) -> int:
    return opts["restarts"] * (len(opts["lam_grid"]) if cell.lam == "validation" else 1)


def _memory(cell: Cell, opts: Mapping[str, Any]) -> Resources:
    D, N, L = cell.sizes()
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
    D, N, L = cell.sizes()
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
    D, N, L = cell.sizes()
    return Resources(4.0 * 4 * (N + opts["n_test"]) * L * D,
                     f"training and test data (N={N}, n_test={opts['n_test']}) x L={L} x D={D}",
                     "D, alpha or n_test")


def _gd_cost(cell: Cell, opts: Mapping[str, Any]) -> float:
    D, N, L = cell.sizes()
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
