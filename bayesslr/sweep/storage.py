"""Results directory: one netCDF file per cell, written atomically; resume; config guard; lock.

Layout of an output directory::

    OUT/run.lock         held (an OS file lock) by the one run writing here; holds its pid
    OUT/config.json      the canonical sweep config (what ``--force`` replaces)
    OUT/manifest.json    cell keys -> method, status, error, code version (rewritten at end)
    OUT/cells/KEY.nc     one finished cell (ok or failed), KEY = SHA-1 of the cell's JSON
    OUT/dataset.nc       the assembled dataset (:mod:`bayesslr.sweep.dataset`)
    OUT/figures/         written by ``bayesslr report``

Guarantees (the ones ``bayesslr run`` documents):

* **One writer.** A run holds an exclusive ``fcntl.flock`` on ``OUT/run.lock`` for its whole
  life (:class:`DirectoryLock`); a second run on the same directory is refused
  (:class:`DirectoryBusy`, naming the holder's pid). The kernel drops the lock when the holder
  exits, however it exits (``kill -9`` included), so a crash never leaves it stuck. Readers
  (``bayesslr report``, ``--dry-run``, :meth:`ResultStore.records`) take no lock.
* **Whole files only.** Every file is encoded in memory first (netCDF through h5netcdf into a
  :class:`io.BytesIO`, JSON as text), then written with plain file I/O to a temporary name
  unique to its writer (``.NAME.HOST.PID.RANDOM.tmp``), ``fsync``-ed, and moved into place
  with :func:`os.replace`. A reader sees the old file or the new one, never half a file. The
  HDF5 library never writes to disk, so a full disk, a quota or a file-size limit cannot leave
  its state broken: the write raises :class:`StoreError` (one line: the path and the OS error),
  the temporary file is removed and the old file, if any, stays as it was.
* **Files get the mode the umask gives** (``0o666 & ~umask``), like any other tool's output.
* **Checked content.** A cell file carries a SHA-256 checksum of its content (cell, status,
  error, every output bit for bit, code version) and the code version of its method
  (``MethodSpec.version``). On resume a file that cannot be read, does not match its name or
  fails its checksum is *corrupt* and recomputed; a cell computed by another code version of
  its method is *stale* and recomputed unless the caller keeps it (``--keep-stale``). Files
  written before checksums existed count as stale (version unknown).
* **Temporary files of dead writers only are removed**, and only those this layer named for
  a file a run writes here (``cells/KEY.nc``, config.json, manifest.json, dataset.nc; the
  exact ``.NAME.HOST.PID.RANDOM.tmp`` form, a regular file of this user): one whose writer is
  a process of this host that no longer exists, or that is older than
  :data:`bayesslr.core.files.STALE_TMP_SECONDS` (a writer keeps its temporary file for
  milliseconds). Any other hidden ``.tmp`` file is left alone.
* **A possibly shared, possibly tampered directory.** Nothing is opened through a symbolic
  link or a special file where a regular file belongs: a link, FIFO or device at
  ``run.lock`` or ``config.json`` is refused (one line naming the path), one at a cell file is
  not read (the cell is recomputed, the entry replaced). ``cells/`` and the families'
  checkpoint directories (:func:`run_subdirs`) must be directories inside OUT, not links.
  config.json and manifest.json carry a SHA-256 checksum like the cells; a config.json that
  is missing or fails its checks beside stored results refuses the run unless ``--force`` (or
  the checksummed manifest records the same config).

This module is the one adapter to the netCDF engine (h5netcdf, always named explicitly).
"""

from __future__ import annotations

import contextlib
import datetime as _dt
import hashlib
import io
import json
import math
import os
import re
import sys
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import xarray as xr

import bayesslr
from bayesslr.core.files import (  # the one durable-write layer
    HOST,
    FileLock,
    LockUnsupported,
    NotRegularFile,
    StoreError,
    checked_json_object,
    read_regular,
    remove_dead_tmp,
    tmp_writer_gone,
    write_bytes_atomic,
    write_text_atomic,
)
from bayesslr.core.task import ConfigError
from bayesslr.registry import Cell, Recompute, get_method
from bayesslr.sweep.config import SweepConfig, cell_key

