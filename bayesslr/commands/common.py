"""Shared pieces of the CLI verbs: value parsing and result printing."""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import numpy as np
import typer
from rich.console import Console
from rich.table import Table

from bayesslr.core.task import ConfigError, TaskConfig, check_int, check_real, make_task
from bayesslr.registry import Cell, run_unit, units, validate_cell


def cli_task(variant: str, L: str, L_dist: str | None, nu: str, delta: str,
             D: int = 1) -> TaskConfig:
    """Validate the shared task options (``--L-dist`` replaces ``--L`` when given)."""
    return make_task(variant, L=L, L_dist=L_dist,
                     nu=parse_float("nu", nu, low=0.0, allow_inf=True),
                     delta=parse_float("delta", delta, low=0.0), D=D)


def flag(name: str, help: str) -> Any:
    """A boolean ``--name`` option, off by default, shown without a metavar in the help."""
    return typer.Option(False, name, metavar="", help=help)


JSON_FLAG_HELP = "Print one JSON object."


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


def plural(n: int, word: str, many: str | None = None) -> str:
    """``"1 figure"``, ``"2 figures"`` (``many``: an irregular plural)."""
    return f"{n} {word if n == 1 else many or word + 's'}"


def _cell_text(v: Any) -> str:
    if isinstance(v, bool) or v is None:
        return str(v).lower()
    if isinstance(v, float):
        return f"{v:.6g}"
    if isinstance(v, list | tuple):
        items = [_cell_text(x) for x in v]
        return ", ".join(items) if len(items) <= 8 else (
            f"{', '.join(items[:3])}, ..., {', '.join(items[-2:])} ({len(items)} values)")
    return str(v)


def _flat(result: Mapping[str, Any], prefix: str = "") -> list[tuple[str, Any]]:
    rows = []
    for k, v in result.items():
        if isinstance(v, Mapping):
            rows += _flat(v, f"{prefix}{k}.")
        else:
            rows.append((f"{prefix}{k}", v))
    return rows


def text_table(title: str | None, columns: Sequence[str], rows: Iterable[Sequence[str]], *,
               keep: Sequence[str] = (), right: Sequence[str] = ()) -> Table:
    """A table that wraps instead of truncating (never ``0.4…``): the columns named in
    ``keep`` are never narrower than their longest entry, the others wrap at spaces and fold a
    word longer than the column onto the next line; ``right``: right-justified columns."""
    rows = [[str(c) for c in r] for r in rows]
    table = Table(title=title or None, show_header=True)
    for i, c in enumerate(columns):
        longest = max([len(c), *(len(r[i]) for r in rows)])
        table.add_column(c, justify="right" if c in right else "left", overflow="fold",
                         min_width=longest if c in keep else None)
    for r in rows:
        table.add_row(*r)
    return table


def column_groups(widths: Sequence[int], width: int, *, keys: int = 1) -> list[list[int]]:
    """The columns of a table too wide for ``width`` characters split into several tables:
    each holds the first ``keys`` columns and as many of the next ones as fit at their full
    width (a box table of columns ``w`` is ``sum(w + 3) + 1`` wide); one table when all fit.

    Examples
    --------
    >>> column_groups([5, 10, 10], 80)
    [[0, 1, 2]]
    >>> column_groups([5, 30, 30, 30], 80)
    [[0, 1, 2], [0, 3]]
    """
    head = list(range(min(keys, len(widths))))
    base = 1 + sum(widths[i] + 3 for i in head)
    groups: list[list[int]] = []
    cur, used = list(head), base
    for i in range(len(head), len(widths)):
        if used + widths[i] + 3 > width and len(cur) > len(head):
            groups.append(cur)
            cur, used = list(head), base
        cur.append(i)
        used += widths[i] + 3
    if len(cur) > len(head) or not groups:
        groups.append(cur)
    return groups


def emit(result: Mapping[str, Any], as_json: bool, title: str = "",
         columns: tuple[str, ...] = ()) -> None:
    """Print a result: one JSON object (``--json``) or readable tables.

    The readable form is a ``quantity | value`` table (nested mappings flattened to
    ``solver.tol``, lists written out, a long value wrapped); a list of records under
    ``points`` becomes a second table with one row per record and ``columns`` as its
    columns, split into several tables (each repeating the first column) where it would be
    wider than the terminal: a number is never cut.
    """
    if as_json:
        print(json.dumps(_jsonable(result), allow_nan=False))
        return
    console = Console()
    points = result.get("points") if columns else None
    rows = [(k, _cell_text(v)) for k, v in
            _flat({k: v for k, v in result.items() if not (k == "points" and points)})]
    console.print(text_table(title, ("quantity", "value"), rows, keep=("quantity",),
                             right=("value",)))
    if points:
        shown = [c for c in columns if any(c in p for p in points)]
        cells = [[_cell_text(p.get(c, "")) for c in shown] for p in points]
        widths = [max([len(c), *(len(r[i]) for r in cells)]) for i, c in enumerate(shown)]
        groups = column_groups(widths, console.width)
        for n, group in enumerate(groups):
            head = f"{title}: {plural(len(points), 'point')}" if title else ""
            if head and len(groups) > 1:
                head = f"{head} ({n + 1}/{len(groups)})"
            names = [shown[i] for i in group]
            console.print(text_table(head, names, ([r[i] for i in group] for r in cells),
                                     keep=names, right=names))


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
