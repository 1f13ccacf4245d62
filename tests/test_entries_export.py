"""Outside algorithms on the leaderboard (entries, ``bayesslr score-draws``) and the posteriordb
export read by the official ``posteriordb`` package (issue 24)."""

from __future__ import annotations

import json
import math

import jax
import numpy as np
import pytest

import bayesslr as bs
from bayesslr.core.task import ConfigError
from bayesslr.posteriors import entry, write_entry
from bayesslr.report import inference as rep
from conftest import run_cli

NAME = "slr_spiked_L3_nu2_delta0.01-D50_alpha5_seed0"


@pytest.fixture(scope="module")
def tgt():
    return bs.target(NAME)


def _builtin_record(method: str, excess: float, grads: float) -> dict:
    """A built-in inference cell record of the same task (the shape the family writes)."""
    cell = {"method": method, "variant": "spiked", "L": "3", "nu": 2.0, "delta": 0.01,
            "alpha": 5.0, "D": 50, "seed": 0}
    res = {"test_error": 0.36 + excess, "stderr": 0.008, "excess_over_reference": excess,
           "excess_over_reference_stderr": 0.001, "excess_over_oracle": 0.02 + excess,
           "excess_over_oracle_stderr": 0.001, "reference_error": 0.3629,
           "reference_source": "nuts_long", "grad_evals": grads, "compile_s": 1.0,
           "run_s": 2.0, "converged": True, "reason": "", "reaches_reference": excess < 0.003,
           "iterations": 100}
    return {"cell": cell, "status": "ok", "result": res}


def test_an_outside_entry_appears_on_the_leaderboard_and_the_figure(tgt, tmp_path):
    near = {c: tgt.teacher[c] + 0.05 * tgt.init(jax.random.key(1), 200)[c] for c in "kv"}
    rec_g = entry(tgt, near, name="my_sampler", cost=2.5e4, note="test")
    rec_s = entry(tgt, tgt.init(jax.random.key(0), 64), name="prior_draws", cost=3.0,
                  cost_unit="seconds")
    assert rec_g["cell"]["method"] == "entry:my_sampler"
    assert rec_g["result"]["grad_evals"] == 2.5e4 and rec_s["result"]["grad_evals"] is None
    results = tmp_path / "results"
    p1 = write_entry(rec_g, results)
    write_entry(rec_s, results)
    assert p1.parent == results / "entries" and json.loads(p1.read_text())["status"] == "ok"
    records = [_builtin_record("inference:nuts-random-3e4", 0.02, 3.0e4),
               _builtin_record("inference:smc-prior-3e4", 0.001, 3.0e4)]
    for i, r in enumerate(records):
        (results / f"{i}.json").write_text(json.dumps(r))
    df = rep.tidy(results)  # a directory of records: its entries/ are read beside them
    board = rep.leaderboard(df)
    rows = board.set_index("algorithm")
    assert {"nuts", "smc", "my_sampler", "prior_draws"} <= set(rows.index)
    mine = rows.loc["my_sampler"]
    assert mine["start"] == "outside" and mine["grad_evals"] == 2.5e4
    assert mine["excess_over_reference"] == pytest.approx(
        rec_g["result"]["excess_over_reference"])
    assert rows.loc["prior_draws", "cost_unit"] == "seconds"
    assert math.isnan(rows.loc["prior_draws", "grad_evals"])
    assert not bool(rows.loc["prior_draws", "reaches_reference"])
    # the figure draws the entrant: a point on the cost axis, a labelled line otherwise
    fig = rep.error_vs_cost(df)
    labels = [t.get_text() for ax in fig.axes if ax.get_legend()
              for t in ax.get_legend().get_texts()]
    assert "my_sampler (outside)" in labels
    assert any(lab.startswith("prior_draws (outside; 3 seconds") for lab in labels)
    written, skipped = rep.write_inference_figures(df, tmp_path / "fig")
    assert not skipped


def test_entry_refuses_bad_input_in_one_line(tgt):
    d = tgt.init(jax.random.key(0), 4)
    for kw, what in ((dict(name="bad name", cost=1), "name="),
                     (dict(name="ok", cost=-1), "cost="),
                     (dict(name="ok", cost=float("nan")), "cost="),
                     (dict(name="ok", cost=1, cost_unit=" "), "cost_unit")):
        with pytest.raises(ConfigError, match=what) as ex:
            entry(tgt, d, **kw)
        assert "\n" not in str(ex.value)


