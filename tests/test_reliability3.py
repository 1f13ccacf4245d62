"""Reliability, third round (issue 40): a results directory treated as shared and possibly
tampered with, the Python API's sizes checked before allocating, exports and notebook reports
as durable as ``run``.

Each test names the numbered case of the issue and how it failed before the change. The sweep
method is the test-only family ``sweeptest`` (tests/sweep_plugin.py).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from bayesslr.core.files import HOST, STALE_TMP_SECONDS
from conftest import run_cli

pytestmark = pytest.mark.usefixtures("plugin")  # the test family (conftest.py)


def toml(path: Path, alphas=(1, 2), seeds=(0,), name="rel3", **options) -> Path:
    opts = ", ".join(f"{k} = {json.dumps(v)}" for k, v in options.items())
    path.write_text(f'name = {json.dumps(name)}\n[options]\nsweeptest = {{ {opts} }}\n'
                    f'[[grid]]\nmethods = ["sweeptest:a"]\nalpha = {list(alphas)}\n'
                    f'seeds = {list(seeds)}\n')
    return path


def one_line(err: str) -> str:
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert "Traceback" not in err
    return lines[0]


def run(args: list[str], capsys) -> tuple[int, str, str]:
    return run_cli(["run", *args, "--quiet"], capsys)


def dead_pid() -> int:
    proc = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"],
                          capture_output=True, text=True, check=True)
    return int(proc.stdout)


def ran(log: Path) -> int:
    return len(log.read_text().splitlines()) if log.exists() else 0


@pytest.fixture
def swept(tmp_path, capsys) -> Path:
    """A finished two-cell sweep in ``tmp_path/o`` (config ``tmp_path/a.toml``)."""
    out = tmp_path / "o"
    code, _, err = run(["--config", str(toml(tmp_path / "a.toml")), "--out", str(out)], capsys)
    assert code == 0, err
    return out


# --------------------------------------------------------------------------------------------
# case 1: a symbolic link (or FIFO, or hard link) at OUT/run.lock
# --------------------------------------------------------------------------------------------
@pytest.mark.parametrize("kind", ["symlink", "hardlink", "fifo"])
def test_a_planted_lock_file_is_refused_and_its_target_untouched(kind, tmp_path, capsys):
    """Case 1. Before: ``run`` opened OUT/run.lock through the link and truncated the file it
    points to (a neighbour's, or the user's own). Now: exit 2, one line naming the lock path,
    the target's bytes as they were, nothing computed."""
    out = tmp_path / "o"
    out.mkdir()
    victim = tmp_path / "precious.txt"
    victim.write_text("do not truncate me\n")
    lock = out / "run.lock"
    if kind == "symlink":
        lock.symlink_to(victim)
    elif kind == "hardlink":
        os.link(victim, lock)
    else:
        os.mkfifo(lock)
    code, _, err = run(["--config", str(toml(tmp_path / "a.toml")), "--out", str(out)], capsys)
    assert code == 2, err
    line = one_line(err)
    assert str(lock) in line and "not a regular file" in line
    assert victim.read_text() == "do not truncate me\n"
    assert not (out / "cells").exists() and not (out / "dataset.nc").exists()


def test_exclusive_lock_refuses_a_link(tmp_path):
    """Case 1, the other lock (the replica-``lam`` cache's): never opened through a link."""
    from bayesslr.core.files import NotRegularFile, exclusive_lock

    victim = tmp_path / "v"
    victim.write_text("x")
    (tmp_path / "l").symlink_to(victim)
    with pytest.raises(NotRegularFile, match="symbolic link"), exclusive_lock(tmp_path / "l"):
        pass
    assert victim.read_text() == "x"


