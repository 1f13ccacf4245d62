"""The ``bayesslr`` command. Thin: each verb lives in :mod:`bayesslr.commands` (``register(app)``).

Bad input exits with code 2 and one line on stderr naming the problem (never a traceback).
"""

from __future__ import annotations

import importlib
import sys

import typer

from bayesslr.task import ConfigError

# verb modules, each with ``register(app)``
COMMAND_MODULES: tuple[str, ...] = (
    "bayesslr.commands.population",
    "bayesslr.commands.run",
)

app = typer.Typer(
    name="bayesslr",
    help="Single-location regression: Bayes-optimal sampling vs attention ERM vs theory.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)

for _mod in COMMAND_MODULES:
    importlib.import_module(_mod).register(app)


def main() -> None:
    """Console entry point: run the app, turning configuration errors into exit code 2."""
    try:
        app(standalone_mode=True)
    except ConfigError as exc:
        print(f"bayesslr: error: {exc}", file=sys.stderr)
        sys.exit(2)


if __name__ == "__main__":
    main()