def test_score_draws_verb_writes_an_entry(tgt, tmp_path, capsys):
    d = tgt.init(jax.random.key(0), 32)
    f = tmp_path / "draws.npz"
    np.savez(f, k=np.asarray(d["k"]), v=np.asarray(d["v"]))
    code, out, err = run_cli(["score-draws", NAME, str(f), "--name", "cli_entrant", "--cost",
                              "1000", "--out", str(tmp_path / "res"), "--json"], capsys)
    assert code == 0, err
    res = json.loads(out)
    assert res["entrant"] == "cli_entrant" and res["reaches_reference"] is False
    assert (tmp_path / "res" / "entries").is_dir()
    code, out, err = run_cli(["score-draws", NAME, str(f), "--json"], capsys)
    assert code == 0 and "excess_over_reference" in json.loads(out)
    # bad input: exit 2 with one line, before anything is computed
    for argv, what in ((["score-draws", "nope", str(f)], "malformed"),
                       (["score-draws", NAME, str(tmp_path / "none.npz")], "not a file"),
                       (["score-draws", NAME, str(f), "--out", str(tmp_path)], "--name")):
        code, out, err = run_cli(argv, capsys)
        assert code == 2 and what in err and err.count("\n") == 1, err


@pytest.mark.filterwarnings("ignore:PyTensor could not link to a BLAS:UserWarning")
def test_posteriordb_reads_the_export(tmp_path, capsys):
    pdb = pytest.importorskip("posteriordb", reason="the test extra installs posteriordb")
    out = tmp_path / "pdb"
    code, text, err = run_cli(["export", "posteriordb", str(out), "--only", NAME,
                               "--reference-draws", "quick", "--thin", "2", "--json"], capsys)
    assert code == 0, err
    db = pdb.PosteriorDatabase(str(out))
    pname = "slr_spiked_L3_nu2_delta0p01-D50_alpha5_seed0"  # posteriordb's names hold no dot
    assert db.posterior_names() == [pname]
    post = db.posterior(pname)
    assert post.information["bayesslr_target"] == NAME and bs.target(pname).name == NAME
    values = post.data.values()
    t = bs.target(NAME)
    np.testing.assert_array_equal(np.asarray(values["X"], np.float32), t.data["X"])
    np.testing.assert_array_equal(np.asarray(values["y"], np.float32), t.data["y"])
    assert values["nu"] == 2.0 and values["delta"] == 0.01 and values["variant"] == "spiked"
    draws = post.reference_draws()
    assert len(draws) == 2 and len(draws[0]) == 2 * t.D and len(draws[0]["k[1]"]) == 50
    info = post.reference_draws_info()
    assert "quick" in info["inference"]["method"]
    assert "Bayes-optimal" in post.information["reference_figure"]
    assert post.information["bayes_optimal_error"]["value"] == pytest.approx(
        t.reference["bayes_error"])
    assert post.model._implementations == {
        "pymc": {"model_code": "models/pymc/slr_marginal.py"}}
    code_text = post.model.code("pymc")
    assert "def model(data)" in code_text and "import bayesslr" not in code_text
    # the shipped code, run on the shipped data, is the target's log density
    if all(__import__("importlib").util.find_spec(m) for m in ("pymc", "pytensor")):
        ns: dict = {}
        exec(compile(code_text, "slr_marginal.py", "exec"), ns)
        logp = ns["model"](values).compile_logp()
        th = {c: np.asarray([draws[0][f"{c}[{j + 1}]"][0] for j in range(t.D)])
              for c in "kv"}
        ours = float(t.log_density({c: th[c].astype(np.float32) for c in "kv"}))
        assert float(logp(th)) == pytest.approx(ours, rel=1e-5)
    # the reference draws are posterior draws: their predictor is near the reference
    k, v = (np.stack([np.stack([d[f"{c}[{j + 1}]"] for j in range(t.D)], -1) for d in draws])
            for c in "kv")
    assert k.shape == (2, 50, t.D)
    s = bs.score_draws(t, {"k": k, "v": v})
    assert abs(s["excess_over_reference"]) < 0.02


def test_export_refuses_bad_input_before_writing(tmp_path, capsys):
    out = tmp_path / "pdb"
    for argv, what in ((["--only", "slr_spiked_L3_nu2_delta0.01-D999_alpha5_seed0"],
                        "not stored"),
                       (["--thin", "0"], "thin"),
                       (["--reference-draws", "long"], "reference_draws")):
        code, _, err = run_cli(["export", "posteriordb", str(out), *argv], capsys)
        assert code == 2 and what in err and err.count("\n") == 1, err
    assert not out.exists()
