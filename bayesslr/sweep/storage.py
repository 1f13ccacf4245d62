"""Results directory: one netCDF file per cell, written atomically; resume; config guard.

Layout of an output directory::

    OUT/config.json      the canonical sweep config (what ``--force`` replaces)
    OUT/manifest.json    cell keys -> method and parameters, counts, versions (rewritten at end)
    OUT/cells/KEY.nc     one finished cell (ok or failed), KEY = SHA-1 of the cell's JSON
    OUT/dataset.nc       the assembled dataset (:mod:`bayesslr.sweep.dataset`)
    OUT/figures/         written by ``bayesslr report``

Every file is written to a temporary name in the same directory and moved into place with
:func:`os.replace`, so a reader (or a resumed run) sees either the old file or the new one,
never half a file. A cell file that cannot be read, or whose stored cell does not match its
name, counts as missing and is recomputed. This module is the one adapter to the netCDF engine
(h5netcdf, always named explicitly).
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import signal
import tempfile
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import xarray as xr

from bayesslr.methods import Cell
from bayesslr.sweep.config import SweepConfig, cell_key
from bayesslr.task import ConfigError

ENGINE = "h5netcdf"


@dataclass(frozen=True)
class CellRecord:
    """The outcome of one cell.

    Attributes
    ----------
    cell : Cell
        The cell.
    status : {"ok", "failed"}
        Whether the method returned.
    outputs : dict
        Scalar outputs (numbers as float, text as str); empty when failed.
    error : str
        ``"ExceptionType: message"`` when failed, else ``""``.
    runtime_s : float
        Wall time of the method call in seconds.
    """

    cell: Cell
    status: str
    outputs: Mapping[str, float | str] = field(default_factory=dict)
    error: str = ""
    runtime_s: float = math.nan

    @property
    def key(self) -> str:
        return cell_key(self.cell)


def cell_from_json(text: str) -> Cell:
    """Inverse of :meth:`Cell.to_json`."""
    d = json.loads(text)
    if d.get("nu") == "inf":
        d["nu"] = math.inf
    return Cell(**d)


def normalize_outputs(raw: Mapping[str, Any]) -> dict[str, float | str]:
    """Scalars -> float (bools and ints included), text -> str, anything else -> JSON text."""
    out: dict[str, float | str] = {}
    for k, v in raw.items():
        if isinstance(v, np.ndarray | np.generic) or hasattr(v, "dtype"):
            arr = np.asarray(v)
            v = arr.item() if arr.size == 1 else arr.tolist()
        if isinstance(v, bool | int | float | np.integer | np.floating):
            out[str(k)] = float(v)
        elif isinstance(v, str):
            out[str(k)] = v
        else:
            out[str(k)] = json.dumps(v, default=str)
    return out


# --------------------------------------------------------------------------------------------
# atomic writes; signals are deferred while a file is moved into place
# --------------------------------------------------------------------------------------------
@contextlib.contextmanager
def _signals_deferred() -> Iterator[None]:
    """Hold SIGINT/SIGTERM until the block ends (main thread only), then re-deliver them."""
    import threading

    if threading.current_thread() is not threading.main_thread():
        yield
        return
    pending: list[int] = []
    old = {}
    for sig in (signal.SIGINT, signal.SIGTERM):
        old[sig] = signal.getsignal(sig)
        signal.signal(sig, lambda s, _f: pending.append(s))
    try:
        yield
    finally:
        for sig, h in old.items():
            signal.signal(sig, h)
        for s in pending:
            os.kill(os.getpid(), s)


def _tmp_path(path: Path) -> Path:
    fd, name = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    os.close(fd)
    return Path(name)


def write_netcdf_atomic(ds: xr.Dataset, path: Path) -> None:
    """Write ``ds`` to ``path`` with h5netcdf through a temporary file and :func:`os.replace`."""
    tmp = _tmp_path(path)
    try:
        ds.to_netcdf(tmp, engine=ENGINE)
        with _signals_deferred():
            os.replace(tmp, path)
    finally:
        if tmp.exists():
            tmp.unlink()


def write_text_atomic(text: str, path: Path) -> None:
    tmp = _tmp_path(path)
    try:
        tmp.write_text(text, encoding="utf-8")
        with _signals_deferred():
            os.replace(tmp, path)
    finally:
        if tmp.exists():
            tmp.unlink()


def record_to_dataset(rec: CellRecord) -> xr.Dataset:
    """A cell as a small dataset: numeric outputs in one vector along ``output``, text outputs
    along ``text_output`` (few variables: h5netcdf's cost is per variable)."""
    num = {k: v for k, v in rec.outputs.items() if isinstance(v, float)}
    txt = {k: v for k, v in rec.outputs.items() if isinstance(v, str)}
    ds = xr.Dataset(
        {"value": ("output", np.array(list(num.values()), dtype=np.float64)),
         "text": ("text_output", np.array(list(txt.values()), dtype=str))},
        coords={"output": np.array(list(num), dtype=str),
                "text_output": np.array(list(txt), dtype=str)},
        attrs={"cell": rec.cell.to_json(), "key": rec.key, "status": rec.status,
               "error": rec.error, "runtime_s": float(rec.runtime_s)})
    return ds


def _text(values: np.ndarray) -> list[str]:
    return [v.decode() if isinstance(v, bytes) else str(v) for v in np.asarray(values).tolist()]


def read_cell_file(path: Path) -> CellRecord:
    """Read a file written by :func:`record_to_dataset` (h5netcdf directly: about 4x faster than
    :func:`xarray.open_dataset` for these tiny files, which matters when resuming big sweeps)."""
    import h5netcdf

    with h5netcdf.File(path, "r") as f:
        attrs = {k: (v.decode() if isinstance(v, bytes) else v) for k, v in f.attrs.items()}
        v = f.variables
        num = dict(zip(_text(v["output"][...]), np.asarray(v["value"][...], dtype=float).tolist(),
                       strict=True))
        txt = dict(zip(_text(v["text_output"][...]), _text(v["text"][...]), strict=True))
    cell = cell_from_json(str(attrs["cell"]))
    if cell_key(cell) != attrs["key"]:
        raise ValueError("stored cell does not match its key")
    status = str(attrs["status"])
    if status not in {"ok", "failed"}:
        raise ValueError(f"bad status {status!r}")
    return CellRecord(cell, status, {**num, **txt}, str(attrs.get("error", "")),
                      float(attrs["runtime_s"]))


# --------------------------------------------------------------------------------------------
# the results directory
# --------------------------------------------------------------------------------------------
def check_writable(out: Path) -> None:
    """Fail (ConfigError) unless ``out`` is, or can be created as, a writable directory.

    Touches nothing: only the nearest existing ancestor is inspected.
    """
    p = out.expanduser()
    if p.exists():
        if not p.is_dir():
            raise ConfigError(f"out={str(out)!r} exists and is not a directory; allowed: a "
                              "directory path")
        if not os.access(p, os.W_OK | os.X_OK):
            raise ConfigError(f"out={str(out)!r} is not writable; allowed: a writable directory")
        cells = p / "cells"
        if cells.exists() and not os.access(cells, os.W_OK | os.X_OK):
            raise ConfigError(f"out={str(out)!r}/cells is not writable")
        return
    parent = p.absolute().parent
    while not parent.exists():
        parent = parent.parent
    if not parent.is_dir() or not os.access(parent, os.W_OK | os.X_OK):
        raise ConfigError(f"out={str(out)!r} cannot be created ({str(parent)!r} is not a "
                          "writable directory); allowed: a writable path")


class ResultStore:
    """One sweep's output directory.

    Parameters
    ----------
    out : path
        The directory (created by :meth:`prepare`).
    """

    def __init__(self, out: str | Path) -> None:
        self.out = Path(out)
        self.cells_dir = self.out / "cells"
        self.config_path = self.out / "config.json"
        self.manifest_path = self.out / "manifest.json"
        self.dataset_path = self.out / "dataset.nc"
        self.figures_dir = self.out / "figures"

    # ---- config guard ------------------------------------------------------------------
    def stored_config(self) -> dict[str, Any] | None:
        """The config already in the directory, or None."""
        if not self.config_path.exists():
            return None
        try:
            return json.loads(self.config_path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return None

    def check_config(self, cfg: SweepConfig, *, force: bool) -> None:
        """Refuse (ConfigError) a directory that holds a different sweep, unless ``force``."""
        check_writable(self.out)
        stored = self.stored_config()
        if stored is None or force:
            if stored is None and self.out.exists() and any(self.out.iterdir()) \
                    and not self.cells_dir.exists() and not force:
                raise ConfigError(f"out={str(self.out)!r} is not empty and holds no sweep; "
                                  "allowed: an empty or new directory, or --force")
            return
        if stored.get("digest") != cfg.digest():
            raise ConfigError(f"out={str(self.out)!r} holds results of a different config "
                              f"({stored.get('name', '?')!r}); use --force to replace it, or "
                              "another --out")

    def prepare(self, cfg: SweepConfig) -> None:
        """Create the directory, store the config, drop temporary files of killed runs."""
        self.cells_dir.mkdir(parents=True, exist_ok=True)
        doc = {"digest": cfg.digest(), **cfg.to_dict()}
        text = json.dumps(doc, sort_keys=True, indent=1)
        if not self.config_path.exists() or self.config_path.read_text() != text:
            write_text_atomic(text, self.config_path)
        for tmp in self.cells_dir.glob(".*.tmp"):
            with contextlib.suppress(OSError):
                tmp.unlink()

    def load_config(self) -> dict[str, Any]:
        stored = self.stored_config()
        if stored is None:
            raise ConfigError(f"results={str(self.out)!r} holds no sweep (no readable "
                              "config.json); allowed: a directory written by 'bayesslr run'")
        return stored

    # ---- cells -------------------------------------------------------------------------
    def cell_path(self, cell: Cell) -> Path:
        return self.cells_dir / f"{cell_key(cell)}.nc"

    def read(self, cell: Cell) -> CellRecord | None:
        """The stored record of ``cell``, or None when missing or unreadable."""
        path = self.cell_path(cell)
        if not path.exists():
            return None
        try:
            rec = read_cell_file(path)
        except Exception:  # unreadable, truncated or foreign: recompute
            return None
        return rec if cell_key(rec.cell) == cell_key(cell) else None

    def write(self, rec: CellRecord) -> None:
        """Store one finished cell atomically."""
        write_netcdf_atomic(record_to_dataset(rec), self.cell_path(rec.cell))

    def pending(self, cells: list[Cell] | tuple[Cell, ...], *, retry_failed: bool = True
                ) -> tuple[list[Cell], dict[str, CellRecord]]:
        """Split ``cells`` into those to compute and the readable stored records (by key)."""
        todo, done = [], {}
        for c in cells:
            rec = self.read(c)
            if rec is None or (retry_failed and rec.status != "ok"):
                todo.append(c)
            else:
                done[cell_key(c)] = rec
        return todo, done

    def records(self, cells: list[Cell] | tuple[Cell, ...]) -> list[CellRecord]:
        """Stored records of ``cells`` (missing ones skipped), in the order of ``cells``."""
        return [r for r in (self.read(c) for c in cells) if r is not None]

    def write_manifest(self, cfg: SweepConfig, records: list[CellRecord],
                       extra: Mapping[str, Any]) -> None:
        doc = {
            "name": cfg.name,
            "digest": cfg.digest(),
            "cells_total": len(cfg.cells),
            "cells_ok": sum(r.status == "ok" for r in records),
            "cells_failed": sum(r.status == "failed" for r in records),
            "cells": {r.key: {"method": r.cell.method, "status": r.status, "error": r.error}
                      for r in records},
            **extra,
        }
        write_text_atomic(json.dumps(doc, sort_keys=True, indent=1), self.manifest_path)
