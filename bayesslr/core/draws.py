"""Where a sampling cell keeps its draws: ``bayesslr run --keep-draws`` (``OUT/draws/``).

The sweep's executor sets the directory around the work of a unit (:func:`keep_draws`); a
family that samples asks :func:`draws_path` for its cell's file and, when it gets one, writes
its draws there as ArviZ ``InferenceData`` (``OUT/draws/<cell key>.nc``, read by
``arviz.from_netcdf``). Outside a sweep, or without the flag, there is no path and nothing is
written. The cell's key (:meth:`bayesslr.registry.Cell.key`) is its results file's, so a cell's
draws and its numbers are found by the same name.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from contextvars import ContextVar
from pathlib import Path

_DIR: ContextVar[Path | None] = ContextVar("bayesslr_draws_dir", default=None)


@contextlib.contextmanager
def keep_draws(directory: str | Path | None) -> Iterator[None]:
    """Within the block, sampling cells write their draws into ``directory`` (None: not).

    Examples
    --------
    >>> with keep_draws("/tmp/out/draws"):
    ...     str(draws_path("0123456789abcdef"))
    '/tmp/out/draws/0123456789abcdef.nc'
    >>> draws_path("0123456789abcdef") is None
    True
    """
    token = _DIR.set(None if directory is None else Path(directory))
    try:
        yield
    finally:
        _DIR.reset(token)


def draws_path(key: str) -> Path | None:
    """The draws file of the cell with key ``key``, or None when draws are not kept."""
    d = _DIR.get()
    return None if d is None else d / f"{key}.nc"