ENGINE = "h5netcdf"
CELL_FORMAT = "bayesslr-cell/2"  # format 1: no checksum, no method version
LOCK_NAME = "run.lock"
CONFIG_FORMAT = "bayesslr-config/2"  # format 1 (no "format" key): no checksum
MAX_CELL_BYTES = 1 << 30  # a cell file is kilobytes (``pad`` test outputs: megabytes)
MAX_JSON_BYTES = 256 << 20  # config.json, manifest.json (a 10^6-cell manifest: ~200 MB)
CELL_NAME_RE = re.compile(r"[0-9a-f]{16}\.nc")  # what cells/ holds: KEY.nc
OUT_FILES = ("config.json", "manifest.json", "dataset.nc")  # what OUT holds besides cells/
CELLS_DIR = "cells"


def run_subdirs() -> tuple[str, ...]:
    """The directories a run writes into under OUT (never symbolic links): ``cells`` and the
    checkpoint directory of every family that keeps one (its registry ``Checkpoints``)."""
    from bayesslr.registry import checkpoint_dirs

    return (CELLS_DIR, *(c.directory for c in checkpoint_dirs()))


class DirectoryBusy(ConfigError):
    """Another run holds the results directory (the CLI exits 2 with this one line)."""

    def __init__(self, out: Path, holder: Mapping[str, Any]) -> None:
        pid = holder.get("pid", "unknown")
        where = f" on {holder['host']}" if holder.get("host") not in (None, HOST) else ""
        since = f", started {holder['started']}" if holder.get("started") else ""
        super().__init__(f"out={str(out)!r} is in use by another run (pid {pid}{where}{since}); "
                         "allowed: one run per directory: wait for it to finish or stop it, or "
                         "use another --out")
        self.pid = holder.get("pid")


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
    method_version : str
        Code version of the method that computed it (``MethodSpec.version`` where it ran);
        ``""`` when unknown (files written before versions were recorded).
    cpu_s : float
        Process CPU time of the method call in seconds, all threads (:mod:`bayesslr.core.
        cputime`; unlike ``runtime_s`` it does not grow with the machine's load); NaN when
        unknown (cells written before it was recorded). A diagnostic, not a result: it is kept
        out of the checksum (a cell file reads the same with or without it) and out of the
        record's equality (an unknown one, NaN, would make a record unequal to itself read
        back).
    """

    cell: Cell
    status: str
    outputs: Mapping[str, float | str] = field(default_factory=dict)
    error: str = ""
    runtime_s: float = math.nan
    method_version: str = ""
    cpu_s: float = field(default=math.nan, compare=False)

    @property
    def key(self) -> str:
        return cell_key(self.cell)


def method_version(method: str) -> str:
    """The code version of ``method``'s family in this process (``MethodSpec.version``)."""
    from bayesslr.registry import get_method

    return str(getattr(get_method(method), "version", "1"))


def cell_from_json(text: str) -> Cell:
    """Inverse of :meth:`Cell.to_json`."""
    d = json.loads(text)
    if d.get("nu") == "inf":
        d["nu"] = math.inf
    return Cell(**d)


def clean_text(text: str) -> str:
    """Text a netCDF string can hold: NUL characters and lone surrogates (undecodable bytes)
    escaped with backslashes."""
    text = text.replace("\x00", "\\x00")
    return text.encode("utf-8", "backslashreplace").decode("utf-8")


def normalize_outputs(raw: Mapping[str, Any]) -> dict[str, float | str]:
    """Scalars -> float (bools and ints included), text -> str, anything else -> JSON text
    (text cleaned by :func:`clean_text`)."""
    out: dict[str, float | str] = {}
    for k, v in raw.items():
        if isinstance(v, np.ndarray | np.generic) or hasattr(v, "dtype"):
            arr = np.asarray(v)
            v = arr.item() if arr.size == 1 else arr.tolist()
        key = clean_text(str(k))
        if isinstance(v, bool | int | float | np.integer | np.floating):
            out[key] = float(v)
        elif isinstance(v, str):
            out[key] = clean_text(v)
        else:
            out[key] = clean_text(json.dumps(v, default=str))
    return out


