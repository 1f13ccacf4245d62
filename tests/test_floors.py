"""The package's floors (docs/architecture.md): each floor imports only the floors below it,
core -> registry -> families -> results -> sweep -> report -> cli, so there is no import
circle. Every ``import`` of ``bayesslr`` modules is read with :mod:`ast`, those inside
functions too (a lazy import is still a dependency)."""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parent.parent / "bayesslr"
FAMILIES = ("population", "bayes", "erm", "theory", "amp", "inference", "multihead")
FLOORS: dict[str, int] = {"core": 0, "registry": 1, **dict.fromkeys(FAMILIES, 2),
                          "results": 3, "export": 3, "posteriors": 3, "ground_truth": 3,
                          "sweep": 4, "report": 5, "commands": 6,
                          "cli": 6, "__main__": 6}


def floor_of(module: str) -> tuple[str, int] | None:
    """``bayesslr.erm.method`` -> ``("erm", 2)``; the front door ``bayesslr`` -> None."""
    parts = module.split(".")
    if parts[0] != "bayesslr" or len(parts) == 1:
        return None
    room = parts[1]
    return room, FLOORS[room]


def imports_of(path: Path) -> list[tuple[str, int]]:
    """Every ``bayesslr`` module imported in ``path``, with the line."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    here = ".".join(path.relative_to(PACKAGE.parent).with_suffix("").parts)
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
    "multihead": (),  # the multi-head model (docs/multihead.md): core only, not yet registered
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
