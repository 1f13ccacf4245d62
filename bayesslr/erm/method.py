"""Registry entries of the ERM protocols: ``erm:<activation>`` and ``gd:<activation>``.

* ``erm:<softmax|linear|erf|softplus>``: one cell is one L-BFGS ERM protocol
  (:func:`bayesslr.erm.protocol.erm_fit`) over ``seeds`` consecutive seeds starting at the cell's
  ``seed``; the outputs are means over seeds, with ``stderr`` the standard error of
  ``test_error`` over seeds (:meth:`bayesslr.erm.protocol.ERMResult.summary`). ``lam`` is a
  real ``>= 0`` or ``"validation"`` (grid search on held-out training data).
* ``gd:<activation>``: gradient descent or Adam from a random or informed start
  (:func:`bayesslr.erm.gd.gd_trajectory`), one seed per cell; the overlaps, losses and test error
  are recorded every ``record_every`` steps (list outputs along the dataset dimension ``step``)
  and the final values are scalars.

The CLI verb ``bayesslr erm``, the sweep runner and the Python API all go through
:func:`bayesslr.methods.run_cell`.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from typing import Any

import numpy as np

from bayesslr.activations import ACTIVATIONS
from bayesslr.erm.gd import GDOptions, gd_trajectory
from bayesslr.erm.protocol import ERMOptions, erm_fit, parse_lam
from bayesslr.methods import Cell, Output, PlotStyle, Resources, common, outputs, register
from bayesslr.options import Opt, schema_of
from bayesslr.task import OVERLAP_NAMES, ConfigError, LengthLaw

ERM_ACTIVATIONS: tuple[str, ...] = tuple(ACTIVATIONS)

SCHEMA = schema_of(ERMOptions, "erm") + (
    Opt("seeds", 1, "int", low=1, high=10_000,
        doc="consecutive seeds from the cell's seed; outputs are means over them"),
)
GD_SCHEMA = schema_of(GDOptions, "gd")

FLOPS_PER_S = 2e9  # sustained rate assumed for one core by the cost models


def _check(cell: Cell, opts: Mapping[str, Any]) -> None:
    lam = parse_lam(cell.lam)
    if lam == "validation" and cell.n_train() < 2:
        raise ConfigError(f"alpha*D={cell.alpha * cell.dimension():g} gives fewer than 2 "
                          "training samples; lam='validation' needs at least 2")


def _sizes(cell: Cell) -> tuple[int, int, int]:
    return cell.dimension(), cell.n_train(), LengthLaw.parse(cell.L).L_max


def _memory(cell: Cell, opts: Mapping[str, Any]) -> Resources:
    D, N, L = _sizes(cell)
    per_seed = 4.0 * 3 * N * L * D  # X, its masked copy, slack (as erm.protocol.fit_seeds)
    chunk = max(1, min(opts["seeds"], int(opts["max_batch_bytes"] // per_seed)))
    members = opts["restarts"] * (len(opts["lam_grid"]) if cell.lam == "validation" else 1)
    state = chunk * members * 2 * D * 4 * (2 * opts["memory"] + 6)  # L-BFGS histories
    test = 4.0 * 3 * opts["n_test"] * L * D
    return Resources(chunk * per_seed + state + test,
                     f"training data N={N} x L={L} x D={D} float32 for {chunk} seed(s) at once, "
                     f"test data n_test={opts['n_test']}", "D (or sqrtND), alpha or n_test")


def _cost(cell: Cell, opts: Mapping[str, Any]) -> float:
    D, N, L = _sizes(cell)
    grid = len(opts["lam_grid"]) if cell.lam == "validation" else 1
    evals = 100 * 3  # ~100 L-BFGS iterations, forward and backward pass
    return 3.0 + opts["seeds"] * (grid + 1 if grid > 1 else 1) * evals * N * D * L * 4 \
        / FLOPS_PER_S


ERM_OUTPUTS = common("test_error", "stderr", "stderr_test", "risk", "oracle_error",
                     "oracle_error_stderr", "excess_over_oracle", "excess_over_oracle_stderr",
                     "train_loss", *OVERLAP_NAMES, "lam", "converged", "iterations",
                     "runtime_s") + outputs(
    ("objective", "training objective per sample S/N at the solution"),
    ("converged_fraction", "fraction of seeds whose L-BFGS met the gradient tolerance"),
    ("grad_norm", "largest final |grad S|/sqrt(D) over seeds"),
    ("lam_mode", "fixed or validation", ""),
    ("lam_grid", "grid searched by lam='validation' (JSON list)", ""),
    ("val_risk", "validation risk per grid value (JSON list)", ""),
)


@register("erm", schema=SCHEMA, activations=ERM_ACTIVATIONS, needs=("alpha", "lam", "D"),
          description="regularised ERM by L-BFGS on the data (spec section 4)",
          outputs=ERM_OUTPUTS, cost=_cost, memory=_memory, check=_check,
          plot=PlotStyle(kind="marker", label="{activation} (ERM)", marker="o", filled=False),
          version="2")
def erm_cell(cell: Cell, opts: Mapping[str, Any]) -> dict[str, Any]:
    """Registered method ``erm:<activation>`` (see the module docstring; options
    :data:`SCHEMA`)."""
    lam = parse_lam(cell.lam)
    task = cell.task()
    n_train = cell.n_train()
    res = erm_fit(task, cell.activation, n_train, lam,
                  seeds=np.arange(cell.seed, cell.seed + opts["seeds"]),
                  opts=ERMOptions.from_options(opts))
    out = res.summary()
    out.update({"D": task.D, "N": n_train, "lam_mode": "fixed" if lam != "validation"
                else "validation"})
    for key in ("lam_grid", "val_risk"):
        if key in out:
            out[key] = json.dumps([x if math.isfinite(x) else None for x in out[key]])
    return out


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
          description="gradient descent / Adam trajectories of the overlaps (spec section 4)",
          outputs=common(*OVERLAP_NAMES, "train_loss", "test_error", "runtime_s") + outputs(
              ("objective", "training objective per sample S/N at the last step"),
              Output("step", "optimiser step of each record", "1", None, "step"),
              *(Output(f"trajectory_{v}", f"{v} at each record", "1", None, "step")
                for v in TRAJECTORY_VARS)),
          cost=_gd_cost, memory=_gd_memory, check=lambda c, o: _check_fixed_lam(c),
          plot=PlotStyle(kind="line", label="{activation} (GD)", linestyle="--"),
          version="1")
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
    if not isinstance(parse_lam(cell.lam), float):
        raise ConfigError(f"lam={cell.lam!r} is not allowed for gd; allowed: real >= 0")
