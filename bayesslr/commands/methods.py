"""``bayesslr methods``: the registered families, their verbs, options, outputs and versions."""

from __future__ import annotations

import json

import typer
from rich.console import Console

from bayesslr.commands.common import JSON_FLAG_HELP, flag, text_table
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
    if family is None:  # every table wraps its long cells instead of cutting them
        rows = []
        for name, s in specs.items():
            acts = ", ".join(s.activations) if len(s.activations) <= 6 else (
                f"{', '.join(s.activations[:3])}, ... ({len(s.activations)})")
            what = s.description + (f"; activations: {acts}" if acts else "")
            rows.append((name, s.version, " ".join(s.face.verb or (name,)),
                         str(len(s.schema.opts)), what))
        console.print(text_table("method families", ("family", "version", "verb", "options",
                                                     "description"),
                                 rows, keep=("family", "version", "verb", "options")))
        return
    spec = specs[family]
    # a list default written "0.001, 0.01, ..." so that it wraps between its numbers
    console.print(text_table(
        f"{family} options (version {spec.version})", ("name", "default", "allowed", "doc"),
        ((r["name"], r["default"].replace(",", ", "), r["allowed"], r["doc"])
         for r in spec.schema.table()), keep=("name",)))
    console.print(text_table(
        f"{family} outputs", ("name", "units", "long_name"),
        ((o.name, o.units, o.long_name + (f" (standard error: {o.stderr})" if o.stderr else ""))
         for o in spec.outputs), keep=("name", "units")))


def add_methods_verb(app: typer.Typer) -> None:
    app.command("methods")(methods)
