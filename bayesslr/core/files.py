"""Durable files and locks: the one place the package writes a file that must survive a crash
or be shared between processes.

* :func:`write_bytes_atomic` / :func:`write_text_atomic` / :func:`write_json_atomic`: a unique
  temporary file beside the target (host, pid, random: the storage layer's scan removes stale
  ones), ``fsync``, :func:`os.replace`, then ``fsync`` of the directory. A reader sees the old
  file or the new one, never half a file; an OS error raises :class:`StoreError` (one line:
  the path and the error) with the temporary file removed and the old file intact.
* :class:`FileLock` (and :func:`exclusive_lock`, the same held for a ``with`` block): the one
  lock of the package, an ``fcntl.flock`` on a lock file. The kernel drops it when its
  process dies, so a crashed holder never leaves a stale lock behind and no age rule is
  needed. The results directory's lock (:class:`bayesslr.sweep.storage.DirectoryLock`, which
  adds who holds it) and the replica-``lam`` cache are this lock. The lock file must be a
  regular file with one link: a symbolic link, FIFO, device or hard link there is refused
  (:class:`NotRegularFile`), never opened through, so a planted link cannot make a run
  truncate the file it points to.
* :func:`read_regular`: the bytes of a file that must be a regular file (a cell, a config,
  a checkpoint), read without following a symbolic link and without blocking on a FIFO, up to
  a size limit; anything else raises :class:`NotRegularFile` naming the path.
* :func:`remove_dead_tmp`: removes the temporary files this layer made for one target name
  (the exact ``.NAME.HOST.PID.RANDOM.tmp`` pattern, a regular file of this user) whose writer
  is gone; nothing else in the directory is touched.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import json
import os
import re
import secrets
import socket
import stat
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

HOST = re.sub(r"[^A-Za-z0-9-]", "-", socket.gethostname())[:40] or "host"
"""This machine's name as temporary names and lock files carry it (letters, digits, ``-``)."""


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


class NotRegularFile(OSError):
    """A path where a regular file is expected holds something else (a symbolic link, a FIFO,
    a device, a directory, a socket, a hard link to another file), or a file over its size
    limit. It is never opened through; the message is one line naming the path.

    Attributes
    ----------
    path : Path
        The path.
    what : str
        What is there (``"a symbolic link"``, ``"a FIFO"``, ...).
    """

    def __init__(self, path: Path, what: str) -> None:
        super().__init__(errno.EINVAL, f"{path} is {what}")
        self.path = Path(path)
        self.what = what

    def __str__(self) -> str:
        return (f"{self.path} is {self.what}, not a regular file; allowed: a regular file "
                "written by bayesslr (remove it)")


