"""The ``bayesslr`` command. Thin: each verb lives in :mod:`bayesslr.commands` (``register(app)``).

Bad input exits with code 2 and one line on stderr naming the problem (never a traceback).
"""

from __future__ import annotations

import importlib
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


def _fail(message: str) -> None:
    message = " ".join(str(message).split())
    if message:  # click's "no arguments: show help" carries no message
        print(f"bayesslr: error: {message}", file=sys.stderr)
    sys.exit(2)


def main(argv: list[str] | None = None) -> None:
    """Console entry point.

    Usage errors (unknown option, bad type) and :class:`ConfigError` (a value out of range)
    both exit with code 2 and print one line; Ctrl-C exits with 130.
    """
    from bayesslr.jaxconfig import configure_jax

    configure_jax()
    try:
        rc = app(args=argv, standalone_mode=False)
    except ConfigError as exc:
        _fail(str(exc))
    except (typer.Abort, KeyboardInterrupt):
        print("bayesslr: interrupted", file=sys.stderr)
        sys.exit(130)
    except TyperException as exc:  # usage errors: unknown option, bad type, missing argument
        fmt = getattr(exc, "format_message", None)
        _fail(fmt() if callable(fmt) else str(exc))
    sys.exit(rc if isinstance(rc, int) else 0)


if __name__ == "__main__":
    main()
