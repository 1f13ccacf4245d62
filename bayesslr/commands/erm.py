"""``bayesslr erm``: regularised ERM of one attention activation by L-BFGS (spec section 4).

A one-cell sweep: the flags build a :class:`bayesslr.methods.Cell` for ``erm:<activation>`` and
:func:`bayesslr.methods.run_cell` runs it, the code path of the sweep runner.
"""

from __future__ import annotations

import json

import typer

from bayesslr.commands.common import emit, parse_float, parse_grid
from bayesslr.erm.method import ERM_ACTIVATIONS
from bayesslr.erm.protocol import DEFAULT_LAM_GRID, INITS
from bayesslr.methods import Cell, run_cell
from bayesslr.task import ConfigError, check_int, make_task


def erm(
    variant: str = typer.Option("spiked", help="Task variant: spiked or max."),
    L: str = typer.Option("3", "--L", help="Fixed sequence length (integer >= 1)."),
    L_dist: str = typer.Option(
        None, "--L-dist", help="Length law instead of --L: '1,2,3' (uniform) or '1:0.2,3:0.8'."),
    nu: str = typer.Option("2", help="Signal strength nu >= 0 ('inf' allowed for max)."),
    delta: str = typer.Option("0", help="Label-noise variance Delta >= 0."),
    alpha: str = typer.Option("5", help="Sample ratio alpha = N/D > 0."),
    lam: str = typer.Option(
        "0.1", help="Ridge penalty lam >= 0 on k and v, or 'auto' (validation grid search)."),
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
        help="Grid searched by --lam auto: '0.01,0.1,1' or start:stop:num."),
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
    nu_v = parse_float("nu", nu, low=0.0, allow_inf=True)
    delta_v = parse_float("delta", delta, low=0.0)
    alpha_v = parse_float("alpha", alpha, low=0.0, low_open=True)
    lam_v: float | str = "auto" if lam.strip().lower() == "auto" else parse_float(
        "lam", lam, low=0.0)
    D_v = check_int("D", D, low=1) if D is not None else None
    sqrt_v = parse_float("sqrtND", sqrtND, low=1.0) if sqrtND is not None else None
    length = L_dist if L_dist is not None else L
    task = make_task(variant, L=length, nu=nu_v, delta=delta_v, D=1)  # validates the task
    options = {"seeds": check_int("seeds", seeds, low=1), "init": init,
               "restarts": check_int("restarts", restarts, low=1),
               "lam_grid": tuple(parse_grid("lam_grid", lam_grid, low=0.0)),
               "n_test": check_int("n_test", n_test, low=2)}
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


def register(app: typer.Typer) -> None:
    app.command("erm")(erm)
