"""``bayesslr population``: the JSON contract and one-line errors with exit code 2."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from bayesslr.core.task import make_task
from bayesslr.population.method import linear_spiked_closed_form
from conftest import run_cli


def _run(argv, capsys):
    return run_cli(argv, capsys)


def test_json_contract_for_an_activation(capsys):
    code, out, _ = _run(["population", "--variant", "spiked", "--L", "3", "--nu", "2",
                         "--activation", "linear", "--samples", "20000", "--json"], capsys)
    assert code == 0
    res = json.loads(out)
    for key in ("excess_risk", "stderr", "risk", "m_k", "q_k", "m_v", "q_v"):
        assert isinstance(res[key], float)
    assert res["risk"] == pytest.approx(res["excess_risk"])  # delta = 0
    exact = linear_spiked_closed_form(make_task("spiked", L=3, nu=2.0))
    assert abs(res["excess_risk"] - exact) < 4 * res["stderr"]


def test_json_bayes_with_length_law_and_noise(capsys):
    code, out, _ = _run(["population", "--variant", "max", "--L-dist", "1,2,3", "--nu", "inf",
                         "--delta", "0.5", "--activation", "bayes", "--samples", "500",
                         "--json"], capsys)
    assert code == 0
    res = json.loads(out)
    assert res["excess_risk"] == 0.0 and res["risk"] == 0.5 and res["L"] == "1,2,3"


def test_table_output(capsys):
    code, out, _ = _run(["population", "--activation", "bayes", "--samples", "500"], capsys)
    assert code == 0 and "excess_risk" in out


@pytest.mark.parametrize(
    "argv,needle",
    [
        (["--nu", "-1"], "nu="),
        (["--nu", "inf"], "nu="),  # spiked
        (["--L", "0"], "L="),
        (["--L", "2.5"], "L="),
        (["--delta", "nan"], "delta="),
        (["--activation", "relu"], "activation="),
        (["--variant", "min"], "variant="),
        (["--samples", "abc"], "samples="),
        (["--no-such-flag"], "--no-such-flag"),
    ],
)
def test_bad_input_exits_2_with_one_line(capsys, argv, needle):
    code, out, err = _run(["population", *argv], capsys)
    assert code == 2 and out == ""
    lines = err.strip().splitlines()
    assert len(lines) == 1 and needle in lines[0] and lines[0].startswith("bayesslr: error:")


def test_console_script_entry_point():
    proc = subprocess.run(
        [sys.executable, "-m", "bayesslr.cli", "population", "--nu", "-2", "--json"],
        capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1 and "nu=" in proc.stderr
