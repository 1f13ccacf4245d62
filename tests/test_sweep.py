"""Sweep runner: config validation, storage/resume, dataset layout, executors, interrupts.

The method used is the test-only family ``sweeptest`` (tests/sweep_plugin.py), a closed-form
function of the cell and its seed, loaded through ``$BAYESSLR_PLUGINS`` so that subprocesses
and dask workers see it too. Subprocess tests cost one JAX import each: there are two.
"""

from __future__ import annotations

import json
import math
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
import xarray as xr

from bayesslr.cli import main
from bayesslr.core.files import HOST
from bayesslr.core.task import ConfigError
from bayesslr.sweep.config import cell_key, parse_config
from bayesslr.sweep.dataset import comparable
from bayesslr.sweep.runner import run_sweep
from bayesslr.sweep.storage import ResultStore
from conftest import REPO

pytestmark = pytest.mark.usefixtures("plugin")  # the test family (conftest.py)


def tiny(**over) -> dict:
    raw = {"name": "tiny", "defaults": {"seeds": [0, 1], "variant": "max"},
           "grid": [{"methods": ["sweeptest:a", "sweeptest:b"], "alpha": [1, 2.5],
                     "nu": [1.0, "inf"]}]}
    raw.update(over)
    return raw


TINY_TOML = """name = "tiny"
[defaults]
seeds = [0, 1]
variant = "max"
[[grid]]
methods = ["sweeptest:a", "sweeptest:b"]
alpha = [1, 2.5]
nu = [1.0, "inf"]
"""


def write_toml(path: Path, text: str) -> Path:
    path.write_text(text)
    return path


def executions(log: Path) -> list[str]:
    return log.read_text().splitlines() if log.exists() else []


def snapshot(root: Path) -> dict[str, tuple[int, int, int]]:
    """(mtime_ns, inode, size) of every file under ``root``."""
    return {str(p.relative_to(root)): (p.stat().st_mtime_ns, p.stat().st_ino, p.stat().st_size)
            for p in sorted(root.rglob("*")) if p.is_file()}


# --------------------------------------------------------------------------------------------
# configuration
# --------------------------------------------------------------------------------------------
def test_grid_expansion_and_normalisation():
    raw = {"defaults": {"seeds": 3, "L": [2, "1,2,3"]},
           "options": {"sweeptest": {"sleep": 0}, "sweeptest:b": {"sleep": 0.0, "fail_seed": 7}},
           "grid": [{"methods": ["sweeptest:a", "sweeptest:b"], "alpha": [1, 2],
                     "lam": [0.1, "validation"], "D": 10},
                    {"methods": "sweeptest:a", "alpha": 1, "lam": 0.1, "D": 10, "seeds": [0]}]}
    cfg = parse_config(raw)
    assert len(cfg.cells) == 2 * 2 * 2 * 2 * 3  # second block duplicates the first
    assert {c.L for c in cfg.cells} == {"2", "1,2,3"}
    assert {c.lam for c in cfg.cells} == {0.1, "validation"}
    assert all(isinstance(c.alpha, float) for c in cfg.cells)
    b = next(c for c in cfg.cells if c.method == "sweeptest:b")
    assert dict(b.options) == {"sleep": 0.0, "fail_seed": 7}
    assert cfg.dims == ["variant", "L", "nu", "delta", "alpha", "lam", "D"]
    # the digest ignores name/description and sees every value
    assert parse_config({**raw, "name": "other"}).digest() == cfg.digest()
    assert parse_config({**raw, "grid": raw["grid"][::-1]}).digest() == cfg.digest()
    raw["grid"][0]["alpha"] = [1, 3]
    assert parse_config(raw).digest() != cfg.digest()