# --------------------------------------------------------------------------------------------
# case 3: a lost or garbage config.json
# --------------------------------------------------------------------------------------------
@pytest.mark.parametrize("damage", ["deleted", "garbage", "edited", "list", "symlink"])
def test_a_lost_config_does_not_let_another_config_replace_the_results(damage, swept,
                                                                      tmp_path, capsys):
    """Case 3. Before: a deleted or unparsable config.json counted as 'no config', so a
    different config ran without --force and replaced dataset.nc. Now: exit 2, one line
    naming the reason; dataset.nc untouched; --force still replaces it."""
    cfg_path = swept / "config.json"
    if damage == "deleted":
        cfg_path.unlink()
    elif damage == "garbage":
        cfg_path.write_bytes(b"\x00\xff not json")
    elif damage == "edited":  # valid JSON, claims another digest: fails its checksum
        doc = json.loads(cfg_path.read_text())
        doc["name"] = "someone-else"
        cfg_path.write_text(json.dumps(doc))
    elif damage == "list":
        cfg_path.write_text("[1, 2]")
    else:
        cfg_path.unlink()
        cfg_path.symlink_to("/dev/zero")
    before = (swept / "dataset.nc").read_bytes()
    other = toml(tmp_path / "b.toml", alphas=(3,), name="other")
    code, _, err = run(["--config", str(other), "--out", str(swept)], capsys)
    assert code == 2, err
    line = one_line(err)
    assert "config.json" in line and "--force" in line
    assert (swept / "dataset.nc").read_bytes() == before
    code, _, err = run(["--config", str(other), "--out", str(swept), "--force"], capsys)
    assert code == 0, err
    assert json.loads(cfg_path.read_text())["name"] == "other" and not cfg_path.is_symlink()


def test_a_lost_config_of_the_same_sweep_resumes_from_the_manifest(swept, tmp_path, capsys,
                                                                  plugin):
    """Case 3, the honest case: the checksummed manifest proves the cells are this config's,
    so the same command resumes (nothing recomputed) and writes config.json again."""
    (swept / "config.json").unlink()
    n = ran(plugin)
    code, so, err = run(["--config", str(tmp_path / "a.toml"), "--out", str(swept)], capsys)
    assert code == 0, err
    assert "2 reused" in so and ran(plugin) == n
    assert json.loads((swept / "config.json").read_text())["checksum"].startswith("sha256:")
    manifest = json.loads((swept / "manifest.json").read_text())
    manifest["cells_ok"] = 7  # a tampered manifest proves nothing
    (swept / "manifest.json").write_text(json.dumps(manifest))
    (swept / "config.json").unlink()
    code, _, err = run(["--config", str(tmp_path / "a.toml"), "--out", str(swept)], capsys)
    assert code == 2 and "config.json is missing" in one_line(err)


def test_report_refuses_a_tampered_config(swept, capsys):
    """Case 3, the reader: a config.json failing its checksum is not trusted by report."""
    doc = json.loads((swept / "config.json").read_text())
    doc["description"] = "edited"
    (swept / "config.json").write_text(json.dumps(doc))
    from bayesslr.core.task import ConfigError
    from bayesslr.sweep.storage import ResultStore

    with pytest.raises(ConfigError, match="checksum"):
        ResultStore(swept).load_config()


# --------------------------------------------------------------------------------------------
# case 4: hidden .tmp files bayesslr did not write
# --------------------------------------------------------------------------------------------
def test_only_temporary_files_bayesslr_named_are_removed(swept, tmp_path, capsys):
    """Case 4. Before: every hidden ``.*.tmp`` older than an hour in OUT and cells/ (with
    --force too) and in any ``report --out DIR`` was deleted, a user's own included. Now only
    the exact names the durable write makes for a file bayesslr writes there, whose writer is
    gone."""
    old = time.time() - 2 * STALE_TMP_SECONDS
    pid = dead_pid()
    key = "0" * 16
    ours = [swept / "cells" / f".{key}.nc.{HOST}.{pid}.0123456789ab.tmp",
            swept / f".dataset.nc.{HOST}.{pid}.0123456789ab.tmp",
            swept / ".config.json.otherhost.12.0123456789ab.tmp"]  # old, another host
    foreign = [swept / ".notes.tmp", swept / "cells" / ".draft.tmp",
               swept / f".notes.txt.{HOST}.{pid}.0123456789ab.tmp",  # not a file we write
               swept / "cells" / f".{key}.nc.{HOST}.{pid}.xyz.tmp"]  # not our form
    for p in ours + foreign:
        p.write_text("x")
        os.utime(p, (old, old))
    code, _, err = run(["--config", str(tmp_path / "a.toml"), "--out", str(swept), "--force"],
                       capsys)
    assert code == 0, err
    assert [p.exists() for p in ours] == [False] * len(ours)
    assert [p.exists() for p in foreign] == [True] * len(foreign)
    figs = tmp_path / "figs"
    figs.mkdir()
    mine = figs / ".thesis.tmp"
    mine.write_text("draft")
    os.utime(mine, (old, old))
    left = figs / f".verdicts.txt.{HOST}.{pid}.0123456789ab.tmp"  # a killed report's
    left.write_text("half")
    code, _, err = run_cli(["report", str(swept), "--out", str(figs), "--formats", "png"],
                           capsys)
    assert code == 0, err
    assert mine.read_text() == "draft" and not left.exists()


