"""The multi-head model as a registered family (issue 39, docs/multihead.md section 8): the
``multihead-quick`` preset run through the command line, its dataset, its report notebook and
its verdicts; the claims' rules on synthetic results with known answers; bad cells refused
before any work. The preset is the one CI cost here: about 80 s of CPU on two cores (JAX
compilations of the three attentions and of the NUTS chunk included).
"""

from __future__ import annotations

import html
import math
import re
from pathlib import Path

import numpy as np
import pytest
import xarray as xr
from multihead_records import multihead_gd_records, multihead_records

import bayesslr as bs
from bayesslr.core.task import ConfigError
from bayesslr.registry import Cell, get_method
from bayesslr.report.claims import STATUSES, multihead_claims
from bayesslr.report.claims.multihead_claims import MULTIHEAD_CLAIMS
from bayesslr.sweep.dataset import family_dataset
from conftest import run_cli

MEMBERS = ["multihead:softmax", "multihead:softmax1", "multihead:bayes_softmax",
           "multihead:bayes_sampling"]


@pytest.fixture(scope="module")
def quick(tmp_path_factory):
    out = tmp_path_factory.mktemp("mhq")
    import io
    from contextlib import redirect_stderr, redirect_stdout

    from bayesslr.cli import main

    buf = io.StringIO()
    code = 0
    with redirect_stdout(buf), redirect_stderr(buf):
        try:
            main(["run", "--preset", "multihead-quick", "--out", str(out), "--quiet"])
        except SystemExit as exc:
            code = exc.code
    assert code in (0, None), buf.getvalue()
    return out


def test_quick_preset_holds_the_task_the_attentions_and_the_sampler(quick):
    with xr.open_datatree(quick / "dataset.nc", engine="h5netcdf") as tree:
        ds = tree["multihead"].to_dataset().load()
        cells = tree["cells"].to_dataset().load()
    assert set(cells["status"].values) == {"ok"}
    assert ds["variant"].values.tolist() == ["multihead"]
    assert sorted(ds["method"].values.tolist()) == sorted(MEMBERS)
    # every member of a seed saw the same teacher and test set: the oracle's error is the
    # same number for all of them (float32 scoring of identical rows)
    orc = ds["oracle_error"].sel({"lam": 0.01})
    for alpha in ds["alpha"].values:
        for seed in ds["seed"].values:
            v = np.asarray(orc.sel(alpha=alpha, seed=seed).values, float).ravel()
            v = v[np.isfinite(v)]
            assert v.size >= 4 and np.ptp(v) < 1e-6 * max(1.0, v.max()), (alpha, seed, v)
    # the excess over the oracle is the paired difference, non-negative for every estimator
    ex = np.asarray(ds["excess_over_oracle"].values, float)
    assert np.all(ex[np.isfinite(ex)] >= 0)
    te, oe = (np.asarray(ds[v].values, float) for v in ("test_error", "oracle_error"))
    ok = np.isfinite(ex)
    assert np.allclose(te[ok] - oe[ok], ex[ok], atol=1e-5)
    # the pruning curve: 0 heads kept is the zero predictor (excess about 1, its mean square),
    # all heads kept is the student itself
    pr = ds["prune_excess_over_oracle"].sel({"method": "multihead:softmax", "lam": 0.01})
    assert pr.sizes["heads_kept"] >= 3
    last = pr.isel(heads_kept=2)
    np.testing.assert_allclose(
        last.values, ds["excess_over_oracle"].sel({"method": "multihead:softmax",
                                                   "lam": 0.01}).values, rtol=1e-5)
    # the sampler's diagnostics are stored and the verdict is the rule's
    s = ds.sel({"method": "multihead:bayes_sampling"})
    rhat = np.asarray(s["r_hat_max"].values, float)
    conv = np.asarray(s["converged"].values, float)
    finite = np.isfinite(rhat)
    assert finite.any()
    assert np.all(conv[finite & (rhat > 1.01)] == 0)


def test_quick_preset_holds_gradient_descent_trajectories(quick):
    """The three attentions' GD trajectories along ``step``: the start is a random head (its
    alignment with the 2-dimensional teacher span near sqrt(F / D) = 0.35, far from 1), every
    record's alignment is a cosine in [0, 1] and its index in [-1, 1], and the last record is
    the final value."""
    with xr.open_datatree(quick / "dataset.nc", engine="h5netcdf") as tree:
        ds = tree["multihead_gd"].to_dataset().load()
    assert sorted(ds["method"].values.tolist()) == sorted(
        f"multihead_gd:{m.partition(':')[2]}" for m in MEMBERS[:3])
    steps = ds["step"].values
    assert steps[0] == 0 and steps[-1] == 600 and ds.sizes["step"] == 31
    a = np.asarray(ds["trajectory_alignment_K"].values, float)
    s = np.asarray(ds["trajectory_specialisation_K"].values, float)
    fin = np.isfinite(a)
    assert fin.any() and np.all((a[fin] >= 0) & (a[fin] <= 1 + 1e-9))
    # the index is (mean share - 1/F) / (1 - 1/F), shares in [0, 1]: within [-1, 1]
    assert np.all((s[fin] >= -1 - 1e-9) & (s[fin] <= 1 + 1e-9))
    start = ds["trajectory_alignment_K"].isel(step=0).values
    start = start[np.isfinite(start)]
    assert start.size and np.all(start < 0.7), start
    np.testing.assert_allclose(ds["alignment_K"].values,
                               ds["trajectory_alignment_K"].isel(step=-1).values)