# --------------------------------------------------------------------------------------------
# atomic writes: bytes made in memory, plain file I/O, unique temporary names
# --------------------------------------------------------------------------------------------
# --------------------------------------------------------------------------------------------
# cell files: encode, checksum, decode
# --------------------------------------------------------------------------------------------
class CorruptCell(ValueError):
    """A cell file that cannot be trusted (unreadable, foreign, or failing its checksum)."""


def _split_outputs(outputs: Mapping[str, float | str]) -> tuple[dict[str, float], dict[str, str]]:
    num = {k: float(v) for k, v in outputs.items() if not isinstance(v, str)}
    txt = {k: v for k, v in outputs.items() if isinstance(v, str)}
    return num, txt


def content_checksum(cell_json: str, status: str, error: str, runtime_s: float,
                     version: str, num: Mapping[str, float], txt: Mapping[str, str]) -> str:
    """SHA-256 of a cell's content, every number bit for bit (:meth:`float.hex`)."""
    doc = {"format": CELL_FORMAT, "cell": cell_json, "status": status, "error": error,
           "runtime_s": float(runtime_s).hex(), "method_version": version,
           "outputs": {k: float(v).hex() for k, v in num.items()}, "text_outputs": dict(txt)}
    text = json.dumps(doc, sort_keys=True, ensure_ascii=False)
    return "sha256:" + hashlib.sha256(text.encode("utf-8")).hexdigest()


def record_to_dataset(rec: CellRecord) -> xr.Dataset:
    """A cell as a small dataset: numeric outputs in one vector along ``output``, text outputs
    along ``text_output`` (what ``xr.open_dataset`` shows of a cell file)."""
    num, txt = _split_outputs(rec.outputs)
    return xr.Dataset(
        {"value": ("output", np.array(list(num.values()), dtype=np.float64)),
         "text": ("text_output", np.array(list(txt.values()), dtype=str))},
        coords={"output": np.array(list(num), dtype=str),
                "text_output": np.array(list(txt), dtype=str)},
        attrs=_cell_attrs(rec))


def _cell_attrs(rec: CellRecord) -> dict[str, Any]:
    num, txt = _split_outputs(rec.outputs)
    cell_json = rec.cell.to_json()
    attrs = {"format": CELL_FORMAT, "cell": cell_json, "key": rec.key, "status": rec.status,
             "error": rec.error, "runtime_s": float(rec.runtime_s),
             "method_version": rec.method_version, "bayesslr_version": bayesslr.__version__,
             "checksum": content_checksum(cell_json, rec.status, rec.error, rec.runtime_s,
                                          rec.method_version, num, txt)}
    if math.isfinite(rec.cpu_s):  # outside the checksum (CellRecord.cpu_s)
        attrs["cpu_s"] = float(rec.cpu_s)
    return attrs


def encode_cell(rec: CellRecord) -> bytes:
    """The netCDF-4 bytes of a cell file (h5netcdf directly into memory: about 5x cheaper
    than going through xarray for these tiny files)."""
    import h5netcdf
    import h5py

    num, txt = _split_outputs(rec.outputs)
    text_type = h5py.string_dtype("utf-8")
    bio = io.BytesIO()
    with h5netcdf.File(bio, "w") as f:
        f.dimensions = {"output": len(num), "text_output": len(txt)}
        for name, dim, values, dtype in (
                ("output", "output", list(num), text_type),
                ("text_output", "text_output", list(txt), text_type),
                ("value", "output", list(num.values()), np.float64),
                ("text", "text_output", list(txt.values()), text_type)):
            var = f.create_variable(name, (dim,), dtype=dtype)
            if values:
                var[...] = np.array(values, dtype=object if dtype is text_type else dtype)
        for k, v in _cell_attrs(rec).items():
            f.attrs[k] = v
    return bio.getvalue()


def _text(values: Any) -> list[str]:
    return [v.decode() if isinstance(v, bytes) else str(v) for v in np.asarray(values).tolist()]


