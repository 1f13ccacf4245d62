"""``bayesslr sample``: the Bayes-optimal estimator by NUTS on one task (docs/estimators.md).

A one-cell sweep: the flags build a :class:`bayesslr.registry.Cell` of the family
``bayes_sampling`` (options, ranges and defaults from its registry schema) and
:func:`bayesslr.commands.common.run_one` runs it as ``bayesslr run`` does.
"""

from __future__ import annotations

import typer

from bayesslr.commands.common import (
    LDistOpt,
    LOpt,
    VariantOpt,
    cli_task,
    emit,
    given,
    parse_float,
    run_one,
    schema_option,
)
from bayesslr.core.task import check_int
from bayesslr.registry import Cell


def _opt(name: str, flag: str | None = None):
    return schema_option("bayes_sampling", name, flag)


def sample(
    variant: VariantOpt = "spiked",
    L: LOpt = "3",
    L_dist: LDistOpt = None,
    nu: str = typer.Option("2", help="Signal strength nu >= 0 (inf needs --tempered)."),
    delta: str = typer.Option("0.01", help="Label-noise variance Delta > 0 (0 needs --tempered)."),
    D: str = typer.Option("100", "--D", help="Token dimension D >= 1."),
    alpha: str = typer.Option("4", help="Sample ratio alpha = N/D > 0."),
    seed: str = typer.Option("0", help="Seed of teacher, data and sampler."),
    chains: str = _opt("chains"),
    warmup: str = _opt("warmup"),
    draws: str = _opt("draws"),
    init: str = _opt("init"),
    chain_method: str = _opt("chain_method"),
    x64: bool = typer.Option(None, "--x64/--no-x64", show_default=False,
                             help="Sample in float64 (default: float32)."),
    n_test: str = _opt("n_test"),
    tempered: bool = typer.Option(
        None, "--tempered/--no-tempered", show_default=False,
        help="Accept delta=0 / nu=inf by sampling a tempered likelihood (delta_model, "
             "nu_model)."),
    tempered_delta: str = _opt("tempered_delta"),
    tempered_nu: str = _opt("tempered_nu"),
    target_accept: str = _opt("target_accept"),
    model: str = _opt("model"),
    save_idata: str = _opt("idata", "--save-idata"),
    as_json: bool = typer.Option(False, "--json", help="Print one JSON object."),
) -> None:
    """Posterior-mean (Bayes-optimal) test error by NUTS, with sampler diagnostics and a
    convergence verdict."""
    task = cli_task(variant, L, L_dist, nu, delta, D=check_int("D", D, low=1))
    alpha_v = parse_float("alpha", alpha, low=0.0, low_open=True)
    cell = Cell(
        method="bayes_sampling", variant=variant, L=task.length.label(), nu=task.nu,
        delta=task.delta, alpha=alpha_v, D=task.D, seed=check_int("seed", seed, low=0),
        options=given(chains=chains, warmup=warmup, draws=draws, init=init,
                      chain_method=chain_method, x64=x64, n_test=n_test, tempered=tempered,
                      tempered_delta=tempered_delta, tempered_nu=tempered_nu,
                      target_accept=target_accept, model=model, idata=save_idata),
    )
    out = run_one(cell)
    result = {"variant": variant, "L": task.length.label(), "nu": task.nu, "delta": task.delta,
              "D": task.D, "alpha": alpha_v, "seed": cell.seed, **out}
    emit(result, as_json, title="bayes_sampling")


def register(app: typer.Typer) -> None:
    app.command("sample")(sample)
