"""Report figures: every figure from synthetic results with the sweep's layout (one group per
family), graceful degradation when methods or dimensions are absent, and the ``report`` verb."""

from __future__ import annotations

import numpy as np
import pytest
import xarray as xr

from bayesslr.cli import main
from bayesslr.report import FIGURES, NothingToPlot, write_report

METHODS = ["population:bayes", "population:softmax", "population:linear", "theory_bayes",
           "theory_erm:softmax", "theory_erm:linear", "erm:softmax", "erm:linear",
           "bayes_sampling"]


def synthetic_hypercube(methods=METHODS) -> xr.Dataset:
    """All methods on one grid: method x variant x L x nu x delta x alpha x lam x seed."""
    coords = {"method": methods, "variant": ["spiked"], "L": ["2", "3"], "nu": [1.0, 5.0],
              "delta": [0.01], "alpha": [1.0, 2.0, 5.0], "lam": [0.01, 0.1], "seed": [0, 1]}
    shape = tuple(len(v) for v in coords.values())
    rng = np.random.default_rng(0)
    level = {"bayes": 0.2, "softmax": 0.25, "linear": 0.4}
    base = np.array([level.get(m.split(":")[-1], 0.22) for m in methods])
    alpha = np.array(coords["alpha"])
    err = (base[:, None, None, None, None, None, None, None]
           + 1.0 / alpha[None, None, None, None, None, :, None, None]
           + 0.01 * rng.standard_normal(shape))
    dims = list(coords)
    ds = xr.Dataset({"test_error": (dims, err), "stderr": (dims, np.full(shape, 0.01))},
                    coords=coords)
    bs = ds["method"] == "bayes_sampling"
    ds["r_hat_max"] = (1.0 + 0.01 * ds["test_error"] ** 2).where(bs)
    ds["ess_bulk_min"] = (100 + 50 * ds["test_error"]).where(bs)
    return ds


# the cell fields that index each family (as in the registry; population has no alpha, ...)
FAMILY_DIMS = {"population": ("alpha", "lam"), "theory_bayes": ("lam",), "bayes_sampling":
               ("lam",), "theory_erm": (), "erm": ()}


def synthetic(methods=METHODS) -> xr.DataTree:
    """Results shaped like a sweep's: one group per family, each over its own dimensions."""
    cube = synthetic_hypercube(methods)
    children = {}
    for fam in dict.fromkeys(m.split(":")[0] for m in methods):
        ds = cube.sel({"method": [m for m in methods if m.split(":")[0] == fam]})
        for d in FAMILY_DIMS[fam]:
            ds = ds.isel({d: 0}, drop=True)
        children[fam] = xr.DataTree(ds.dropna("method", how="all", subset=["test_error"])
                                    .drop_vars([v for v in ("r_hat_max", "ess_bulk_min")
                                                if fam != "bayes_sampling"]))
    return xr.DataTree(xr.Dataset(), children=children)


@pytest.fixture(scope="module")
def results(tmp_path_factory):
    d = tmp_path_factory.mktemp("results")
    synthetic().to_netcdf(d / "dataset.nc", engine="h5netcdf")
    return d


def test_all_figures_written_as_png_and_pdf(results):
    written, skipped = write_report(results, dpi=50)
    assert skipped == []
    assert {p.name for p in written} == {f"{n}.{e}" for n in FIGURES for e in ("png", "pdf")}
    assert all(p.stat().st_size > 1000 for p in written)


def test_lam_is_tuned_per_alpha():
    from bayesslr.report.figures import curve

    ds = synthetic_hypercube()
    ds["test_error"].loc[{"method": "erm:softmax", "lam": 0.1}] = 9.0
    mean, _ = curve(ds, "erm:softmax")
    assert "lam" not in mean.dims and float(mean.max()) < 9.0


@pytest.mark.parametrize("keep, drawn", [
    (["population:softmax", "population:linear"], {"population_vs_nu", "population_vs_L"}),
    (["erm:softmax"], {"error_vs_alpha"}),
    (["bayes_sampling"], {"error_vs_alpha", "sampler_diagnostics"}),
])
def test_absent_methods_degrade_gracefully(keep, drawn):
    ds = synthetic(keep)
    got = set()
    for name, fn in FIGURES.items():
        try:
            fn(ds)
            got.add(name)
        except NothingToPlot as why:
            assert str(why)
    assert got == drawn


def test_report_verb(capsys, tmp_path):
    synthetic(["population:softmax", "population:linear"]).to_netcdf(
        tmp_path / "dataset.nc", engine="h5netcdf")
    with pytest.raises(SystemExit) as e:
        main(["report", str(tmp_path), "--formats", "png"])
    assert e.value.code == 0
    captured = capsys.readouterr()
    assert f"figures: {tmp_path / 'figures'}" in captured.out
    assert "skipped error_vs_alpha: no finite-sample method" in captured.err
    assert {p.stem for p in (tmp_path / "figures").glob("*.png")} == {
        "population_vs_nu", "population_vs_L"}
    with pytest.raises(SystemExit) as e:
        main(["report", str(tmp_path / "nothing")])
    assert e.value.code == 2


@pytest.mark.slow
def test_notebooks_execute_on_a_tiny_dataset(tmp_path, monkeypatch):
    """Every jupytext notebook under reports/ runs top to bottom on a small dataset."""
    from pathlib import Path

    import jupytext
    from nbclient import NotebookClient

    synthetic().to_netcdf(tmp_path / "dataset.nc", engine="h5netcdf")
    monkeypatch.setenv("BAYESSLR_RESULTS", str(tmp_path))
    notebooks = sorted((Path(__file__).resolve().parent.parent / "reports").glob("*.py"))
    assert notebooks
    for path in notebooks:
        nb = jupytext.read(path)
        NotebookClient(nb, timeout=300, kernel_name="python3",
                       resources={"metadata": {"path": str(tmp_path)}}).execute()
        text = "".join(o.get("text", "") for c in nb.cells for o in c.get("outputs", []))
        assert "holds at" in text


def test_each_method_shown_at_its_largest_size():
    from bayesslr.report.figures import curve

    ds = synthetic_hypercube(["erm:softmax", "bayes_sampling"]).expand_dims(
        D=[50, 1000]).copy(deep=True)
    ds["test_error"].loc[{"method": "bayes_sampling", "D": 1000}] = np.nan
    ds["test_error"].loc[{"method": "erm:softmax", "D": 50}] = np.nan
    for m in ("erm:softmax", "bayes_sampling"):
        mean, _ = curve(ds, m)
        assert "D" not in mean.dims and np.isfinite(mean).all()
