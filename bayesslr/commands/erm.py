"""``bayesslr erm``: regularised ERM of one attention activation by L-BFGS (docs/estimators.md).

A one-cell sweep: the flags build a :class:`bayesslr.registry.Cell` for ``erm:<activation>``
(options, ranges and defaults from its registry schema), run by
:func:`bayesslr.commands.common.run_one` as the sweep runner runs it.
"""

from __future__ import annotations

import json

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
    parse_float,
    parse_grid,
    run_one,
    schema_option,
)
from bayesslr.core.task import ConfigError, check_int
from bayesslr.erm.method import ERM_ACTIVATIONS
from bayesslr.erm.protocol import parse_lam
from bayesslr.registry import Cell


def _opt(name: str, flag: str | None = None):
    return schema_option("erm", name, flag)


def _lam(text: str) -> float | str:
    try:
        return parse_lam(float(text))
    except ValueError:
        return parse_lam(text)


def erm(
    variant: VariantOpt = "spiked",
    L: LOpt = "3",
    L_dist: LDistOpt = None,
    nu: NuOpt = "2",
    delta: DeltaOpt = "0",
    alpha: str = typer.Option("5", help="Sample ratio alpha = N/D > 0."),
    lam: str = typer.Option(
        "0.1", help="Ridge penalty lam >= 0 on k and v, 'validation' (grid search on "
                    "held-out training data) or 'replica' (the replica theory's optimal lam at "
                    "this task and alpha, cached on disk)."),
    activation: str = typer.Option("softmax", help=f"One of: {', '.join(ERM_ACTIVATIONS)}."),
    D: str = typer.Option(None, "--D", help="Token dimension D (integer >= 1)."),
    sqrtND: str = typer.Option(
        None, "--sqrtND", help="Instead of --D: the paper's sizing D = sqrtND / sqrt(alpha)."),
    seeds: str = _opt("seeds"),
    init: str = _opt("init"),
    seed: str = typer.Option("0", help="First seed; the seeds are seed, seed+1, ..."),
    restarts: str = _opt("restarts"),
    lam_grid: str = _opt("lam_grid"),
    n_test: str = _opt("n_test"),
    as_json: bool = typer.Option(False, "--json", help="Print one JSON object."),
) -> None:
    """Fit (k, v) by L-BFGS on sum 1/2 (y - f)^2 + lam/2 (|k|^2 + |v|^2) and report the test
    excess error on fresh data (mean over seeds), its standard error, the training loss and the
    overlaps."""
    if activation not in ERM_ACTIVATIONS:
        raise ConfigError(f"activation={activation!r} is unknown; allowed: one of "
                          f"{', '.join(ERM_ACTIVATIONS)}")
    if (D is None) == (sqrtND is None):
        raise ConfigError("give exactly one of --D (integer >= 1) and --sqrtND (real >= 1)")
    task = cli_task(variant, L, L_dist, nu, delta)  # validates the task
    alpha_v = parse_float("alpha", alpha, low=0.0, low_open=True)
    grid = tuple(parse_grid("lam_grid", lam_grid, low=0.0)) if lam_grid is not None else None
    cell = Cell(method=f"erm:{activation}", variant=variant, L=task.length.label(),
                nu=task.nu, delta=task.delta, alpha=alpha_v, lam=_lam(lam),
                D=check_int("D", D, low=1) if D is not None else None,
                sqrtND=parse_float("sqrtND", sqrtND, low=1.0) if sqrtND is not None else None,
                seed=check_int("seed", seed, low=0),
                options=given(seeds=seeds, init=init, restarts=restarts, lam_grid=grid,
                              n_test=n_test))
    out = run_one(cell)
    for key in ("lam_grid", "val_risk"):
        if key in out:
            out[key] = json.loads(out[key])
    result = {"variant": variant, "L": task.length.label(), "nu": task.nu, "delta": task.delta,
              "alpha": alpha_v, "activation": activation, **out}
    emit(result, as_json, title=f"erm {activation}")


def register(app: typer.Typer) -> None:
    app.command("erm")(erm)