@pytest.mark.parametrize("change, needle", [
    ({"grid": [{"methods": ["nosuch:thing"], "alpha": 1}]}, "method='nosuch:thing' is unknown"),
    ({"grid": [{"methods": ["sweeptest:c"], "alpha": 1}]}, "sweeptest:a"),
    ({"grid": [{"methods": ["sweeptest:a"], "alpha": -1}]}, "grid[0].alpha=-1"),
    ({"grid": [{"methods": ["sweeptest:a"], "alpha": []}]}, "grid[0].alpha=[] is empty"),
    ({"grid": []}, "grid is empty"),
    ({"grid": [{"methods": [], "alpha": 1}]}, "methods=[] is empty"),
    ({"grid": [{"methods": ["sweeptest:a"], "alpha": 1, "nu": "abc"}]}, "grid[0].nu='abc'"),
    ({"grid": [{"methods": ["sweeptest:a"], "alpha": True}]}, "grid[0].alpha=True"),
    ({"grid": [{"methods": ["sweeptest:a"], "alpha": 1, "seeds": [1.5]}]}, "seeds[0]=1.5"),
    ({"grid": [{"methods": ["sweeptest:a"], "alpha": 1, "D": "10"}]}, "grid[0].D='10'"),
    ({"grid": [{"methods": ["sweeptest:a"], "alpha": 1, "alhpa": 2}]}, "grid[0].alhpa"),
    ({"grid": [{"methods": ["sweeptest:a"]}]}, "needs alpha"),
    ({"grid": [{"methods": ["sweeptest:a"], "alpha": 1, "variant": "spiked", "nu": "inf"}]},
     "nu=inf is not allowed"),
    ({"grid": [{"methods": ["sweeptest:a"], "alpha": 1, "D": 5, "sqrtND": 10}]},
     "both D and sqrtND"),
])
def test_bad_configs_name_the_problem(change, needle):
    with pytest.raises(ConfigError) as exc:
        parse_config(tiny(**change))
    assert needle in str(exc.value)


BAD_TOML = {
    "unknown method": 'grid = [{methods = ["erm_typo:softmax"], alpha = 1}]',
    "negative alpha": 'grid = [{methods = ["sweeptest:a"], alpha = [1, -2]}]',
    "empty grid": "grid = []",
    "wrong type": 'grid = [{methods = ["sweeptest:a"], alpha = 1, seeds = "zero"}]',
    "not toml": "grid = [",
}


def test_cli_bad_configs_exit_2_and_touch_nothing(tmp_path, capsys, plugin):
    """Each bad config: exit 2, one line on stderr, no computation, the directory untouched."""
    out = tmp_path / "out"
    good = write_toml(tmp_path / "good.toml",
                      'grid = [{methods = ["sweeptest:a"], alpha = 1, seeds = [0]}]')
    with pytest.raises(SystemExit) as e:
        main(["run", "--config", str(good), "--out", str(out), "--quiet"])
    assert e.value.code == 0
    (out / "notes.txt").write_text("mine")
    before = snapshot(out)
    n_exec = len(executions(plugin))
    capsys.readouterr()
    cases = [(["--config", str(write_toml(tmp_path / f"bad{i}.toml", text))], name)
             for i, (name, text) in enumerate(BAD_TOML.items())]
    other = write_toml(tmp_path / "other.toml",
                       'grid = [{methods = ["sweeptest:a"], alpha = 2, seeds = [0]}]')
    cases.append((["--config", str(other)], "different config"))
    cases.append((["--config", str(good), "--workers", "0"], "workers"))
    for args, name in cases:
        with pytest.raises(SystemExit) as e:
            main(["run", *args, "--out", str(out), "--quiet"])
        err = capsys.readouterr().err.strip()
        assert e.value.code == 2, name
        assert len(err.splitlines()) == 1 and err.startswith("bayesslr: error:"), (name, err)
        assert snapshot(out) == before, name
    # a path that cannot be written: under a regular file
    with pytest.raises(SystemExit) as e:
        main(["run", "--config", str(good), "--out", str(out / "notes.txt" / "x"), "--quiet"])
    err = capsys.readouterr().err.strip()
    assert e.value.code == 2 and len(err.splitlines()) == 1 and "notes.txt" in err
    assert snapshot(out) == before
    # a scheduler nobody listens at: refused before the (new) directory is created
    with pytest.raises(SystemExit) as e:
        main(["run", "--config", str(good), "--out", str(tmp_path / "fresh"), "--scheduler",
              "tcp://127.0.0.1:1", "--quiet"])
    err = capsys.readouterr().err.strip()
    assert e.value.code == 2 and "cannot be reached" in err and len(err.splitlines()) == 1
    assert not (tmp_path / "fresh").exists()
    assert len(executions(plugin)) == n_exec