def test_quick_report_notebook_draws_the_figure_and_every_verdict(quick):
    from bayesslr.report.notebooks import find_notebooks, write_notebooks

    nb = [p for p in find_notebooks() if p.stem == "multihead"]
    assert nb, "reports/multihead.py is missing"
    runs = write_notebooks(quick, quick / "figures", notebooks=nb)
    (run,) = runs
    assert not run.error and not run.skipped and run.html is not None, run
    assert run.images == 2
    page = html.unescape(re.sub(r"<[^>]+>", "", run.html.read_text(encoding="utf-8")))
    assert "Traceback" not in page
    assert len(run.verdicts) == len(MULTIHEAD_CLAIMS)
    assert all(re.match(r"VERDICT \[(" + "|".join(STATUSES) + r")\] ", v)
               for v in run.verdicts)


def test_quick_verdicts_are_not_decided_on_two_seeds(quick):
    """Two seeds give one degree of freedom (an ordering needs 14 standard errors): the
    comparisons are undecided, and the reason says what is needed."""
    from bayesslr.results.load import load_results

    vs = multihead_claims(load_results(quick))
    assert [v.claim for v in vs] == list(MULTIHEAD_CLAIMS)
    assert vs[-1].status == "not enough data" and "needs" in vs[-1].evidence
    assert all(re.search(r"\d", v.evidence) for v in vs[:-1])


# ---------------------------------------------------------------------------------------------
# the claims' rules on synthetic results with known answers
# ---------------------------------------------------------------------------------------------
def synthetic(gd: dict[str, int] | None = None, gd_seeds: int = 12, **kw) -> xr.DataTree:
    """The synthetic multi-head records (tests/multihead_records.py) as a sweep's tree, with
    ``multihead_gd`` trajectories where ``gd`` is given (member -> seeds showing the stages)."""
    children = {}
    for fam, recs in (("multihead", multihead_records(**kw)),
                      ("multihead_gd", multihead_gd_records(gd, seeds=gd_seeds) if gd else [])):
        if recs:
            methods = list(dict.fromkeys(r.cell.method for r in recs))
            children[fam] = xr.DataTree(family_dataset(get_method(methods[0]), recs, methods))
    return xr.DataTree(xr.Dataset(), children=children)


ALL = {"softmax": 12, "softmax1": 12, "bayes_softmax": 12}


def _status(vs):
    return {c.split(":")[0]: v.status for c, v in zip(MULTIHEAD_CLAIMS, vs, strict=True)}


def test_claims_hold_where_the_synthetic_answer_says_so():
    vs = multihead_claims(synthetic(floor=True))
    st = [v.status for v in vs]
    assert st[:6] == ["holds"] * 6, [v.line() for v in vs]
    assert st[6] == "not enough data"


def test_claims_fail_where_the_synthetic_answer_says_so():
    vs = multihead_claims(synthetic(floor=False, prune_cost=0.2))
    st = [v.status for v in vs]
    assert st[4] == "does not hold", vs[4].line()  # no floor: softmax falls like 1/alpha
    assert st[5] == "does not hold", vs[5].line()  # pruning costs 0.2 >> seed noise
    assert st[:4] == ["holds"] * 4


def test_stages_claim_holds_fails_or_says_how_many_seeds():
    """Twelve of twelve seeds at each of three points: the one-sided binomial p-value 2^-12 is
    below the family level 0.0228 / 3; none of twelve for softmax: the fraction is below one
    half; four of four at one point: p = 1/16 > 0.0228 decides nothing, and six seeds would
    (2^-6 = 0.016)."""
    assert multihead_claims(synthetic(gd=ALL))[6].status == "holds"
    v = multihead_claims(synthetic(gd={**ALL, "softmax": 0}))[6]
    assert v.status == "does not hold", v.line()
    assert "softmax, multihead L=3 ν=9 Δ=0.05 α=64 λ=0.01 D=24: 0 of 12 seeds" in v.evidence
    v = multihead_claims(synthetic(gd={"bayes_softmax": 4}, gd_seeds=4))[6]
    assert v.status == "not enough data" and "needs about 6 seeds" in v.evidence, v.line()
    v = multihead_claims(synthetic(gd={"bayes_softmax": 9}, gd_seeds=12))[6]
    assert v.status == "not enough data", v.line()  # P(X >= 9 | 12) = 0.073 > 0.0228


