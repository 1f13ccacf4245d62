"""The shipped reference results: the file's provenance and completeness, ``bayesslr report
--reference OUT`` (figures from the file, nothing computed), the notebooks' fallback to it, and
a few of its cells recomputed here within their standard errors."""

from __future__ import annotations

import json
import math

import pytest
import xarray as xr
from test_report import synthetic

import bayesslr
from bayesslr.core.task import ConfigError
from bayesslr.report import show
from bayesslr.results import reference
from conftest import run_cli


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    """A reference file built once from synthetic results (the families the figures need)."""
    d = tmp_path_factory.mktemp("reference")
    results = d / "results"
    results.mkdir()
    synthetic(("population", "theory_erm", "theory_bayes", "erm")).to_netcdf(
        results / "dataset.nc", engine="h5netcdf")
    return reference.build_reference(results, d / "package" / "reference.nc",
                                     reductions={"erm": "sqrtND 1e4 -> 1e3"}, wall_time_s=12.5)


@pytest.fixture
def packaged(built, monkeypatch):
    """The built file standing in for the package's one."""
    monkeypatch.setattr(reference, "reference_path", lambda name="reference": built)
    return built


def test_build_records_provenance(packaged):
    tree = reference.load_reference()
    assert json.loads(tree.attrs["reductions"]) == {"erm": "sqrtND 1e4 -> 1e3"}
    assert tree.attrs["wall_time_s"] == 12.5 and "cores" in tree.attrs["machine"]
    assert {"population", "theory_erm", "theory_bayes", "erm"} <= set(tree.children)


def test_report_reference_writes_figures_without_computing(packaged, tmp_path, capsys,
                                                          monkeypatch):
    import bayesslr.registry as methods

    def refuse(*a, **k):
        raise AssertionError("report --reference must not compute cells")

    monkeypatch.setattr(methods, "run_cell", refuse)
    out = tmp_path / "figs"
    code, stdout, _ = run_cli(["report", "--reference", str(out), "--formats", "png"], capsys)
    assert code == 0, stdout
    assert "files, from the shipped reference)" in stdout
    assert {"population_vs_nu", "error_vs_alpha"} <= {p.stem for p in out.glob("*.png")}
    assert (out / "verdicts.txt").read_text().strip()


@pytest.mark.parametrize("argv", [["report"], ["report", "somewhere", "--reference", "x"],
                                  ["report", "--reference", "x", "--notebooks"]])
def test_report_reference_refusals(argv, capsys, tmp_path):
    code, _, err = run_cli(argv, capsys)
    assert code == 2 and len(err.strip().splitlines()) == 1


