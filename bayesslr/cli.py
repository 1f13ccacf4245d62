"""The ``bayesslr`` command. Thin: each verb lives in :mod:`bayesslr.commands` (``register(app)``).

Exit statuses, for every verb: 0 success; 2 bad input (one line on stderr naming the problem,
never a traceback), or a results directory in use by another run; 3 a sweep finished with
failed cells (``run``); 4 a results file could not be written (one line: the path and the OS
error); 130/143 interrupted by SIGINT/SIGTERM.
"""

from __future__ import annotations

import importlib
import os
import sys

import typer
from typer.exceptions import TyperException  # typer vendors click; its errors derive from this

from bayesslr.task import ConfigError

# verb modules, each with ``register(app)``
COMMAND_MODULES: tuple[str, ...] = (
    "bayesslr.commands.population",
    "bayesslr.commands.erm",
    "bayesslr.commands.sample",
    "bayesslr.commands.run",
    "bayesslr.commands.theory",
    "bayesslr.commands.amp",
    "bayesslr.commands.targets",  # score-draws, export (not family verbs)
)

app = typer.Typer(
    name="bayesslr",
    help="Single-location regression: Bayes-optimal sampling vs attention ERM vs theory.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)



@app.callback()
def _root() -> None:
    """Single-location regression: Bayes-optimal sampling vs attention ERM vs theory."""


for _mod in COMMAND_MODULES:
    importlib.import_module(_mod).register(app)


EXIT_BAD_INPUT = 2
EXIT_CELLS_FAILED = 3
EXIT_WRITE_FAILED = 4


def _fail(message: str, code: int = EXIT_BAD_INPUT) -> None:
    message = " ".join(str(message).split())
    if message:  # click's "no arguments: show help" carries no message
        print(f"bayesslr: error: {message}", file=sys.stderr)
    sys.exit(code)


def _store_error() -> type[Exception]:
    """:class:`bayesslr.sweep.storage.StoreError` when that module is loaded (it is whenever
    one can have been raised), without importing it for the verbs that do not write."""
    mod = sys.modules.get("bayesslr.sweep.storage")
    return mod.StoreError if mod is not None else _NeverRaised


def _cell_failed() -> type[Exception]:
    """:class:`bayesslr.commands.common.CellFailed` (a single-run verb's method raised)."""
    mod = sys.modules.get("bayesslr.commands.common")
    return mod.CellFailed if mod is not None else _NeverRaised


def _interrupted() -> type[BaseException]:
    """:class:`bayesslr.sweep.executors.SweepInterrupted` when that module is loaded."""
    mod = sys.modules.get("bayesslr.sweep.executors")
    return mod.SweepInterrupted if mod is not None else _NeverRaised


class _NeverRaised(Exception):
    pass


def _exit(rc: int, *, console: bool) -> None:
    """Leave with ``rc``. From the console entry point, a process that still runs an
    abandoned in-process cell (an interrupt stopped the sweep inside it) leaves with
    :func:`os._exit` after flushing: tearing the interpreter down under a thread that is
    inside compiled code can crash it. Finished cells are already on disk (fsync-ed)."""
    executors = sys.modules.get("bayesslr.sweep.executors")
    if console and executors is not None and executors.abandoned_cells():
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except (OSError, ValueError):
                pass
        os._exit(rc)
    sys.exit(rc)


def main(argv: list[str] | None = None) -> None:
    """Console entry point (``argv=None``: the process's arguments).

    Usage errors (unknown option, bad type) and :class:`ConfigError` (a value out of range, a
    directory in use) exit with code 2 and print one line; a results file that cannot be
    written exits with 4 and one line; Ctrl-C exits with 130.
    """
    from bayesslr.jaxconfig import configure_jax

    configure_jax()
    try:
        rc = app(args=argv, standalone_mode=False)
    except ConfigError as exc:
        _fail(str(exc))
    except _store_error() as exc:
        _fail(str(exc), EXIT_WRITE_FAILED)
    except _cell_failed() as exc:
        _fail(str(exc), EXIT_CELLS_FAILED)
    except _interrupted() as exc:
        print(f"bayesslr: {exc}", file=sys.stderr)
        _exit(exc.exit_code, console=argv is None)
    except (typer.Abort, KeyboardInterrupt):
        print("bayesslr: interrupted", file=sys.stderr)
        sys.exit(130)
    except TyperException as exc:  # usage errors: unknown option, bad type, missing argument
        fmt = getattr(exc, "format_message", None)
        _fail(fmt() if callable(fmt) else str(exc))
    _exit(rc if isinstance(rc, int) else 0, console=argv is None)


if __name__ == "__main__":
    main()
