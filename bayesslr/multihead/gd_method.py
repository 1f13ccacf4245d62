"""The ``multihead_gd`` family: gradient-descent trajectories of the multi-head student as sweep
cells (docs/multihead.md sections 6.2 and 8.7), the evidence of the claim that heads specialise
after an unspecialised phase.

Members ``multihead_gd:softmax``, ``multihead_gd:softmax1``, ``multihead_gd:bayes_softmax``:
full-batch gradient descent at a fixed step from a small random start
(:func:`bayesslr.multihead.erm.multihead_gd`), on the task variant ``multihead``. A cell's seed
gives the teacher and the training data exactly as the ``multihead`` family's cells of the same
seed (``seed_key(seed)`` split by :func:`bayesslr.multihead.sample_multihead`), so a trajectory
and the ERM fits and the sampled posterior of one seed are trained on the same data.

Outputs: the final values as scalars and every record along ``step``: the key and value
specialisation indices (:func:`bayesslr.multihead.erm.specialisation`: 0 when every head
carries the same mixture of directions, 1 when each direction has a head of its own), the test
error and its paired gap to the teacher-known Bayes predictor, the training loss.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import jax
import numpy as np

from bayesslr.core.options import Opt, Schema, schema_of
from bayesslr.core.task import ConfigError, LengthLaw, seed_key
from bayesslr.multihead.erm import MultiheadGDOptions, multihead_gd, specialisation
from bayesslr.multihead.method import TASK_SCHEMA, VARIANT, heads_of, task_of
from bayesslr.multihead.task import SIGMAS, sample_teacher
from bayesslr.registry import Cell, CliFace, Output, PlotStyle, ReportRole, Resources

# isort: split
from bayesslr.registry import common, outputs, register

FAMILY = "multihead_gd"
# the task's own options (F, theta, teacher) and the student's H; n_test is GD's own
SCHEMA = Schema(FAMILY, tuple(o for o in TASK_SCHEMA.opts if o.name != "n_test")) + Schema(
    FAMILY, (Opt("H", None, "int", low=1, high=256, nullable=True,
                 doc="student heads (none: as many as the teacher's directions F)"),)
) + schema_of(MultiheadGDOptions)

# what every record holds, as ``trajectory_<name>`` along ``step``
TRAJECTORY = {
    "specialisation_K": ("key_specialisation", "specialisation index of the keys"),
    "specialisation_V": ("value_specialisation", "specialisation index of the values"),
    "test_error": ("test_error", "test excess error"),
    "excess_over_oracle": ("bayes_gap", "test error minus the teacher-known Bayes predictor's"),
    "train_loss": ("train_loss", "training loss per sample"),
}
ALIGNMENT_DOC = ("key alignment with the teacher's span: the mean over heads of the cosine of "
                 "k_h with its projection on span(k*_1 ... k*_F)")

OUTPUTS = common("test_error", "stderr", "excess_over_oracle", "excess_over_oracle_stderr",
                 "train_loss", "runtime_s") + outputs(
    ("specialisation_K", "specialisation index of the keys at the last step"),
    ("specialisation_V", "specialisation index of the values at the last step"),
    ("objective", "training objective per sample S/N at the last step"),
    ("alignment_K", ALIGNMENT_DOC + " (last step)"),
    ("n_heads", "student heads H"),
    ("n_directions", "hidden directions F of the teacher (option F)"),
    Output("step", "optimiser step of each record", "1", None, "step"),
    *(Output(f"trajectory_{name}", f"{doc} at each record", "1", None, "step")
      for name, (_, doc) in TRAJECTORY.items()),
    Output("trajectory_alignment_K", ALIGNMENT_DOC + " at each record", "1", None, "step"),
)


def alignment(overlap: np.ndarray, norm: np.ndarray, teacher_norm: np.ndarray) -> float:
    """Mean over heads of ``sqrt(sum_f c_hf^2)``, ``c_hf`` the cosines of
    :func:`bayesslr.multihead.erm.specialisation`: for orthonormal directions the cosine of each
    head with its projection on the teacher's span (about ``sqrt(F / D)`` for a random head, 1
    for a head inside the span, whatever its mixture of directions)."""
    c = specialisation(overlap, norm, teacher_norm).cosine
    return float(np.mean(np.sqrt(np.sum(c * c, axis=1))))


def _check(cell: Cell, opts: Mapping[str, Any]) -> None:
    task_of(cell, opts)
    if cell.lam is None or isinstance(cell.lam, str):
        raise ConfigError(f"lam={cell.lam!r} is not a penalty of {cell.method}; allowed: real "
                          ">= 0")
    if float(cell.lam) < 0 or not math.isfinite(float(cell.lam)):
        raise ConfigError(f"lam={cell.lam!r} is out of range; allowed: finite real >= 0")
    MultiheadGDOptions.from_options({k: opts[k] for k in _GD_FIELDS})


_GD_FIELDS = tuple(o.name for o in schema_of(MultiheadGDOptions).opts)


def _cost(cell: Cell, opts: Mapping[str, Any]) -> float:
    """Modelled core-seconds: a share of the compilation (once per member and shape), then
    ``steps`` gradients of ``N L H D`` and a test-set record every ``record_every`` steps;
    measured at ``D = 24, N = 1536, L = 3, H = 2``, 2000 steps, 2000 test inputs: 0.54-0.84
    CPU-s a cell once compiled, 3-6 s for the first of a member (docs/multihead.md 8.7); the
    fixed part is that compilation shared by a member's seeds (the ``multihead`` preset's 180
    cells at version 2: 115 CPU-s in all, 0.64 a cell, modelled 0.81)."""
    D, N, L = cell.dimension(), cell.n_train(), LengthLaw.parse(cell.L).L_max
    H = heads_of(opts)
    records = opts["steps"] // opts["record_every"]
    return 0.1 + 2.5e-10 * (opts["steps"] * N + records * opts["n_test"]) * L * H * D * 6


def _memory(cell: Cell, opts: Mapping[str, Any]) -> Resources:
    D, N, L = cell.dimension(), cell.n_train(), LengthLaw.parse(cell.L).L_max
    return Resources(4.0 * 4 * (N + opts["n_test"]) * L * D,
                     f"training and test data (N={N}, n_test={opts['n_test']}) x L={L} x D={D}",
                     "D, alpha or n_test")


@register(FAMILY, schema=SCHEMA, activations=SIGMAS, needs=("alpha", "lam", "D"),
          variants=(VARIANT,),
          description="multi-head SLR: gradient-descent trajectories of the H-head attention "
                      "student, specialisation of its heads (docs/multihead.md)",
          outputs=OUTPUTS, cost=_cost, memory=_memory, check=_check,
          plot=PlotStyle(kind="line", label="{activation} (multi-head GD)", linestyle="--"),
          version="2", report=ReportRole(),
          dims=("variant", "L", "nu", "delta", "alpha", "lam", "D"),
          cli=CliFace(
              verb=("multihead-gd",),
              fields={"activation": "bayes_softmax", "alpha": "64", "lam": "0.01", "D": "16",
                      "seed": "0"},
              task={"variant": VARIANT, "nu": "9", "delta": "0"},
              help={"activation": "The attention: softmax, softmax1 or bayes_softmax.",
                    "lam": "Ridge penalty >= 0.",
                    "L": "Sequence length (integer >= 1; a length law is not a multi-head "
                         "task).",
                    "nu": "Signal strength nu >= 0 of the location (finite)."}))
def multihead_gd_cell(cell: Cell, opts: Mapping[str, Any]) -> dict[str, Any]:
    """Registered method ``multihead_gd:<attention>``: one trajectory (module docstring)."""
    task = task_of(cell, opts)
    gd = MultiheadGDOptions.from_options({k: opts[k] for k in _GD_FIELDS})
    key = seed_key(cell.seed)
    tr = multihead_gd(key, task, heads_of(opts), cell.member, cell.n_train(), float(cell.lam),
                      opts=gd)
    # the teacher's norms |k*_f|^2 / D (the same teacher: the first key of the data's split)
    teacher = sample_teacher(jax.random.split(key, 3)[0], task)
    qk = np.sum(np.asarray(teacher.K, np.float64) ** 2, axis=-1) / task.D
    ov = tr.overlaps
    align = [alignment(ov.key[i], ov.key_norm[i], qk) for i in range(len(tr.step))]
    out: dict[str, Any] = {
        "test_error": float(tr.test_error[-1]), "stderr": float(tr.stderr[-1]),
        "excess_over_oracle": float(tr.bayes_gap[-1]),
        "excess_over_oracle_stderr": float(tr.bayes_gap_stderr[-1]),
        "train_loss": float(tr.train_loss[-1]), "objective": float(tr.objective[-1]),
        "specialisation_K": float(tr.key_specialisation[-1]),
        "specialisation_V": float(tr.value_specialisation[-1]),
        "alignment_K": align[-1], "trajectory_alignment_K": align,
        "n_heads": heads_of(opts), "n_directions": task.F,
        "step": [int(s) for s in tr.step],
    }
    for name, (field, _) in TRAJECTORY.items():
        out[f"trajectory_{name}"] = [float(x) for x in np.asarray(getattr(tr, field))]
    return out
