"""The package's floors (docs/architecture.md): each floor imports only the floors below it,
core -> registry -> families -> results -> sweep -> report -> cli, so there is no import
circle; and the generic layers (core, registry, results, sweep, report, the command line)
import no family package: they reach a family only through its registry entry. Every
``import`` of ``bayesslr`` modules is read with :mod:`ast`, those inside functions too (a lazy
import is still a dependency)."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parent.parent / "bayesslr"
FAMILIES = ("population", "bayes", "erm", "theory", "amp", "inference", "multihead")
FLOORS: dict[str, int] = {"core": 0, "registry": 1, **dict.fromkeys(FAMILIES, 2),
                          "results": 3, "export": 3, "posteriors": 3, "ground_truth": 3,
                          "crosslibrary": 3,
                          "sweep": 4, "report": 5, "commands": 6,
                          "cli": 6, "__main__": 6}


def floor_of(module: str) -> tuple[str, int] | None:
    """``bayesslr.erm.method`` -> ``("erm", 2)``; the front door ``bayesslr`` -> None."""
    parts = module.split(".")
    if parts[0] != "bayesslr" or len(parts) == 1:
        return None
    room = parts[1]
    return room, FLOORS[room]


def module_of(path: Path) -> str:
    """``.../bayesslr/erm/method.py`` -> ``bayesslr.erm.method``."""
    return ".".join(path.relative_to(PACKAGE.parent).with_suffix("").parts)


def imports_of(path: Path, here: str | None = None) -> list[tuple[str, int]]:
    """Every ``bayesslr`` module imported in ``path`` (the module ``here``, by default the
    one at that path in the package), with the line."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    here = here if here is not None else module_of(path)
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out += [(a.name, node.lineno) for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:  # relative: resolve against this module's package
                base = here.split(".")[: -node.level]
                name = ".".join(base + ([node.module] if node.module else []))
            else:
                name = node.module or ""
            out.append((name, node.lineno))
            out += [(f"{name}.{a.name}", node.lineno) for a in node.names
                    if f"{name}.{a.name}".split(".")[1:2] and (
                        PACKAGE / Path(*f"{name}.{a.name}".split(".")[1:])).with_suffix(
                        ".py").exists()]
    return [(n, line) for n, line in out if n.startswith("bayesslr")]


# the layers that must name no family: they read the registry (MethodSpec, ReportRole,
# Checkpoints, Recompute, Prerequisites) instead. Floor 3 beside them holds the public APIs
# built on families (export, posteriors, ground_truth), which the command line may call.
GENERIC = ("core", "registry", "results", "sweep", "report", "commands", "cli", "__main__")


def family_imports(path: Path, here: str | None = None) -> list[str]:
    """The imports of a family package (a floor-2 room) in the module ``here`` at ``path``
    when that module belongs to a generic layer; empty otherwise."""
    here = here if here is not None else module_of(path)
    mine = floor_of(here.removesuffix(".__init__"))
    if mine is None or mine[0] not in GENERIC:
        return []
    out = []
    for name, line in imports_of(path, here):
        theirs = floor_of(name)
        if theirs is not None and theirs[1] == 2:
            out.append(f"{here}:{line} ({mine[0]}) imports {name}")
    return out


def test_generic_layers_import_no_family_package():
    bad = [b for path in sorted(PACKAGE.rglob("*.py")) for b in family_imports(path)]
    assert not bad, "\n".join(bad)


@pytest.mark.parametrize("room", ["sweep.runner", "report.figures.x", "commands.x", "cli",
                                  "results.load", "core.files"])
def test_the_generic_rule_catches_a_family_import(tmp_path, room):
    """The rule above fails on a lazy import of a family module from a generic layer, and
    lets registry and floor-3 imports through."""
    f = tmp_path / "m.py"
    f.write_text("from bayesslr.registry import families\n"
                 "from bayesslr.posteriors.target import target\n"
                 "def f():\n    from bayesslr.theory.checkpoint import CHECKPOINT_ENV\n")
    bad = family_imports(f, f"bayesslr.{room}")
    assert bad == [f"bayesslr.{room}:4 ({room.split('.')[0]}) imports "
                   "bayesslr.theory.checkpoint"]
    assert family_imports(f, "bayesslr.export.x") == []  # floor 3, not a generic layer


def test_every_module_is_on_a_floor():
    rooms = {p.relative_to(PACKAGE).parts[0].removesuffix(".py")
             for p in PACKAGE.rglob("*.py")} - {"__init__"}
    assert rooms <= set(FLOORS), rooms - set(FLOORS)


def test_no_module_imports_a_floor_above_its_own():
    upward = []
    for path in sorted(PACKAGE.rglob("*.py")):
        module = ".".join(path.relative_to(PACKAGE.parent).with_suffix("").parts)
        mine = floor_of(module.removesuffix(".__init__"))
        if mine is None:
            continue  # the front door (bayesslr/__init__.py) names the public API lazily
        for name, line in imports_of(path):
            theirs = floor_of(name)
            if theirs is None:
                continue
            same_family = theirs[0] == mine[0]
            if theirs[1] > mine[1] or (theirs[1] == mine[1] == 2 and not same_family
                                       and not _family_may_use(mine[0], theirs[0])):
                upward.append(f"{path.relative_to(PACKAGE)}:{line} ({mine[0]}) imports {name}")
    assert not upward, "\n".join(upward)


# a family may build on the ones it is made of (its math is theirs), never on a later one
FAMILY_USES: dict[str, tuple[str, ...]] = {
    "population": (),
    "theory": ("population",),
    "bayes": (),
    "amp": ("theory", "population", "bayes"),
    "erm": ("theory", "population"),
    "inference": ("bayes", "theory", "amp", "erm", "population"),
    # the multi-head model (docs/multihead.md), the `multihead` family: its ERM reuses the one-head
    # L-BFGS steps (erm.lbfgs), its sampler the NUTS layer and the diagnostics (bayes)
    "multihead": ("erm", "bayes"),
}


def _family_may_use(mine: str, theirs: str) -> bool:
    return theirs in FAMILY_USES[mine]


def test_the_floor_graph_has_no_circle_between_families():
    seen: dict[str, int] = {}

    def depth(f: str, stack: tuple[str, ...] = ()) -> int:
        assert f not in stack, f"circle: {' -> '.join((*stack, f))}"
        if f not in seen:
            seen[f] = 1 + max((depth(g, (*stack, f)) for g in FAMILY_USES[f]), default=0)
        return seen[f]

    for f in FAMILY_USES:
        depth(f)
