"""Checkpoints of a replica continuation path (bayesslr.theory.checkpoint): a path stopped
after some of its points resumes after them, with the numbers of an uninterrupted solve.

Before: a path's cells were written only when the whole path was solved, so the ``paper``
preset's replica paths (about two core-hours each) were lost whenever a run stopped before
their end (three sessions in a row). The real theory runs here at a tiny size (300 channel
samples, three ``alpha``, a three-value ``lam`` grid): a few seconds.
"""

from __future__ import annotations

import dataclasses
import json
import math
import os

import numpy as np
import pytest

from bayesslr.core.task import make_task
from bayesslr.theory import checkpoint as C
from bayesslr.theory import lam_opt
from bayesslr.theory.erm import ErmTheoryOptions

TASK = make_task("spiked", L=3, nu=2.0, delta=0.01, D=1)
OPT = ErmTheoryOptions(samples=300, test_samples=2000)
ALPHAS = [0.5, 1.0, 2.0]
KW = {"lam_grid": (1.0, 0.1, 0.01), "refine_iter": 2, "grid_stop": 2}


# what differs between two solves of one path in one process, checkpoint or not: the wall time
# and the counts of map calls (the second finds the exploring map's starts in a memo)
WORK = {"runtime_s", "update_calls", "exact_calls"}


def _strip(obj):
    """The encoded results without the fields of :data:`WORK`."""
    if isinstance(obj, dict):
        return {k: _strip(v) for k, v in obj.items() if k not in WORK}
    if isinstance(obj, list):
        return [_strip(x) for x in obj]
    return obj


def _ckpt():
    return C.PathCheckpoint.open(task=TASK, activation="softmax", path=ALPHAS, options=OPT, **KW)


@pytest.fixture(scope="module")
def uninterrupted():
    return lam_opt.optimal_lambda_curve(TASK, "softmax", ALPHAS, OPT, **KW)


@pytest.fixture
def cdir(tmp_path, monkeypatch):
    monkeypatch.setenv(C.CHECKPOINT_ENV, str(tmp_path / "ck"))
    return tmp_path / "ck"


def _interrupt_at(monkeypatch, alpha_stop):
    """optimal_lambda raises at ``alpha_stop`` (a run stopped there); counts its calls."""
    real, calls = lam_opt.optimal_lambda, []

    def fake(task, activation, alpha, *a, **k):
        calls.append(alpha)
        if alpha == alpha_stop:
            raise KeyboardInterrupt
        return real(task, activation, alpha, *a, **k)

    monkeypatch.setattr(lam_opt, "optimal_lambda", fake)
    return calls


def test_a_stopped_path_resumes_with_the_same_numbers(cdir, monkeypatch, uninterrupted):
    calls = _interrupt_at(monkeypatch, 2.0)
    with pytest.raises(KeyboardInterrupt):
        lam_opt.optimal_lambda_curve(TASK, "softmax", ALPHAS, OPT, checkpoint=_ckpt(), **KW)
    assert calls == [0.5, 1.0, 2.0]
    ck = _ckpt()
    assert sorted(p.name for p in ck.directory.iterdir()) == ["alpha-0.5.json", "alpha-1.0.json"]
    monkeypatch.undo()
    monkeypatch.setenv(C.CHECKPOINT_ENV, str(cdir))
    calls = _interrupt_at(monkeypatch, None)
    resumed = lam_opt.optimal_lambda_curve(TASK, "softmax", ALPHAS, OPT, checkpoint=ck, **KW)
    assert calls == [2.0]  # the two points written were restored, not solved
    assert ck.restored_s > 0
    assert _strip(C.encode(resumed)) == _strip(C.encode(uninterrupted))
    assert resumed[2].lam == uninterrupted[2].lam  # exactly, not approximately
    assert not ck.directory.exists() and not cdir.exists()  # removed once the path is whole


def test_an_unreadable_or_foreign_point_is_solved_again(cdir, monkeypatch):
    ck = _ckpt()
    calls = _interrupt_at(monkeypatch, 2.0)  # every run below stops at alpha = 2
    with pytest.raises(KeyboardInterrupt):
        lam_opt.optimal_lambda_curve(TASK, "softmax", ALPHAS, OPT, checkpoint=ck, **KW)
    second = ck.directory / "alpha-1.0.json"
    foreign = {**json.loads(second.read_text()), "key": "another path"}
    foreign["checksum"] = C._checksum(foreign)  # a whole, checked file of another path
    second.write_text(json.dumps(foreign))
    assert len(ck.restore(ALPHAS)) == 1
    calls.clear()
    with pytest.raises(KeyboardInterrupt):
        lam_opt.optimal_lambda_curve(TASK, "softmax", ALPHAS, OPT, checkpoint=ck, **KW)
    assert calls == [1.0, 2.0]  # the foreign point solved again (and written again)
    assert len(ck.restore(ALPHAS)) == 2
    (ck.directory / "alpha-0.5.json").write_text("{ truncated")
    with pytest.warns(RuntimeWarning, match="not JSON"):
        assert ck.restore(ALPHAS) == []
    calls.clear()
    with pytest.raises(KeyboardInterrupt), pytest.warns(RuntimeWarning, match="not JSON"):
        lam_opt.optimal_lambda_curve(TASK, "softmax", ALPHAS, OPT, checkpoint=ck, **KW)
    assert calls == [0.5, 1.0, 2.0]


