"""``bayesslr amp``: GAMP on one task's data (docs/amp.md, ``docs/amp.md``).

A one-cell sweep: the flags build a :class:`bayesslr.registry.Cell` of the family ``amp``
(options, ranges and defaults from its registry schema) and
:func:`bayesslr.commands.common.run_one` runs it as ``bayesslr run`` does. The JSON holds
``test_error``, ``stderr``, ``oracle_error``, the overlaps ``m_k, q_k, m_v, q_v``,
``iterations``, ``converged`` (with ``reason``), ``runtime_s`` and the per-iteration overlaps
``trajectory_m_k`` ... as lists.
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
    parse_float,
    run_one,
    schema_option,
)
from bayesslr.core.task import check_int
from bayesslr.registry import Cell


def _opt(name: str, flag: str | None = None):
    return schema_option("amp", name, flag)


def amp(
    variant: VariantOpt = "spiked",
    L: LOpt = "3",
    L_dist: LDistOpt = None,
    nu: NuOpt = "2",
    delta: DeltaOpt = "0.01",
    D: str = typer.Option("2000", "--D", help="Token dimension D >= 1."),
    alpha: str = typer.Option("2", help="Sample ratio alpha = N/D > 0."),
    seed: str = typer.Option("0", help="Seed of teacher, data and start."),
    init: str = _opt("init"),
    max_iter: str = _opt("max_iter"),
    tol: str = _opt("tol"),
    damping: str = _opt("damping"),
    adaptive_damping: bool = typer.Option(
        None, "--adaptive-damping/--no-adaptive-damping", show_default=False,
        help="Damp once the fixed-point residual grows (default on)."),
    max_damping: str = _opt("max_damping"),
    variance: str = _opt("variance"),
    m_clip: str = _opt("m_clip"),
    max_seconds: str = _opt("max_seconds"),
    max_quadrature: str = _opt("max_quadrature"),
    gumbel_per_sd: str = _opt("gumbel_per_sd"),
    n_test: str = _opt("n_test"),
    as_json: bool = typer.Option(False, "--json", help="Print one JSON object."),
) -> None:
    """GAMP from the uninformed or informed start: posterior-mean test error against the
    oracle, final and per-iteration overlaps, convergence with its reason."""
    task = cli_task(variant, L, L_dist, nu, delta, D=check_int("D", D, low=1))
    alpha_v = parse_float("alpha", alpha, low=0.0, low_open=True)
    cell = Cell(
        method="amp", variant=variant, L=task.length.label(), nu=task.nu, delta=task.delta,
        alpha=alpha_v, D=task.D, seed=check_int("seed", seed, low=0),
        options=given(init=init, max_iter=max_iter, tol=tol, damping=damping,
                      adaptive_damping=adaptive_damping, max_damping=max_damping,
                      variance=variance, m_clip=m_clip, max_seconds=max_seconds,
                      max_quadrature=max_quadrature, gumbel_per_sd=gumbel_per_sd,
                      n_test=n_test),
    )
    out = run_one(cell)
    result = {"variant": variant, "L": task.length.label(), "nu": task.nu, "delta": task.delta,
              "D": task.D, "alpha": alpha_v, "seed": cell.seed, **out}
    emit(result, as_json, title="amp")


def register(app: typer.Typer) -> None:
    app.command("amp")(amp)
