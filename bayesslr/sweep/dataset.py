"""Cell records -> one tidy :class:`xarray.Dataset`.

Dimensions: ``method``, then every swept parameter that at least one cell sets (in the order
``variant, L, nu, delta, alpha, lam, D | sqrtND``), then ``seed``. A cell that leaves a
parameter unset (population methods have no ``alpha``) holds for every value of it: its result
is broadcast along that dimension, so ``ds.sel({"method": [...], "alpha": 5})`` compares a
population risk with an ERM error directly (``method`` must be passed in a dict: it is also
the name of a keyword of :meth:`xarray.Dataset.sel`). Where a broadcast and an explicit cell
meet, the explicit cell wins. Unvisited grid points are NaN (numbers) or ``""`` (text).

Coordinate types: ``variant``, ``L`` (a length label, ``"3"`` or ``"1,2,3"``) and ``method``
are text; ``nu`` (``inf`` allowed), ``delta``, ``alpha``, ``sqrtND`` are floats; ``D`` and
``seed`` integers; ``lam`` is float unless some cell asks for ``"auto"``, then text labels.
Variables carry CF ``long_name`` and ``units`` from :data:`bayesslr.methods.OUTPUT_VARS`
(numbers are float64, flags 0/1); ``status`` and ``error`` record failures per cell.
"""

from __future__ import annotations

import datetime as _dt
import json
import subprocess
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import xarray as xr

import bayesslr
from bayesslr.methods import OUTPUT_VARS
from bayesslr.sweep.config import PARAM_DIMS, SweepConfig, format_value
from bayesslr.sweep.storage import CellRecord

# option keys that size a Monte Carlo estimate or a sampler (collected into attrs)
MC_OPTION_KEYS: tuple[str, ...] = ("samples", "draws", "warmup", "chains", "n_test",
                                   "n_channel", "channel_samples", "n_val", "restarts")

_EXTRA_VARS: dict[str, tuple[str, str]] = {
    "status": ("cell status: ok, failed, or empty where no cell was run", ""),
    "error": ("error text of a failed cell", ""),
}


def git_revision() -> str:
    """``git describe``-style revision of the source tree (``unknown`` outside a checkout)."""
    root = Path(bayesslr.__file__).resolve().parent.parent
    try:
        rev = subprocess.run(["git", "rev-parse", "HEAD"], cwd=root, capture_output=True,
                             text=True, timeout=10, check=True).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"],
                               cwd=root, capture_output=True, text=True, timeout=10,
                               check=True).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return "unknown"
    return rev + ("-dirty" if dirty else "")


RESERVED = frozenset({"method", "seed", *PARAM_DIMS, "status", "error", "runtime_s"})


def output_name(key: str) -> str:
    """Dataset variable of a method output: a name taken by a dimension or by the runner's own
    variables gets the suffix ``_used`` (``lam`` -> ``lam_used``: the penalty an ``auto`` cell
    chose; ``method`` -> ``method_used``)."""
    return f"{key}_used" if key in RESERVED else key


def _lam_coord(values: list[Any]) -> tuple[np.ndarray, list[Any]]:
    if any(isinstance(v, str) for v in values):
        labels = sorted({format_value(v) for v in values},
                        key=lambda s: (s == "auto", float(s) if s != "auto" else 0.0))
        return np.array(labels, dtype=str), labels
    vals = sorted(set(values))
    return np.array(vals, dtype=float), vals


def _coords(records: Sequence[CellRecord], methods: Sequence[str]) -> dict[str, list[Any]]:
    coords: dict[str, list[Any]] = {"method": list(methods)}
    for d in PARAM_DIMS:
        vals = [getattr(r.cell, d) for r in records if getattr(r.cell, d) is not None]
        if not vals:
            continue
        if d == "L":
            coords[d] = sorted(set(vals), key=lambda s: (s.count(",") > 0, len(s), s))
        elif d == "lam":
            coords[d] = _lam_coord(vals)[1]
        elif d == "variant":
            coords[d] = sorted(set(vals))
        else:
            coords[d] = sorted(set(vals))
    coords["seed"] = sorted({r.cell.seed for r in records})
    return coords


def _coord_key(dim: str, value: Any, lam_text: bool) -> Any:
    if dim == "lam" and lam_text:
        return format_value(value)
    return value


def monte_carlo_sizes(cfg: SweepConfig) -> dict[str, dict[str, Any]]:
    """Per method, the option values that size its Monte Carlo estimates and samplers."""
    out: dict[str, dict[str, Any]] = {}
    for c in cfg.cells:
        sizes = {k: v for k, v in c.options.items() if k in MC_OPTION_KEYS}
        if sizes:
            out.setdefault(c.method, {}).update(sizes)
    return out


