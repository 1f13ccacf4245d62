"""The cross-library leaderboard (issue 38, item 2; docs/targets.md, "Leaderboard"): the shipped
file's structure, the gradient counts of the JAX runners checked against an instrumented log
density, the budget prefix rule, a user's row placed beside the board, the doctests, and bad
input as one line naming the parameter. The nutpie runner's test needs the ``bench`` extra."""

from __future__ import annotations

import doctest
import importlib
import importlib.util
import json
import math
import re
from pathlib import Path

import jax
import numpy as np
import pytest

import bayesslr as bs
from bayesslr.core.task import ConfigError
from bayesslr.crosslibrary import build, checkpoints, runners
from bayesslr.crosslibrary.board import markdown_table

T = "slr_spiked_L3_nu2_delta0.01-D50_alpha5_seed0"
MODULES = ("runners", "checkpoints", "build", "board", "figure")


@pytest.fixture(scope="module")
def board():
    return bs.leaderboard()


def test_shipped_board_has_every_target_and_three_libraries(board):
    assert set(board.dims) == {"target", "library", "algorithm", "budget"}
    assert sorted(map(str, board["target"].values)) == bs.targets()
    assert set(map(str, board["library"].values)) >= {"numpyro", "blackjax", "nutpie"}
    status = board["status"]
    assert set(np.unique(status.values)) <= set(checkpoints.STATUSES)
    missing = status.isin(["missing"]).all("budget")
    listed = json.loads(board.attrs["missing"])
    assert len(listed) == int(missing.sum())
    ok = status == "ok"
    assert bool(np.isfinite(board["excess"].where(ok)).sum() == ok.sum())
    assert bool((board["grad_evals"].where(ok) <= board["budget"]).where(ok, True).all())
    nan_when_never = board["grads_to_reference"].isnull() == board["never_reaches_reference"]
    assert bool(nan_when_never.all())
    for key in ("revision", "settings", "budgets", "load_min", "load_max", "process_cpu_s",
                "process_wall_s", "start"):
        assert key in board.attrs, key
    settings = json.loads(board.attrs["settings"])
    for lib, pkg in (("numpyro", "numpyro"), ("blackjax", "blackjax"), ("nutpie", "nutpie")):
        assert pkg in settings[lib], (lib, settings[lib])
    assert json.loads(board.attrs["budgets"]) == list(board["budget"].values)
    for name in board.data_vars:
        assert board[name].attrs.get("description"), name


def test_shipped_board_ran_three_libraries_on_every_target(board):
    """Issue 38's criterion: no (target, library) missing or failed in the shipped file."""
    ran = ~board["status"].isin(["missing", "failed"]).all("budget")
    assert bool(ran.all()), json.loads(board.attrs["missing"])


