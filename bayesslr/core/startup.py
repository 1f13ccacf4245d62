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

A closed output pipe (``bayesslr run ... | head -1``: the reader left) is not an error of the
verb either: :func:`tolerate_closed_output` makes stdout and stderr swallow it, as Python's
documentation recommends for ``BrokenPipeError`` (the descriptor is pointed at ``/dev/null``
with ``dup2``, so that no later write, nor the flush at exit, fails again), and the verb ends
with its own status (0 when its results are written), where click would exit 1 in silence
after the first failed write, whatever the verb had done or had still to do.

This module imports only the standard library (``io``, ``os``, ``signal``, ``sys``) so that it
is ready within milliseconds of the interpreter's start. A signal the caller ignores (a shell
starts background jobs with SIGINT ignored) stays ignored.
"""

from __future__ import annotations

import io
import os
import signal
import sys

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


class _ReaderMayLeave(io.FileIO):
    """A standard descriptor (1 or 2) as a raw file whose writes never fail because the reader
    of its pipe has gone: on ``BrokenPipeError`` the descriptor becomes ``/dev/null`` and the
    bytes are counted as written (nobody is there to read them)."""

    def write(self, b: object) -> int:  # type: ignore[override]
        try:
            return super().write(b)  # type: ignore[arg-type]
        except BrokenPipeError:
            null = os.open(os.devnull, os.O_WRONLY)
            try:
                os.dup2(null, self.fileno())
            finally:
                os.close(null)
            return memoryview(b).nbytes  # type: ignore[arg-type]


def tolerate_closed_output() -> None:
    """Put ``sys.stdout`` and ``sys.stderr`` (when they are the process's descriptors 1 and 2)
    on :class:`_ReaderMayLeave`, with the same encoding, error handler and buffering: a
    reader that closes the pipe early costs the rest of the output, never the exit status."""
    for name, fd in (("stdout", 1), ("stderr", 2)):
        old = getattr(sys, name)
        try:
            if old is None or old.fileno() != fd:
                continue
            old.flush()
        except (AttributeError, OSError, ValueError):  # not a real file (an embedding host)
            continue
        new = io.TextIOWrapper(io.BufferedWriter(_ReaderMayLeave(fd, "wb", closefd=False)),
                               encoding=old.encoding, errors=old.errors,
                               line_buffering=old.line_buffering,
                               write_through=getattr(old, "write_through", False))
        setattr(sys, name, new)
