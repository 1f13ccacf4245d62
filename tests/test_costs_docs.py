"""One source of cost figures (issue 36, item 4): the costs the docs quote for the presets are
the cost model's (``bayesslr run --preset NAME --dry-run`` from an empty directory and empty
caches), checked here so that they cannot drift from it again: the presets table of README.md,
the generated table of benchmarks/README.md ("The presets by the model now") and the costs of
docs/finite-size.md and docs/paper.md.

``python tests/test_costs_docs.py`` rewrites the generated table of benchmarks/README.md and
prints the README rows' cost cells.
"""

from __future__ import annotations

import os
import re
import sys
import tempfile
from functools import cache
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
BEGIN = ("<!-- preset costs: generated from the cost model by tests/test_costs_docs.py "
         "(python tests/test_costs_docs.py rewrites it) -->")
END = "<!-- end preset costs -->"
WORKERS = 2  # the docs' machine: two cores, --workers 2


@cache
def model_costs() -> dict[str, dict]:
    """Per preset: ``cells`` and the model's core-seconds by family (``total`` too), as
    ``--dry-run`` prints them from an empty directory, the replica caches empty."""
    from bayesslr.sweep.config import load_preset, preset_names
    from bayesslr.sweep.cost import estimate

    saved = {k: os.environ.get(k) for k in ("BAYESSLR_REPLICA_CACHE",
                                            "BAYESSLR_PATH_CHECKPOINTS")}
    with tempfile.TemporaryDirectory() as empty:
        for k in saved:
            os.environ[k] = str(Path(empty) / k)
        try:
            out = {}
            for name in preset_names():
                cells = load_preset(name).cells
                out[name] = {"cells": len(cells), "cost": estimate(cells)}
        finally:
            for k, v in saved.items():
                if v is None:
                    os.environ.pop(k, None)
                else:
                    os.environ[k] = v
    return out


def fmt(seconds: float) -> str:
    from bayesslr.commands.run import _fmt_seconds  # --dry-run's own formatting

    return _fmt_seconds(seconds)


def readme_cost(name: str) -> str:
    """The start of a preset's cost cell in README.md's presets table."""
    total = model_costs()[name]["cost"]["total"]
    return f"{fmt(total)} of core time, {fmt(total / WORKERS)} with `--workers {WORKERS}`"


def generated_table() -> str:
    rows = [BEGIN, "", "| preset | cells | core time | wall, `--workers 2` | by family |",
            "|---|---|---|---|---|"]
    for name, m in model_costs().items():
        cost = dict(m["cost"])
        total = cost.pop("total")
        parts = ", ".join(f"{k} {fmt(v)}" for k, v in sorted(cost.items()))
        rows.append(f"| `{name}` | {m['cells']} | {fmt(total)} | {fmt(total / WORKERS)} | "
                    f"{parts} |")
    return "\n".join([*rows, "", END])


def _block(text: str) -> str:
    start, end = text.index(BEGIN), text.index(END) + len(END)
    return text[start:end]


def test_readme_presets_table_quotes_the_model():
    text = (REPO / "README.md").read_text()
    rows = dict(re.findall(r"^\| `([\w-]+)` \| [^|]+ \| ([^|]+) \|$", text, re.M))
    assert set(model_costs()) <= set(rows), set(model_costs()) - set(rows)
    wrong = {name: (rows[name].strip(), readme_cost(name)) for name in model_costs()
             if not rows[name].strip().startswith(readme_cost(name))}
    assert wrong == {}, ("README.md's presets table is not the cost model's (left: the "
                         "README, right: the model); python tests/test_costs_docs.py prints "
                         f"the cells: {wrong}")


def test_benchmarks_readme_table_is_the_generated_one():
    text = (REPO / "benchmarks" / "README.md").read_text()
    assert _block(text) == generated_table(), (
        "benchmarks/README.md's preset costs are not the cost model's: run "
        "python tests/test_costs_docs.py")


def test_finite_size_doc_quotes_the_model():
    m = model_costs()["finite-size"]
    cost = m["cost"]
    text = " ".join((REPO / "docs" / "finite-size.md").read_text().split())
    assert (f"**Cost**: {m['cells']} cells, {fmt(cost['total'])} of core time by the "
            "calibrated cost model") in text
    assert f"ERM {fmt(cost['erm'])}" in text
    assert f"the replica's optimal `lam` {fmt(cost['erm (replica lam)'])} by the model" in text
    assert f"NUTS {fmt(cost['bayes_sampling'])}" in text


def test_paper_doc_quotes_the_model():
    total = model_costs()["paper"]["cost"]["total"]
    text = " ".join((REPO / "docs" / "paper.md").read_text().split())
    assert (f"{fmt(total)} of core time by the calibrated cost model, {fmt(total / WORKERS)} "
            f"on two cores with `--workers {WORKERS}`") in text


def test_no_stale_cost_figure_is_quoted_as_current():
    """The figures issue 36 found (11.3 and 13.7 core-hours for the paper preset, ~3 for the
    finite-size one, 'days of core time') are history where they remain, never 'now'."""
    bench = (REPO / "benchmarks" / "README.md").read_text()
    assert "(the preset now)" not in bench
    assert "is days of core time" not in bench
    readme = (REPO / "README.md").read_text()
    assert "~3 core-hours" not in readme and "about 8 core-hours" not in readme


if __name__ == "__main__":
    sys.path.insert(0, str(REPO))
    path = REPO / "benchmarks" / "README.md"
    text = path.read_text()
    path.write_text(text.replace(_block(text), generated_table()))
    for name in model_costs():
        print(f"{name}: {readme_cost(name)}")
