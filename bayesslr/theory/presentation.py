"""The ``bayesslr theory erm|bayes`` verbs: their switches and what they print.

``--alpha`` takes a comma list or ``start:stop:num``; each ``alpha`` is one cell, and by
default the cells carry the alpha list as their continuation ``path``, so the points are found
by continuation along it exactly as a sweep of the same cells finds them. The JSON holds the
task, the Monte Carlo sizes and solver settings, and per ``alpha`` (list ``points``) the cell's
outputs (``test_error``, ``stderr`` with its parts, the order parameters, ``converged``,
``reason``, ``iterations``, ...).
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

from bayesslr.core.task import ConfigError
from bayesslr.registry import Cell, CliFace, validate_cell
from bayesslr.theory.erm import STARTS
from bayesslr.theory.solver import SOLVER_KEYS

POINT_COLUMNS: tuple[str, ...] = ("alpha", "test_error", "stderr", "m_k", "q_k", "m_v", "q_v",
                                  "lam", "branch", "hard_phase", "converged", "iterations")
GROUP_HELP = ("Asymptotic theory at finite alpha: ERM replica fixed point and Bayes-optimal "
              "state evolution (docs/theory.md).")
CONTINUATION = ("continuation", True, "Continuation along the alpha list (else each alpha is "
                                      "solved cold).")


def _task_header(cell: Cell) -> dict[str, Any]:
    d = cell.task(D=1).to_dict()
    d.pop("D", None)
    return d


def _path(values: Mapping[str, Any], options: dict[str, Any]) -> dict[str, Any]:
    if values["continuation"]:
        options["path"] = list(values["alphas"])
    return options


def prepare_erm(values: Mapping[str, Any], options: dict[str, Any]) -> dict[str, Any]:
    """``--start both`` is both starts; ``--tol auto`` the family's default."""
    start = values["start"]
    if start not in (*STARTS, "both"):
        raise ConfigError(f"start={start!r} is unknown; allowed: informed, uninformed or both")
    options["start"] = ",".join(STARTS) if start == "both" else start
    if str(options.get("tol", "")).strip().lower() == "auto":
        del options["tol"]
    return _path(values, options)


def present_erm(cells: Sequence[Cell], outs: Sequence[dict[str, Any]],
                values: Mapping[str, Any]) -> dict[str, Any]:
    """The task, sizes and solver settings, then one record per ``alpha``."""
    opts = validate_cell(cells[0])
    header = {**_task_header(cells[0]), "activation": cells[0].activation,
              "method": cells[0].method, "samples": opts["samples"],
              "test_samples": opts["test_samples"], "seed": cells[0].seed,
              "vh_form": opts["vh_form"], "solver": {k: opts[k] for k in SOLVER_KEYS},
              "continuation": values["continuation"], "lam": values["lam"],
              "lam_v": opts["lam_v"]}
    points = []
    for c, o in zip(cells, outs, strict=True):
        point = {"alpha": c.alpha, **o}
        if "branches" in o:
            point["branches"] = json.loads(o["branches"])
        points.append(point)
    return {**header, "points": points}


def present_bayes(cells: Sequence[Cell], outs: Sequence[dict[str, Any]],
                  values: Mapping[str, Any]) -> dict[str, Any]:
    """The task, sizes and solver settings, the hard window, then one record per ``alpha``
    with both branches."""
    opts = validate_cell(cells[0])
    points = []
    for c, o in zip(cells, outs, strict=True):
        point = {"alpha": c.alpha, **o}
        point["branches"] = {
            name: {"test_error": o[f"test_error_{name}"], "m_k": o[f"m_k_{name}"],
                   "m_v": o[f"m_v_{name}"], "free_entropy": o[f"free_entropy_{name}"],
                   "converged": o[f"converged_{name}"], "iterations": o[f"iterations_{name}"]}
            for name in ("informed", "uninformed")}
        points.append(point)
    hard = [p["alpha"] for p in points if p["hard_phase"]]
    return {**_task_header(cells[0]), "method": "theory_bayes", "samples": opts["samples"],
            "test_samples": opts["test_samples"], "seed": cells[0].seed,
            "quadrature": outs[0]["quadrature"], "m_clip": opts["m_clip"],
            "solver": {k: opts[k] for k in SOLVER_KEYS}, "continuation": values["continuation"],
            "hard_phase_alpha": [min(hard), max(hard)] if hard else None, "points": points}


ERM_FACE = CliFace(
    verb=("theory", "erm"), grid=True, group_help=GROUP_HELP,
    fields={"alpha": "5", "lam": "0.1", "activation": "softmax", "seed": "0"},
    help={"lam": "Ridge penalty lam >= 0 (k and v), or 'optimal' (the theory's optimal lam "
                 "per alpha).", "seed": "Seed of the channel samples."},
    hide=("start", "path"),
    switches=(("start", "informed", "informed, uninformed or both.",
               "[informed|uninformed|both]"), CONTINUATION),
    prepare=prepare_erm, present=present_erm, columns=POINT_COLUMNS,
    doc="Replica-symmetric ERM fixed point: overlaps, conjugates, test excess error, training "
        "loss, per alpha (continuation in alpha over a list, both sweep directions)")

BAYES_FACE = CliFace(
    verb=("theory", "bayes"), grid=True, group_help=GROUP_HELP,
    fields={"alpha": "1,2,5,20", "seed": "0"},
    help={"delta": "Label-noise variance Delta >= 0 (at 0, m_v is clipped below 1).",
          "seed": "Seed of the channel samples."},
    hide=("path",), switches=(CONTINUATION,), prepare=_path, present=present_bayes,
    columns=POINT_COLUMNS,
    doc="Bayes-optimal state evolution from the informed and the uninformed start; where they "
        "differ the larger free entropy gives the Bayes-optimal branch, and an uninformed "
        "branch below it marks a computationally hard phase")