def test_a_symlinked_cells_directory_is_refused(swept, tmp_path, capsys):
    """Case 4 (through a symlinked cells/) and the rule that every write stays under OUT:
    a cells/ that is a link out of OUT is refused with one line, nothing written there."""
    elsewhere = tmp_path / "elsewhere"
    (swept / "cells").rename(elsewhere)
    (swept / "cells").symlink_to(elsewhere)
    names = sorted(p.name for p in elsewhere.iterdir())
    code, _, err = run(["--config", str(tmp_path / "a.toml"), "--out", str(swept)], capsys)
    assert code == 2 and "cells is a symbolic link" in one_line(err)
    assert sorted(p.name for p in elsewhere.iterdir()) == names


# --------------------------------------------------------------------------------------------
# case 5: a sweep name that walks out of results/
# --------------------------------------------------------------------------------------------
@pytest.mark.parametrize("name", ["../../x", "/ABS/x", "a/b", ".."])
def test_a_sweep_name_cannot_write_outside_results(name, tmp_path, capsys, monkeypatch):
    """Case 5. Before: with no --out, ``results/NAME`` with NAME ``../../x`` or an absolute
    path wrote outside results/. Now: exit 2, one line naming the name; nothing created."""
    work = tmp_path / "a" / "b"
    work.mkdir(parents=True)
    monkeypatch.chdir(work)
    name = name.replace("/ABS", str(tmp_path / "abs"))
    cfg = toml(work / "c.toml", name=name)
    before = sorted(tmp_path.rglob("*"))
    code, _, err = run(["--config", str(cfg)], capsys)
    assert code == 2, err
    assert f"name={name!r}" in one_line(err)
    assert sorted(tmp_path.rglob("*")) == before


