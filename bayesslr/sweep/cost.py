"""The cost estimate of ``bayesslr run --dry-run``: core-seconds per cell, and wall time.

Each family's cost model lives in its registry entry (:attr:`bayesslr.registry.MethodSpec.cost`):
the process CPU time of one cell (all threads; compilation included, amortised over a sweep's
cells of one shape) as a count of the dominant loop's work times a per-unit time, both
calibrated on measured cells of the paper preset (``benchmarks/bench_paper_subset.py``; the
constants, the measurements and the model's accuracy are in ``benchmarks/README.md``, section
"Cost model"). Work shared by several cells is counted once: the replica theory's optimal
``lam`` that ERM cells with ``lam = "replica"`` ask for (:func:`prerequisites`; none when it is
already cached on disk). When the output directory already holds finished cells, each family's
model is rescaled by the median ratio of measured to modelled time: their ``cpu_s`` (process CPU
time, which the model models and the machine's load does not stretch), or their ``runtime_s``
(wall time) for cells written before ``cpu_s`` was recorded.

Wall time: a sweep keeps ``min(workers, cores)`` cores busy (``--workers N`` runs N cells at
once; in-process, one cell at a time, whose JAX computations use several threads only in part:
between ``core / cores`` and ``core`` seconds), so :func:`wall_seconds` divides the core time by
that number.
"""

from __future__ import annotations

import os
import statistics
from collections.abc import Sequence

from bayesslr.registry import Cell, get_method
from bayesslr.sweep.storage import CellRecord


def model_seconds(cell: Cell) -> float:
    """Modelled core-seconds of one cell: its family's cost model (the registry)."""
    spec = get_method(cell.method)
    return float(spec.cost(cell, spec.schema.validate(cell.options)))


def prerequisites(cells: Sequence[Cell]) -> dict[str, float]:
    """Core-seconds of the work several cells share, counted once per sweep, by what it is.

    Each family declares what its cells read from other families
    (:attr:`bayesslr.registry.MethodSpec.prerequisites`, e.g. ERM's ``lam = 'replica'``: the
    replica theory's optimal ``lam`` at the cell's task and ``alpha``); the work not yet cached
    is costed by the other family's own model, once per distinct key, under the label
    ``"<family> (<what>)"``.
    """
    by_family: dict[str, list[Cell]] = {}
    for c in cells:
        by_family.setdefault(c.family, []).append(c)
    out: dict[str, float] = {}
    for family, group in by_family.items():
        need = get_method(group[0].method).prerequisites
        if need is None:
            continue
        pending = need.pending(group)
        if pending:
            out[f"{family} ({need.what})"] = sum(model_seconds(t) for t in pending.values())
    return out


def measured_seconds(rec: CellRecord) -> float:
    """What a finished cell cost: its ``cpu_s`` where recorded, else its ``runtime_s``."""
    return rec.cpu_s if rec.cpu_s == rec.cpu_s else rec.runtime_s


def rescaling_cells(measured: Sequence[CellRecord]) -> list[CellRecord]:
    """The measured cells that rescale the model (:func:`estimate`): ok, with a time."""
    return [r for r in measured if r.status == "ok" and measured_seconds(r) == measured_seconds(r)]


def estimate(cells: Sequence[Cell], measured: Sequence[CellRecord] = ()) -> dict[str, float]:
    """Core-seconds by family (key ``"total"`` too), rescaled by measured cells if any, with
    the shared work of :func:`prerequisites` as separate entries."""
    scale: dict[str, float] = {}
    by_fam: dict[str, list[float]] = {}
    for r in rescaling_cells(measured):
        by_fam.setdefault(r.cell.family, []).append(measured_seconds(r) / model_seconds(r.cell))
    for fam, ratios in by_fam.items():
        scale[fam] = statistics.median(ratios)
    out: dict[str, float] = {}
    for c in cells:
        out[c.family] = out.get(c.family, 0.0) + model_seconds(c) * scale.get(c.family, 1.0)
    out.update(prerequisites(cells))
    out["total"] = sum(out.values())
    return out


def against_model(measured: Sequence[CellRecord]) -> dict[str, dict[str, float]]:
    """What finished cells cost against what the model says they cost, by family: ``cells``,
    ``measured_s`` (their :func:`measured_seconds`), ``model_s`` (:func:`model_seconds`, not
    rescaled), ``ratio`` (measured over model, summed) and ``by_wall`` (how many of them were
    measured by their wall time, which the machine's load stretches, for want of a CPU time).

    The model's shared work (:func:`prerequisites`) is not in ``model_s``: a cell that did it
    (the first ERM cell at the replica's ``lam`` of a task) carries it in its measured time.
    """
    out: dict[str, dict[str, float]] = {}
    for r in rescaling_cells(measured):
        f = out.setdefault(r.cell.family, {"cells": 0, "measured_s": 0.0, "model_s": 0.0,
                                           "by_wall": 0})
        f["cells"] += 1
        f["measured_s"] += measured_seconds(r)
        f["model_s"] += model_seconds(r.cell)
        f["by_wall"] += r.cpu_s != r.cpu_s
    for f in out.values():
        f["ratio"] = f["measured_s"] / f["model_s"] if f["model_s"] > 0 else float("nan")
    return out


def wall_seconds(core_seconds: float, workers: int | None = None,
                 cores: int | None = None) -> float:
    """Wall time of ``core_seconds`` of work on ``min(workers, cores)`` busy cores (``workers``
    None: in-process, counted as one busy core, an upper bound)."""
    cores = cores or os.cpu_count() or 1
    return core_seconds / max(1, min(workers or 1, cores))
