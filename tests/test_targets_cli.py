"""``bayesslr targets`` and ``bayesslr targets show NAME`` (issue 38, item 1): every stored
target listed with its task, size, reference and the reference's quality, in 80 columns and as
JSON; bad names are one line, exit 2."""

from __future__ import annotations

import json

import pytest

import bayesslr as bs
from bayesslr.posteriors.target import TARGET_FIELDS
from conftest import run_cli


def test_targets_lists_every_stored_target_in_80_columns(capsys):
    code, out, _ = run_cli(["targets"], capsys)
    assert code in (0, None)
    lines = out.splitlines()
    assert max(len(x) for x in lines) <= 80
    listed = [x.split()[0] for x in lines[1:] if x.startswith("slr_")]
    assert listed == bs.targets() and len(listed) == 16
    assert f"{len(listed)} targets." in out


def test_targets_json_carries_task_size_reference_and_quality(capsys):
    code, out, _ = run_cli(["targets", "--json"], capsys)
    assert code in (0, None)
    rows = json.loads(out)["targets"]
    assert [r["name"] for r in rows] == bs.targets()
    for r in rows:
        assert tuple(r) == TARGET_FIELDS
        assert r["dim"] == 2 * r["D"] and r["N"] == round(r["alpha"] * r["D"])
        assert r["reference"] == "nuts_long" and r["bayes_error_stderr"] > 0
        # the reference's own checks, as the stored reference judged them
        assert r["checks_passed"] == (r["checks"] == "ok")
    # the one stored reference that fails its checks says so (docs/targets.md)
    assert sum(not r["checks_passed"] for r in rows) >= 1


def test_targets_show_one_and_refuse_bad_names(capsys):
    name = "slr_spiked_L3_nu2_delta0p01-D50_alpha5_seed0"  # posteriordb's spelling
    code, out, _ = run_cli(["targets", "show", name, "--json"], capsys)
    assert code in (0, None)
    rec = json.loads(out)
    assert rec["name"] == "slr_spiked_L3_nu2_delta0.01-D50_alpha5_seed0"
    assert rec["bayes_error"] == pytest.approx(bs.target(rec["name"]).reference["bayes_error"])
    for argv, word in ((["targets", "show", "nope"], "malformed"),
                       (["targets", "show", "slr_spiked_L3_nu2_delta0.01-D50_alpha7_seed0"],
                        "is not stored")):
        code, out, err = run_cli(argv, capsys)
        assert code == 2 and word in err and len(err.strip().splitlines()) == 1
