"""The trapping-map driver (issue 24): run order, resumability keys, and the table's
reductions (reach fraction with its binomial standard error, mean excess with its standard
error over seeds, the GAMP - stored reference gap)."""

from __future__ import annotations

import json
import math

import pytest

from bayesslr.inference import trapping as tr


def test_plan_puts_the_equal_budget_comparison_first_and_gamp_before_each_task():
    p = tr.plan(100_000)
    first = p[:24]
    assert {(r["delta"], r["D"], r["alpha"]) for r in first} == {(0.01, 50, 2.0),
                                                                 (0.01, 100, 2.0)}
    for i in range(0, len(p), 4):  # GAMP (the reference) first, then the three algorithms
        assert p[i]["what"] == "gamp" and [r["what"] for r in p[i + 1:i + 4]] == list(tr.ALGOS)
    keys = [tr.run_key(r) for r in p]
    assert len(set(keys)) == len(keys)
    rest = p[24:]
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
    assert row["no_reference"] == 1


def test_each_algorithm_runs_through_the_family_runners_contract(tmp_path, monkeypatch):
    """``run_algo`` calls every algorithm as the family does (``RUNNERS[alg](key, alg, spec,
    data, opts, budget)``) and scores its draws against the GAMP reference on the seed's test
    inputs. A driver that called the runners by another signature recorded a TypeError for
    every SMC and PT run of the map."""
    import numpy as np

    from bayesslr.inference import method as M

    calls = []

    def fake(key, alg, spec, data, opts, budget):
        calls.append((alg, opts["init"], budget))
        k = np.tile(np.asarray(data.teacher.k), (4, 1)) + 0.01 * np.arange(4)[:, None]
        v = np.tile(np.asarray(data.teacher.v), (4, 1))
        return k, v, {"grad_evals": budget, "converged": True}

    monkeypatch.setattr(M, "RUNNERS", {a.split("-")[0]: fake for a in tr.ALGOS})
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
