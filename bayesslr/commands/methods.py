"""``bayesslr methods``: the registered families, their verbs, options, outputs and versions."""

from __future__ import annotations

import json

import typer
from rich.console import Console
from rich.table import Table

from bayesslr.commands.common import JSON_FLAG_HELP, flag
from bayesslr.registry import MethodSpec, families


def describe(spec: MethodSpec) -> dict:
    """One family as data: what ``bayesslr methods --json`` prints for it."""
    return {"family": spec.family, "description": spec.description, "version": spec.version,
            "verb": " ".join(spec.face.verb or (spec.family,)),
            "activations": list(spec.activations), "needs": list(spec.needs),
            "options": spec.schema.table(),
            "outputs": [{"name": o.name, "long_name": o.long_name, "units": o.units,
                         "stderr": o.stderr, "dim": o.dim} for o in spec.outputs]}


def methods(
    family: str = typer.Argument(None, metavar="[FAMILY]",
                                 help="Show this family's options and outputs in full."),
    as_json: bool = flag("--json", JSON_FLAG_HELP),
) -> None:
    """List the method families: verb, version, activations, options and outputs."""
    from bayesslr.core.task import ConfigError

    specs = families()
    if family is not None:
        if family not in specs:
            raise ConfigError(f"family={family!r} is unknown; allowed: {', '.join(specs)}")
        specs = {family: specs[family]}
    if as_json:
        print(json.dumps({name: describe(s) for name, s in specs.items()}))
        return
    console = Console()
    if family is None:
        table = Table(title="method families")
        for col in ("family", "version", "verb", "activations", "options", "description"):
            table.add_column(col)
        for name, s in specs.items():
            acts = ", ".join(s.activations) if len(s.activations) <= 6 else (
                f"{', '.join(s.activations[:3])}, ... ({len(s.activations)})")
            table.add_row(name, s.version, " ".join(s.face.verb or (name,)), acts,
                          str(len(s.schema.opts)), s.description)
        console.print(table)
        return
    spec = specs[family]
    options = Table(title=f"{family} options (version {spec.version})")
    for col in ("name", "default", "allowed", "doc"):
        options.add_column(col)
    for row in spec.schema.table():
        options.add_row(*(row[c] for c in ("name", "default", "allowed", "doc")))
    console.print(options)
    outs = Table(title=f"{family} outputs")
    for col in ("name", "long_name", "units", "stderr"):
        outs.add_column(col)
    for o in spec.outputs:
        outs.add_row(o.name, o.long_name, o.units, o.stderr or "")
    console.print(outs)


def add_methods_verb(app: typer.Typer) -> None:
    app.command("methods")(methods)
