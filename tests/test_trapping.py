"""The trapping-map driver (issue 24), a study script of ``benchmarks/studies/``: run order,
resumability keys, and the table's reductions (reach fraction with its binomial standard
error, mean excess with its standard error over seeds, the GAMP - stored reference gap)."""

from __future__ import annotations

import dataclasses
import json
import math
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks" / "studies"))
import trapping as tr  # noqa: E402  (a script beside its study_cli, not a package module)

from bayesslr.inference import algorithms as A  # noqa: E402


def _fake_runners(monkeypatch, run) -> None:
    """Every algorithm of the map runs ``run`` instead (its record otherwise unchanged)."""
    for a in tr.ALGOS:
        name = a.split("-")[0]
        monkeypatch.setitem(A.ALGORITHMS, name, dataclasses.replace(A.ALGORITHMS[name], run=run))


def test_plan_puts_the_equal_budget_comparison_first_and_gamp_before_each_task():
    p = tr.plan(100_000)
    first = p[:30]
    assert {(r["delta"], r["D"], r["alpha"]) for r in first} == {(0.01, 50, 2.0),
                                                                 (0.01, 100, 2.0)}
    for i in range(0, len(p), 5):  # the references (GAMP, then NUTS where GAMP fails) first
        assert [r["what"] for r in p[i:i + 2]] == ["gamp", "nutsref"]
        assert [r["what"] for r in p[i + 2:i + 5]] == list(tr.ALGOS)
    keys = [tr.run_key(r) for r in p]
    assert len(set(keys)) == len(keys)
    rest = p[30:]
    cost = [r["D"] * r["D"] * r["alpha"] for r in rest]
    assert cost == sorted(cost)  # then by increasing cost


def _write(work, **row):
    (work / f"{tr.run_key(row)}.json").write_text(json.dumps(row))


def test_table_reduces_seeds_with_their_standard_errors(tmp_path):
    base = dict(delta=0.01, D=25, alpha=2.0, budget=1000)
    for s, (reach, ex) in enumerate([(True, 0.001), (False, 0.2), (True, -0.001)]):
        _write(tmp_path, **base, seed=s, what="smc-prior", reaches=reach, excess=ex,
               excess_stderr=0.01, reference="gamp", grad_evals=990, run_s=1.0)
        _write(tmp_path, **{**base, "budget": 0}, seed=s, what="gamp", stored_reference=True,
               gamp_converged=True,
               gamp_minus_reference=0.001 * s, gamp_minus_reference_stderr=0.0005)
    _write(tmp_path, **base, seed=9, what="smc-prior", error="RuntimeError: boom")
    # a seed whose GAMP reference did not converge (it blew up): no reference, counted apart
    _write(tmp_path, **{**base, "budget": 0}, seed=5, what="gamp", gamp_converged=False,
           stored_reference=False, test_error=1e9)
    _write(tmp_path, **base, seed=5, what="smc-prior", reaches=True, excess=-1e9,
           excess_stderr=1.0, reference="gamp", grad_evals=990, run_s=1.0)
    # a seed whose NUTS reference failed its checks: no reference either
    _write(tmp_path, **{**base, "budget": 0}, seed=6, what="nutsref", checks_passed=False,
           checks="r_hat_max=1.05 > 1.01", test_error=0.4)
    _write(tmp_path, **base, seed=6, what="smc-prior", reaches=True, excess=0.0,
           excess_stderr=1.0, reference="nutsref", grad_evals=990, run_s=1.0)
    t = tr.trapping_table(tmp_path)
    row = t[t["algorithm"] == "smc-prior"].iloc[0]
    assert row["seeds"] == 3 and row["seed_list"] == "0,1,2"
    assert row["reach_fraction"] == pytest.approx(2 / 3)
    assert row["reach_se"] == pytest.approx(math.sqrt((2 / 3) * (1 / 3) / 3))
    assert row["excess_mean"] == pytest.approx(0.2 / 3)
    sd = math.sqrt(((0.001 - 0.2 / 3) ** 2 + (0.2 - 0.2 / 3) ** 2 + (-0.001 - 0.2 / 3) ** 2)
                   / 2)
    assert row["excess_se"] == pytest.approx(sd / math.sqrt(3))
    gap = t[t["algorithm"] == "gamp - stored reference"].iloc[0]
    assert gap["excess_mean"] == pytest.approx(0.001)
    assert row["failed"] == 1  # a failed run is counted apart, not as a seed
    assert row["no_reference"] == 2
    assert set(t["algorithm"]) == {"smc-prior", "gamp - stored reference"}