def decode_cell(data: bytes) -> CellRecord:
    """Read the bytes of a cell file; raise :class:`CorruptCell` unless they are a whole cell
    file whose stored cell matches its key and whose content matches its checksum (files of
    format 1, without a checksum, are returned with ``method_version=""``)."""
    import h5py

    try:
        with h5py.File(io.BytesIO(data), "r") as f:
            attrs = {k: (v.decode() if isinstance(v, bytes) else v) for k, v in f.attrs.items()}
            names = _text(f["output"][()]) if f["output"].size else []
            values = np.asarray(f["value"][()], dtype=float).tolist() if names else []
            tnames = _text(f["text_output"][()]) if f["text_output"].size else []
            tvalues = _text(f["text"][()]) if tnames else []
        num = dict(zip(names, values, strict=True))
        txt = dict(zip(tnames, tvalues, strict=True))
        cell_json = str(attrs["cell"])
        cell = cell_from_json(cell_json)
        runtime = float(np.asarray(attrs["runtime_s"]).reshape(-1)[0])
        cpu = float(np.asarray(attrs.get("cpu_s", math.nan)).reshape(-1)[0])
        status, error = str(attrs["status"]), str(attrs.get("error", ""))
    except Exception as exc:  # not HDF5, truncated, missing pieces, foreign layout
        raise CorruptCell(f"unreadable ({type(exc).__name__}: {exc})") from None
    if cell_key(cell) != attrs.get("key"):
        raise CorruptCell("stored cell does not match its key")
    if status not in {"ok", "failed"}:
        raise CorruptCell(f"bad status {status!r}")
    version = str(attrs.get("method_version", ""))
    if "checksum" in attrs:
        want = content_checksum(cell_json, status, error, runtime, version, num, txt)
        if attrs["checksum"] != want:
            raise CorruptCell("content does not match its checksum")
    else:
        version = ""  # format 1: nothing to verify, version unknown
    return CellRecord(cell, status, {**num, **txt}, error, runtime, version, cpu)


def read_cell_file(path: Path) -> CellRecord:
    """Read and verify a cell file (:func:`decode_cell`; one read of the whole file, so a file
    replaced meanwhile is seen whole, old or new). A symbolic link, FIFO or device there is
    never opened through (:func:`~bayesslr.core.files.read_regular`)."""
    try:
        data = read_regular(Path(path), MAX_CELL_BYTES)
    except NotRegularFile as exc:
        raise CorruptCell(exc.what) from None
    except OSError as exc:
        raise CorruptCell(f"unreadable ({exc.strerror or exc})") from None
    return decode_cell(data)


def json_checksum(doc: Mapping[str, Any]) -> str:
    """SHA-256 of a JSON document (its ``checksum`` key left out), keys sorted."""
    body = {k: v for k, v in doc.items() if k != "checksum"}
    text = json.dumps(body, sort_keys=True, ensure_ascii=False)
    return "sha256:" + hashlib.sha256(text.encode("utf-8")).hexdigest()


class BadArtefact(ValueError):
    """A resumable JSON file (config, manifest) that cannot be trusted: not a regular file,
    unreadable, not a JSON object, or failing its checksum. The message says why."""


def read_checked_json(path: Path, *, require_checksum: bool) -> dict[str, Any] | None:
    """The JSON object in ``path`` after its checks, or ``None`` when there is no file.

    Raises :class:`BadArtefact` when it is a symbolic link, FIFO or device (never opened
    through), cannot be read, is not a JSON object, or its ``checksum`` does not match; with
    ``require_checksum`` a file without one is refused too."""
    try:
        data = read_regular(path, MAX_JSON_BYTES)
    except FileNotFoundError:
        return None
    except NotRegularFile as exc:
        raise BadArtefact(exc.what) from None
    except OSError as exc:
        raise BadArtefact(f"unreadable ({exc.strerror or exc})") from None
    try:
        doc = json.loads(data.decode("utf-8"))
    except (UnicodeDecodeError, ValueError, RecursionError) as exc:
        raise BadArtefact(f"not JSON ({type(exc).__name__})") from None
    return checked_json_object(doc, json_checksum, BadArtefact,
                               require_checksum=require_checksum)


