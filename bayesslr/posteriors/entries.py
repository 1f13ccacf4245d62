"""Outside algorithms on the inference leaderboard (docs/targets.md, "Entering the leaderboard").

An *entry* is the score of draws made anywhere (:func:`bayesslr.score_draws`) as a cell record
of the inference benchmark, ``{"cell": {...}, "status": "ok", "result": {...}}``, with the
method ``entry:<name>``: the report (:mod:`bayesslr.report.inference`) reads it beside the
built-in algorithms. The entrant states its own cost: a number and its unit. In gradient
evaluations of the full-data log density (the benchmark's unit) it is drawn on the cost axis of
``error_vs_cost``; in any other unit (seconds, likelihood evaluations, ...) it is drawn as a
horizontal line labelled with its cost, as GAMP is, and the leaderboard shows both columns.

Entries are written as JSON files into ``<results>/entries/`` (:func:`write_entry`), where
``bayesslr report`` and :func:`bayesslr.report.inference.tidy` of the results directory find
them; ``bayesslr score-draws`` does both steps from a draws file.
"""

from __future__ import annotations

import json
import math
import re
import time
from pathlib import Path
from typing import Any

from bayesslr.core.task import ConfigError

GRADIENTS = "gradient evaluations"
_NAME_RE = re.compile(r"^[A-Za-z0-9_.+]{1,64}$")


def entry(target: Any, draws: dict[str, Any], *, name: str, cost: float,
          cost_unit: str = GRADIENTS, note: str = "") -> dict[str, Any]:
    """A leaderboard record of draws made outside the package.

    Parameters
    ----------
    target : Target or str
        The target the draws are of (:func:`bayesslr.target`).
    draws : dict
        ``{"k": (n, D), "v": (n, D)}`` or ``(chains, n, D)``.
    name : str
        The entrant's name: letters, digits, ``_ . +`` (at most 64); the method is
        ``entry:<name>``.
    cost : float
        What the draws cost, ``>= 0``, in ``cost_unit``.
    cost_unit : str
        ``"gradient evaluations"`` (the benchmark's unit: drawn on the cost axis) or any other
        unit (drawn as a labelled line).
    note : str
        Free text stored with the entry (library, settings).

    Returns
    -------
    dict
        ``{"cell": {...}, "status": "ok", "result": {...}}``.

    Examples
    --------
    >>> import jax, bayesslr as bs
    >>> from bayesslr.posteriors import entry
    >>> t = bs.target("slr_spiked_L3_nu2_delta0.01-D50_alpha5_seed0")
    >>> rec = entry(t, t.init(jax.random.key(0), 64), name="prior_draws", cost=0)
    >>> rec["cell"]["method"], rec["result"]["reaches_reference"]
    ('entry:prior_draws', False)
    """
    from bayesslr.posteriors.target import score_draws
    from bayesslr.posteriors.target import target as make_target

    name = str(name)
    if not _NAME_RE.match(name):
        raise ConfigError(f"name={name!r} is out of range; allowed: 1-64 letters, digits, "
                          "'_', '.', '+'")
    try:
        cost_v = float(cost)
    except (TypeError, ValueError):
        cost_v = math.nan
    if not (math.isfinite(cost_v) and cost_v >= 0):
        raise ConfigError(f"cost={cost!r} is out of range; allowed: a finite real >= 0 (in "
                          "cost_unit)")
    unit = " ".join(str(cost_unit).split())
    if not unit:
        raise ConfigError("cost_unit='' is empty; allowed: 'gradient evaluations' or any unit")
    t = make_target(target) if isinstance(target, str) else target
    s = score_draws(t, draws)
    task = t.task
    cell = {"method": f"entry:{name}", "variant": task.variant, "L": task.length.label(),
            "nu": task.nu, "delta": task.delta, "alpha": t.alpha, "D": task.D,
            "seed": t.seed}
    res = {**s, "entrant": name, "cost": cost_v, "cost_unit": unit,
           "grad_evals": cost_v if unit == GRADIENTS else None, "note": str(note),
           "n_test": t.n_test, "when": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
    return {"cell": cell, "status": "ok", "result": res}


def entry_path(results: str | Path, record: dict[str, Any]) -> Path:
    c = record["cell"]
    name = c["method"].split(":", 1)[1]
    return Path(results) / "entries" / (
        f"{name}-{c['variant']}-L{c['L']}-nu{float(c['nu']):g}-delta{float(c['delta']):g}-"
        f"D{c['D']}-alpha{float(c['alpha']):g}-seed{c['seed']}.json")


def write_entry(record: dict[str, Any], results: str | Path) -> Path:
    """Write ``record`` into ``<results>/entries/`` (atomically; an entry of the same name
    and task is replaced). Raises :class:`bayesslr.core.files.StoreError` when it cannot
    be written."""
    from bayesslr.core.files import StoreError, write_text_atomic

    path = entry_path(results, record)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise StoreError(path, exc) from None
    write_text_atomic(json.dumps(record, default=_jsonable, indent=1), path)
    return path


def _jsonable(x: Any) -> Any:
    try:
        return float(x)
    except (TypeError, ValueError):
        return str(x)