def test_missing_reference_is_one_sentence(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(reference, "reference_path", lambda name="reference": tmp_path / "none.nc")
    with pytest.raises(ConfigError, match="missing from this installation"):
        reference.load_reference()
    assert show.open_results(None) is None
    assert "nothing to show" in capsys.readouterr().out


def test_notebooks_fall_back_to_the_reference(packaged, capsys, monkeypatch):
    monkeypatch.delenv("BAYESSLR_RESULTS", raising=False)
    tree = show.open_results(None)
    assert isinstance(tree, xr.DataTree) and "population" in tree.children
    assert "shipped reference results" in capsys.readouterr().out


def test_build_refuses_failed_cells(tmp_path):
    results = tmp_path / "r"
    results.mkdir()
    t = synthetic(("population",))
    t.attrs["cells_failed"] = 2
    t.to_netcdf(results / "dataset.nc", engine="h5netcdf")
    with pytest.raises(ConfigError, match="2 failed cells"):
        reference.build_reference(results, tmp_path / "x.nc")


def test_paper_file_is_its_own(built, tmp_path, monkeypatch, capsys):
    """A second shipped file, the paper preset's: built with name='paper' it records no
    reductions and says which it is; load_reference('paper') opens it, and every figure drawn
    from it says 'paper sizes' in its title; 'report --reference OUT --shipped paper' draws
    from it and says so."""
    from bayesslr.report.figures import FIGURES, NothingToPlot, draw

    results = tmp_path / "results"
    results.mkdir()
    synthetic(("population", "erm")).to_netcdf(results / "dataset.nc", engine="h5netcdf")
    paper = reference.build_reference(results, tmp_path / "paper.nc", name="paper")
    paths = {"reference": built, "paper": paper}
    monkeypatch.setattr(reference, "reference_path", lambda name="reference": paths[name])
    tree = reference.load_reference("paper")
    assert tree.attrs["shipped"] == "paper" and json.loads(tree.attrs["reductions"]) == {}
    assert "paper's sizes" in tree.attrs["reference"]
    assert reference.load_reference().attrs["shipped"] == "reference"
    fig = draw("population_vs_nu", tree)
    assert "(shipped reference, paper sizes)" in fig._suptitle.get_text()
    for name in FIGURES:  # the reference's own titles are unchanged
        try:
            fig = draw(name, reference.load_reference())
        except NothingToPlot:
            continue
        assert "(shipped reference)" in fig._suptitle.get_text(), name
    out = tmp_path / "figs"
    code, stdout, _ = run_cli(["report", "--reference", str(out), "--shipped", "paper",
                               "--formats", "png"], capsys)
    assert code == 0 and "(5 files, from the shipped reference, paper sizes)" in stdout, stdout
    assert "population_vs_nu" in {p.stem for p in out.glob("*.png")}


@pytest.mark.parametrize("argv", [["report", "--reference", "x", "--shipped", "nope"],
                                  ["report", "somewhere", "--shipped", "paper"]])
def test_shipped_refusals(argv, capsys, tmp_path, monkeypatch):
    """An unknown --shipped, or --shipped without --reference: one line naming the parameter
    and what is allowed, exit 2, nothing written."""
    monkeypatch.chdir(tmp_path)
    code, _, err = run_cli(argv, capsys)
    assert code == 2 and len(err.strip().splitlines()) == 1 and "shipped" in err
    assert list(tmp_path.iterdir()) == []
    with pytest.raises(ConfigError, match="name='nope'.*allowed: reference, paper"):
        reference.load_reference("nope")


# ---- the files the package ships ------------------------------------------------------------
# the paper-figure files (the dynamics file: tests/test_dynamics_reference.py)
HERE = [n for n in ("reference", "paper") if reference.reference_path(n).exists()]


@pytest.mark.parametrize("name", HERE)
def test_shipped_file_is_complete_and_compact(name):
    path = reference.reference_path(name)
    assert path.stat().st_size < 5 * 2**20
    tree = reference.load_reference(name)
    assert tree.attrs["shipped"] == name
    assert int(tree.attrs.get("cells_failed", 0)) == 0
    cert = json.loads(tree.attrs["certificate"])
    if name == "reference":
        assert json.loads(tree.attrs["reductions"])  # every reduction named
    else:  # the paper's sizes, nothing reduced
        assert json.loads(tree.attrs["reductions"]) == {}
        assert cert["families"]["erm"]["sqrtND"] == [10000]
        assert cert["families"]["bayes_sampling"]["D"] == [200]
    assert {"population", "theory_bayes", "erm", "bayes_sampling"} <= set(tree.children)
    cells = tree["cells"].to_dataset()
    assert (cells["status"].values == "ok").all()
    assert cert["clean"] and all(f["at_current_version"] == 1.0
                                 for f in cert["families"].values())


@pytest.mark.parametrize("which", HERE)
@pytest.mark.parametrize("method, setting", [
    ("population:softmax", dict(variant="spiked", L=2, nu=2.0)),
    ("population:bayes", dict(variant="spiked", L=4, nu=5.0)),
])
def test_shipped_cells_recompute(method, setting, which):
    """A cheap cell recomputed with a fresh Monte Carlo seed agrees with the stored one within
    4 combined standard errors (two independent Monte Carlo estimates of the same risk: their
    difference has standard deviation hypot(se_stored, se_new); 4 of them leave a 6e-5 chance
    of a false alarm per cell)."""
    tree = reference.load_reference(which)
    ds = tree["population"].to_dataset()
    stored = ds.sel({"method": method, "variant": setting["variant"], "L": str(setting["L"]),
                     "nu": setting["nu"]}).squeeze(drop=True)
    value, se = float(stored["test_error"]), float(stored["stderr"])
    assert math.isfinite(value) and se > 0
    cell = bayesslr.Cell(method=method, delta=0.01, seed=7, options={"samples": 50_000},
                         **{**setting, "L": str(setting["L"])})
    out = bayesslr.run_cell(cell)
    tol = 4 * math.hypot(se, out["stderr"])
    assert abs(out["test_error"] - value) < tol, (out["test_error"], value, tol)


@pytest.mark.parametrize("which", HERE)
def test_shipped_state_evolution_point_recomputes(which):
    """A state-evolution point (spiked L = 3, nu = 2, alpha = 5: one fixed point, so the
    continuation the file used and a single solve reach the same one) recomputed with another
    channel-sample seed agrees within 4 combined Monte Carlo standard errors."""
    ds = reference.load_reference(which)["theory_bayes"].to_dataset()
    stored = ds.sel({"method": "theory_bayes", "variant": "spiked", "L": "3", "nu": 2.0,
                     "alpha": 5.0}).squeeze(drop=True)
    value, se = float(stored["test_error"]), float(stored["stderr"])
    assert math.isfinite(value) and se > 0
    out = bayesslr.run_cell(bayesslr.Cell(method="theory_bayes", variant="spiked", L="3",
                                          nu=2.0, delta=0.01, alpha=5.0, seed=7))
    assert abs(out["test_error"] - value) < 4 * math.hypot(se, out["stderr"])


# ---- issue 21, case 4: a mistyped path is an error, the reference says what it is ----------
def test_explicit_path_without_results_is_an_error(packaged, monkeypatch, tmp_path, capsys):
    """BAYESSLR_RESULTS=/no/such/dir used to print 'No results at ...' and then show the
    shipped reference as if it were the user's; now it is one ConfigError, and the command
    exits 2."""
    monkeypatch.setenv("BAYESSLR_RESULTS", str(tmp_path / "no" / "such"))
    with pytest.raises(ConfigError, match="holds no results"):
        show.open_results(show.results_parameter())
    assert "shipped reference" not in capsys.readouterr().out
    code, _, err = run_cli(["report", str(tmp_path / "no" / "such")], capsys)
    assert code == 2 and len(err.strip().splitlines()) == 1


def test_reference_figures_say_shipped_reference(packaged, monkeypatch, tmp_path):
    """Only with no path given is the reference shown, and every figure drawn from it says
    'shipped reference' in its title (files and notebooks alike); the user's results do not."""
    from bayesslr.report import write_report
    from bayesslr.report.figures import FIGURES, NothingToPlot, draw

    monkeypatch.delenv("BAYESSLR_RESULTS", raising=False)
    monkeypatch.chdir(tmp_path)  # no results/quick here
    tree = show.open_results(show.results_parameter())
    drawn = 0
    for name in FIGURES:
        try:
            fig = draw(name, tree)
        except NothingToPlot:
            continue
        drawn += 1
        assert "(shipped reference)" in fig._suptitle.get_text(), name
    assert drawn >= 2
    own = xr.DataTree(tree.to_dataset(), children={k: tree[k] for k in tree.children})
    own.attrs.pop("reference")
    fig = draw("population_vs_nu", own)
    assert "shipped reference" not in fig._suptitle.get_text()
    written, _ = write_report(tree, tmp_path / "figs", formats=("png",), dpi=30)
    assert written


# ---- issue 20, item 2: the certificate, computed from the file ------------------------------
def _with_cells(tree, recs, revision, old_erm=0):
    """The synthetic tree with a ``cells`` group as a sweep writes it (method, its code
    version, status, settings), ``old_erm`` erm cells at an older code version."""
    import numpy as np

    from bayesslr.registry import get_method

    rows = [r for fam in ("bayes_sampling", "erm") for r in recs[fam]]
    versions = []
    n_old = 0
    for r in rows:
        v = get_method(r.cell.method).version
        if r.cell.method.startswith("erm") and n_old < old_erm:
            v, n_old = str(int(v) - 2), n_old + 1
        versions.append(v)
    settings = [json.dumps({"method": r.cell.method, "D": r.cell.D, "sqrtND": r.cell.sqrtND,
                            "seed": r.cell.seed, "alpha": r.cell.alpha}) for r in rows]
    cells = xr.Dataset({"method": ("cell", [r.cell.method for r in rows]),
                        "method_version": ("cell", versions),
                        "status": ("cell", ["ok"] * len(rows)),
                        "settings": ("cell", settings)},
                       coords={"cell": np.arange(len(rows))})
    out = xr.DataTree(xr.Dataset(attrs={"git_revision": revision}),
                      children={**{k: tree[k] for k in ("bayes_sampling", "erm")},
                                "cells": xr.DataTree(cells)})
    return out


@pytest.mark.parametrize("revision, old_erm", [("abc123-dirty", 2), ("abc123", 0)])
def test_certificate_is_computed_from_the_file(revision, old_erm, tmp_path, monkeypatch):
    """load_reference() reports revision, cleanliness, code versions against this code's, the
    converged fraction and the sizes of each family, each read from the file: change the file
    and the certificate changes with it."""
    from test_report import synthetic_records

    from bayesslr.registry import get_method

    recs = synthetic_records()
    tree = _with_cells(synthetic(("bayes_sampling", "erm")), recs, revision, old_erm)
    path = tmp_path / "reference.nc"
    tree.to_netcdf(path, engine="h5netcdf")
    monkeypatch.setattr(reference, "reference_path", lambda name="reference": path)
    cert = json.loads(reference.load_reference().attrs["certificate"])
    assert cert == reference.certificate(xr.open_datatree(path, engine="h5netcdf").load())
    assert cert["revision"] == revision and cert["clean"] == (old_erm == 0)
    n_erm = len(recs["erm"])
    erm, bs_ = cert["families"]["erm"], cert["families"]["bayes_sampling"]
    cur = get_method("erm:softmax").version
    assert erm["current_version"] == cur and erm["cells"] == n_erm
    assert erm["at_current_version"] == pytest.approx((n_erm - old_erm) / n_erm)
    assert erm["versions"].get(str(int(cur) - 2), 0) == old_erm
    assert erm["D"] == [100, 400] and erm["seeds"] == 2
    # the synthetic alpha = 5 sampler cell did not converge (its starts disagree)
    assert bs_["converged"] == pytest.approx(0.5) and bs_["D"] == [50]
    # ... and it is listed, with the sampler's own reason, read from the file
    ds = tree["bayes_sampling"].to_dataset()
    bad = ds["converged"].where(~ds["converged"].astype(bool), drop=True)
    assert [f["alpha"] for f in bs_["flagged"]] == [float(a) for a in bad["alpha"].values]
    assert [f["reason"] for f in bs_["flagged"]] == [
        str(ds["reason"].sel(alpha=a).squeeze().item()) for a in bad["alpha"].values]
    assert erm["flagged"] == []
    assert cert["certified"] is False  # a non-converged sampler cell is never certified


def test_a_partial_file_is_not_certified():
    """A file that records its sweep's size (``cells_total``, as a run's dataset does) and
    holds fewer cells (an assembled partial run) is reported as such and not certified; the
    same file complete is."""
    from test_report import synthetic_records

    tree = _with_cells(synthetic(("bayes_sampling", "erm")), synthetic_records(), "abc123")
    ds = tree["bayes_sampling"].to_dataset()
    tree["bayes_sampling"] = xr.DataTree(ds.assign(converged=xr.ones_like(ds["converged"])))
    full = reference.certificate(tree)
    assert full["certified"] is True and "cells_total" not in full
    tree.attrs["cells_total"] = full["cells"]
    assert reference.certificate(tree)["certified"] is True
    tree.attrs["cells_total"] = full["cells"] + 5
    part = reference.certificate(tree)
    assert part["cells_total"] == full["cells"] + 5 and part["certified"] is False


@pytest.mark.slow
@pytest.mark.parametrize("which", HERE)
def test_shipped_figures_are_legible_and_titled(which):
    """Case 5 on the file itself: every figure drawn from the shipped reference passes the
    extended legibility check (its R-hat panel had one tick label, its ESS axes fixed decimals
    over three decades), says 'shipped reference', and says 'not converged' in its caption
    exactly when the certificate lists flagged cells of a family it draws; the finite-sample
    figure has the Bayes-risk line in every panel."""
    from bayesslr.report.figures import FIGURES, NothingToPlot, draw
    from bayesslr.report.figures.legibility import legibility_problems

    tree = reference.load_reference(which)
    fams = json.loads(tree.attrs["certificate"])["families"]
    flagged = {name: any(fams.get(f, {}).get("flagged") for f in drawn) for name, drawn in (
        ("error_vs_alpha", ("theory_erm", "erm", "bayes_sampling", "theory_bayes")),
        ("sampler_diagnostics", ("bayes_sampling",)))}
    for name in FIGURES:
        try:
            fig = draw(name, tree)
        except NothingToPlot:
            continue
        assert legibility_problems(fig) == [], name
        assert "(shipped reference" in fig._suptitle.get_text(), name
        if name in flagged:  # the caption says so exactly when the file has flagged cells
            assert ("not converged" in fig._suptitle.get_text()) == flagged[name], name
        if name == "error_vs_alpha":
            for ax in fig.axes:
                assert any(ln.get_label().startswith("Bayes risk") for ln in ax.lines)
