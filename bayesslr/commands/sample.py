"""``bayesslr sample``: the Bayes-optimal estimator by NUTS on one task (spec section 6).

A one-cell sweep: the flags build a :class:`bayesslr.methods.Cell` of the method
``bayes_sampling`` and :func:`bayesslr.methods.run_cell` runs it, the same code path as
``bayesslr run``.
"""

from __future__ import annotations

import typer

from bayesslr.commands.common import LDistOpt, LOpt, VariantOpt, cli_task, emit, parse_float
from bayesslr.methods import Cell, run_cell
from bayesslr.task import check_int


def sample(
    variant: VariantOpt = "spiked",
    L: LOpt = "3",
    L_dist: LDistOpt = None,
    nu: str = typer.Option("2", help="Signal strength nu >= 0 (inf needs --tempered)."),
    delta: str = typer.Option("0.01", help="Label-noise variance Delta > 0 (0 needs --tempered)."),
    D: int = typer.Option(100, "--D", help="Token dimension D >= 1."),
    alpha: str = typer.Option("4", help="Sample ratio alpha = N/D > 0."),
    seed: int = typer.Option(0, help="Seed of teacher, data and sampler."),
    chains: int = typer.Option(2, help="NUTS chains."),
    warmup: int = typer.Option(500, help="Warm-up iterations per chain."),
    draws: int = typer.Option(500, help="Kept draws per chain."),
    init: str = typer.Option(
        "teacher", help="Start: teacher, random or anneal; a comma list ('teacher,random') runs "
                        "each and reports their disagreement."),
    chain_method: str = typer.Option(
        "vectorized", "--chain-method", help="vectorized, parallel (falls back) or sequential."),
    x64: bool = typer.Option(False, "--x64", help="Sample in float64."),
    n_test: int = typer.Option(10_000, "--n-test", help="Fresh test inputs."),
    tempered: bool = typer.Option(
        False, "--tempered",
        help="Accept delta=0 / nu=inf by sampling a tempered likelihood (delta_model, nu_model)."),
    tempered_delta: float = typer.Option(0.01, "--tempered-delta", help="delta_model if delta=0."),
    tempered_nu: float = typer.Option(10.0, "--tempered-nu", help="nu_model if nu=inf."),
    target_accept: float = typer.Option(0.8, "--target-accept", help="NUTS target acceptance."),
    model: str = typer.Option("marginal", help="marginal, or enumerated (needs funsor)."),
    save_idata: str = typer.Option(
        "", "--save-idata", help="Write the ArviZ InferenceData to this netCDF file."),
    as_json: bool = typer.Option(False, "--json", help="Print one JSON object."),
) -> None:
    """Posterior-mean (Bayes-optimal) test error by NUTS, with sampler diagnostics."""
    task = cli_task(variant, L, L_dist, nu, delta, D=check_int("D", D, low=1))
    alpha_v = parse_float("alpha", alpha, low=0.0, low_open=True)
    cell = Cell(
        method="bayes_sampling", variant=variant, L=task.length.label(), nu=task.nu,
        delta=task.delta, alpha=alpha_v, D=task.D, seed=check_int("seed", seed, low=0),
        options={"chains": chains, "warmup": warmup, "draws": draws, "init": init,
                 "chain_method": chain_method, "x64": x64, "n_test": n_test,
                 "tempered": tempered, "tempered_delta": tempered_delta,
                 "tempered_nu": tempered_nu, "target_accept": target_accept, "model": model,
                 "idata": save_idata},
    )
    out = run_cell(cell)
    result = {"variant": variant, "L": task.length.label(), "nu": task.nu, "delta": task.delta,
              "D": task.D, "alpha": alpha_v, "seed": seed, **out}
    emit(result, as_json, title="bayes_sampling")


def register(app: typer.Typer) -> None:
    app.command("sample")(sample)
