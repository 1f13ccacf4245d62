"""``bayesslr run ... --keep-draws`` (issue 38, item 3): each sampling cell the run computes
writes its draws as ArviZ InferenceData, ``OUT/draws/<cell key>.nc``, which ``az.from_netcdf``
and ``az.summary`` read; the sampler-health notebook shows the flagged ones."""

from __future__ import annotations

import io
from contextlib import redirect_stdout

import arviz as az
import pytest

import bayesslr as bs
from bayesslr.core.task import ConfigError
from bayesslr.report import show
from bayesslr.sweep.config import parse_config

TASK = {"nu": [2.0], "D": [6], "delta": [0.5], "L": ["2"]}
CFG = {"name": "keep-draws",
       "grid": [{"name": "nuts", "methods": ["bayes_sampling"], "alpha": [2.0], **TASK},
                {"name": "pt", "methods": ["bayes_sampling"], "alpha": [3.0], **TASK,
                 "options": {"bayes_sampling": {"sampler": "pt", "replicas": 4,
                                                "pt_integration_steps": 3, "warmup": 20,
                                                "draws": 40}}}],
       "options": {"bayes_sampling": {"chains": 2, "warmup": 20, "draws": 30, "n_test": 50}}}


@pytest.fixture(scope="module")
def kept(tmp_path_factory):
    out = tmp_path_factory.mktemp("kept")
    summary = bs.run(CFG, out, keep_draws=True, log=None)
    assert summary.computed == 2 and summary.failed == 0
    return out


def test_each_sampling_cell_leaves_inference_data(kept):
    keys = {c.key() for c in parse_config(CFG).cells}
    files = {p.stem: p for p in (kept / "draws").glob("*.nc")}
    assert set(files) == keys  # named by the cell's key, as its results file
    assert {p.stem for p in (kept / "cells").glob("*.nc")} == keys
    samplers = set()
    for p in files.values():
        idata = az.from_netcdf(str(p))
        assert {"posterior", "sample_stats"} <= set(idata.groups())
        assert dict(idata.posterior["k"].sizes) == {"chain": 2, "draw": idata.posterior.sizes[
            "draw"], "D": 6}
        assert az.summary(idata, var_names=["k", "v"]).shape[0] == 12
        samplers.add(idata.posterior.attrs["sampler"])
    assert samplers == {"nuts", "pt"}
    # the notebook's section shows the flagged cells (these short runs do not converge)
    buf = io.StringIO()
    with redirect_stdout(buf):
        show.kept_draws(str(kept))
    assert "2 cells' draws kept" in buf.getvalue() and "worst R-hat" in buf.getvalue()


def test_no_draws_without_the_flag_and_a_linked_draws_dir_is_refused(tmp_path):
    out = tmp_path / "plain"
    cfg = {**CFG, "grid": CFG["grid"][:1]}
    bs.run(cfg, out, log=None)
    assert not (out / "draws").exists()
    (out / "draws").symlink_to(tmp_path)  # a planted link: the draws must not follow it
    with pytest.raises(ConfigError, match="draws directory .* is a link"):
        bs.run(cfg, out, keep_draws=True, log=None)



def _encoded_size(n: int) -> int:
    import numpy as np
    import xarray as xr

    from bayesslr.core.files import encode_netcdf

    tree = xr.DataTree.from_dict({"/posterior": xr.Dataset({"k": ("draw", np.arange(n))}),
                                  "/sample_stats": xr.Dataset({"lp": ("draw", np.ones(n))})})
    return len(bytes(encode_netcdf(tree)))


def test_draws_are_encoded_inside_a_dask_worker_process():
    """``run --workers N --keep-draws`` writes the draws in a dask worker process, where xarray
    took a distributed write lock named after the in-memory buffer and failed ("Semaphore or
    Lock ... not known"), losing a 50-minute cell; the encoder now writes synchronously."""
    distributed = pytest.importorskip("distributed")
    with distributed.LocalCluster(n_workers=1, threads_per_worker=1, processes=True,
                                  dashboard_address=None) as cluster, \
            distributed.Client(cluster) as client:
        assert client.submit(_encoded_size, 5).result(timeout=120) > 0