# --------------------------------------------------------------------------------------------
# the lock
# --------------------------------------------------------------------------------------------
class DirectoryLock:
    """The :class:`bayesslr.core.files.FileLock` of ``OUT/run.lock`` (see the module docstring).

    The lock file holds one JSON line (pid, host, start time, command) written after the lock
    is taken. The descriptor is not inherited by child processes (``O_CLOEXEC``; dask workers
    are spawned), so only this process holds the lock.
    """

    def __init__(self, out: Path) -> None:
        self.out = Path(out)
        self.path = self.out / LOCK_NAME
        self._lock = FileLock(self.path)

    def acquire(self) -> None:
        try:
            self.out.mkdir(parents=True, exist_ok=True)
            fd = self._lock.acquire(blocking=False)
        except BlockingIOError:
            raise DirectoryBusy(self.out, self._holder()) from None
        except LockUnsupported as exc:
            raise ConfigError(f"out={str(self.out)!r} cannot be locked ({exc.strerror}); "
                              "allowed: a directory on a filesystem with file locks") from None
        except NotRegularFile as exc:  # a planted link: never truncate what it points to
            raise ConfigError(str(exc)) from None
        except OSError as exc:
            raise StoreError(self.path, exc) from None
        info = {"pid": os.getpid(), "host": HOST,
                "started": _dt.datetime.now().astimezone().isoformat(timespec="seconds"),
                "argv": " ".join(sys.argv)[:500]}
        try:
            os.ftruncate(fd, 0)
            os.pwrite(fd, (json.dumps(info) + "\n").encode(), 0)
        except OSError as exc:
            self._lock.release()
            raise StoreError(self.path, exc) from None

    def _holder(self, wait_s: float = 1.0) -> dict[str, Any]:
        """What the holder wrote (it writes right after locking: wait a moment for it)."""
        t0 = time.monotonic()
        while True:
            try:
                text = read_regular(self.path, 4096).decode("utf-8", "replace").strip()
                if text:
                    return dict(json.loads(text))
            except (OSError, ValueError, TypeError):
                pass
            if time.monotonic() - t0 > wait_s:
                return {}
            time.sleep(0.02)

    def release(self) -> None:
        if self._lock.fd is None:
            return
        with contextlib.suppress(OSError):
            os.ftruncate(self._lock.fd, 0)  # no stale pid on display
        self._lock.release()  # drops the lock

    def __enter__(self) -> DirectoryLock:
        self.acquire()
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()


# --------------------------------------------------------------------------------------------
# the results directory
# --------------------------------------------------------------------------------------------
def check_writable(out: Path) -> None:
    """Fail (ConfigError) unless ``out`` is, or can be created as, a writable directory.

    Touches nothing: only the nearest existing ancestor is inspected.
    """
    p = out.expanduser()
    if p.is_symlink() and not p.exists():
        raise ConfigError(f"out={str(out)!r} is a symbolic link to {os.readlink(p)!r}, which "
                          "does not exist; allowed: a directory path (create the target, or "
                          "remove the link)")
    if p.exists():
        if not p.is_dir():
            raise ConfigError(f"out={str(out)!r} exists and is not a directory; allowed: a "
                              "directory path")
        if not os.access(p, os.W_OK | os.X_OK):
            raise ConfigError(f"out={str(out)!r} is not writable; allowed: a writable directory")
        for sub in run_subdirs():  # every write stays under OUT: never followed out
            d = p / sub
            if d.is_symlink():
                raise ConfigError(f"out={str(out)!r}/{sub} is a symbolic link (to "
                                  f"{os.readlink(d)!r}); allowed: a directory inside OUT "
                                  "(remove the link)")
            if d.exists() and not d.is_dir():
                raise ConfigError(f"out={str(out)!r}/{sub} is not a directory; allowed: a "
                                  "directory inside OUT (remove it)")
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


def dead_writer(tmp: Path, *, now: float | None = None) -> bool:
    """True when nobody can be writing the temporary file ``tmp`` any more
    (:func:`bayesslr.core.files.tmp_writer_gone`). Which temporary files may be removed at
    all is :func:`bayesslr.core.files.remove_dead_tmp`'s rule: only those this layer named
    for a file bayesslr writes there."""
    return tmp_writer_gone(tmp, now=now)


