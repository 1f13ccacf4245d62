"""First contact (issue 36, items 3 and 6): what a new user meets before any result. The
package imports without its optional extras, it carries a licence and a citation, the bare
command groups print their usage on several lines, the tables fit 80 columns, the help is
typed and states each default."""

from __future__ import annotations

import subprocess
import sys
import textwrap
import tomllib

import yaml

import bayesslr
from conftest import REPO

# the optional extras of pyproject.toml, by the top-level modules they install
EXTRA_MODULES = ("pymc", "pytensor", "nutpie", "blackjax", "dask", "distributed", "jupytext",
                 "nbclient", "nbconvert", "ipykernel", "posteriordb", "cryptography")


def test_every_module_imports_without_the_optional_extras():
    """Item 6: ``pytest --doctest-modules bayesslr`` imports every module; none may import an
    optional extra at its top (``bayesslr/export/slr_pymc.py`` imported PyMC). The extras are
    made absent (``sys.modules[name] = None``: ``import`` fails and ``find_spec`` says not
    installed), every module of the package is imported, and the PyMC model says what it
    needs when called."""
    probe = textwrap.dedent(f"""
        import importlib, pkgutil, sys
        for name in {EXTRA_MODULES!r}:
            sys.modules[name] = None
        import bayesslr
        bad = []
        for m in pkgutil.walk_packages(bayesslr.__path__, "bayesslr."):
            try:
                importlib.import_module(m.name)
            except Exception as exc:
                bad.append(f"{{m.name}}: {{type(exc).__name__}}: {{exc}}")
        from bayesslr.export.slr_pymc import model
        try:
            model({{}})
        except ImportError as exc:
            assert "pip install pymc" in str(exc), exc
        else:
            bad.append("slr_pymc.model ran without PyMC")
        print("\\n".join(bad))
        """)
    run = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True,
                         cwd=REPO, timeout=300)
    assert run.returncode == 0, run.stderr[-3000:]
    assert run.stdout.strip() == "", run.stdout


def test_licence_is_mit_as_the_pyproject_says():
    meta = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    assert meta["license"] == "MIT"
    text = (REPO / "LICENSE").read_text()
    assert text.startswith("MIT License\n")
    assert "Permission is hereby granted, free of charge" in text


def test_citation_cites_the_software_and_the_paper():
    cff = yaml.safe_load((REPO / "CITATION.cff").read_text(encoding="utf-8"))
    assert cff["cff-version"] == "1.2.0" and cff["type"] == "software"
    assert str(cff["version"]) == bayesslr.__version__  # bumped with the package
    assert cff["license"] == "MIT"
    (paper,) = [r for r in cff["references"] if "2509.21936" in str(r.get("identifiers"))]
    assert paper["title"] == ("Statistical Advantage of Softmax Attention: Insights from "
                              "Single-Location Regression")
    assert [a["family-names"] for a in paper["authors"]] == [
        "Duranthon", "Marion", "Boyer", "Loureiro", "Zdeborová"]
    assert paper["year"] == 2025
