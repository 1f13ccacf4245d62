"""``lam = "replica"`` of ERM cells, as one service: the replica theory's optimal ``lam`` at
the cell's task and ``alpha`` (docs/estimators.md, docs/theory.md), solved once, kept, shared.

Everything about it is here: which theory cell answers an ERM cell (:func:`replica_cell`: the
``theory_erm:<activation>`` point with ``lam = "optimal"``, on the continuation path
:data:`REPLICA_PATH` below its ``alpha``), its key, the answer kept in memory and on disk
(one JSON file per key in :func:`replica_cache_dir`: ``$BAYESSLR_REPLICA_CACHE``, or
``~/.cache/bayesslr/replica_lam``; ``off`` disables), the :class:`~bayesslr.core.files.FileLock`
under which one process solves a point or a whole path while the others wait and read its
answer (:func:`bayesslr.core.files.exclusive_lock`), and what the cost estimate and the unit
order need (:data:`REPLICA_PREREQUISITES`). The ERM family (:mod:`bayesslr.erm.method`) asks
:func:`replica_lam` and nothing else.

Two stores are involved and stay distinct, for a reason: this cache holds *answers* (one
``lam`` per point, valid for every later run anywhere), while the path checkpoints of
:mod:`bayesslr.theory.checkpoint` (``$BAYESSLR_PATH_CHECKPOINTS``, ``OUT/theory_paths``
during a run) hold the *progress* of one continuation solve, removed when it completes.
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import json
import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from bayesslr.core.files import StoreError, env_dir, exclusive_lock, write_json_atomic
from bayesslr.core.lam import LAM_REPLICA, parse_lam
from bayesslr.registry import Cell, Prerequisites, get_method

# lam = "replica": the replica points are solved by continuation in alpha from 0.5 along these
# values (the paper preset's ERM alphas) and the cell's own alpha, each lam of the theory's
# grid warm-started from the neighbouring alpha (bayesslr.theory.lam_opt.optimal_lambda_curve).
# A point depends only on the path below it, so the answer at an alpha does not depend on
# which other cells a sweep holds; one solve of the whole path caches every point on it.
REPLICA_PATH: tuple[float, ...] = (0.5, 1.0, 2.0, 3.0, 5.0, 8.0, 12.0, 16.0, 20.0)
REPLICA_CACHE_ENV = "BAYESSLR_REPLICA_CACHE"
_REPLICA_MEMO: dict[str, dict[str, Any]] = {}


def replica_cache_dir() -> Path | None:
    """Directory of the cache of ``lam='replica'``: ``$BAYESSLR_REPLICA_CACHE``, or
    ``~/.cache/bayesslr/replica_lam``; ``None`` when the variable is ``off`` (or empty, ``0``,
    ``none``, ``false``)."""
    return env_dir(REPLICA_CACHE_ENV, Path.home() / ".cache" / "bayesslr" / "replica_lam")


def _path_below(alpha: float) -> list[float]:
    """The continuation path of a replica point: :data:`REPLICA_PATH` below ``alpha``, then
    ``alpha``."""
    return [a for a in REPLICA_PATH if a < alpha and not math.isclose(a, alpha)] + [alpha]


def replica_cell(cell: Cell, opts: Mapping[str, Any]) -> Cell:
    """The ``theory_erm:<activation>`` cell whose ``lam='optimal'`` answers ``lam='replica'`` for
    an ERM cell: same task and ``alpha``, channel seed 0 (the theory's common random numbers,
    not the ERM data seed), ``samples = replica_samples``, every other theory option at its
    default; with ``replica_path``, the continuation path :func:`_path_below` (it depends on
    ``alpha`` alone, so the value does not depend on which other cells a sweep holds)."""
    alpha = float(cell.alpha)
    options = _point_options(opts["replica_samples"], alpha, opts.get("replica_path", True))
    return Cell(method=f"theory_erm:{cell.activation}", variant=cell.variant, L=cell.L,
                nu=cell.nu, delta=cell.delta, alpha=alpha, lam="optimal", seed=0,
                options=options)


def _point_options(samples: int, alpha: float, on_path: bool) -> dict[str, Any]:
    """Theory options of the replica point at ``alpha``: ``samples``, and the continuation path
    below it when ``on_path`` and there is one."""
    options: dict[str, Any] = {"samples": samples}
    path = _path_below(alpha) if on_path else [alpha]
    if len(path) > 1:
        options["path"] = path
    return options


def _lock_name(tcell: Cell) -> str:
    """Lock of a replica solve: per point, or per path (every point on a path is solved by one
    process; the others wait for it instead of solving the same path again)."""
    if not tcell.options.get("path"):
        return _replica_key(tcell)
    whole = dataclasses.replace(tcell, alpha=None, options={**tcell.options, "path": None})
    return "path-" + hashlib.sha1(whole.to_json().encode()).hexdigest()[:20]


def _replica_key(tcell: Cell) -> str:
    spec = get_method(tcell.method)
    opts = spec.schema.validate(tcell.options)
    text = json.dumps({"cell": json.loads(tcell.to_json()), "options": repr(sorted(
        opts.items())), "version": spec.version}, sort_keys=True)
    return hashlib.sha1(text.encode()).hexdigest()[:20]


def replica_lam(cell: Cell, opts: Mapping[str, Any]) -> dict[str, Any]:
    """The replica theory's optimal ``lam`` for an ERM cell (docs/theory.md), with its test error.

    Runs :func:`replica_cell` through the registry (:func:`bayesslr.registry.run_cell`: the
    theory family's own ``lam='optimal'`` search, :func:`bayesslr.theory.lam_opt.optimal_lambda`)
    once per ``(task, alpha, activation, theory options, theory code version)``: the answer is
    kept in memory and in :func:`replica_cache_dir` (one JSON file per key, written atomically;
    concurrent workers wait on a lock file instead of solving the same point or path twice;
    on a continuation path, :func:`_solve_replica` keeps every point of the path), so the
    seeds and sizes of a sweep share it.

    Returns
    -------
    dict
        ``lam``, ``test_error``, ``stderr``, ``converged``, ``at_boundary``, ``reason``, and the
        theory cell (``cell``, JSON).

    Raises
    ------
    RuntimeError
        When the theory's search did not converge (no usable ``lam``): the ERM cell is then
        recorded as failed with this reason.
    """
    tcell = replica_cell(cell, opts)
    key = _replica_key(tcell)
    if key in _REPLICA_MEMO:
        return _REPLICA_MEMO[key]
    root = replica_cache_dir()
    path = root / f"{key}.json" if root is not None else None
    rec = _read_json(path) if path is not None else None
    if rec is None and path is not None:
        rec = _solve_locked(tcell, path, root / f"{_lock_name(tcell)}.lock")
    if rec is None:
        rec = _solve_replica(tcell)
    if not (rec["converged"] and math.isfinite(rec["lam"])):
        raise RuntimeError(f"lam='replica': the replica theory's optimal lam at {tcell.variant} "
                           f"L={tcell.L} nu={tcell.nu:g} delta={tcell.delta:g} alpha="
                           f"{tcell.alpha:g} ({tcell.method}) did not converge "
                           f"({rec.get('reason', '')}); use lam='validation' or a number")
    _REPLICA_MEMO[key] = rec
    return rec


def replica_pending(cell: Cell, opts: Mapping[str, Any]) -> tuple[str, Cell] | None:
    """``(key, theory cell)`` of the replica ``lam`` this ERM cell needs, or ``None`` when it
    needs none or the answer is already cached (the cost estimate counts each key once)."""
    if parse_lam(cell.lam) != LAM_REPLICA:
        return None
    tcell = replica_cell(cell, opts)
    key = _replica_key(tcell)
    root = replica_cache_dir()
    if key in _REPLICA_MEMO or (root is not None and (root / f"{key}.json").exists()):
        return None
    return key, tcell


def _replica_prerequisites(cells: Sequence[Cell]) -> dict[str, Cell]:
    """The replica points that ``lam='replica'`` cells need and that are not cached yet."""
    needed: dict[str, Cell] = {}
    for c in cells:
        pending = replica_pending(c, get_method(c.method).schema.validate(c.options))
        if pending is not None:
            needed.setdefault(*pending)
    return needed


def _replica_waits_on(cell: Cell) -> str | None:
    """The replica solve (its lock: a whole continuation path, or a lone point) that an ERM
    cell with ``lam='replica'`` waits on while another process solves it; ``None`` when the
    cell needs none or its answer is cached."""
    pending = replica_pending(cell, get_method(cell.method).schema.validate(cell.options))
    return None if pending is None else _lock_name(pending[1])


REPLICA_PREREQUISITES = Prerequisites("replica lam", _replica_prerequisites, _replica_waits_on)


def _record(tcell: Cell, out: Mapping[str, Any]) -> dict[str, Any]:
    return {"lam": float(out["lam"]), "test_error": float(out["test_error"]),
            "stderr": float(out["stderr"]), "converged": bool(out["converged"]),
            "at_boundary": bool(out.get("lam_at_boundary", False)),
            "reason": str(out.get("reason", "")), "runtime_s": float(out.get("runtime_s", 0)),
            "cell": tcell.to_json()}


def _solve_replica(tcell: Cell) -> dict[str, Any]:
    """Solve a replica point. On a continuation path, the whole of :data:`REPLICA_PATH` is
    solved (with the point's own ``alpha`` inserted), and every point whose path below it is
    the canonical one is remembered (memory and disk) under its own key: the other cells of a
    sweep then find theirs solved."""
    from bayesslr.registry import run_cell, run_unit

    path = tcell.options.get("path")
    if not path:
        return _record(tcell, run_cell(tcell))
    alpha = float(tcell.alpha)
    full = sorted({*REPLICA_PATH, alpha})
    on_grid = any(math.isclose(alpha, a) for a in REPLICA_PATH)
    cells = [dataclasses.replace(tcell, alpha=a, options={**tcell.options, "path": full})
             for a in full]
    outs = run_unit(cells)
    mine = None
    for a, out in zip(full, outs, strict=True):
        if a > alpha and not on_grid:
            break  # above an off-grid alpha the path is not the canonical one
        own = dataclasses.replace(tcell, alpha=a, options=_point_options(
            tcell.options["samples"], a, True))
        rec = _record(own, out)
        if math.isclose(a, alpha):
            mine = rec
        else:
            _remember(own, rec)
    assert mine is not None
    return mine


def _remember(tcell: Cell, rec: dict[str, Any]) -> None:
    """Keep a solved replica point in memory and, when the cache is on, on disk (atomic)."""
    key = _replica_key(tcell)
    _REPLICA_MEMO.setdefault(key, rec)
    root = replica_cache_dir()
    if root is None:
        return
    path = root / f"{key}.json"
    try:
        root.mkdir(parents=True, exist_ok=True)
        if not path.exists():
            write_json_atomic(rec, path, sort_keys=True)
    except (OSError, StoreError):
        pass


def _read_json(path: Path) -> dict[str, Any] | None:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None


def _solve_locked(tcell: Cell, path: Path, lock: Path) -> dict[str, Any] | None:
    """Solve and store under the lock ``lock`` (:func:`_lock_name`;
    :func:`bayesslr.core.files.exclusive_lock`: a process that solves the same point holds it,
    the others wait and read its answer); ``None`` when the directory cannot be written."""
    with contextlib.ExitStack() as stack:
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            stack.enter_context(exclusive_lock(lock))
        except OSError:
            return None
        rec = _read_json(path)  # solved while we waited for the lock
        if rec is None:
            rec = _solve_replica(tcell)
            write_json_atomic(rec, path, sort_keys=True)
        return rec