@dataclass
class ResumeScan:
    """What a results directory holds for a list of cells (:meth:`ResultStore.scan`).

    Attributes
    ----------
    todo : list of Cell
        Cells to compute: missing, corrupt, failed (when retried) and stale (unless kept).
    done : dict
        Key -> stored record reused as it is.
    missing, corrupt, failed, stale : int
        Counts: no file; a file that is unreadable, foreign or fails its checksum; a stored
        failure; computed by another code version of its method (or before versions were
        recorded).
    stale_kept : bool
        Whether stale cells were kept (they are in ``done``) rather than queued.
    versions : dict
        ``{family: (stored versions, current version)}`` of the stale cells.
    recomputed : dict
        ``{(what, why): count}``: stale cells of the current version, by the family rule
        (:class:`bayesslr.registry.Recompute`) that recomputes them.
    special : list of str
        Cell paths that are not regular files (not opened).
    """

    todo: list[Cell] = field(default_factory=list)
    done: dict[str, CellRecord] = field(default_factory=dict)
    missing: int = 0
    corrupt: int = 0
    failed: int = 0
    stale: int = 0
    stale_kept: bool = False
    versions: dict[str, tuple[list[str], str]] = field(default_factory=dict)
    recomputed: dict[tuple[str, str], int] = field(default_factory=dict)
    special: list[str] = field(default_factory=list)

    def messages(self) -> list[str]:
        """One line per anomaly a user must hear about (corrupt files, stale cells)."""
        out = []
        if self.special:
            more = f" (and {len(self.special) - 1} more)" if len(self.special) > 1 else ""
            out.append(f"{self.special[0]}{more}, not a regular file: not opened, to be "
                       "recomputed (replaced by a regular file)")
        if self.corrupt:
            out.append(f"{self.corrupt} cell file{'s' if self.corrupt > 1 else ''} corrupt "
                       "(unreadable, or content not matching its checksum): to be "
                       "recomputed")
        for (what, why), n in self.recomputed.items():
            out.append(f"{n} {what} cell{'s' if n > 1 else ''} {why}: "
                       + ("kept as they are (--keep-stale)" if self.stale_kept
                          else "to be recomputed"))
        by_rule = sum(self.recomputed.values())
        if self.stale > by_rule:
            what = "; ".join(f"{fam} {', '.join(v or '(unknown)' for v in old)} -> {new}"
                             for fam, (old, new) in sorted(self.versions.items()))
            act = ("kept as they are (--keep-stale)" if self.stale_kept
                   else "to be recomputed (--keep-stale keeps them)")
            n = self.stale - by_rule
            out.append(f"{n} cell{'s' if n > 1 else ''} computed by another "
                       f"code version of {'their' if n > 1 else 'its'} method "
                       f"[{what}]: {act}")
        return out