def test_each_algorithm_runs_through_the_family_runners_contract(tmp_path, monkeypatch):
    """``run_algo`` calls every algorithm as the family does (``ALGORITHMS[alg].run(key, alg,
    spec, data, opts, budget)``) and scores its draws against the GAMP reference on the seed's test
    inputs. A driver that called the runners by another signature recorded a TypeError for
    every SMC and PT run of the map."""
    import numpy as np

    calls = []

    def fake(key, alg, spec, data, opts, budget):
        calls.append((alg, opts["init"], budget))
        k = np.tile(np.asarray(data.teacher.k), (4, 1)) + 0.01 * np.arange(4)[:, None]
        v = np.tile(np.asarray(data.teacher.v), (4, 1))
        return k, v, {"grad_evals": budget, "converged": True}

    _fake_runners(monkeypatch, fake)
    base = dict(delta=0.01, D=25, alpha=2.0, seed=0)
    _, data = tr._data(base)
    gamp = {**base, "what": "gamp", "budget": 0, "test_error": 0.5, "stderr": 0.01,
            "gamp_converged": True}
    tr._gamp_file(tmp_path, base).write_text(json.dumps(gamp))
    tr._yhat_file(tmp_path, base).parent.mkdir(parents=True)
    np.save(tr._yhat_file(tmp_path, base), np.zeros(tr.N_TEST))
    for what in tr.ALGOS:
        out = tr.run_algo({**base, "what": what, "budget": 1000}, tmp_path)
        assert out["reference"] == "gamp" and np.isfinite(out["excess"])
        assert np.isfinite(out["excess_stderr"]) and out["grad_evals"] == 1000
    assert calls == [(a.split("-")[0], a.split("-")[1], 1000) for a in tr.ALGOS]