def build_dataset(cfg: SweepConfig, records: Sequence[CellRecord]) -> xr.Dataset:
    """Assemble the records of a sweep into one dataset (see the module docstring)."""
    methods = [m for m in cfg.methods if any(r.cell.method == m for r in records)]
    coords = _coords(records, methods)
    dims = list(coords)
    shape = tuple(len(coords[d]) for d in dims)
    lam_text = "lam" in coords and any(isinstance(v, str) for v in coords["lam"])
    index = {d: {_coord_key(d, v, lam_text): i for i, v in enumerate(coords[d])} for d in dims}

    names: list[str] = []
    text_vars: set[str] = set()
    for r in records:
        for k, v in r.outputs.items():
            if k == "runtime_s":  # the runner's wall time of the cell is kept instead
                continue
            k = output_name(k)
            if k not in names:
                names.append(k)
            if isinstance(v, str):
                text_vars.add(k)
    order = [output_name(k) for k in OUTPUT_VARS if output_name(k) in names]
    order += [k for k in names if k not in order]
    arrays: dict[str, np.ndarray] = {
        k: (np.full(shape, "", dtype=object) if k in text_vars else np.full(shape, np.nan))
        for k in order}
    arrays["runtime_s"] = np.full(shape, np.nan)
    arrays["status"] = np.full(shape, "", dtype=object)
    arrays["error"] = np.full(shape, "", dtype=object)

    # broadcast cells first (most unset fields first), explicit cells overwrite them
    def n_unset(r: CellRecord) -> int:
        return sum(getattr(r.cell, d) is None for d in dims if d not in {"method", "seed"})

    for r in sorted(records, key=n_unset, reverse=True):
        idx = []
        for d in dims:
            v = r.cell.seed if d == "seed" else getattr(r.cell, d)
            idx.append(list(range(len(coords[d]))) if v is None
                       else [index[d][_coord_key(d, v, lam_text)]])
        sel = np.ix_(*idx)
        outputs = {output_name(k): v for k, v in r.outputs.items()}
        for k in order:
            v = outputs.get(k)
            if k in text_vars:
                arrays[k][sel] = "" if v is None else (v if isinstance(v, str) else format_value(v))
            else:
                arrays[k][sel] = np.nan if v is None or isinstance(v, str) else v
        arrays["runtime_s"][sel] = r.runtime_s
        arrays["status"][sel] = r.status
        arrays["error"][sel] = r.error

    coord_arrays: dict[str, Any] = {}
    for d in dims:
        if d == "lam":
            coord_arrays[d] = _lam_coord(coords[d])[0]
        elif d in {"method", "variant", "L"}:
            coord_arrays[d] = np.array(coords[d], dtype=str)
        elif d in {"D", "seed"}:
            coord_arrays[d] = np.array(coords[d], dtype=np.int64)
        else:
            coord_arrays[d] = np.array(coords[d], dtype=float)
    data_vars = {}
    for k, arr in arrays.items():
        if arr.dtype == object:
            arr = arr.astype(str)
        base = k[:-5] if k.endswith("_used") and k[:-5] in RESERVED else k
        long_name, units = (OUTPUT_VARS.get(base) or _EXTRA_VARS.get(k)
                            or (k.replace("_", " "), "1"))
        attrs = {"long_name": long_name}
        if units:
            attrs["units"] = units
        data_vars[k] = (dims, arr, attrs)
    ds = xr.Dataset(data_vars, coords=coord_arrays)
    _coord_attrs(ds)
    ds.attrs.update(global_attrs(cfg, records))
    return ds


_COORD_ATTRS = {
    "method": ("method name (family or family:activation)", ""),
    "variant": ("how the hidden token is marked (spec section 1)", ""),
    "L": ("sequence length or length law label", ""),
    "nu": ("signal strength nu", "1"),
    "delta": ("label-noise variance Delta", "1"),
    "alpha": ("sample ratio N/D", "1"),
    "lam": ("requested ridge penalty (auto: tuned)", ""),
    "D": ("token dimension", "1"),
    "sqrtND": ("sizing sqrt(N D)", "1"),
    "seed": ("seed of teacher, data and algorithm", "1"),
}


def _coord_attrs(ds: xr.Dataset) -> None:
    for d, (long_name, units) in _COORD_ATTRS.items():
        if d in ds.coords:
            ds[d].attrs["long_name"] = long_name
            if units:
                ds[d].attrs["units"] = units


def global_attrs(cfg: SweepConfig, records: Sequence[CellRecord]) -> dict[str, Any]:
    """Provenance: config JSON, version, git revision, Monte Carlo sizes, conventions."""
    return {
        "title": f"bayesslr sweep {cfg.name}",
        "Conventions": "CF-1.8",
        "source": f"bayesslr {bayesslr.__version__}",
        "bayesslr_version": bayesslr.__version__,
        "git_revision": git_revision(),
        "config": cfg.to_json(),
        "config_digest": cfg.digest(),
        "monte_carlo_sizes": json.dumps(monte_carlo_sizes(cfg), sort_keys=True),
        "cells_total": len(cfg.cells),
        "cells_ok": sum(r.status == "ok" for r in records),
        "cells_failed": sum(r.status == "failed" for r in records),
        "conventions_slr": ("spec shared/spec/slr.md: tokens N(0, I_D); spiked x_eps += "
                            "sqrt(nu/D) k*; max eps* ~ softmax(nu chi*); y = z*_eps + "
                            "sqrt(Delta) xi; test_error is the excess risk (risk - Delta)"),
        "broadcast": ("a cell that leaves a parameter unset holds for every value of that "
                      "dimension"),
        "history": f"{_dt.datetime.now(_dt.UTC).isoformat(timespec='seconds')} bayesslr run",
    }


def comparable(ds: xr.Dataset) -> xr.Dataset:
    """The dataset without what legitimately differs between runs (wall times, timestamps)."""
    out = ds.drop_vars(["runtime_s"], errors="ignore")
    out.attrs = {k: v for k, v in ds.attrs.items() if k not in {"history", "git_revision"}}
    return out