def test_unconverged_sampler_is_not_ground_truth():
    vs = multihead_claims(synthetic(floor=True, converged=False))
    assert vs[0].status == "does not hold"
    for v in vs[1:5]:
        assert v.status == "not enough data", v.line()
        assert "left out (sampler not converged" in v.evidence


def test_without_multihead_results_every_claim_says_what_it_needs():
    vs = multihead_claims(xr.DataTree())
    assert len(vs) == len(MULTIHEAD_CLAIMS)
    assert all(v.status == "not enough data" and "multihead-quick" in v.evidence for v in vs)


# ---------------------------------------------------------------------------------------------
# bad cells: one line naming the parameter, before any work
# ---------------------------------------------------------------------------------------------
BASE = dict(variant="multihead", L="3", nu=9.0, delta=0.05, alpha=4.0, D=16)


@pytest.mark.parametrize("cell, match", [
    (Cell("multihead:softmax", **BASE), r"lam=None is not a penalty .* allowed: real >= 0"),
    (Cell("multihead:softmax", lam="replica", **BASE), r"lam='replica'"),
    (Cell("multihead:bayes_sampling", lam=0.1, **BASE), r"lam=0.1: .* no penalty"),
    (Cell("multihead:softmax", lam=0.1, options={"draws": 10}, **BASE),
     r"options \['draws'\] apply to multihead:bayes_sampling only"),
    (Cell("multihead:bayes_sampling", options={"restarts": 2}, **BASE),
     r"options \['restarts'\] apply to the attention students only"),
    (Cell("multihead:bayes_sampling", **{**BASE, "delta": 0.0}), r"delta"),
    (Cell("multihead:softmax", lam=0.1, options={"F": 9}, **BASE), r"D=16 is out of range"),
    (Cell("multihead:softmax", lam=0.1, **{**BASE, "L": "1,2,3"}), r"L='1,2,3' is a length"),
    (Cell("multihead:softmax", lam=0.1, **{**BASE, "variant": "spiked"}),
     r"variant='spiked' is not a task of method 'multihead:softmax'; allowed: one of "
     r"multihead"),
    (Cell("erm:softmax", lam=0.1, **BASE),
     r"variant='multihead' is not a task of method 'erm:softmax'; allowed: one of spiked, max"),
    (Cell("multihead:softmax2", lam=0.1, **BASE), r"needs an estimator; allowed"),
])
def test_bad_cells_are_refused_in_one_line(cell, match):
    with pytest.raises(ConfigError, match=match) as exc:
        bs.registry.validate_cell(cell)
    assert "\n" not in str(exc.value)


def test_a_bad_preset_value_names_the_variant():
    from bayesslr.sweep.config import parse_config

    with pytest.raises(ConfigError, match=r"variant='multi' is unknown; allowed: one of "
                                          r"spiked, max, multihead"):
        parse_config({"name": "x", "defaults": {"variant": "multi"},
                      "grid": [{"methods": ["multihead:softmax"], "alpha": 2.0, "lam": 0.1,
                                "D": 8}]})


def test_cost_and_memory_models_are_finite_and_grow_with_size(capsys):
    spec = get_method("multihead:bayes_sampling")
    small = Cell("multihead:bayes_sampling", **BASE)
    big = Cell("multihead:bayes_sampling", **{**BASE, "alpha": 64.0})
    opts = bs.registry.validate_cell(small)
    assert 0 < spec.cost(small, opts) < spec.cost(big, opts) < math.inf
    assert 0 < spec.memory(small, opts).bytes < spec.memory(big, opts).bytes
    code, out, err = run_cli(["run", "--preset", "multihead", "--dry-run", "--out",
                              "/nonexistent-multihead-dry-run"], capsys)
    assert code == 0, out + err
    assert "multihead:bayes_sampling: 18" in out


def test_shipped_file_is_certified_and_its_figures_are_in_the_docs():
    """Issue 39's 'the full preset's results ship certified': every cell at its family's
    current version from a clean revision, every ERM fit below gtol, every sampling cell
    passing the rule; docs/multihead.md shows the figures drawn from it."""
    from bayesslr.results.reference import certificate

    cert = certificate(bs.load_reference("multihead"))
    assert cert["certified"] and cert["clean"], cert
    assert cert["cells"] == cert["cells_total"] == 414 and cert["cells_failed"] == 0
    for fam in ("multihead", "multihead_gd"):
        assert cert["families"][fam]["at_current_version"] == 1.0, fam
    assert cert["families"]["multihead"]["converged"] == 1.0
    assert cert["families"]["multihead"]["flagged"] == []
    repo = Path(__file__).resolve().parents[1]
    text = (repo / "docs" / "multihead.md").read_text(encoding="utf-8")
    for name in ("multihead_excess", "multihead_specialisation"):
        assert (repo / "docs" / "figures" / f"{name}.png").exists(), name
        assert f"(figures/{name}.png)" in text, name
