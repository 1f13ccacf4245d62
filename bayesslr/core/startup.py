"""Signal handling from the first instruction of the ``bayesslr`` command.

The console entry point (``[project.scripts] bayesslr = "bayesslr.__main__:main"``, also
``python -m bayesslr``) calls :func:`install`, which installs the SIGINT/SIGTERM handlers
before anything heavy is imported
(NumPy, JAX, typer, xarray: seconds of start-up). Until a verb's work takes the signals over
(:func:`bayesslr.sweep.executors.interrupt_on_signals`: stop at the next safe point, finished
cells on disk), a signal ends the process at once, from the handler: one line on stderr and
exit status ``128 + signal`` (130 for SIGINT, 143 for SIGTERM), without unwinding. Nothing can
be lost: no results file is open then except through the durable write (a temporary name,
then a rename), whose leftover temporary file a later run removes. A ``KeyboardInterrupt``
raised inside an import or a C callback, by contrast, is swallowed or turned into an
``ImportError`` or a crash; that is why no code path here lets one be raised.

This module imports only the standard library (``os``, ``signal``, ``sys``) so that it is
ready within milliseconds of the interpreter's start. A signal the caller ignores (a shell
starts background jobs with SIGINT ignored) stays ignored.
"""

from __future__ import annotations

import os
import signal

# set by main(): this process is the console command (an interrupt may end it from a handler)
console = False

_NAMES = {int(signal.SIGINT): "SIGINT", int(signal.SIGTERM): "SIGTERM"}


def exit_now(signum: int, detail: str = "") -> None:
    """Leave at once with ``128 + signum`` and one line on stderr, without unwinding (no
    ``finally``, no atexit, no interpreter teardown under threads still in compiled code).
    Safe from a signal handler: only ``os.write`` and ``os._exit``."""
    name = _NAMES.get(int(signum), f"signal {int(signum)}")
    line = f"bayesslr: interrupted by {name}" + (f" ({detail})" if detail else "") + "\n"
    try:
        os.write(2, line.encode("utf-8", "replace"))
    except OSError:
        pass
    os._exit(128 + int(signum))


def _on_signal(signum: int, _frame: object) -> None:
    exit_now(signum)


def install() -> None:
    """SIGINT and SIGTERM end the process at once (:func:`exit_now`), unless ignored."""
    for s in (signal.SIGINT, signal.SIGTERM):
        if signal.getsignal(s) is not signal.SIG_IGN:
            signal.signal(s, _on_signal)
