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
* **Temporary files of dead writers only are removed**: a temporary file whose writer is a
  process of this host that no longer exists, or that is older than
  :data:`STALE_TMP_SECONDS` (a writer keeps its temporary file for milliseconds).

This module is the one adapter to the netCDF engine (h5netcdf, always named explicitly).
"""

from __future__ import annotations

import contextlib
import datetime as _dt
import errno
import fcntl
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
from bayesslr.core.files import (  # the one durable-write layer; its names kept here too
    _HOST,
    StoreError,
    _fsync_dir,  # noqa: F401
    _tmp_path,  # noqa: F401
    _unlink_quiet,  # noqa: F401
    write_bytes_atomic,
    write_text_atomic,
)
from bayesslr.core.task import ConfigError
from bayesslr.registry import Cell
from bayesslr.sweep.config import SweepConfig, cell_key

ENGINE = "h5netcdf"
CELL_FORMAT = "bayesslr-cell/2"  # format 1: no checksum, no method version
LOCK_NAME = "run.lock"
STALE_TMP_SECONDS = 3600.0
_TMP_RE = re.compile(r"^\.(?P<name>.+)\.(?P<host>[A-Za-z0-9-]+)\.(?P<pid>\d+)\.[0-9a-f]+\.tmp$")


class DirectoryBusy(ConfigError):
    """Another run holds the results directory (the CLI exits 2 with this one line)."""

    def __init__(self, out: Path, holder: Mapping[str, Any]) -> None:
        pid = holder.get("pid", "unknown")
        where = f" on {holder['host']}" if holder.get("host") not in (None, _HOST) else ""
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
    replaced meanwhile is seen whole, old or new)."""
    try:
        data = Path(path).read_bytes()
    except OSError as exc:
        raise CorruptCell(f"unreadable ({exc.strerror or exc})") from None
    return decode_cell(data)


# --------------------------------------------------------------------------------------------
# the lock
# --------------------------------------------------------------------------------------------
class DirectoryLock:
    """Exclusive ``fcntl.flock`` on ``OUT/run.lock`` (see the module docstring).

    The lock file holds one JSON line (pid, host, start time, command) written after the lock
    is taken. The descriptor is not inherited by child processes (``O_CLOEXEC``; dask workers
    are spawned), so only this process holds the lock.
    """

    def __init__(self, out: Path) -> None:
        self.out = Path(out)
        self.path = self.out / LOCK_NAME
        self._fd: int | None = None

    def acquire(self) -> None:
        try:
            self.out.mkdir(parents=True, exist_ok=True)
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o666)
        except OSError as exc:
            raise StoreError(self.path, exc) from None
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as exc:
            try:
                if exc.errno in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES):
                    raise DirectoryBusy(self.out, self._holder(fd)) from None
                raise ConfigError(f"out={str(self.out)!r} cannot be locked ({exc.strerror}); "
                                  "allowed: a directory on a filesystem with file locks"
                                  ) from None
            finally:
                os.close(fd)
        info = {"pid": os.getpid(), "host": _HOST,
                "started": _dt.datetime.now().astimezone().isoformat(timespec="seconds"),
                "argv": " ".join(sys.argv)[:500]}
        try:
            os.ftruncate(fd, 0)
            os.pwrite(fd, (json.dumps(info) + "\n").encode(), 0)
        except OSError as exc:
            os.close(fd)  # closing drops the lock
            raise StoreError(self.path, exc) from None
        self._fd = fd

    @staticmethod
    def _holder(fd: int, wait_s: float = 1.0) -> dict[str, Any]:
        """What the holder wrote (it writes right after locking: wait a moment for it)."""
        t0 = time.monotonic()
        while True:
            try:
                text = os.pread(fd, 4096, 0).decode("utf-8", "replace").strip()
                if text:
                    return dict(json.loads(text))
            except (OSError, ValueError, TypeError):
                pass
            if time.monotonic() - t0 > wait_s:
                return {}
            time.sleep(0.02)

    def release(self) -> None:
        if self._fd is None:
            return
        fd, self._fd = self._fd, None
        with contextlib.suppress(OSError):
            os.ftruncate(fd, 0)  # no stale pid on display
        os.close(fd)  # drops the lock

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


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:  # EPERM: exists, belongs to someone else
        return True
    return True


def dead_writer(tmp: Path, *, now: float | None = None) -> bool:
    """True when nobody can be writing the temporary file ``tmp`` any more: its writer is a
    process of this host that no longer exists, or the file is older than
    :data:`STALE_TMP_SECONDS` (names of other hosts or other formats are judged by age)."""
    m = _TMP_RE.match(tmp.name)
    if m and m["host"] == _HOST:
        pid = int(m["pid"])
        if pid != os.getpid() and not _pid_alive(pid):
            return True
    try:
        age = (now if now is not None else time.time()) - tmp.stat().st_mtime
    except OSError:
        return False
    return age > STALE_TMP_SECONDS


# families whose converged points carry a channel Monte Carlo error (``stderr_channel``)
CHANNEL_ERROR_FAMILIES = ("theory_erm", "theory_bayes")


