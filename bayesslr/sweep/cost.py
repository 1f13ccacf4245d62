"""A rough cost model for ``bayesslr run --dry-run``: core-seconds per cell.

The model is deliberately simple (a per-family overhead plus a flop count of the dominant
loop divided by an assumed rate) and is meant to tell a laptop sweep from a cluster sweep, not
to schedule. When the output directory already holds finished cells, each family's model is
rescaled by the median ratio of measured to modelled time.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence

from bayesslr.methods import Cell
from bayesslr.sweep.storage import CellRecord
from bayesslr.task import LengthLaw

FLOPS_PER_S = 2e9  # sustained rate assumed for one core
# per family: fixed seconds (compilation, set-up)
# (constants checked against the quick preset on a shared 2-core machine: population 1-3 s,
# theory_bayes 0.4 s after an 8 s compile, theory_erm 40-75 s, ERM at D = 200 0.3 s after a
# 10-35 s compile, NUTS at D = 50 26-35 s)
OVERHEAD_S: dict[str, float] = {"population": 3.0, "theory_bayes": 3.0, "theory_erm": 40.0,
                                "erm": 3.0, "bayes_sampling": 25.0}


def _opt(cell: Cell, key: str, default: float) -> float:
    v = cell.options.get(key, default)
    return float(v) if isinstance(v, int | float) and not isinstance(v, bool) else default


def model_seconds(cell: Cell) -> float:
    """Modelled core-seconds of one cell (see the module docstring)."""
    fam = cell.family
    L = LengthLaw.parse(cell.L).L_max
    base = OVERHEAD_S.get(fam, 5.0)
    if fam == "population":
        evals = 1.0 if cell.activation == "bayes" else 60.0
        return base + evals * _opt(cell, "samples", 200_000) * L * 30 / FLOPS_PER_S
    if fam in {"theory_erm", "theory_bayes"}:
        iters = _opt(cell, "max_iter", 200)
        lam_grid = 8.0 if cell.lam == "auto" else 1.0
        return base * lam_grid + lam_grid * iters * _opt(cell, "n_channel", 20_000) * L * 400 \
            / FLOPS_PER_S
    if cell.alpha is None or (cell.D is None and cell.sqrtND is None):
        return base
    D = cell.dimension()
    N = cell.n_train()
    work = N * D * L * 4
    if fam == "erm":
        lam_grid = 8.0 if cell.lam == "auto" else 1.0
        return base + lam_grid * 100 * 3 * work / FLOPS_PER_S  # ~100 L-BFGS iterations
    if fam == "bayes_sampling":
        steps = (_opt(cell, "warmup", 500) + _opt(cell, "draws", 500)) * _opt(cell, "chains", 2)
        return base + steps * 2 * 16 * work / FLOPS_PER_S
    return base


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