def _kind(mode: int) -> str:
    for test, what in ((stat.S_ISLNK, "a symbolic link"), (stat.S_ISFIFO, "a FIFO"),
                       (stat.S_ISSOCK, "a socket"), (stat.S_ISDIR, "a directory"),
                       (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device")):
        if test(mode):
            return what
    return "not a regular file"


def open_regular(path: Path, flags: int, *, single_link: bool = False) -> int:
    """``os.open`` of ``path`` that refuses anything but a regular file: a symbolic link
    (``O_NOFOLLOW``), a FIFO (opened non-blocking, then refused), a device, a directory, and,
    with ``single_link``, a file with more than one hard link. Raises :class:`NotRegularFile`
    or the ``OSError`` of the open."""
    path = Path(path)
    with contextlib.suppress(FileNotFoundError):
        st = os.lstat(path)
        if not stat.S_ISREG(st.st_mode):  # refused before any open (a device's open acts)
            raise NotRegularFile(path, _kind(st.st_mode))
    try:
        fd = os.open(path, flags | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, 0o666)
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise NotRegularFile(path, "a symbolic link") from None
        raise
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise NotRegularFile(path, _kind(st.st_mode))
        if single_link and st.st_nlink > 1:
            raise NotRegularFile(path, f"a hard link shared with {st.st_nlink - 1} other "
                                       "path(s)")
        os.set_blocking(fd, True)
    except BaseException:
        os.close(fd)
        raise
    return fd


def read_regular(path: Path, max_bytes: int) -> bytes:
    """The whole content of the regular file ``path`` (:func:`open_regular`), at most
    ``max_bytes`` of it: a longer file raises :class:`NotRegularFile` (nothing past the limit
    is read, so a huge or growing file cannot exhaust memory)."""
    fd = open_regular(path, os.O_RDONLY)
    try:
        chunks: list[bytes] = []
        got = 0
        while True:
            chunk = os.read(fd, min(1 << 20, max_bytes + 1 - got))
            if not chunk:
                break
            chunks.append(chunk)
            got += len(chunk)
            if got > max_bytes:
                raise NotRegularFile(path, f"larger than {max_bytes} bytes (the most such a "
                                           "file holds)")
        return b"".join(chunks)
    finally:
        os.close(fd)


def checked_json_object(doc: Any, checksum: Callable[[Any], str], error: type[Exception], *,
                        require_checksum: bool) -> dict[str, Any]:
    """``doc`` (a parsed JSON document) once it is a JSON object whose ``checksum`` key is
    ``checksum(doc)``; otherwise ``error(why)``: not an object, no checksum (only with
    ``require_checksum``), or a checksum that does not match (or cannot be computed: a value
    the hash's ``json.dumps`` refuses). The check of the results directory's artefacts and of
    the theory checkpoints, each with its own hash and error class."""
    if not isinstance(doc, dict):
        raise error(f"not a JSON object (a {type(doc).__name__})")
    if "checksum" not in doc:
        if require_checksum:
            raise error("no checksum")
        return doc
    try:
        ok = doc["checksum"] == checksum(doc)
    except (TypeError, ValueError):
        ok = False
    if not ok:
        raise error("content does not match its checksum")
    return doc


def env_dir(variable: str, default: Path) -> Path | None:
    """A directory named by the environment ``variable``, ``default`` when it is unset, or
    ``None`` when it says ``off`` (or is empty, ``0``, ``none``, ``false``): the caches and
    checkpoints of the suite."""
    env = os.environ.get(variable)
    if env is not None and env.strip().lower() in {"", "0", "off", "none", "false"}:
        return None
    return Path(env).expanduser() if env else default


def temporary_path(path: Path) -> Path:
    """A temporary name next to ``path``, unique to this writer (host, pid, random):
    ``.NAME.HOST.PID.RANDOM.tmp``, the only form :func:`remove_dead_tmp` ever removes.

    Examples
    --------
    >>> from pathlib import Path
    >>> from bayesslr.core.files import TMP_RE, temporary_path
    >>> t = temporary_path(Path("out/dataset.nc"))
    >>> t.parent, TMP_RE.match(t.name)["name"]
    (PosixPath('out'), 'dataset.nc')
    """
    return path.parent / f".{path.name}.{HOST}.{os.getpid()}.{secrets.token_hex(6)}.tmp"


TMP_RE = re.compile(r"^\.(?P<name>.+)\.(?P<host>[A-Za-z0-9-]+)\.(?P<pid>\d+)\.[0-9a-f]+\.tmp$")
STALE_TMP_SECONDS = 3600.0  # a writer keeps its temporary file for milliseconds


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:  # EPERM: exists, belongs to someone else
        return True
    return True


def tmp_writer_gone(tmp: Path, *, now: float | None = None) -> bool:
    """True when nobody can be writing the temporary file ``tmp`` any more: its writer is a
    process of this host that no longer exists, or the file is older than
    :data:`STALE_TMP_SECONDS` (names of other hosts are judged by age)."""
    m = TMP_RE.match(tmp.name)
    if m and m["host"] == HOST:
        pid = int(m["pid"])
        if pid != os.getpid() and not _pid_alive(pid):
            return True
    try:
        age = (now if now is not None else time.time()) - tmp.lstat().st_mtime
    except OSError:
        return False
    return age > STALE_TMP_SECONDS


def remove_dead_tmp(directory: Path, target: str | re.Pattern[str], *,
                    now: float | None = None) -> int:
    """Remove the temporary files left in ``directory`` by dead writers of this layer for the
    target name ``target`` (a name, or a pattern a whole name must match): only names of the
    exact form :func:`temporary_path` makes, regular files owned by this user, whose writer is gone
    (:func:`tmp_writer_gone`). A hidden ``.tmp`` file of anyone or anything else is left alone.
    Returns how many were removed."""
    now = time.time() if now is None else now
    uid = os.getuid()
    try:
        entries = list(os.scandir(directory))
    except OSError:
        return 0
    removed = 0
    for e in entries:
        m = TMP_RE.match(e.name)
        if not m:
            continue
        name = m["name"]
        if not (name == target if isinstance(target, str) else target.fullmatch(name)):
            continue
        try:
            st = e.stat(follow_symlinks=False)
        except OSError:
            continue
        if not stat.S_ISREG(st.st_mode) or st.st_uid != uid:
            continue
        if tmp_writer_gone(Path(e.path), now=now):
            with contextlib.suppress(OSError):
                os.unlink(e.path)
                removed += 1
    return removed


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
    tmp = temporary_path(path)
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
    nothing touches the disk).

    The write runs on dask's synchronous scheduler: inside a dask.distributed worker process
    xarray would otherwise take a *distributed* write lock named after the in-memory buffer,
    which the scheduler does not know (``RuntimeError: Semaphore or Lock ... not known``; it
    cost a 50-minute sampling cell its ``--keep-draws`` file). Nothing here is lazy, so no
    lock across processes is needed."""
    import io

    bio = io.BytesIO()
    try:
        import dask
    except ImportError:  # dask comes with the distributed extra only; without it no worker either
        ds.to_netcdf(bio, engine="h5netcdf")
    else:
        with dask.config.set(scheduler="synchronous"):
            ds.to_netcdf(bio, engine="h5netcdf")
    return bio.getbuffer()


def write_netcdf_atomic(ds: Any, path: Path) -> None:
    """Encode ``ds`` in memory, then :func:`write_bytes_atomic`."""
    write_bytes_atomic(encode_netcdf(ds), path)


class LockUnsupported(OSError):
    """The filesystem of a lock file refuses ``flock`` (not a busy lock: no lock at all)."""


_BUSY = (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES)


class FileLock:
    """The one lock protocol of the package: an exclusive ``fcntl.flock`` on a lock file.

    The lock file is created if missing and must be a regular file with one link (a symbolic
    link, FIFO, device or hard link there raises :class:`NotRegularFile`: nothing is opened
    through it). The descriptor is not inherited by child processes (``O_CLOEXEC``); closing
    it drops the lock, and so does the kernel when the holder dies, so a crashed holder never
    leaves a stale lock and no age rule is needed. The results directory's lock
    (:class:`bayesslr.sweep.storage.DirectoryLock`) and the replica-``lam`` cache
    (:func:`exclusive_lock`) are this class.

    Examples
    --------
    >>> import tempfile
    >>> from pathlib import Path
    >>> from bayesslr.core.files import FileLock
    >>> path = Path(tempfile.mkdtemp()) / "x.lock"
    >>> lock = FileLock(path)
    >>> fd = lock.acquire(blocking=False)
    >>> FileLock(path).acquire(blocking=False)
    Traceback (most recent call last):
    ...
    BlockingIOError: [Errno 11] Resource temporarily unavailable
    >>> lock.release(); lock.held
    False
    """

    def __init__(self, path: Path) -> None:
        self.path = Path(path)
        self.fd: int | None = None

    @property
    def held(self) -> bool:
        """Whether this object holds the lock."""
        return self.fd is not None

    def acquire(self, *, blocking: bool = True) -> int:
        """Take the lock (wait for it, or with ``blocking=False`` raise
        :class:`BlockingIOError` at once when another process holds it) and return the
        descriptor (the holder may write who it is into the file). The open's own errors
        (:class:`NotRegularFile`, ``OSError``) pass through; a filesystem without locks raises
        :class:`LockUnsupported`."""
        fd = open_regular(self.path, os.O_RDWR | os.O_CREAT, single_link=True)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | (0 if blocking else fcntl.LOCK_NB))
        except OSError as exc:
            os.close(fd)
            if exc.errno in _BUSY:
                raise BlockingIOError(exc.errno, os.strerror(exc.errno)) from None
            raise LockUnsupported(exc.errno, exc.strerror) from None
        except BaseException:
            os.close(fd)
            raise
        self.fd = fd
        return fd

    def release(self) -> None:
        """Drop the lock (closing the descriptor); nothing when it is not held."""
        fd, self.fd = self.fd, None
        if fd is not None:
            os.close(fd)


@contextlib.contextmanager
def exclusive_lock(path: Path, *, blocking: bool = True) -> Iterator[int]:
    """Hold the :class:`FileLock` of ``path`` for the ``with`` block (``blocking=False``:
    :class:`BlockingIOError` at once when another process holds it); yields the descriptor.

    Examples
    --------
    >>> import tempfile
    >>> from pathlib import Path
    >>> from bayesslr.core.files import exclusive_lock
    >>> with exclusive_lock(Path(tempfile.mkdtemp()) / "x.lock") as fd:
    ...     fd >= 0
    True
    """
    lock = FileLock(path)
    fd = lock.acquire(blocking=blocking)
    try:
        yield fd
    finally:
        lock.release()