def unflagged_channel_error(rec: CellRecord) -> bool:
    """A stored theory cell that says ``converged`` with a test error but no channel error
    (``stderr_channel`` NaN, its ``stderr`` the test formula's alone): written before such
    points were flagged (:func:`bayesslr.theory.erm.unknown_channel_error`). Its family's
    code version did not change (every other point is bit for bit the same), so the resume
    treats it as stale by this rule. ``channel_error = false`` (ERM theory) asks for no
    channel error: those cells are as they should be."""
    if rec.status != "ok" or rec.cell.family not in CHANNEL_ERROR_FAMILIES:
        return False
    if rec.cell.options.get("channel_error", True) is False:  # the option's default: on
        return False
    out = rec.outputs
    conv, test, chan = (out.get(k) for k in ("converged", "test_error", "stderr_channel"))
    return (isinstance(conv, float) and conv == 1.0 and isinstance(test, float)
            and math.isfinite(test) and isinstance(chan, float) and not math.isfinite(chan))


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
    """

    todo: list[Cell] = field(default_factory=list)
    done: dict[str, CellRecord] = field(default_factory=dict)
    missing: int = 0
    corrupt: int = 0
    failed: int = 0
    stale: int = 0
    stale_kept: bool = False
    versions: dict[str, tuple[list[str], str]] = field(default_factory=dict)
    unflagged: int = 0

    def messages(self) -> list[str]:
        """One line per anomaly a user must hear about (corrupt files, stale cells)."""
        out = []
        if self.corrupt:
            out.append(f"{self.corrupt} cell file{'s' if self.corrupt > 1 else ''} corrupt "
                       "(unreadable, or content not matching its checksum): to be "
                       "recomputed")
        if self.unflagged:
            out.append(f"{self.unflagged} theory cell{'s' if self.unflagged > 1 else ''} "
                       "stored as converged with no channel error (stderr_channel NaN, so its "
                       "stderr was too small): " + ("kept as they are (--keep-stale)"
                                                    if self.stale_kept else "to be recomputed"))
        if self.stale > self.unflagged:
            what = "; ".join(f"{fam} {', '.join(v or '(unknown)' for v in old)} -> {new}"
                             for fam, (old, new) in sorted(self.versions.items()))
            act = ("kept as they are (--keep-stale)" if self.stale_kept
                   else "to be recomputed (--keep-stale keeps them)")
            n = self.stale - self.unflagged
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

    def lock(self) -> DirectoryLock:
        """The directory's exclusive lock (a context manager; creates ``out``)."""
        return DirectoryLock(self.out)

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
            if stored is None and self.out.exists() and not self.cells_dir.exists() \
                    and not force and any(p.name != LOCK_NAME for p in self.out.iterdir()):
                raise ConfigError(f"out={str(self.out)!r} is not empty and holds no sweep; "
                                  "allowed: an empty or new directory, or --force")
            return
        if stored.get("digest") != cfg.digest():
            raise ConfigError(f"out={str(self.out)!r} holds results of a different config "
                              f"({stored.get('name', '?')!r}); use --force to replace it, or "
                              "another --out")

    def prepare(self, cfg: SweepConfig) -> int:
        """Create the directory, store the config, drop temporary files of dead writers
        (:func:`dead_writer`). Call it with the lock held. Returns how many were dropped."""
        try:
            self.cells_dir.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise StoreError(self.cells_dir, exc) from None
        doc = {"digest": cfg.digest(), **cfg.to_dict()}
        text = json.dumps(doc, sort_keys=True, indent=1)
        try:
            same = self.config_path.read_text(encoding="utf-8") == text
        except (OSError, ValueError):
            same = False
        if not same:
            write_text_atomic(text, self.config_path)
        dropped = 0
        now = time.time()
        for d in (self.cells_dir, self.out):
            for tmp in d.glob(".*.tmp"):
                if dead_writer(tmp, now=now):
                    with contextlib.suppress(OSError):
                        tmp.unlink()
                        dropped += 1
        return dropped

    def load_config(self) -> dict[str, Any]:
        stored = self.stored_config()
        if stored is None:
            raise ConfigError(f"results={str(self.out)!r} holds no sweep (no readable "
                              "config.json); allowed: a directory written by 'bayesslr run'")
        return stored

    # ---- cells -------------------------------------------------------------------------
    def cell_path(self, cell: Cell) -> Path:
        return self.cells_dir / f"{cell_key(cell)}.nc"

    def inspect(self, cell: Cell) -> tuple[str, CellRecord | None]:
        """``("missing" | "corrupt" | "found", record)`` for the stored file of ``cell``."""
        path = self.cell_path(cell)
        try:
            data = path.read_bytes()
        except FileNotFoundError:
            return "missing", None
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
        current: dict[str, str] = {}
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
            if unflagged_channel_error(rec):
                scan.stale += 1
                scan.unflagged += 1
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
        write_text_atomic(json.dumps(doc, sort_keys=True, indent=1), self.manifest_path)
