"""``bayesslr theory erm|bayes``: the finite-``alpha`` asymptotic theory (docs/theory.md).

``--alpha`` takes a comma list or ``start:stop:num``. Each ``alpha`` is one cell of the
registered families ``theory_erm:<activation>`` / ``theory_bayes``, and the verb runs those
cells as a sweep does (:func:`bayesslr.commands.common.run_cells`): by default the cells carry
the alpha list as their continuation ``path``, so the points are found by continuation along
it, exactly as a sweep of the same cells finds them. The JSON holds, per ``alpha`` (list
``points``), ``test_error``, its ``stderr`` (with the parts ``stderr_test`` and
``stderr_channel``), the order parameters, ``converged``, ``reason`` and ``iterations`` (plus
conjugates and diagnostics), and the Monte Carlo sizes and solver settings used.
"""

from __future__ import annotations

import json
from typing import Any

import typer

from bayesslr.commands.common import (
    DeltaOpt,
    LDistOpt,
    LOpt,
    NuOpt,
    VariantOpt,
    cli_task,
    emit,
    given,
    parse_grid,
    run_cells,
    schema_option,
)
from bayesslr.core.task import ConfigError, TaskConfig, check_int
from bayesslr.registry import Cell, validate_cell
from bayesslr.theory.erm import ERM_ACTIVATIONS, STARTS
from bayesslr.theory.solver import SOLVER_KEYS

theory_app = typer.Typer(
    name="theory",
    help="Asymptotic theory at finite alpha: ERM replica fixed point and Bayes-optimal state "
         "evolution (docs/theory.md).",
    no_args_is_help=True,
)

def _erm(name: str):
    return schema_option("theory_erm", name)


def _bayes(name: str):
    return schema_option("theory_bayes", name)


def _header(task: TaskConfig) -> dict[str, Any]:
    d = task.to_dict()
    d.pop("D", None)
    return d


@theory_app.command("erm")
def erm(
    variant: VariantOpt = "spiked",
    L: LOpt = "3",
    L_dist: LDistOpt = None,
    nu: NuOpt = "2",
    delta: DeltaOpt = "0",
    alpha: str = typer.Option("5", help="alpha > 0: '5', '1,2,5,20' or start:stop:num."),
    lam: str = typer.Option("0.1", help="Ridge penalty lam >= 0 (k and v), or 'opt' (the "
                                        "theory's optimal lam per alpha)."),
    lam_v: str = typer.Option(None, "--lam-v", help="Penalty on v if different from --lam."),
    activation: str = typer.Option("softmax", help=f"One of: {', '.join(ERM_ACTIVATIONS)}."),
    start: str = typer.Option("informed", help="informed, uninformed or both."),
    sweep: str = _erm("sweep"),
    continuation: bool = typer.Option(True, "--continuation/--no-continuation",
                                      help="Continuation along the alpha list (else each "
                                           "alpha is solved cold)."),
    samples: str = _erm("samples"),
    test_samples: str = _erm("test_samples"),
    seed: str = typer.Option("0", help="Seed of the channel samples."),
    vh_form: str = _erm("vh_form"),
    damping: str = _erm("damping"),
    tol: str = _erm("tol"),
    accel: str = _erm("accel"),
    max_iter: str = _erm("max_iter"),
    as_json: bool = typer.Option(False, "--json", help="Print one JSON object."),
) -> None:
    """Replica-symmetric ERM fixed point: overlaps, conjugates, test excess error, training
    loss, per alpha (continuation in alpha over a list, both sweep directions)."""
    task = cli_task(variant, L, L_dist, nu, delta)
    alphas = parse_grid("alpha", alpha, low=0.0, low_open=True)
    if start not in (*STARTS, "both"):
        raise ConfigError(f"start={start!r} is unknown; allowed: informed, uninformed or both")
    options = given(samples=samples, test_samples=test_samples, vh_form=vh_form,
                    damping=damping, accel=accel, max_iter=max_iter, sweep=sweep, lam_v=lam_v,
                    tol=None if tol is None or tol.strip().lower() == "auto" else tol,
                    start=",".join(STARTS) if start == "both" else start,
                    path=alphas if continuation else None)
    cells = [Cell(method=f"theory_erm:{activation}", variant=variant, L=task.length.label(),
                  nu=task.nu, delta=task.delta, alpha=a, lam=lam, seed=check_int("seed", seed,
                                                                                   low=0),
                  options=options) for a in alphas]
    outs = run_cells(cells)
    opts = validate_cell(cells[0])
    header = {**_header(task), "activation": activation, "method": cells[0].method,
              "samples": opts["samples"], "test_samples": opts["test_samples"],
              "seed": cells[0].seed, "vh_form": opts["vh_form"],
              "solver": {k: opts[k] for k in SOLVER_KEYS}, "continuation": continuation,
              "lam": lam, "lam_v": opts["lam_v"]}
    points = []
    for c, o in zip(cells, outs, strict=True):
        point = {"alpha": c.alpha, **o}
        if "branches" in o:
            point["branches"] = json.loads(o["branches"])
        points.append(point)
    emit({**header, "points": points}, as_json, title="theory erm")


@theory_app.command("bayes")
def bayes(
    variant: VariantOpt = "spiked",
    L: LOpt = "3",
    L_dist: LDistOpt = None,
    nu: NuOpt = "2",
    delta: str = typer.Option("0", help="Label-noise variance Delta >= 0 (at 0, m_v is "
                                        "clipped below 1)."),
    alpha: str = typer.Option("1,2,5,20", help="alpha > 0: comma list or start:stop:num."),
    samples: str = _bayes("samples"),
    test_samples: str = _bayes("test_samples"),
    seed: str = typer.Option("0", help="Seed of the channel samples."),
    gh_nodes: str = _bayes("gh_nodes"),
    continuation: bool = typer.Option(True, "--continuation/--no-continuation",
                                      help="Warm-start each alpha from its neighbour."),
    branch: str = _bayes("branch"),
    tol: str = _bayes("tol"),
    as_json: bool = typer.Option(False, "--json", help="Print one JSON object."),
) -> None:
    """Bayes-optimal state evolution from the informed and the uninformed start; where they
    differ the larger free entropy gives the Bayes-optimal branch, and an uninformed branch
    below it marks a computationally hard phase."""
    task = cli_task(variant, L, L_dist, nu, delta)
    alphas = parse_grid("alpha", alpha, low=0.0, low_open=True)
    options = given(samples=samples, test_samples=test_samples, gh_nodes=gh_nodes, tol=tol,
                    branch=branch, path=alphas if continuation else None)
    cells = [Cell(method="theory_bayes", variant=variant, L=task.length.label(), nu=task.nu,
                  delta=task.delta, alpha=a, seed=check_int("seed", seed, low=0),
                  options=options) for a in alphas]
    outs = run_cells(cells)
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
    result = {**_header(task), "method": "theory_bayes", "samples": opts["samples"],
              "test_samples": opts["test_samples"], "seed": cells[0].seed,
              "quadrature": outs[0]["quadrature"], "m_clip": opts["m_clip"],
              "solver": {k: opts[k] for k in SOLVER_KEYS}, "continuation": continuation,
              "hard_phase_alpha": [min(hard), max(hard)] if hard else None, "points": points}
    emit(result, as_json, title="theory bayes")


def register(app: typer.Typer) -> None:
    app.add_typer(theory_app, name="theory")