def test_where_gamp_fails_a_nuts_reference_is_made_and_the_runs_are_scored_again(
        tmp_path, monkeypatch, capsys):
    """A cell whose GAMP did not converge (and has no stored reference) gets the stored
    reference's teacher-start NUTS chains on its own data, up to ``N D <= nutsref_max_nd``;
    algorithm runs scored against the failed GAMP are run again against it. Before: such cells
    had no reference and were only counted (alpha = 5, D = 200: one seed of three left)."""
    import numpy as np

    from bayesslr import ground_truth as G
    from bayesslr.inference import reference as R

    chains = []

    class Res:
        def __init__(self, k, v):
            self.k, self.v = k, v
            self.r_hat_max, self.ess_bulk_min, self.divergences, self.grad_evals = (
                1.002, 5000.0, 0, 1234)

        def flat(self):
            return self.k.reshape(-1, self.k.shape[-1]), self.v.reshape(-1, self.v.shape[-1])

    def fake_chains(spec, data, D, opt):
        chains.append((D, opt.chains, opt.draws))
        k = np.tile(np.asarray(data.teacher.k), (2, 3, 1))
        return Res(k, np.tile(np.asarray(data.teacher.v), (2, 3, 1)))

    def fake_runner(key, alg, spec, data, opts, budget):
        k = np.tile(np.asarray(data.teacher.k), (4, 1)) + 0.01 * np.arange(4)[:, None]
        return k, np.tile(np.asarray(data.teacher.v), (4, 1)), {"grad_evals": budget,
                                                                 "run_s": 0.1}

    monkeypatch.setattr(G, "teacher_chains", fake_chains)
    _fake_runners(monkeypatch, fake_runner)
    monkeypatch.setattr("bayesslr.core.jaxconfig.configure_jax", lambda *a, **k: None)
    monkeypatch.setattr(tr, "SETTINGS", {0.01: (2.0, 5.0)})  # the plan: these two cells
    cells = [dict(delta=0.01, D=25, alpha=5.0, seed=0), dict(delta=0.01, D=25, alpha=2.0, seed=0)]
    for c, ok in zip(cells, (False, True), strict=True):  # GAMP failed on the first only
        _write(tmp_path, **c, what="gamp", budget=0, gamp_converged=ok, stored_reference=False,
               test_error=1e5 if not ok else 0.5, stderr=1.0)
        tr._yhat_file(tmp_path, c).parent.mkdir(exist_ok=True)
        np.save(tr._yhat_file(tmp_path, c), np.zeros(tr.N_TEST))
        for a in tr.ALGOS:  # scored against GAMP by an earlier run
            _write(tmp_path, **c, what=a, budget=1000, reference="gamp", excess=-1e5)
    tr.run_trapping_map(tmp_path, 1000, [], seeds=(0,), Ds=(25,), nutsref_max_nd=5000)
    assert chains == [(25, 4, 2000)]  # the failed cell only; the stored reference's settings
    nref = json.loads(tr._nutsref_file(tmp_path, cells[0]).read_text())
    assert nref["checks_passed"] and nref["grad_evals"] == 1234
    for a in tr.ALGOS:
        new = json.loads((tmp_path / f"{tr.run_key({**cells[0], 'what': a, 'budget': 1000})}"
                                      ".json").read_text())
        assert new["reference"] == "nutsref" and abs(new["excess"]) < 0.05
        assert tr._yhat_file(tmp_path, {**cells[0], "what": a, "budget": 1000}, None).exists()
        old = json.loads((tmp_path / f"{tr.run_key({**cells[1], 'what': a, 'budget': 1000})}"
                                      ".json").read_text())
        assert old["excess"] == -1e5  # a cell with a converged GAMP is left as it was
    t = tr.trapping_table(tmp_path)
    row = t[(t["alpha"] == 5.0) & (t["algorithm"] == "smc-prior")].iloc[0]
    assert row["reference"] == "nutsref" and row["no_reference"] == 0
    # a larger cell beyond the cap gets no NUTS reference: said, and nothing recorded
    big = dict(delta=0.01, D=50, alpha=5.0, seed=0)
    _write(tmp_path, **big, what="gamp", budget=0, gamp_converged=False, stored_reference=False)
    np.save(tr._yhat_file(tmp_path, big), np.zeros(tr.N_TEST))
    monkeypatch.setattr(R, "lookup", lambda *a, **k: None)
    tr.run_trapping_map(tmp_path, 1000, ["alpha=5", "what=nutsref"], seeds=(0,), Ds=(50,),
                        nutsref_max_nd=5000)
    assert "no NUTS reference at N D = 12500 > --nutsref-max-nd 5000" in capsys.readouterr().out
    assert not tr._nutsref_file(tmp_path, big).exists() and len(chains) == 1
    # and its algorithms are not run: with no reference the table could not score them
    tr.run_trapping_map(tmp_path, 1000, ["alpha=5"], seeds=(0,), Ds=(50,), nutsref_max_nd=5000)
    assert not list(tmp_path.glob("*D50-alpha5-seed0-smc*"))


def test_a_fresh_clone_makes_the_gamp_predictions_again(tmp_path, monkeypatch):
    """The records are committed but not GAMP's predictions (``yhat/``, ignored by git): a
    resumed map makes them again and keeps the record; before, every run that needed them was
    skipped without a word."""
    import numpy as np

    made = []

    def fake_gamp(r, work):
        made.append(tr.run_key(r))
        tr._yhat_file(work, r).parent.mkdir(exist_ok=True)
        np.save(tr._yhat_file(work, r), np.zeros(tr.N_TEST))
        return {"test_error": 0.0}

    monkeypatch.setattr(tr, "run_gamp", fake_gamp)
    monkeypatch.setattr("bayesslr.core.jaxconfig.configure_jax", lambda *a, **k: None)
    monkeypatch.setattr(tr, "SETTINGS", {0.01: (2.0,)})
    monkeypatch.setattr(tr, "ALGOS", ())
    c = dict(delta=0.01, D=25, alpha=2.0, seed=0)
    _write(tmp_path, **c, what="gamp", budget=0, gamp_converged=True, test_error=0.5)
    before = tr._gamp_file(tmp_path, c).read_text()
    tr.run_trapping_map(tmp_path, 1000, ["D=25"], seeds=(0,), Ds=(25,))
    assert made == [tr.run_key({**c, "what": "gamp", "budget": 0})]
    assert tr._yhat_file(tmp_path, c).exists()
    assert tr._gamp_file(tmp_path, c).read_text() == before
