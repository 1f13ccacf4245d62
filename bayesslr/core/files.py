"""Durable files and locks: the one place the package writes a file that must survive a crash
or be shared between processes.

* :func:`write_bytes_atomic` / :func:`write_text_atomic` / :func:`write_json_atomic`: a unique
  temporary file beside the target (host, pid, random: the storage layer's scan removes stale
  ones), ``fsync``, :func:`os.replace`, then ``fsync`` of the directory. A reader sees the old
  file or the new one, never half a file; an OS error raises :class:`StoreError` (one line:
  the path and the error) with the temporary file removed and the old file intact.
* :func:`exclusive_lock`: an ``fcntl.flock`` on a lock file, held for a ``with`` block. The
  kernel drops it when its process dies, so a crashed holder never leaves a stale lock behind
  and no age rule is needed. The results directory's lock
  (:class:`bayesslr.sweep.storage.DirectoryLock`) and the replica-``lam`` cache of
  :mod:`bayesslr.erm.method` both use this protocol.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import re
import secrets
import socket
from collections.abc import Iterator
from pathlib import Path
from typing import Any

_HOST = re.sub(r"[^A-Za-z0-9-]", "-", socket.gethostname())[:40] or "host"


class StoreError(RuntimeError):
    """A results file could not be written (disk full, quota, permissions, file-size limit).

    Nothing half-written stays behind: the temporary file is removed and the file that was
    there before, if any, is intact. The message is one line: the path and the OS error.

    Attributes
    ----------
    path : Path
        The file that could not be written.
    errno : int or None
        The OS error number (``errno.ENOSPC``, ``errno.EFBIG``, ``errno.EACCES``, ...).
    """

    def __init__(self, path: Path, exc: BaseException) -> None:
        why = getattr(exc, "strerror", None) or str(exc) or type(exc).__name__
        super().__init__(f"cannot write {path} ({why})")
        self.path = Path(path)
        self.errno = getattr(exc, "errno", None)


def env_dir(variable: str, default: Path) -> Path | None:
    """A directory named by the environment ``variable``, ``default`` when it is unset, or
    ``None`` when it says ``off`` (or is empty, ``0``, ``none``, ``false``): the caches and
    checkpoints of the suite."""
    env = os.environ.get(variable)
    if env is not None and env.strip().lower() in {"", "0", "off", "none", "false"}:
        return None
    return Path(env).expanduser() if env else default


def _tmp_path(path: Path) -> Path:
    """A temporary name next to ``path``, unique to this writer (host, pid, random)."""
    return path.parent / f".{path.name}.{_HOST}.{os.getpid()}.{secrets.token_hex(6)}.tmp"


def _unlink_quiet(path: Path) -> None:
    with contextlib.suppress(OSError):
        os.unlink(path)


def _fsync_dir(directory: Path) -> None:
    """Make a rename in ``directory`` durable (best effort: some filesystems refuse)."""
    try:
        fd = os.open(directory, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def write_bytes_atomic(data: bytes | bytearray | memoryview, path: Path) -> None:
    """Write ``data`` to ``path``: unique temporary file, ``fsync``, :func:`os.replace`.

    The file gets mode ``0o666 & ~umask``. Raises :class:`StoreError` on any OS error, after
    removing the temporary file (the previous ``path``, if any, is untouched).
    """
    path = Path(path)
    tmp = _tmp_path(path)
    try:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o666)
    except OSError as exc:
        raise StoreError(path, exc) from None
    try:
        try:
            view = memoryview(data).cast("B")
            while view:
                view = view[os.write(fd, view):]
            os.fsync(fd)
        finally:
            os.close(fd)  # NFS may report ENOSPC only here
        os.replace(tmp, path)
    except OSError as exc:
        _unlink_quiet(tmp)
        raise StoreError(path, exc) from None
    except BaseException:
        _unlink_quiet(tmp)
        raise
    _fsync_dir(path.parent)


def write_text_atomic(text: str, path: Path) -> None:
    """:func:`write_bytes_atomic` of UTF-8 text."""
    write_bytes_atomic(text.encode("utf-8"), path)


def write_json_atomic(obj: Any, path: Path, **dumps: Any) -> None:
    """:func:`write_text_atomic` of ``json.dumps(obj, **dumps)``."""
    write_text_atomic(json.dumps(obj, **dumps), path)


def encode_netcdf(ds: Any) -> memoryview:
    """``ds`` (an xarray dataset or a tree of them) as netCDF-4 bytes (h5netcdf into memory;
    nothing touches the disk)."""
    import io

    bio = io.BytesIO()
    ds.to_netcdf(bio, engine="h5netcdf")
    return bio.getbuffer()


def write_netcdf_atomic(ds: Any, path: Path) -> None:
    """Encode ``ds`` in memory, then :func:`write_bytes_atomic`."""
    write_bytes_atomic(encode_netcdf(ds), path)


@contextlib.contextmanager
def exclusive_lock(path: Path, *, blocking: bool = True) -> Iterator[int]:
    """Hold an exclusive ``flock`` on ``path`` (created if missing) for the ``with`` block.

    ``blocking=False`` raises :class:`BlockingIOError` at once when another process holds it.
    The descriptor is not inherited by child processes (``O_CLOEXEC``). Yields the descriptor
    (the holder may write who it is into the file).
    """
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o666)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | (0 if blocking else fcntl.LOCK_NB))
        yield fd
    finally:
        os.close(fd)  # closing drops the lock
