"""The ratio comparison of two saved runs (``benchmarks/compare_ratios.py``) and the group
ratio helpers (``benchmarks/benchutil.py``), on the committed baseline and made-up stats."""

from __future__ import annotations

import json
from pathlib import Path

import compare_ratios
import pytest
from benchutil import ratio

BASELINE_DIR = Path(__file__).resolve().parent / "baselines"
BASELINES = sorted(BASELINE_DIR.rglob("*.json"))


def _run(tmp_path, name: str, values: dict[str, float]) -> Path:
    p = tmp_path / name
    p.write_text(json.dumps({"benchmarks": [
        {"fullname": "bench_x.py::test_a", "name": "test_a", "group": "g",
         "extra_info": {**values, "load_before": 3.0}}]}))
    return p


def test_compare_flags_regressions_only_beyond_the_threshold(tmp_path, capsys):
    base = _run(tmp_path, "a.json", {"ratio_fit": 1.0, "speedup_ess": 2.0, "ratio_old": 3.0})
    same = _run(tmp_path, "b.json", {"ratio_fit": 1.2, "speedup_ess": 1.7, "ratio_new": 1.0})
    assert compare_ratios.main([str(base), str(same), "--fail", "25"]) == 0
    out = capsys.readouterr().out
    assert "only in the baseline" in out and "only in the new run" in out
    worse = _run(tmp_path, "c.json", {"ratio_fit": 1.3, "speedup_ess": 2.0})
    assert compare_ratios.main([str(base), str(worse), "--fail", "25"]) == 1
    slower = _run(tmp_path, "d.json", {"ratio_fit": 1.0, "speedup_ess": 1.4})
    assert compare_ratios.main([str(base), str(slower), "--fail", "25"]) == 1
    assert "worse" in capsys.readouterr().out


def test_compare_bad_input(tmp_path, capsys):
    base = _run(tmp_path, "a.json", {"ratio_fit": 1.0})
    assert compare_ratios.main([str(base), str(tmp_path / "missing.json")]) == 2
    assert compare_ratios.main([str(base), str(base), "--fail", "-1"]) == 2
    assert "--fail" in capsys.readouterr().err


@pytest.mark.skipif(not BASELINES, reason="no committed baseline under benchmarks/baselines")
def test_committed_baseline_has_the_groups_ratios():
    """The baseline carries the ratio of every group the suite cares about, and compares
    equal to itself."""
    got = {k for _, k in compare_ratios.ratios(BASELINE_DIR)}
    for key in ("ratio_fit_over_floor_x_evaluations", "ratio_iteration_over_floor",
                "ratio_first_call_over_warm_fit", "ratio_grid_over_slowest_single"):
        assert key in got, key
    assert compare_ratios.main([str(BASELINE_DIR), str(BASELINE_DIR)]) == 0


class _Bench:
    def __init__(self, disabled=False):
        self.extra_info, self.disabled = {}, disabled


def test_ratio_helper():
    b = _Bench()
    assert ratio(b, "ratio_x", 3.0, 2.0) == 1.5 and b.extra_info["ratio_x"] == 1.5
    assert ratio(b, "speedup_y", None, 2.0) is None
    assert b.extra_info["speedup_y_missing"] == "a side of the ratio was not run"
    d = _Bench(disabled=True)
    ratio(d, "ratio_z", 1.0, None)
    assert d.extra_info["ratio_z_missing"] == "benchmarks disabled"
    with pytest.raises(ValueError, match="ratio_ or speedup_"):
        ratio(b, "fit_over_floor", 1.0, 1.0)


def test_table_lists_each_ratio_with_its_load(tmp_path, capsys):
    run = _run(tmp_path, "a.json", {"ratio_fit": 1.25, "speedup_ess": 2.0})
    assert compare_ratios.main([str(run), "--table"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0].startswith("| group |") and len(out) == 4
    assert "ratio_fit | 1.25 | 3.0 -> ? |" in out[2]
