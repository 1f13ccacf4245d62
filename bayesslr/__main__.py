"""The ``bayesslr`` command's entry point (``[project.scripts]`` and ``python -m bayesslr``):
the signal handlers of :mod:`bayesslr.core.startup` first, then the CLI (:mod:`bayesslr.cli`),
so that an interrupt during the seconds of heavy imports ends in one line (issue 25)."""

from bayesslr.core import startup


def main() -> None:
    """Console entry point: handlers, output that a closed pipe cannot fail
    (:func:`~bayesslr.core.startup.tolerate_closed_output`), then :func:`bayesslr.cli.main` on
    ``sys.argv``."""
    startup.install()
    startup.console = True
    startup.tolerate_closed_output()
    from bayesslr.cli import main as cli_main

    cli_main()


if __name__ == "__main__":
    main()
