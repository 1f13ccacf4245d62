"""``bayesslr population``: population excess risk of the Bayes predictor or an activation."""

from __future__ import annotations

import typer

from bayesslr.commands.common import emit, parse_float
from bayesslr.methods import Cell, run_cell
from bayesslr.population import DEFAULT_SAMPLES, POPULATION_ACTIVATIONS
from bayesslr.task import ConfigError, make_task


def population(
    variant: str = typer.Option("spiked", help="Task variant: spiked or max."),
    L: str = typer.Option("3", "--L", help="Fixed sequence length (integer >= 1)."),
    L_dist: str = typer.Option(
        None, "--L-dist", help="Length law instead of --L: '1,2,3' (uniform) or '1:0.2,3:0.8'."),
    nu: str = typer.Option("2", help="Signal strength nu >= 0 ('inf' allowed for max)."),
    delta: str = typer.Option("0", help="Label-noise variance Delta >= 0."),
    activation: str = typer.Option(
        "softmax", help=f"One of: {', '.join(POPULATION_ACTIVATIONS)}."),
    samples: int = typer.Option(
        DEFAULT_SAMPLES, help="Monte Carlo draws per length (or Gauss-Hermite nodes per axis)."),
    seed: int = typer.Option(0, help="Seed of the common random numbers."),
    method: str = typer.Option("mc", help="Expectation method: mc or gauss-hermite."),
    as_json: bool = typer.Option(False, "--json", help="Print one JSON object."),
) -> None:
    """Best population excess risk (spec section 3): Bayes, or an activation optimised over
    (m_k, q_k, its own scalars) with the v side in closed form."""
    if activation not in POPULATION_ACTIVATIONS:
        raise ConfigError(f"activation={activation!r} is unknown; allowed: one of "
                          f"{', '.join(POPULATION_ACTIVATIONS)}")
    nu_v = parse_float("nu", nu, low=0.0, allow_inf=True)
    delta_v = parse_float("delta", delta, low=0.0)
    length = L_dist if L_dist is not None else L
    task = make_task(variant, L=length, nu=nu_v, delta=delta_v, D=1)  # validates everything
    cell = Cell(method=f"population:{activation}", variant=variant, L=task.length.label(),
                nu=task.nu, delta=task.delta, seed=seed,
                options={"samples": samples, "mc_method": method})
    out = run_cell(cell)
    rest = {k: v for k, v in out.items() if k != "test_error"}
    result = {"excess_risk": out["test_error"], **rest}
    result = {"variant": variant, "L": task.length.label(), "nu": task.nu, "delta": task.delta,
              **result}
    emit(result, as_json, title=f"population {activation}")


def register(app: typer.Typer) -> None:
    app.command("population")(population)
