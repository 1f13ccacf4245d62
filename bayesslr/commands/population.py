"""``bayesslr population``: population excess risk of the Bayes predictor or an activation.

A one-cell sweep of the family ``population:<activation>`` (options, ranges and defaults from
its registry schema).
"""

from __future__ import annotations

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
    run_one,
    schema_option,
)
from bayesslr.core.task import ConfigError, check_int
from bayesslr.population.method import POPULATION_ACTIVATIONS
from bayesslr.registry import Cell


def population(
    variant: VariantOpt = "spiked",
    L: LOpt = "3",
    L_dist: LDistOpt = None,
    nu: NuOpt = "2",
    delta: DeltaOpt = "0",
    activation: str = typer.Option(
        "softmax", help=f"One of: {', '.join(POPULATION_ACTIVATIONS)}."),
    samples: str = schema_option("population", "samples"),
    seed: str = typer.Option("0", help="Seed of the common random numbers."),
    method: str = schema_option("population", "mc_method", "--method"),
    as_json: bool = typer.Option(False, "--json", help="Print one JSON object."),
) -> None:
    """Best population excess risk (docs/model.md): Bayes, or an activation optimised over
    (m_k, q_k, its own scalars) with the v side in closed form."""
    if activation not in POPULATION_ACTIVATIONS:
        raise ConfigError(f"activation={activation!r} is unknown; allowed: one of "
                          f"{', '.join(POPULATION_ACTIVATIONS)}")
    task = cli_task(variant, L, L_dist, nu, delta)  # validates everything
    cell = Cell(method=f"population:{activation}", variant=variant, L=task.length.label(),
                nu=task.nu, delta=task.delta, seed=check_int("seed", seed, low=0),
                options=given(samples=samples, mc_method=method))
    out = run_one(cell)
    rest = {k: v for k, v in out.items() if k != "test_error"}
    result = {"excess_risk": out["test_error"], **rest}
    result = {"variant": variant, "L": task.length.label(), "nu": task.nu, "delta": task.delta,
              **result}
    emit(result, as_json, title=f"population {activation}")


def register(app: typer.Typer) -> None:
    app.command("population")(population)
