"""The ``bayesslr`` command: one verb per method family, generated from the registry
(:mod:`bayesslr.commands.family`), plus ``run``, ``presets``, ``report`` and ``methods``.

Families registered by plugins (``$BAYESSLR_PLUGINS``: modules or ``.py`` files, comma
separated) get their verb the same way. Exit statuses (:mod:`bayesslr.core.exit_codes`), for
every verb: 0 success; 2 bad input (one line on stderr naming the problem, never a traceback),
or a results directory in use by another run; 3 a sweep finished with failed cells, or a
single-run verb's cell failed; 4 a results file could not be written (one line: the path and
the OS error); 5 a sweep lost its dask scheduler; 130/143 interrupted by SIGINT/SIGTERM. From
the console a closed output pipe changes none of them (``bayesslr.core.startup``).
"""

from __future__ import annotations

import os
import sys

import typer
from typer.exceptions import TyperException  # typer vendors click; its errors derive from this

from bayesslr.commands import family, methods, run, targets
from bayesslr.core.exit_codes import (
    EXIT_BAD_INPUT,
    EXIT_CELLS_FAILED,
    EXIT_SCHEDULER_LOST,
    EXIT_WRITE_FAILED,
)
from bayesslr.core.files import StoreError
from bayesslr.core.task import ConfigError
from bayesslr.registry import families

HELP = "Single-location regression: Bayes-optimal sampling vs attention ERM vs theory."


def _plain_argument_help() -> None:
    """Typer prints an argument's Python type beside its name (``[FAMILY] <str>``); our
    arguments carry a metavar that says what they take, so the type is left out."""
    from typer.core import TyperArgument

    TyperArgument.display_type_rich = lambda self, ctx: None  # type: ignore[method-assign]


def build_app() -> typer.Typer:
    """The command: the registry's families (plugins of ``$BAYESSLR_PLUGINS`` loaded first)."""
    from bayesslr.sweep.executors import load_plugins, plugin_names

    load_plugins(plugin_names())
    cli = typer.Typer(name="bayesslr", help=HELP, no_args_is_help=True, add_completion=False,
                      pretty_exceptions_enable=False, rich_markup_mode=None)
    _plain_argument_help()
    cli.callback()(_root)
    family.add_family_verbs(cli, families())
    run.add_sweep_verbs(cli)
    methods.add_methods_verb(cli)
    targets.add_target_verbs(cli)  # score-draws, export: verbs on named targets, not families
    return cli


def _root() -> None:
    """Single-location regression: Bayes-optimal sampling vs attention ERM vs theory."""


def __getattr__(name: str) -> typer.Typer:
    # ``bayesslr.cli.app``: the command built on first use, so that importing this module
    # imports no method family (``main`` builds its own, after loading the plugins)
    if name == "app":
        return build_app()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def _fail(message: str, code: int = EXIT_BAD_INPUT) -> None:
    message = " ".join(str(message).split())
    if message:  # click's "no arguments: show help" carries no message
        print(f"bayesslr: error: {message}", file=sys.stderr)
    sys.exit(code)


def _cell_failed() -> type[Exception]:
    """:class:`bayesslr.commands.common.CellFailed` (a single-run verb's method raised)."""
    mod = sys.modules.get("bayesslr.commands.common")
    return mod.CellFailed if mod is not None else _NeverRaised


def _interrupted() -> type[BaseException]:
    """:class:`bayesslr.sweep.executors.SweepInterrupted` when that module is loaded."""
    mod = sys.modules.get("bayesslr.sweep.executors")
    return mod.SweepInterrupted if mod is not None else _NeverRaised


def _scheduler_lost() -> type[Exception]:
    """:class:`bayesslr.sweep.executors.SchedulerLost` when that module is loaded."""
    mod = sys.modules.get("bayesslr.sweep.executors")
    return mod.SchedulerLost if mod is not None else _NeverRaised


class _NeverRaised(Exception):
    pass


def _exit(rc: int, *, console: bool) -> None:
    """Leave with ``rc``. From the console entry point, a process that still runs an
    abandoned in-process cell (an interrupt stopped the sweep inside it), or that was
    interrupted (130/143: nothing is left to wait for, dask's exit hooks included), leaves
    with :func:`os._exit` after flushing: tearing the interpreter down under a thread that
    is inside compiled code can crash it. Finished cells are already on disk (fsync-ed)."""
    executors = sys.modules.get("bayesslr.sweep.executors")
    if console and (rc in (130, 143) or (executors is not None
                                         and executors.abandoned_cells())):
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
    from bayesslr.core.jaxconfig import configure_jax

    configure_jax()
    try:
        rc = build_app()(args=argv, standalone_mode=False)
    except ConfigError as exc:
        _fail(str(exc))
    except StoreError as exc:
        _fail(str(exc), EXIT_WRITE_FAILED)
    except _cell_failed() as exc:
        _fail(str(exc), EXIT_CELLS_FAILED)
    except _scheduler_lost() as exc:
        _fail(str(exc), EXIT_SCHEDULER_LOST)
    except _interrupted() as exc:
        print(f"bayesslr: {exc}", file=sys.stderr)
        _exit(exc.exit_code, console=argv is None)
    except (typer.Abort, KeyboardInterrupt):
        print("bayesslr: interrupted", file=sys.stderr)
        sys.exit(130)
    except TyperException as exc:  # usage errors: unknown option, bad type, missing argument
        if type(exc).__name__ == "NoArgsIsHelpError":  # a bare group: its help, lines kept
            print(exc.format_message().rstrip(), file=sys.stderr)
            sys.exit(EXIT_BAD_INPUT)
        fmt = getattr(exc, "format_message", None)
        _fail(fmt() if callable(fmt) else str(exc))
    _exit(rc if isinstance(rc, int) else 0, console=argv is None)


if __name__ == "__main__":
    main()