def test_the_key_separates_paths_and_follows_the_code_version(monkeypatch):
    base = dict(task=TASK, activation="softmax", path=ALPHAS, options=OPT, **KW)
    k = C.path_key(**base)
    assert C.path_key(**base) == k
    assert C.path_key(**{**base, "path": [0.5, 1.0]}) != k
    assert C.path_key(**{**base, "activation": "linear"}) != k
    assert C.path_key(**{**base, "options": dataclasses.replace(OPT, seed=1)}) != k
    from bayesslr import registry

    spec = registry.get_method("theory_erm:softmax")
    monkeypatch.setitem(registry._REGISTRY, "theory_erm",
                        dataclasses.replace(spec, version=spec.version + "x"))
    assert C.path_key(**base) != k


@pytest.mark.parametrize("value", ["off", "0", "", "none"])
def test_checkpoints_switch_off(monkeypatch, value):
    monkeypatch.setenv(C.CHECKPOINT_ENV, value)
    assert C.checkpoint_dir() is None and _ckpt() is None


def test_the_codec_reads_back_exactly(uninterrupted):
    obj = {"r": uninterrupted[0], 0.1: np.array([1.0, math.nan, -math.inf, 1e-300]),
           "t": (1, 2.5, "x", None, True), "i": np.arange(3)}
    text = json.dumps(C.encode(obj), allow_nan=False)  # strict JSON
    back = C.decode(json.loads(text))
    assert C.encode(back) == C.encode(obj)
    assert type(back["r"]) is type(uninterrupted[0]) and back["r"].lam == uninterrupted[0].lam
    assert isinstance(back["t"], tuple) and back["i"].dtype == obj["i"].dtype
    np.testing.assert_array_equal(back[0.1], obj[0.1])
    with pytest.raises(TypeError, match="cannot checkpoint"):
        C.encode(object())


def test_an_unwritable_checkpoint_only_warns(tmp_path, monkeypatch):
    blocker = tmp_path / "file"
    blocker.write_text("")
    monkeypatch.setenv(C.CHECKPOINT_ENV, str(blocker / "below"))  # a directory under a file
    ck = _ckpt()
    with pytest.warns(RuntimeWarning, match="checkpoint not written"):
        ck.save(0.5, {"a": 1.0}, {}, 1.0)


def test_a_path_cell_solves_its_curve_with_a_checkpoint(cdir, monkeypatch):
    """theory_erm cells on a path (the paper preset's, and ERM's lam='replica') hand the
    curve a checkpoint of their own path; a cell off any path does not need one."""
    from bayesslr.registry import Cell, run_unit
    from bayesslr.theory import method as TM

    seen = []

    def fake(task, activation, alphas, opt, *, lam_grid, refine_iter, grid_stop,
             checkpoint=None):
        seen.append(checkpoint)
        raise KeyboardInterrupt

    monkeypatch.setattr(TM, "optimal_lambda_curve", fake)
    cells = [Cell(method="theory_erm:softmax", variant="spiked", L="3", nu=2.0, delta=0.01,
                  alpha=a, lam="optimal", seed=0,
                  options={"samples": 300, "test_samples": 2000, "path": ALPHAS,
                           "lam_grid": list(KW["lam_grid"]), "refine_iter": 2})
             for a in ALPHAS]
    with pytest.raises(KeyboardInterrupt):
        run_unit(cells)
    ck = seen[0]
    assert isinstance(ck, C.PathCheckpoint) and ck.directory.parent == cdir
    assert ck.key == _ckpt().key  # the same path as solved directly: one key


@pytest.mark.parametrize("preset", [False, True])
def test_a_sweep_keeps_path_checkpoints_in_its_output_directory(tmp_path, monkeypatch, plugin,
                                                                  preset):
    """While ``run_sweep`` runs cells, the checkpoints of replica curves go to
    ``OUT/theory_paths`` (so a copied run directory resumes its curves on another machine),
    unless ``$BAYESSLR_PATH_CHECKPOINTS`` says otherwise; the variable is restored after."""
    from bayesslr.registry import get_method
    from bayesslr.sweep.config import parse_config
    from bayesslr.sweep.executors import InProcessExecutor
    from bayesslr.sweep.runner import run_sweep
    from bayesslr.theory.method import PATHS_DIR

    assert get_method("theory_erm:softmax").checkpoints.directory == PATHS_DIR

    seen = []

    class Spy(InProcessExecutor):
        def run(self, cells, on_done, stop=None):
            seen.append(C.checkpoint_dir())
            super().run(cells, on_done, stop)

    if preset:
        monkeypatch.setenv(C.CHECKPOINT_ENV, str(tmp_path / "mine"))
    else:
        monkeypatch.delenv(C.CHECKPOINT_ENV, raising=False)
    before = os.environ.get(C.CHECKPOINT_ENV)
    cfg = parse_config({"name": "t", "grid": [{"methods": ["sweeptest:a"], "alpha": [1],
                                               "seeds": [0]}]})
    run_sweep(cfg, tmp_path / "out", Spy(), progress=False)
    assert seen == [tmp_path / "mine" if preset else tmp_path / "out" / PATHS_DIR]
    assert os.environ.get(C.CHECKPOINT_ENV) == before
