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

import io
from pathlib import Path
from typing import Any

from bayesslr.core.files import remove_dead_tmp
from bayesslr.sweep.storage import StoreError, check_writable, write_bytes_atomic

__all__ = ["StoreError", "prepare_out", "save_figure", "save_text"]


def prepare_out(out: str | Path) -> Path:
    """``out`` checked (ConfigError unless it is, or can be created as, a writable
    directory) and created; the path returned. Nothing in it is removed: the temporary file a
    report killed mid-write left for a file is removed when that file is written again
    (:func:`_write`), and nobody else's hidden files are touched."""
    out = Path(out)
    check_writable(out)
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise StoreError(out, exc) from None
    return out


def _write(data: bytes | memoryview, path: Path) -> None:
    """Drop what dead writers of ``path`` itself left (:func:`remove_dead_tmp`), then write."""
    remove_dead_tmp(path.parent, path.name)
    write_bytes_atomic(data, path)


def save_figure(fig: Any, path: str | Path, *, dpi: int) -> Path:
    """``fig`` (matplotlib) encoded in memory in the format of ``path``'s suffix, then written
    durably."""
    path = Path(path)
    buf = io.BytesIO()
    fig.savefig(buf, format=path.suffix.lstrip(".").lower(), dpi=dpi)
    _write(buf.getbuffer(), path)
    return path


def save_text(text: str, path: str | Path) -> Path:
    """UTF-8 ``text`` written durably."""
    path = Path(path)
    _write(text.encode("utf-8"), path)
    return path
