"""Shared pieces of the CLI verbs: value parsing and result printing."""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from typing import Annotated, Any

import numpy as np
import typer
from rich.console import Console
from rich.table import Table

from bayesslr.core.task import ConfigError, TaskConfig, check_int, check_real, make_task
from bayesslr.registry import Cell, families, run_unit, units, validate_cell

# The task options every verb shares (annotated types, so each verb keeps its own default).
VariantOpt = Annotated[str, typer.Option(help="Task variant: spiked or max.")]
LOpt = Annotated[str, typer.Option(
    "--L", help="Sequence length (integer >= 1), or a law '1,2,3' / '1:0.2,3:0.8'.")]
LDistOpt = Annotated[str | None, typer.Option(
    "--L-dist", help="Length law instead of --L: '1,2,3' (uniform) or '1:0.2,3:0.8'.")]
NuOpt = Annotated[str, typer.Option(help="Signal strength nu >= 0 ('inf' allowed for max).")]
DeltaOpt = Annotated[str, typer.Option(help="Label-noise variance Delta >= 0.")]


def cli_task(variant: str, L: str, L_dist: str | None, nu: str, delta: str,
             D: int = 1) -> TaskConfig:
    """Validate the shared task options (``--L-dist`` replaces ``--L`` when given)."""
    return make_task(variant, L=L, L_dist=L_dist,
                     nu=parse_float("nu", nu, low=0.0, allow_inf=True),
                     delta=parse_float("delta", delta, low=0.0), D=D)


def parse_float(name: str, text: str, *, low: float | None = None, low_open: bool = False,
                allow_inf: bool = False) -> float:
    """Parse one real (``inf`` accepted when ``allow_inf``)."""
    t = str(text).strip().lower()
    if allow_inf and t in {"inf", "infinity", "+inf"}:
        return math.inf
    return check_real(name, t, low=low, low_open=low_open, allow_inf=allow_inf)


# most points a grid option (``--alpha 1,2,5`` or ``start:stop:num``) may hold; a theory curve
# is 20-200 points, and each point is a fixed-point solve of seconds to minutes
MAX_GRID_POINTS = 10_000


def parse_grid(name: str, text: str, *, low: float | None = None,
               low_open: bool = False) -> list[float]:
    """Parse ``"1,2,5,20"`` (a list) or ``"start:stop:num"`` (``num`` points, linear, inclusive).

    At most :data:`MAX_GRID_POINTS` points, refused before anything is allocated.
    """
    t = str(text).strip()
    if not t:
        raise ConfigError(f"{name}='' is empty; allowed: a comma list or start:stop:num")
    if ":" in t:
        parts = t.split(":")
        if len(parts) != 3:
            raise ConfigError(f"{name}={t!r} is malformed; allowed: start:stop:num")
        a = check_real(name, parts[0], low=low, low_open=low_open)
        b = check_real(name, parts[1], low=low, low_open=low_open)
        num = check_int(f"{name} num", parts[2], low=1, high=MAX_GRID_POINTS)
        return [float(x) for x in np.linspace(a, b, num)]
    if t.count(",") >= MAX_GRID_POINTS:
        raise ConfigError(f"{name} lists {t.count(',') + 1} values; allowed: at most "
                          f"{MAX_GRID_POINTS} points")
    return [check_real(name, p, low=low, low_open=low_open) for p in t.split(",") if p.strip()]


def _jsonable(x: Any) -> Any:
    if isinstance(x, Mapping):
        return {str(k): _jsonable(v) for k, v in x.items()}
    if isinstance(x, list | tuple):
        return [_jsonable(v) for v in x]
    if isinstance(x, np.generic | np.ndarray) or hasattr(x, "dtype"):
        x = np.asarray(x).tolist()
        return _jsonable(x) if isinstance(x, list) else x
    if isinstance(x, float) and not math.isfinite(x):
        return None if math.isnan(x) else ("inf" if x > 0 else "-inf")
    return x


def emit(result: Mapping[str, Any], as_json: bool, title: str = "") -> None:
    """Print a result: one JSON object (``--json``) or a readable table."""
    if as_json:
        print(json.dumps(_jsonable(result), allow_nan=False))
        return
    table = Table(title=title or None, show_header=True)
    table.add_column("quantity")
    table.add_column("value", justify="right")
    for k, v in result.items():
        if isinstance(v, float):
            v = f"{v:.6g}"
        elif isinstance(v, Mapping | list | tuple):
            v = json.dumps(_jsonable(v))
        table.add_row(str(k), str(v))
    Console().print(table)


class CellFailed(Exception):
    """A single-run verb's cell raised inside its method (exit status 3, as a sweep with
    failed cells)."""


def run_cells(cells: list[Cell]) -> list[dict[str, Any]]:
    """Run cells in this process exactly as a sweep runs them: every cell validated first,
    grouped into units of work (:func:`bayesslr.registry.units`), run by the in-process
    executor under the sweep's interrupt handling (Ctrl-C / SIGTERM end the verb with
    :class:`~bayesslr.sweep.executors.SweepInterrupted`, never swallowed); results in the
    order of ``cells``. A method failure raises :class:`CellFailed` with its message."""
    from bayesslr.sweep.executors import call_interruptibly, interrupt_on_signals

    for c in cells:
        validate_cell(c)  # every cell before any work
    results: dict[int, dict[str, Any]] = {}
    with interrupt_on_signals() as stop:
        for unit in units(cells):
            try:
                done, outs = call_interruptibly(run_unit, unit, stop=stop,
                                                name=f"bayesslr-cell-{unit[0].method}")
            except ConfigError:
                raise
            except Exception as exc:  # a method failure: one line, as a sweep records it
                text = " ".join(f"{type(exc).__name__}: {exc}".split())
                raise CellFailed(f"{unit[0].method}: {text}") from None
            stop.check()
            if done:
                results.update({id(c): o for c, o in zip(unit, outs, strict=True)})
    return [results[id(c)] for c in cells]


def run_one(cell: Cell) -> dict[str, Any]:
    """:func:`run_cells` of one cell."""
    return run_cells([cell])[0]


def schema_option(family: str, name: str, flag: str | None = None) -> Any:
    """A typer option for the family's option ``name``: its help, allowed range and default
    come from the registry's schema (one place); the flag's value stays ``None`` unless given,
    so the family's own default applies."""
    opt = families()[family].schema[name]
    default = opt.default if not isinstance(opt.default, tuple) else ",".join(
        f"{x:g}" if isinstance(x, float) else str(x) for x in opt.default)
    shown = "none" if default is None else str(default).lower() if isinstance(
        default, bool) else f"{default:g}" if isinstance(default, float) else str(default)
    return typer.Option(None, flag or "--" + name.replace("_", "-"), show_default=False,
                        help=f"{opt.doc[:1].upper()}{opt.doc[1:]} (default {shown}; "
                             f"allowed: {opt.allowed()}).")


def given(**values: Any) -> dict[str, Any]:
    """The options the user gave (flags left at ``None`` take the family's default)."""
    return {k: v for k, v in values.items() if v is not None}
