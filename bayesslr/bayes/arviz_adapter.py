"""The only module that touches ArviZ (its API is moving; docs/model.md §6, STYLE "adapters").

* :func:`diagnostics`: rank-normalised split R-hat and bulk / tail ESS over every coordinate,
  ArviZ's formulas computed over all coordinates at once by :mod:`bayesslr.bayes.diagnostics`
  (no ArviZ call; equal to ArviZ's values to rounding, ``tests/test_fast_diagnostics.py``);
  :func:`diagnostics_arviz`, the same through ArviZ, is the reference;
* :func:`to_inference_data`: draws, sample statistics and data as an ``InferenceData`` (built
  with ``az.from_dict``, not ``az.from_numpyro``, so the enumerated model works too);
* :func:`write_netcdf`: the ``InferenceData`` to a netCDF file.

ArviZ 0.23 announces its refactor with a ``FutureWarning`` on import; it is silenced here, once,
so that the test suite can keep warnings as errors.
"""

from __future__ import annotations

import json
import warnings
from pathlib import Path
from typing import Any

import numpy as np


def _az():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)
        import arviz as az
    return az


def diagnostics(draws: dict[str, np.ndarray]) -> dict[str, float]:
    """R-hat max and ESS (bulk, tail) min over all coordinates of all variables.

    ArviZ's ``rhat(method="rank")``, ``ess(method="bulk")`` and ``ess(method="tail")``, as array
    operations over every coordinate at once (:func:`bayesslr.bayes.diagnostics.diagnostics`:
    ArviZ loops over coordinates in Python); the values are :func:`diagnostics_arviz`'s to
    rounding (relative 1e-10 in the tests), so results computed before are unchanged.

    Parameters
    ----------
    draws : dict
        ``name -> array (chains, draws, ...)``.

    Returns
    -------
    dict
        ``r_hat_max``, ``ess_bulk_min``, ``ess_tail_min`` (NaN when undefined, e.g. a constant
        chain).
    """
    from bayesslr.bayes.diagnostics import diagnostics as fast

    return fast(draws)


def diagnostics_arviz(draws: dict[str, np.ndarray]) -> dict[str, float]:
    """:func:`diagnostics` through ArviZ itself (one coordinate at a time): the reference."""
    az = _az()
    ds = az.convert_to_dataset({k: np.asarray(v) for k, v in draws.items()})
    with warnings.catch_warnings(), np.errstate(invalid="ignore", divide="ignore"):
        warnings.simplefilter("ignore", RuntimeWarning)
        rhat = az.rhat(ds, method="rank")
        bulk = az.ess(ds, method="bulk")
        tail = az.ess(ds, method="tail")

    def red(d, fn) -> float:
        vals = np.concatenate([np.ravel(d[n].values) for n in d.data_vars])
        vals = vals[np.isfinite(vals)]
        return float(fn(vals)) if vals.size else float("nan")

    return {"r_hat_max": red(rhat, np.max), "ess_bulk_min": red(bulk, np.min),
            "ess_tail_min": red(tail, np.min)}


def mcse_mean(x: np.ndarray) -> np.ndarray:
    """Monte Carlo standard error of the mean of draws ``x`` ``(chains, draws, ...)``.

    ArviZ's ``mcse(method="mean")``: ``sd / sqrt(ess_mean)`` per trailing coordinate.
    """
    az = _az()
    ds = az.convert_to_dataset({"x": np.asarray(x, np.float64)})
    return np.asarray(az.mcse(ds, method="mean")["x"].values)


def to_inference_data(result: Any, *, attrs: dict[str, Any] | None = None,
                      observed: dict[str, np.ndarray] | None = None) -> Any:
    """An ``arviz.InferenceData`` of a :class:`bayesslr.bayes.sampler.SampleResult`.

    Groups: ``posterior`` (``k``, ``v`` with dimension ``D``), ``sample_stats`` (``lp``,
    ``diverging``, ``n_steps``, ``step_size``) and, when given, ``observed_data``. ``attrs`` (task,
    options, seeds) go to every group as flat JSON-able attributes.
    """
    az = _az()
    chains, draws = result.log_density.shape
    stats = {
        "lp": result.log_density,
        "diverging": result.diverging,
        "n_steps": result.num_steps,
        "step_size": np.repeat(np.asarray(result.step_size)[:, None], draws, axis=1),
    }
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)
        idata = az.from_dict(
            posterior={"k": result.k, "v": result.v},
            sample_stats=stats,
            observed_data=observed,
            dims={"k": ["D"], "v": ["D"]},
        )
    flat = {str(n): (a if isinstance(a, int | float | str) and not isinstance(a, bool)
                     else json.dumps(a, default=str)) for n, a in (attrs or {}).items()}
    for group in idata.groups():
        idata[group].attrs.update(flat)
    return idata


def write_netcdf(idata: Any, path: str | Path) -> Path:
    """Write ``idata`` to ``path`` as netCDF-4, one group per InferenceData group, durably
    (encoded in memory, then :func:`bayesslr.core.files.write_netcdf_atomic`: a reader never
    sees half a file); return the path."""
    import xarray as xr

    from bayesslr.core.files import write_netcdf_atomic

    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tree = xr.DataTree.from_dict({f"/{g}": idata[g] for g in idata.groups()})
    write_netcdf_atomic(tree, path)
    return path


def read_netcdf(path: str | Path) -> Any:
    """Read an ``InferenceData`` written by :func:`write_netcdf`."""
    return _az().from_netcdf(str(path))
