"""A rich progress bar for sweeps: cells done / total, failures, elapsed time and ETA.

Written to stderr. On a terminal it redraws in place; otherwise (logs, CI) it prints one line
per ``every`` seconds at most, so long cluster runs leave a readable trace.
"""

from __future__ import annotations

import time
from types import TracebackType

from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)


class SweepProgress:
    """Context manager; call :meth:`advance` once per finished cell.

    Parameters
    ----------
    total : int
        Cells in the sweep.
    done : int
        Cells already finished (resumed runs start there).
    label : str
        Text in front of the bar.
    enabled : bool
        False silences it (tests, ``--quiet``).
    every : float
        Seconds between lines when stderr is not a terminal.
    """

    def __init__(self, total: int, done: int = 0, label: str = "cells", *, enabled: bool = True,
                 every: float = 30.0) -> None:
        self.total, self.done, self.failed = total, done, 0
        self.label = label
        self.enabled = enabled
        self.every = every
        self.console = Console(stderr=True)
        self._live = enabled and self.console.is_terminal
        self._last = 0.0
        self._t0 = time.monotonic()
        self._start_done = done
        self._progress: Progress | None = None
        self._task = None

    def __enter__(self) -> SweepProgress:
        if self._live:
            self._progress = Progress(
                TextColumn("[bold]{task.description}"), BarColumn(), MofNCompleteColumn(),
                TextColumn("failed: {task.fields[failed]}"), TimeElapsedColumn(),
                TextColumn("ETA"), TimeRemainingColumn(), console=self.console,
                transient=False)
            self._progress.start()
            self._task = self._progress.add_task(self.label, total=self.total,
                                                 completed=self.done, failed=0)
        return self

    def advance(self, failed: bool = False) -> None:
        self.done += 1
        self.failed += int(failed)
        if self._progress is not None:
            self._progress.update(self._task, advance=1, failed=self.failed)
        elif self.enabled and (time.monotonic() - self._last >= self.every
                               or self.done == self.total):
            self._last = time.monotonic()
            self.console.print(self.line(), highlight=False)

    def line(self) -> str:
        """``label: done/total cells, failed, elapsed, ETA`` as one line."""
        elapsed = time.monotonic() - self._t0
        new = self.done - self._start_done
        eta = (self.total - self.done) * elapsed / new if new else float("nan")
        return (f"{self.label}: {self.done}/{self.total} cells, {self.failed} failed, "
                f"elapsed {elapsed:.0f} s, ETA {eta:.0f} s")

    def __exit__(self, et: type[BaseException] | None, ev: BaseException | None,
                 tb: TracebackType | None) -> None:
        if self._progress is not None:
            self._progress.stop()