# --------------------------------------------------------------------------------------------
# storage, dataset, resume
# --------------------------------------------------------------------------------------------
def test_dataset_layout_failures_and_broadcast(tmp_path, plugin):
    raw = tiny(options={"sweeptest": {"fail_seed": 1}})
    raw["grid"].append({"methods": ["sweeptest:b"], "alpha": 7, "nu": 1.0, "D": 20})
    cfg = parse_config(raw)
    summary = run_sweep(cfg, tmp_path / "r", progress=False)
    assert summary.failed == len([c for c in cfg.cells if c.seed == 1])
    root = xr.open_dataset(summary.dataset, engine="h5netcdf").load()
    assert json.loads(root.attrs["config"])["name"] == "tiny"
    for key in ("bayesslr_version", "git_revision", "monte_carlo_sizes", "Conventions"):
        assert key in root.attrs
    # the group 'cells' lists every cell, failures with their error
    cells = xr.open_dataset(summary.dataset, group="cells", engine="h5netcdf").load()
    assert cells.sizes["cell"] == len(cfg.cells)
    assert set(cells["status"].values.tolist()) == {"ok", "failed"}
    # each cell's measured wall and CPU time (bayesslr.core.cputime)
    assert cells["cpu_s"].attrs["units"] == "s"
    assert (cells["cpu_s"] >= 0).all() and (cells["runtime_s"] >= 0).all()
    ds = xr.open_dataset(summary.dataset, group="sweeptest", engine="h5netcdf").load()
    assert list(ds["test_error"].dims) == ["method", "variant", "L", "nu", "delta", "alpha",
                                           "D", "seed"]
    assert ds["test_error"].attrs["long_name"].startswith("test excess error")
    assert ds["test_error"].attrs["standard_error"] == "stderr"
    # a list output is a variable along its own dimension, padded with NaN
    assert ds["trace"].dims[-1] == "step" and ds.sizes["step"] == 8  # alpha = 7: 8 values
    t0 = ds["trace"].sel({"method": "sweeptest:a", "variant": "max", "L": "3", "delta": 0.0,
                          "alpha": 1.0, "nu": 1.0, "seed": 0}).isel(D=0).values
    np.testing.assert_array_equal(t0, [1.0, 0.5] + [np.nan] * 6)
    assert ds["runtime_s"].attrs["units"] == "s"
    a = ds.sel({"method": "sweeptest:a", "variant": "max", "L": "3", "delta": 0.0,
                "alpha": [1.0, 2.5]})
    # cells without D hold for every D (broadcast); failed cells are NaN with their error
    np.testing.assert_array_equal(a["test_error"].sel(D=20, seed=0).values,
                                  a["test_error"].sel(seed=0).isel(D=0).values)
    assert np.isnan(a["test_error"].sel(seed=1)).all()
    assert (a["status"].sel(seed=1) == "failed").all()
    assert "planned failure at seed 1" in str(a["error"].sel(seed=1, alpha=1, nu=1.0).item())
    assert ds["init"].dtype.kind == "U" and ds["converged"].dtype == np.float64
    b = ds.sel({"method": "sweeptest:b", "variant": "max", "L": "3", "delta": 0.0,
                "nu": 1.0, "seed": 0, "D": 20})
    assert np.isfinite(b["test_error"].sel(alpha=7.0)) and np.isfinite(b["test_error"].sel(
        alpha=1.0))
    assert ds.sel({"method": "sweeptest:a", "nu": math.inf}).sizes["alpha"] == 3
    assert (ds["status"].sel({"method": "sweeptest:a", "alpha": 7.0}) == "").all()


