"""CPU time of one unit of work: the runner's ``cpu_s`` of a cell.

A cell's ``runtime_s`` is wall time, which stretches with the machine's load: a cell that ran
beside other jobs looks several times dearer than it was. What the cost model of ``bayesslr
run --dry-run`` models is the process CPU time of the work, all threads (JAX computes on
several), so the runner measures that too (:class:`CpuTimer`, ``time.process_time``).

Work a unit restores instead of doing (a replica curve resumed from its checkpoint,
:mod:`bayesslr.theory.checkpoint`) cost CPU time in an earlier run; the code that restores it
reports that time with :func:`add_restored`, and the unit's ``cpu_s`` includes it, as its
``runtime_s`` includes the restored wall time.

The process's CPU time is the unit's only while the process runs one unit at a time: true of a
dask worker (one thread) and of the in-process runner, except after an interrupt, whose
abandoned cell may still be finishing in the background.
"""

from __future__ import annotations

import threading
import time

_LOCAL = threading.local()


def add_restored(cpu_seconds: float) -> None:
    """Count ``cpu_seconds`` spent by an earlier run on work this unit restored."""
    if cpu_seconds > 0:
        _LOCAL.restored = getattr(_LOCAL, "restored", 0.0) + float(cpu_seconds)


class CpuTimer:
    """Process CPU time (all threads) from construction, plus what :func:`add_restored` reported
    in this thread meanwhile.

    Examples
    --------
    >>> t = CpuTimer()
    >>> add_restored(2.5)
    >>> 2.5 <= t.seconds() < 10
    True
    """

    def __init__(self) -> None:
        _LOCAL.restored = 0.0
        self._t0 = time.process_time()

    def seconds(self) -> float:
        return time.process_time() - self._t0 + getattr(_LOCAL, "restored", 0.0)
