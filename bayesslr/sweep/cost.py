"""The cost estimate of ``bayesslr run --dry-run``: core-seconds per cell.

Each family's cost model lives in its registry entry (:attr:`bayesslr.methods.MethodSpec.cost`:
a per-family overhead plus a count of the dominant loop's work at an assumed rate); it tells a
laptop sweep from a cluster sweep. When the output directory already holds finished cells, each
family's model is rescaled by the median ratio of measured to modelled time.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence

from bayesslr.methods import Cell, get_method
from bayesslr.sweep.storage import CellRecord


def model_seconds(cell: Cell) -> float:
    """Modelled core-seconds of one cell: its family's cost model (the registry)."""
    spec = get_method(cell.method)
    return float(spec.cost(cell, spec.schema.validate(cell.options)))


def estimate(cells: Sequence[Cell], measured: Sequence[CellRecord] = ()) -> dict[str, float]:
    """Core-seconds by family (key ``"total"`` too), rescaled by measured cells if any."""
    scale: dict[str, float] = {}
    by_fam: dict[str, list[float]] = {}
    for r in measured:
        if r.status == "ok" and r.runtime_s == r.runtime_s:
            by_fam.setdefault(r.cell.family, []).append(r.runtime_s / model_seconds(r.cell))
    for fam, ratios in by_fam.items():
        scale[fam] = statistics.median(ratios)
    out: dict[str, float] = {}
    for c in cells:
        out[c.family] = out.get(c.family, 0.0) + model_seconds(c) * scale.get(c.family, 1.0)
    out["total"] = sum(out.values())
    return out
