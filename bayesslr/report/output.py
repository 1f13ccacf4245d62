"""Where the report writes: every file through the storage layer's one durable write.

A figure, table, HTML page or verdict file is encoded in memory first, then written with
:func:`bayesslr.sweep.storage.write_bytes_atomic` (a temporary name unique to this writer,
``fsync``, :func:`os.replace`), so a report stopped by a full disk, a file-size limit, a
permission or an interrupt leaves the file that was there before, or none: never a truncated
one. A write that fails raises :class:`~bayesslr.sweep.storage.StoreError` (one line: the
path and the OS error; the CLI exits 4). An output path that is not a writable directory is
bad input (:class:`~bayesslr.core.task.ConfigError`, exit 2), refused before anything is drawn.
"""

from __future__ import annotations

import contextlib
import io
import time
from pathlib import Path
from typing import Any

from bayesslr.sweep.storage import (
    StoreError,
    check_writable,
    dead_writer,
    write_bytes_atomic,
    write_text_atomic,
)

__all__ = ["StoreError", "prepare_out", "save_figure", "save_text"]


def prepare_out(out: str | Path) -> Path:
    """``out`` checked (ConfigError unless it is, or can be created as, a writable
    directory), created, and cleared of temporary files left by dead writers (a report
    killed mid-write); the path returned."""
    out = Path(out)
    check_writable(out)
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise StoreError(out, exc) from None
    now = time.time()
    for tmp in out.glob(".*.tmp"):
        if dead_writer(tmp, now=now):
            with contextlib.suppress(OSError):
                tmp.unlink()
    return out


def save_figure(fig: Any, path: str | Path, *, dpi: int) -> Path:
    """``fig`` (matplotlib) encoded in memory in the format of ``path``'s suffix, then written
    durably."""
    path = Path(path)
    buf = io.BytesIO()
    fig.savefig(buf, format=path.suffix.lstrip(".").lower(), dpi=dpi)
    write_bytes_atomic(buf.getbuffer(), path)
    return path


def save_text(text: str, path: str | Path) -> Path:
    """UTF-8 ``text`` written durably."""
    path = Path(path)
    write_text_atomic(text, path)
    return path