def test_a_results_entry_linked_out_of_results_is_refused(tmp_path, capsys, monkeypatch):
    """Case 5, after resolving: results/NAME a link to a directory outside results/."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "results").mkdir()
    (tmp_path / "outside").mkdir()
    (tmp_path / "results" / "rel3").symlink_to(tmp_path / "outside")
    code, _, err = run(["--config", str(toml(tmp_path / "c.toml"))], capsys)
    assert code == 2 and "name='rel3'" in one_line(err)
    assert not any((tmp_path / "outside").iterdir())
    code, _, err = run(["--config", str(toml(tmp_path / "d.toml", name="fine"))], capsys)
    assert code == 0, err
    assert (tmp_path / "results" / "fine" / "dataset.nc").is_file()


# --------------------------------------------------------------------------------------------
# case 7: a cell file that is a FIFO, or a link to /dev/zero
# --------------------------------------------------------------------------------------------
@pytest.mark.timeout(60)
def test_special_cell_files_are_not_opened_and_are_recomputed(swept, tmp_path, capsys, plugin):
    """Case 7. Before: a FIFO in place of a cell file hung ``run`` with the lock held; a link
    to /dev/zero read until memory ran out. Now both are reported in one line naming a path,
    recomputed, and replaced by regular cell files (the link's target untouched)."""
    cells = sorted((swept / "cells").glob("*.nc"))
    assert len(cells) == 2
    cells[0].unlink()
    os.mkfifo(cells[0])
    victim = tmp_path / "victim.nc"
    victim.write_bytes(cells[1].read_bytes())
    cells[1].unlink()
    cells[1].symlink_to("/dev/zero")
    n = ran(plugin)
    code, so, err = run(["--config", str(tmp_path / "a.toml"), "--out", str(swept)], capsys)
    assert code == 0, err
    assert ran(plugin) == n + 2 and "0 reused, 2 computed" in so
    line = next(ln for ln in err.splitlines() if "not a regular file" in ln)
    assert "cells/" in line and "(and 1 more)" in line
    assert all(p.is_file() and not p.is_symlink() for p in cells)
    from bayesslr.sweep.storage import read_cell_file

    for p in cells:
        read_cell_file(p)
    from bayesslr.sweep.storage import CorruptCell

    link = swept / "cells" / "link.nc"
    link.symlink_to(victim)  # a whole, valid cell file, but through a link: not read
    with pytest.raises(CorruptCell, match="symbolic link"):
        read_cell_file(link)


# --------------------------------------------------------------------------------------------
# case 2: theory_paths checkpoints are checked like cells
# --------------------------------------------------------------------------------------------
def _checkpoint(tmp_path, monkeypatch):
    from bayesslr.theory import checkpoint as C

    monkeypatch.setenv(C.CHECKPOINT_ENV, str(tmp_path / "ck"))
    ck = C.PathCheckpoint.open(task="t", path=[0.5, 1.0])
    ck.save(0.5, {"lam": 0.125, "err": 0.25}, (1.0, 2.0), 3.0)
    ck.save(1.0, {"lam": 0.0625, "err": 0.5}, (3.0, 4.0), 3.0)
    return ck


def test_an_edited_checkpoint_number_is_not_restored(tmp_path, monkeypatch):
    """Case 2. Before: a checkpoint carried no checksum, so an edited number that was still
    valid JSON was restored and flowed into the dataset under a fresh cell checksum. Now the
    file fails its checksum: one warning naming it, the point is solved again (not
    restored), and the file is replaced when it is."""
    ck = _checkpoint(tmp_path, monkeypatch)
    assert [p for p, _ in ck.restore([0.5, 1.0])] == [{"lam": 0.125, "err": 0.25},
                                                        {"lam": 0.0625, "err": 0.5}]
    f = ck.directory / "alpha-1.0.json"
    f.write_text(f.read_text().replace("0.0625", "0.0626"))
    json.loads(f.read_text())  # still valid JSON
    with pytest.warns(RuntimeWarning, match=r"alpha-1\.0\.json not trusted \(content does "
                                            "not match its checksum"):
        assert len(ck.restore([0.5, 1.0])) == 1
    ck.save(1.0, {"lam": 0.0625, "err": 0.5}, (3.0, 4.0), 3.0)  # solved again, replaced
    assert len(ck.restore([0.5, 1.0])) == 2
    doc = json.loads(f.read_text())
    del doc["checksum"]  # an unchecked file (written before checksums) is not trusted either
    f.write_text(json.dumps(doc))
    with pytest.warns(RuntimeWarning, match="no checksum"):
        assert len(ck.restore([0.5, 1.0])) == 1


@pytest.mark.timeout(60)
@pytest.mark.parametrize("bad", ["list", "null", "deep", "fifo", "dev-zero", "directory"])
def test_a_malformed_checkpoint_is_solved_again_not_fatal(bad, tmp_path, monkeypatch):
    """Case 2. Before: a checkpoint file that was a JSON list or ``null`` raised on every rerun,
    a deeply nested one raised RecursionError, a FIFO hung and a link to /dev/zero read until
    memory ran out, until the user deleted it. Now each is refused at once with one warning
    naming the file, and the point's next save replaces it."""
    ck = _checkpoint(tmp_path, monkeypatch)
    f = ck.directory / "alpha-0.5.json"
    f.unlink()
    if bad == "list":
        f.write_text("[1, 2, 3]")
    elif bad == "null":
        f.write_text("null")
    elif bad == "deep":
        f.write_text("[" * 200_000 + "]" * 200_000)
    elif bad == "fifo":
        os.mkfifo(f)
    elif bad == "dev-zero":
        f.symlink_to("/dev/zero")
    else:
        f.mkdir()
    t0 = time.monotonic()
    with pytest.warns(RuntimeWarning, match=r"alpha-0\.5\.json not trusted"):
        assert ck.restore([0.5, 1.0]) == []
    assert time.monotonic() - t0 < 5
    if bad != "directory":  # a directory there cannot be replaced: the save only warns
        ck.save(0.5, {"lam": 0.125, "err": 0.25}, (1.0, 2.0), 3.0)
        assert len(ck.restore([0.5, 1.0])) == 2 and f.is_file() and not f.is_symlink()


# --------------------------------------------------------------------------------------------
# case 6: the Python API checks sizes before allocating, and names the parameter
# --------------------------------------------------------------------------------------------
@pytest.mark.parametrize(("kwargs", "needle"), [
    ({"D": 10**6}, "GB for the target's data"),  # before: the interpreter aborted
    ({"D": 10**7}, "D=10000000 is out of range"),
    ({"n_test": 10**9}, "n_test=1000000000 is out of range"),
    ({"D": 50, "n_test": 10**8}, "need about"),  # before: ran unbounded
    ({"seed": 2**64}, "seed=18446744073709551616 is out of range"),
    ({"seed": 1.5}, "seed=1.5 is not an integer"),
    ({"alpha": float("nan")}, "alpha=nan"),
])
def test_target_sizes_are_checked_before_allocating(kwargs, needle, monkeypatch):
    """Case 6. Before: ``bs.target(D=10**6)`` aborted the interpreter allocating its data, a
    huge ``n_test`` ran unbounded, ``seed=2**64`` failed deep inside JAX and ``seed=1.5`` was
    silently truncated. Now each is one ConfigError (a ValueError) naming the parameter and
    the allowed range, raised before anything is allocated."""
    import tracemalloc

    import bayesslr as bs

    monkeypatch.setenv("BAYESSLR_MEMORY_LIMIT", "8G")
    tracemalloc.start()
    try:
        with pytest.raises(ValueError, match=needle) as ex:
            bs.target(**kwargs)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert isinstance(ex.value, bs.ConfigError) and "allowed" in str(ex.value)
    assert "\n" not in str(ex.value) and peak < 50 * 2**20


@pytest.fixture(scope="module")
def small_target():
    import bayesslr as bs

    return bs.target(D=20, alpha=2.0, n_test=200)


@pytest.mark.parametrize(("draws", "needle"), [
    ("empty", "0 draws"), ("huge", "value of size 1e\\+30"), ("wide", "shapes")])
def test_score_draws_refuses_draws_it_cannot_score(draws, needle, small_target):
    """Case 6. Before: empty draws or draws of 1e30 returned all-NaN scores without an
    error. Now one ConfigError naming ``draws``."""
    import numpy as np

    import bayesslr as bs

    D = small_target.D
    d = {"empty": {"k": np.zeros((0, D)), "v": np.zeros((0, D))},
         "huge": {"k": np.full((4, D), 1e30), "v": np.ones((4, D))},
         "wide": {"k": np.zeros((1, 2, 3, D)), "v": np.zeros((1, 2, 3, D))}}[draws]
    with pytest.raises(bs.ConfigError, match=needle) as ex:
        bs.score_draws(small_target, d)
    assert "draws" in str(ex.value) and "allowed" in str(ex.value)


def test_log_density_and_test_errors_name_a_wrong_shape(small_target):
    """Case 6. Before: a ``(3, D)`` batch to ``log_density`` and a wrong-length ``y_hat`` to
    ``test_errors`` failed inside JAX without naming the parameter. Now one ConfigError each;
    a single point and a vmapped batch still work."""
    import jax
    import numpy as np

    import bayesslr as bs

    t = small_target
    batch = t.init(jax.random.key(0), 3)
    with pytest.raises(bs.ConfigError, match=r"theta\['k'\].*\(3, 20\).*\(D,\)"):
        t.log_density(batch)
    assert np.isfinite(t.log_density(t.teacher))
    assert jax.vmap(t.log_density)(batch).shape == (3,)
    with pytest.raises(bs.ConfigError, match=r"y_hat has shape \(7,\); allowed: \(200,\)"):
        bs.test_errors(t.task, bs.Teacher(*(jax.numpy.asarray(t.teacher[k]) for k in "kv")),
                       t.test, np.zeros(7))
    with pytest.raises(bs.ConfigError, match="n=0 is out of range"):
        t.init(jax.random.key(0), 0)


# --------------------------------------------------------------------------------------------
# case 10: a bad BAYESSLR_PLUGINS entry
# --------------------------------------------------------------------------------------------
@pytest.mark.parametrize("entry", ["missing.py", "syntax.py", "raises.py", "no_such_module_x"])
@pytest.mark.parametrize("verb", [["--help"], ["presets"]])
def test_a_bad_plugin_entry_is_one_line(entry, verb, tmp_path, capsys, monkeypatch):
    """Case 10. Before: a bad entry broke every verb, ``--help`` included, with a traceback.
    Now: exit 2, one line naming the variable, the entry and its error, and saying that the
    variable executes code."""
    (tmp_path / "syntax.py").write_text("def broken(:\n")
    (tmp_path / "raises.py").write_text("raise RuntimeError('plugin boom')\n")
    path = entry if not entry.endswith(".py") else str(tmp_path / entry)
    from conftest import PLUGIN

    monkeypatch.setenv("BAYESSLR_PLUGINS", f"{PLUGIN},{path}")
    code, _, err = run_cli(verb, capsys)
    assert code == 2, err
    line = one_line(err)
    assert f"BAYESSLR_PLUGINS entry {path!r} cannot be loaded" in line and "trusted" in line
    assert {"missing.py": "FileNotFoundError", "syntax.py": "SyntaxError",
            "raises.py": "plugin boom", "no_such_module_x": "ModuleNotFoundError"}[entry] in line
    assert not any(m.startswith("bayesslr_plugin_") and m.endswith(("syntax", "raises"))
                   for m in sys.modules)


# --------------------------------------------------------------------------------------------
# case 9: export posteriordb: durable writes, unique temporary names, guarded OUT
# --------------------------------------------------------------------------------------------
def test_export_write_failure_is_one_store_error_with_no_tmp_left(tmp_path, monkeypatch):
    """Case 9. Before: a write failure gave a traceback and left ``*.tmp`` files behind. Now
    StoreError (the CLI: one line, exit 4), nothing temporary left, and a rerun completes."""
    import errno

    from bayesslr.core import files
    from bayesslr.core.files import StoreError
    from bayesslr.export.posteriordb import export

    out = tmp_path / "pdb"
    real = files.os.write

    def full(fd, data):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(files.os, "write", full)
    with pytest.raises(StoreError, match="No space left on device"):
        export(out, names=[], log=None)
    monkeypatch.setattr(files.os, "write", real)
    assert not [p for p in out.rglob("*") if p.name.endswith(".tmp")]
    export(out, names=[], log=None)
    assert (out / "models" / "pymc" / "slr_marginal.py").is_file()


def test_two_exports_at_once_do_not_collide(tmp_path):
    """Case 9. Before: both wrote ``FILE.tmp`` and one's rename failed (FileNotFoundError).
    Now each writer has its own temporary name."""
    from concurrent.futures import ThreadPoolExecutor

    from bayesslr.export.posteriordb import export

    out = tmp_path / "pdb"
    export(out, names=[], log=None)
    with ThreadPoolExecutor(4) as pool:
        for f in [pool.submit(export, out, names=[], log=None) for _ in range(24)]:
            f.result()
    assert not [p for p in out.rglob("*") if p.name.endswith(".tmp")]


def test_an_export_rerun_with_other_settings_or_beside_user_files_is_refused(tmp_path,
                                                                            capsys):
    """Case 9. Before: a rerun into an existing export skipped every posterior but reported
    the new settings, and an export wrote into a non-empty directory beside the user's files.
    Now both exit 2 with one line, before any work; the same settings rerun fine."""
    from bayesslr.export.posteriordb import MANIFEST, export

    out = tmp_path / "pdb"
    export(out, names=[], thin=8, log=None)
    from bayesslr.core.task import ConfigError

    with pytest.raises(ConfigError, match="thin=8 .*thin=4"):
        export(out, names=[], thin=4, log=None)
    with pytest.raises(ConfigError, match="reference_draws='stored'.*'quick'"):
        export(out, names=[], reference_draws="quick", log=None)
    export(out, names=[], thin=8, log=None)
    doc = json.loads((out / MANIFEST).read_text())
    doc["thin"] = 4  # an edited manifest is not trusted
    (out / MANIFEST).write_text(json.dumps(doc))
    with pytest.raises(ConfigError, match="checksum"):
        export(out, names=[], thin=4, log=None)
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "thesis.tex").write_text("x")
    code, _, err = run_cli(["export", "posteriordb", str(mine), "--only",
                            "slr_spiked_L3_nu2_delta0.01-D50_alpha5_seed0"], capsys)
    assert code == 2 and "holds no bayesslr export" in one_line(err)
    assert sorted(p.name for p in mine.iterdir()) == ["thesis.tex"]