@pytest.mark.parametrize("library", ["numpyro", "blackjax"])
def test_jax_runners_count_every_gradient(library):
    """With one chain (no masked lanes), the runner's count equals the evaluations of an
    instrumented log density (warm-up and start included)."""
    t = bs.target(T)
    calls = [0]

    def bump(k):
        calls[0] += int(np.asarray(k).size // t.D)

    class Counted:
        name, D, teacher, task, data = t.name, t.D, t.teacher, t.task, t.data

        @staticmethod
        def log_density(th):
            jax.debug.callback(bump, th["k"])
            return t.log_density(th)

    r = runners.run_library(library, Counted, chains=1, warmup=30, budget=1500)
    # debug callbacks run asynchronously: a rehearsal at load 4-5 on two cores read the count
    # 15 short of the runner's (one trajectory's callbacks still in flight) without this wait
    jax.effects_barrier()
    assert r.total_grads == calls[0]
    assert r.total_grads >= 1500 and r.timeline[-1, 0] == r.total_grads
    assert np.all(np.diff(r.timeline, axis=0) >= 0)


def test_build_writes_one_file_per_pair_and_resumes(tmp_path):
    logs: list[str] = []
    kw = {"targets": [T], "libraries": ["blackjax"], "budgets": (6000.0,), "chains": 2,
          "warmup": 20, "log": logs.append}
    build.build(tmp_path, **kw)
    assert len(logs) == 1 and build.pair_path(tmp_path, T, "blackjax").is_file()
    build.build(tmp_path, **kw)  # resumes: the pair's file exists, nothing is run
    assert len(logs) == 1
    ds = build.assemble(tmp_path, targets=[T], budgets=(6000.0,))
    st = ds["status"].sel(target=T, algorithm="nuts", budget=6000.0)
    assert str(st.sel(library="blackjax").item()) == "ok"
    assert {str(st.sel(library=x).item()) for x in ("numpyro", "nutpie")} == {"missing"}
    assert float(ds["grad_evals"].sel(library="blackjax").max()) <= 6000
    assert ds.attrs["missing"].count(T) == 2


def test_nutpie_runner_spends_its_budget_in_lockstep():
    pytest.importorskip("nutpie")
    t = bs.target(T)
    r = runners.run_nutpie(t, chains=2, warmup=30, budget=3000)
    assert r.k.shape == (2, r.grads.shape[1], t.D) and r.warmup_grads.shape == (2, 30)
    assert r.total_grads >= 3000 and r.timeline[-1, 0] == r.total_grads
    ds = checkpoints.score_run(r, t, (3000.0,))
    assert str(ds["status"].values[0]) == "ok"
    assert ds["grad_evals"].values[0] <= 3000


def test_place_on_leaderboard_picks_the_largest_budget_within_the_cost(board):
    t = bs.target(T)
    draws = {c: t.teacher[c] + 0.05 * t.init(jax.random.key(1), 100)[c] for c in "kv"}
    s = bs.score_draws(t, draws)
    budgets = sorted(map(float, board["budget"].values))
    table = bs.place_on_leaderboard(s, grad_evals=budgets[1] * 1.5, board=board, ess_bulk=50,
                                    seconds=2.0)
    assert set(table["budget"]) == {budgets[1]}
    mine = table[table["entrant"] == "yours"].iloc[0]
    assert math.isclose(mine["excess"], s["excess_over_reference"])
    assert math.isclose(mine["ess_per_grad"], 50 / (budgets[1] * 1.5))
    low = bs.place_on_leaderboard(s, grad_evals=budgets[0] / 2, board=board)
    assert set(low["budget"]) == {budgets[0]}
    assert all("smallest budget" in st for st in low["status"] if st != "yours")


@pytest.mark.parametrize("call, param", [
    (lambda: runners.check_library("stan"), "library='stan'"),
    (lambda: runners.run_library("numpyro", bs.target(T), budget=0), "budget=0"),
    (lambda: runners.run_library("numpyro", bs.target(T), chains=0), "chains"),
    (lambda: build.check_targets(["slr_nope"]), "target='slr_nope'"),
    (lambda: build.check_budgets([]), "budgets=[]"),
    (lambda: bs.leaderboard("/nonexistent/board.nc"), "path="),
    (lambda: bs.place_on_leaderboard({"x": 1}, 1e4), "score must be"),
    (lambda: bs.place_on_leaderboard({"target": T, "excess_over_reference": 0.0}, -1),
     "grad_evals=-1"),
    (lambda: bs.place_on_leaderboard({"target": "slr_other", "excess_over_reference": 0.0,
                                      "excess_over_reference_stderr": 0.0}, 1e4),
     "target='slr_other'"),
])
def test_bad_input_is_one_line_naming_the_parameter(call, param):
    with pytest.raises(ConfigError) as err:
        call()
    msg = str(err.value)
    assert "\n" not in msg and param in msg and "allowed" in msg, msg


@pytest.mark.parametrize("module", MODULES)
def test_doctests(module):
    mod = importlib.import_module(f"bayesslr.crosslibrary.{module}")
    runner = doctest.DocTestRunner(optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE)
    ran = 0
    for t in doctest.DocTestFinder().find(mod):
        if not t.examples:
            continue
        if t.name.endswith("run_nutpie") and importlib.util.find_spec("nutpie") is None:
            continue  # the bench extra (CI installs test and distributed only)
        runner.run(t)
        ran += 1
    assert ran and runner.failures == 0, f"{module}: {runner.failures} failed"


DOC = Path(__file__).resolve().parent.parent / "docs" / "targets.md"


def test_docs_table_is_the_shipped_board(board):
    text = DOC.read_text()
    table = text.split("<!-- leaderboard table:", 1)[1].split("-->", 1)[1]
    table = table.split("<!-- end leaderboard table -->", 1)[0].strip()
    assert table == markdown_table(board)


def test_docs_three_lines_run(capsys):
    text = DOC.read_text().split("## Leaderboard", 1)[1].split("\n## ", 1)[0]
    (code,) = re.findall(r"```py\n(.*?)```", text, re.S)
    exec(compile(code, "docs/targets.md#leaderboard", "exec"), {})
    out = capsys.readouterr().out
    assert "yours" in out and "nutpie" in out
