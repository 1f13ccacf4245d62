"""The command line of the inference family's resumable studies over a work directory.

``python benchmarks/studies/ground_truth.py`` (the stored reference) and
``python benchmarks/studies/trapping.py`` (the trapping map) each have subcommands that read or
write ``--work DIR``, and select their runs with repeatable ``--only field=value`` filters;
both are built here (the library itself has no command line but ``bayesslr``).
"""

from __future__ import annotations

import argparse
import math
from collections.abc import Mapping
from pathlib import Path
from typing import Any


def study_parser(prog: str, commands: Mapping[str, str],
                 only: tuple[str, ...] = ()) -> tuple[argparse.ArgumentParser,
                                                       dict[str, argparse.ArgumentParser]]:
    """A parser with one subcommand per ``commands`` entry (name -> help), each taking
    ``--work DIR``; those named in ``only`` take the ``--only field=value`` filter too.

    Returns
    -------
    (argparse.ArgumentParser, dict)
        The parser and each subcommand's parser (for its own arguments).
    """
    ap = argparse.ArgumentParser(prog=prog)
    sub = ap.add_subparsers(dest="cmd", required=True)
    subs = {}
    for name, help_ in commands.items():
        p = sub.add_parser(name, help=help_)
        p.add_argument("--work", required=True, type=Path)
        if name in only:
            p.add_argument("--only", action="append", default=[],
                           help="field=value filter, repeatable")
        subs[name] = p
    return ap, subs


def selected(fields: Mapping[str, Any], only: list[str]) -> bool:
    """Whether a run with ``fields`` passes every ``field=value`` filter of ``only``: the value
    as text, or a number equal to it (``alpha=2`` selects ``alpha = 2.0``)."""
    for cond in only:
        name, _, text = cond.partition("=")
        x = fields[name]
        if not (str(x) == text or (isinstance(x, int | float) and not isinstance(x, bool)
                                   and math.isclose(float(x), float(text)))):
            return False
    return True