def test_resume_recomputes_only_missing_unreadable_and_failed(tmp_path, plugin):
    cfg = parse_config(tiny())
    out = tmp_path / "r"
    first = run_sweep(cfg, out, progress=False)
    ref = xr.open_datatree(first.dataset, engine="h5netcdf").load()
    n = len(cfg.cells)
    assert len(executions(plugin)) == n
    store = ResultStore(out)
    victims = list(cfg.cells[:3])
    store.cell_path(victims[0]).unlink()
    store.cell_path(victims[1]).write_bytes(b"garbage")
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"],
                          capture_output=True, text=True, check=True).stdout.strip()
    killed = f".{cell_key(victims[2])}.nc.{HOST}.{dead}.00ff.tmp"  # a killed run's write
    (out / "cells" / killed).write_bytes(b"half a file")
    before = snapshot(out / "cells")
    second = run_sweep(cfg, out, progress=False)
    assert (second.reused, second.computed) == (n - 2, 2)
    assert len(executions(plugin)) == n + 2
    after = snapshot(out / "cells")
    untouched = {f"{cell_key(c)}.nc" for c in cfg.cells[2:]}
    assert all(after[f] == before[f] for f in untouched)
    assert killed not in after
    got = xr.open_datatree(second.dataset, engine="h5netcdf").load()
    xr.testing.assert_identical(comparable(got), comparable(ref))
    # a different config is refused unless forced; forcing keeps the matching cells
    raw = tiny()
    raw["grid"][0]["alpha"] = [1, 2.5, 4]
    with pytest.raises(ConfigError, match="different config"):
        run_sweep(parse_config(raw), out, progress=False)
    forced = run_sweep(parse_config(raw), out, force=True, progress=False)
    assert (forced.reused, forced.computed) == (n, n // 2)


# --------------------------------------------------------------------------------------------
# executors and interrupts
# --------------------------------------------------------------------------------------------
@pytest.mark.slow
def test_dask_two_workers_equals_in_process(tmp_path, plugin):
    """Same config and seeds: identical datasets from a 2-process LocalCluster and in-process.
    Port 8787 (dask's default HTTP port) is held meanwhile, as by a second sweep on the same
    machine: the cluster must start without it (warnings are errors here)."""
    import socket

    cfg_path = write_toml(tmp_path / "tiny.toml", TINY_TOML)
    outs = {}
    with socket.socket() as held:
        try:
            held.bind(("127.0.0.1", 8787))
            held.listen()
        except OSError:
            pass  # already held by another process: the same situation
        for name, extra in (("inproc", []), ("dask", ["--workers", "2"])):
            with pytest.raises(SystemExit) as e:
                main(["run", "--config", str(cfg_path), "--out", str(tmp_path / name),
                      "--quiet", *extra])
            assert e.value.code == 0
            outs[name] = xr.open_datatree(tmp_path / name / "dataset.nc",
                                          engine="h5netcdf").load()
    assert "dask (2 local workers)" in json.loads((tmp_path / "dask" / "manifest.json"
                                                   ).read_text())["executor"]
    assert int(outs["dask"].attrs["cells_ok"]) == 16
    xr.testing.assert_identical(comparable(outs["inproc"]), comparable(outs["dask"]))


def _start(cfg_path: Path, out: Path) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-m", "bayesslr.cli", "run", "--config", str(cfg_path), "--out",
         str(out), "--quiet"], cwd=REPO, env=os.environ.copy(), stdout=subprocess.PIPE,
        stderr=subprocess.PIPE, text=True)


def _wait_for_cells(out: Path, n: int, proc: subprocess.Popen, timeout: float = 90) -> None:
    t0 = time.monotonic()
    while time.monotonic() - t0 < timeout:
        if len(list((out / "cells").glob("*.nc"))) >= n:
            return
        if proc.poll() is not None:
            raise AssertionError(f"run ended early: {proc.communicate()}")
        time.sleep(0.05)
    raise AssertionError("no progress")


@pytest.mark.slow
def test_killed_runs_resume_without_recomputing(tmp_path, plugin):
    """SIGTERM, then SIGKILL mid-sweep; the resumed run recomputes no finished cell and the
    final dataset equals an uninterrupted run."""
    text = ('name = "killme"\n[options]\nsweeptest = { sleep = 0.15 }\n'
            '[[grid]]\nmethods = ["sweeptest:a"]\nalpha = [1, 2, 3, 4, 5, 6]\nseeds = [0, 1]\n')
    cfg_path = write_toml(tmp_path / "k.toml", text)
    out = tmp_path / "k"
    proc = _start(cfg_path, out)
    _wait_for_cells(out, 3, proc)
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=30)
    assert proc.returncode == 128 + signal.SIGTERM, err
    assert "rerun the same command to resume" in err
    first = snapshot(out / "cells")
    assert 3 <= len(first) < 12

    proc = _start(cfg_path, out)
    _wait_for_cells(out, len(first) + 3, proc)
    proc.send_signal(signal.SIGKILL)
    proc.communicate(timeout=30)
    second = snapshot(out / "cells")
    assert all(second[f] == v for f, v in first.items())  # no finished cell rewritten
    done = {f for f in second if f.endswith(".nc")}
    assert len(done) < 12

    n_before = len(executions(plugin))
    from bayesslr.sweep.config import load_config

    cfg = load_config(cfg_path)
    resumed = run_sweep(cfg, out, progress=False)
    assert (resumed.reused, resumed.computed) == (len(done), 12 - len(done))
    assert len(executions(plugin)) - n_before == 12 - len(done)
    final = snapshot(out / "cells")
    assert all(final[f] == second[f] for f in done)
    # at most the cells in flight were lost at each interrupt
    assert len(executions(plugin)) <= 12 + 2

    ref = run_sweep(cfg, tmp_path / "ref", progress=False)
    a = xr.open_datatree(resumed.dataset, engine="h5netcdf").load()
    b = xr.open_datatree(ref.dataset, engine="h5netcdf").load()
    xr.testing.assert_identical(comparable(a), comparable(b))


