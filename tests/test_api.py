"""The Python API: every public entry documented with an example that runs, the README's
Python section runs, no set-up at import, and one code path per method (the theory CLI and a
sweep of the same cells give the same numbers)."""

from __future__ import annotations

import doctest
import json
import re
import subprocess
import sys
from pathlib import Path

import pytest
import xarray as xr

import bayesslr
from bayesslr.sweep.config import parse_config
from bayesslr.sweep.runner import run_sweep
from conftest import run_cli

REPO = Path(__file__).resolve().parent.parent
PUBLIC = [n for n in bayesslr.__all__ if n != "__version__"]


@pytest.mark.parametrize("name", PUBLIC)
def test_public_entry_has_a_numpydoc_example_that_runs(name):
    obj = getattr(bayesslr, name)
    doc = obj.__doc__ or ""
    assert "Examples\n" in doc and "--------" in doc, f"{name} has no Examples section"
    tests = [t for t in doctest.DocTestFinder(recurse=False).find(obj, name)
             if t.examples]
    if "See :func:" in doc.split("Examples", 1)[1]:
        return  # documented by the example of the function that makes it
    assert tests, f"{name}: its Examples section holds no >>> line"
    runner = doctest.DocTestRunner(optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE)
    for t in tests:
        runner.run(t)
    assert runner.failures == 0, f"{name}: {runner.failures} example(s) failed"


def test_readme_python_section_runs(tmp_path, monkeypatch):
    text = (REPO / "README.md").read_text()
    section = text.split("## Python", 1)[1]
    code = re.search(r"```python\n(.*?)```", section, re.S).group(1)
    assert len(code.strip().splitlines()) <= 14  # a ten-line example (plus imports)
    monkeypatch.chdir(tmp_path)
    exec(compile(code, "README.md#python", "exec"), {})


def test_import_changes_no_environment_variable_and_no_jax_setting():
    """Beyond what importing JAX itself does, ``import bayesslr`` (and touching its API)
    changes no environment variable and no JAX configuration value."""
    code = """
import json, os
import jax
env0 = dict(os.environ)
cfg0 = {k: repr(v) for k, v in jax.config.values.items()}
import bayesslr, bayesslr.cli, bayesslr.sweep, bayesslr.report
bayesslr.make_task, bayesslr.fit_erm, bayesslr.sample_posterior, bayesslr.run
cfg1 = {k: repr(v) for k, v in jax.config.values.items()}
print(json.dumps({"env": dict(os.environ) == env0,
                  "jax": [k for k in cfg0 if cfg0[k] != cfg1.get(k)]}))
"""
    env = {k: v for k, v in __import__("os").environ.items() if not k.startswith("BAYESSLR")}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=120, env=env, check=True).stdout
    got = json.loads(out.strip().splitlines()[-1])
    assert got == {"env": True, "jax": []}


def test_theory_cli_and_a_sweep_of_the_same_cells_agree(tmp_path, capsys):
    """``bayesslr theory bayes`` and a sweep of the same cells (continuation along the same
    alpha list), including points in the hard window of spiked L=3, nu=2, Delta=0 (the
    uninformed branch persists up to alpha ~ 1.25), give the same numbers."""
    alphas = [1.1, 1.2, 2.0]
    argv = ["theory", "bayes", "--L", "3", "--nu", "2", "--delta", "0", "--alpha",
            ",".join(map(str, alphas)), "--samples", "2000", "--test-samples", "2000",
            "--json"]
    code, out, err = run_cli(argv, capsys)
    assert code == 0, err
    cli = json.loads(out)["points"]
    assert any(p["hard_phase"] for p in cli)  # the check covers the hard window
    cfg = parse_config({"name": "se", "defaults": {"variant": "spiked", "L": 3, "nu": 2.0,
                                                   "delta": 0.0},
                        "options": {"theory_bayes": {"samples": 2000, "test_samples": 2000}},
                        "grid": [{"methods": ["theory_bayes"], "alpha": alphas,
                                  "continuation": True}]})
    summary = run_sweep(cfg, tmp_path / "r", progress=False)
    ds = xr.open_dataset(summary.dataset, group="theory_bayes", engine="h5netcdf")
    for p in cli:
        row = ds.sel({"method": "theory_bayes", "alpha": p["alpha"]}).isel(seed=0).squeeze()
        for key in ("test_error", "stderr", "m_k", "m_v", "test_error_informed",
                    "test_error_uninformed", "free_entropy"):
            assert float(row[key]) == pytest.approx(p[key], rel=1e-12, abs=1e-15), key
        assert bool(row["hard_phase"]) == p["hard_phase"]
