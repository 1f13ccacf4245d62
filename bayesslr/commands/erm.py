"""``bayesslr erm``: regularised ERM of one attention activation by L-BFGS (spec section 4).

A one-cell sweep: the flags build a :class:`bayesslr.methods.Cell` for ``erm:<activation>`` and
:func:`bayesslr.methods.run_cell` runs it, the code path of the sweep runner.
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
    parse_float,
    parse_grid,
)
from bayesslr.erm.method import ERM_ACTIVATIONS
from bayesslr.erm.protocol import DEFAULT_LAM_GRID, INITS, parse_lam
from bayesslr.methods import Cell, run_cell
from bayesslr.task import ConfigError, check_int


def erm(
    variant: VariantOpt = "spiked",
    L: LOpt = "3",
    L_dist: LDistOpt = None,
    nu: NuOpt = "2",
    delta: DeltaOpt = "0",
    alpha: str = typer.Option("5", help="Sample ratio alpha = N/D > 0."),
    lam: str = typer.Option(
        "0.1", help="Ridge penalty lam >= 0 on k and v, or 'validation' (grid search on "
                    "held-out training data)."),
    activation: str = typer.Option("softmax", help=f"One of: {', '.join(ERM_ACTIVATIONS)}."),
    D: str = typer.Option(None, "--D", help="Token dimension D (integer >= 1)."),
    sqrtND: str = typer.Option(
        None, "--sqrtND", help="Instead of --D: the paper's sizing D = sqrtND / sqrt(alpha)."),
    seeds: str = typer.Option("1", help="Number of seeds (teacher, data, start), >= 1."),
    init: str = typer.Option("informed", help=f"Start: {' or '.join(INITS)}."),
    seed: str = typer.Option("0", help="First seed; the seeds are seed, seed+1, ..."),
    restarts: str = typer.Option("1", help="Starts per seed; the lowest objective is kept."),
    lam_grid: str = typer.Option(
        ",".join(f"{x:g}" for x in DEFAULT_LAM_GRID), "--lam-grid",
        help="Grid searched by --lam validation: '0.01,0.1,1' or start:stop:num."),
    n_test: str = typer.Option("10000", "--n-test", help="Fresh test samples per seed."),
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
    lam_v: float | str = parse_lam(lam if not _is_real(lam) else float(lam))
    D_v = check_int("D", D, low=1) if D is not None else None
    sqrt_v = parse_float("sqrtND", sqrtND, low=1.0) if sqrtND is not None else None
    options = {"seeds": seeds, "init": init, "restarts": restarts,
               "lam_grid": tuple(parse_grid("lam_grid", lam_grid, low=0.0)), "n_test": n_test}
    cell = Cell(method=f"erm:{activation}", variant=variant, L=task.length.label(),
                nu=task.nu, delta=task.delta, alpha=alpha_v, lam=lam_v, D=D_v, sqrtND=sqrt_v,
                seed=check_int("seed", seed, low=0), options=options)
    out = run_cell(cell)
    for key in ("lam_grid", "val_risk"):
        if key in out:
            out[key] = json.loads(out[key])
    result = {"variant": variant, "L": task.length.label(), "nu": task.nu, "delta": task.delta,
              "alpha": alpha_v, "activation": activation, **out}
    emit(result, as_json, title=f"erm {activation}")


def _is_real(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True


def register(app: typer.Typer) -> None:
    app.command("erm")(erm)