# --------------------------------------------------------------------------------------------
# presets and the dry run
# --------------------------------------------------------------------------------------------
def test_presets_are_valid(capsys, tmp_path):
    """Every preset validates (methods of families not registered here are reported, not
    silently dropped); the quick preset validates as shipped; --dry-run prints count and cost."""
    from bayesslr.registry import FAMILY_MODULES
    from bayesslr.sweep.config import available_methods, load_preset, preset_names, preset_raw

    assert {"quick", "paper"} <= set(preset_names())
    quick = load_preset("quick")
    assert {c.family for c in quick.cells} <= set(FAMILY_MODULES)
    names, _missing = available_methods()
    known = set(names)
    for name in preset_names():
        raw = preset_raw(name)
        for block in raw["grid"]:
            block["methods"] = [m for m in block["methods"] if m in known]
        raw["grid"] = [b for b in raw["grid"] if b["methods"]]
        assert parse_config(raw, name=name).cells
    capsys.readouterr()
    with pytest.raises(SystemExit) as e:
        main(["presets"])
    assert e.value.code == 0
    listed = capsys.readouterr().out
    assert "quick:" in listed and "paper:" in listed
    with pytest.raises(SystemExit) as e:
        main(["run", "--preset", "quick", "--dry-run", "--out", str(tmp_path / "q")])
    assert e.value.code == 0
    out = capsys.readouterr().out
    assert f"sweep quick: {len(quick.cells)} cells" in out and "cost estimate" in out
    assert not (tmp_path / "q").exists()
    with pytest.raises(SystemExit) as e:
        main(["run", "--preset", "paper", "--dry-run", "--out", str(tmp_path / "p")])
    assert e.value.code == 0
    out = capsys.readouterr().out
    assert f"sweep paper: {len(load_preset('paper').cells)} cells" in out
    assert "cost estimate" in out and not (tmp_path / "p").exists()


def test_plugin_family_gets_its_group_and_report_section(tmp_path):
    """The plugin family (declared only in tests/sweep_plugin.py) gets its dataset group, its
    own figure and its verdicts section in ``bayesslr report``."""
    from bayesslr.report import write_report

    cfg = parse_config(tiny())
    out = tmp_path / "r"
    run_sweep(cfg, out, progress=False)
    tree = xr.open_datatree(out / "dataset.nc")
    assert "sweeptest" in tree.children and "trace" in tree["sweeptest"].ds
    written, skipped = write_report(out, tmp_path / "fig", formats=("png",))
    names = {p.name for p in written}
    assert "sweeptest_trace.png" in names, skipped
    verdicts = (tmp_path / "fig" / "verdicts.txt").read_text()
    assert "# sweeptest\nVERDICT [holds] sweeptest errors stay below 2" in verdicts


@pytest.mark.timeout(300)
def test_local_cluster_workers_keep_the_adaptive_malloc_thresholds(monkeypatch):
    """dask's nanny sets ``MALLOC_TRIM_THRESHOLD_=65536`` in its workers, which switches off
    glibc's adaptive mmap threshold: every XLA temporary above 128 kB was then mapped and
    page-faulted afresh (32% more CPU on a replica optimal-lam search). The local cluster's
    workers run without it, and keep the rest of dask's pre-spawn environment."""
    from bayesslr.sweep.executors import DaskExecutor

    monkeypatch.delenv("MALLOC_TRIM_THRESHOLD_", raising=False)
    ex = DaskExecutor(workers=1)
    ex.open()
    try:
        env = ex._client.run(lambda: {k: os.environ.get(k) for k in (
            "MALLOC_TRIM_THRESHOLD_", "OMP_NUM_THREADS")})
    finally:
        ex.close()
    assert env and all(e == {"MALLOC_TRIM_THRESHOLD_": None, "OMP_NUM_THREADS": "1"}
                       for e in env.values()), env