class ResultStore:
    """One sweep's output directory.

    Parameters
    ----------
    out : path
        The directory (created by :meth:`lock` or :meth:`prepare`).
    """

    def __init__(self, out: str | Path) -> None:
        self.out = Path(out)
        self.cells_dir = self.out / "cells"
        self.config_path = self.out / "config.json"
        self.manifest_path = self.out / "manifest.json"
        self.dataset_path = self.out / "dataset.nc"
        self.figures_dir = self.out / "figures"
        self.lock_path = self.out / LOCK_NAME
        self.special: list[str] = []  # cell paths found not to be regular files

    def lock(self) -> DirectoryLock:
        """The directory's exclusive lock (a context manager; creates ``out``)."""
        return DirectoryLock(self.out)

    # ---- config guard ------------------------------------------------------------------
    def config_state(self) -> tuple[str, dict[str, Any] | None]:
        """``("missing", None)``, ``("ok", doc)`` or ``("bad: WHY", None)`` for config.json.

        A config.json is trusted only when it is a regular file (a symbolic link, FIFO or
        device there is never opened through) holding a JSON object whose checksum matches
        (files written before checksums existed, format 1, carry none and are read as they
        are)."""
        try:
            doc = read_checked_json(self.config_path, require_checksum=False)
        except BadArtefact as exc:
            return f"bad: {exc}", None
        if doc is None:
            return "missing", None
        if not isinstance(doc.get("digest"), str):
            return "bad: no config digest", None
        return "ok", doc

    def stored_config(self) -> dict[str, Any] | None:
        """The config already in the directory, or None (missing, or failing its checks:
        :meth:`config_state`)."""
        return self.config_state()[1]

    def manifest_digest(self) -> str | None:
        """The config digest that a checksummed, readable manifest.json records, else None."""
        try:
            doc = read_checked_json(self.manifest_path, require_checksum=True)
        except BadArtefact:
            return None
        digest = None if doc is None else doc.get("digest")
        return digest if isinstance(digest, str) else None

    def holds_results(self) -> bool:
        """Whether the directory holds anything a run wrote: a cell file, a dataset or a
        manifest (what a lost config.json must not let another config replace)."""
        if any(p.is_symlink() or p.exists() for p in (self.dataset_path, self.manifest_path)):
            return True
        try:
            with os.scandir(self.cells_dir) as it:
                return any(CELL_NAME_RE.fullmatch(e.name) for e in it)
        except OSError:
            return False

    def check_config(self, cfg: SweepConfig, *, force: bool) -> None:
        """Refuse (ConfigError) a directory that holds a different sweep, unless ``force``.

        A config.json that is missing or fails its checks (:meth:`config_state`) beside stored
        results is refused too, unless the checksummed manifest records this very config
        (it is then written again): no config replaces results it cannot prove its own."""
        check_writable(self.out)
        state, stored = self.config_state()
        if force:
            return
        if state == "ok":
            assert stored is not None
            if stored.get("digest") != cfg.digest():
                raise ConfigError(f"out={str(self.out)!r} holds results of a different config "
                                  f"({stored.get('name', '?')!r}); use --force to replace it, "
                                  "or another --out")
            return
        if self.out.exists() and self.holds_results():
            if self.manifest_digest() == cfg.digest():
                return  # the manifest proves the results are this config's
            why = ("is missing" if state == "missing"
                   else f"cannot be trusted ({state.removeprefix('bad: ')})")
            raise ConfigError(f"out={str(self.out)!r} holds results but its config.json {why}, "
                              "so they may be another config's; allowed: --force (cells that "
                              "match this config are kept, the rest recomputed), or another "
                              "--out")
        if state != "missing":
            raise ConfigError(f"{self.config_path} cannot be trusted "
                              f"({state.removeprefix('bad: ')}); allowed: --force to replace "
                              "it, or another --out")
        if self.out.exists() and not self.cells_dir.exists() \
                and any(p.name != LOCK_NAME for p in self.out.iterdir()):
            raise ConfigError(f"out={str(self.out)!r} is not empty and holds no sweep; "
                              "allowed: an empty or new directory, or --force")

    def prepare(self, cfg: SweepConfig) -> int:
        """Create the directory, store the config (checksummed), drop the temporary files
        that dead writers of this layer left for the files a run writes here
        (:func:`~bayesslr.core.files.remove_dead_tmp`: cell files, config, manifest, dataset;
        nobody else's hidden files). Call it with the lock held. Returns how many were
        dropped."""
        check_writable(self.out)  # again under the lock: cells/ must not be a link
        try:
            self.cells_dir.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise StoreError(self.cells_dir, exc) from None
        doc: dict[str, Any] = {"format": CONFIG_FORMAT, "digest": cfg.digest(), **cfg.to_dict()}
        doc["checksum"] = json_checksum(doc)
        text = json.dumps(doc, sort_keys=True, indent=1)
        try:
            same = read_regular(self.config_path, MAX_JSON_BYTES) == text.encode("utf-8")
        except OSError:  # missing, a link, a FIFO: replaced (the link itself, not its target)
            same = False
        if not same:
            write_text_atomic(text, self.config_path)
        now = time.time()
        dropped = remove_dead_tmp(self.cells_dir, CELL_NAME_RE, now=now)
        for name in OUT_FILES:
            dropped += remove_dead_tmp(self.out, name, now=now)
        return dropped

    def load_config(self) -> dict[str, Any]:
        state, stored = self.config_state()
        if stored is None:
            why = "no config.json" if state == "missing" else \
                f"config.json {state.removeprefix('bad: ')}"
            raise ConfigError(f"results={str(self.out)!r} holds no trusted sweep ({why}); "
                              "allowed: a directory written by 'bayesslr run'")
        return stored

    # ---- cells -------------------------------------------------------------------------
    def cell_path(self, cell: Cell) -> Path:
        return self.cells_dir / f"{cell_key(cell)}.nc"

    def inspect(self, cell: Cell) -> tuple[str, CellRecord | None]:
        """``("missing" | "corrupt" | "found", record)`` for the stored file of ``cell``."""
        path = self.cell_path(cell)
        try:
            data = read_regular(path, MAX_CELL_BYTES)
        except FileNotFoundError:
            return "missing", None
        except NotRegularFile as exc:  # a link, FIFO or device: never opened through
            self.special.append(str(exc).split(", not a regular file")[0])
            return "corrupt", None
        except OSError:
            return "corrupt", None
        try:
            rec = decode_cell(data)
        except CorruptCell:
            return "corrupt", None
        if cell_key(rec.cell) != cell_key(cell):
            return "corrupt", None
        return "found", rec

    def read(self, cell: Cell) -> CellRecord | None:
        """The stored record of ``cell``, or None when missing or corrupt."""
        state, rec = self.inspect(cell)
        return rec if state == "found" else None

    def write(self, rec: CellRecord) -> None:
        """Store one finished cell atomically (raises :class:`StoreError`)."""
        write_bytes_atomic(encode_cell(rec), self.cell_path(rec.cell))

    def scan(self, cells: Sequence[Cell], *, retry_failed: bool = True,
             keep_stale: bool = False) -> ResumeScan:
        """Sort ``cells`` into those to compute and the stored records to reuse (read-only)."""
        scan = ResumeScan(stale_kept=keep_stale)
        self.special = scan.special
        current: dict[str, str] = {}
        rules: dict[str, Recompute | None] = {}
        for c in cells:
            state, rec = self.inspect(c)
            if rec is None:
                scan.todo.append(c)
                scan.missing += state == "missing"
                scan.corrupt += state == "corrupt"
                continue
            if retry_failed and rec.status != "ok":
                scan.failed += 1
                scan.todo.append(c)
                continue
            if c.family not in current:
                current[c.family] = method_version(c.method)
                rules[c.family] = get_method(c.method).recompute
            rule = rules[c.family]
            if rec.status == "ok" and rule is not None and rule.test(rec.cell, rec.outputs):
                scan.stale += 1
                what = (rule.what, rule.why)
                scan.recomputed[what] = scan.recomputed.get(what, 0) + 1
                if not keep_stale:
                    scan.todo.append(c)
                    continue
            elif rec.method_version != current[c.family]:
                scan.stale += 1
                old, new = scan.versions.setdefault(c.family, ([], current[c.family]))
                if rec.method_version not in old:
                    old.append(rec.method_version)
                if not keep_stale:
                    scan.todo.append(c)
                    continue
            scan.done[cell_key(c)] = rec
        return scan

    def pending(self, cells: Sequence[Cell], *, retry_failed: bool = True,
                keep_stale: bool = False) -> tuple[list[Cell], dict[str, CellRecord]]:
        """Split ``cells`` into those to compute and the stored records to reuse (by key)."""
        scan = self.scan(cells, retry_failed=retry_failed, keep_stale=keep_stale)
        return scan.todo, scan.done

    def records(self, cells: Sequence[Cell]) -> list[CellRecord]:
        """Stored records of ``cells`` (missing ones skipped), in the order of ``cells``."""
        return [r for r in (self.read(c) for c in cells) if r is not None]

    def write_manifest(self, cfg: SweepConfig, records: list[CellRecord],
                       extra: Mapping[str, Any]) -> None:
        """``manifest.json``: counts, and per cell its method, status, error, code version."""
        doc = {
            "name": cfg.name,
            "digest": cfg.digest(),
            "cells_total": len(cfg.cells),
            "cells_ok": sum(r.status == "ok" for r in records),
            "cells_failed": sum(r.status == "failed" for r in records),
            "cells": {r.key: {"method": r.cell.method, "status": r.status, "error": r.error,
                              "method_version": r.method_version} for r in records},
            **extra,
        }
        doc["checksum"] = json_checksum(doc)
        write_text_atomic(json.dumps(doc, sort_keys=True, indent=1), self.manifest_path)
