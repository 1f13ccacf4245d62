"""Cell records -> one results file: an :class:`xarray.DataTree` with one dense group per family.

Layout of ``OUT/dataset.nc`` (netCDF4 groups, h5netcdf):

* the root group holds the provenance (config JSON, version, git revision, Monte Carlo sizes,
  conventions) and a table of every cell along the dimension ``cell`` (``method``, ``key``,
  ``status``, ``error``, ``runtime_s`` and the cell's settings as JSON), so that failures are
  listed in one place;
* one group per method family (``population``, ``erm``, ``theory_erm``, ``theory_bayes``,
  ``bayes_sampling``, ...), named after it, with dimensions ``method``, the cell fields that
  index the family (its registry ``dims``: ``variant, L, nu, delta, alpha, lam, D | sqrtND``,
  those that some cell of the family sets) and ``seed``, plus one extra dimension per list
  output (``step``, ``iteration``). Its variables are the family's outputs (declared ones first,
  with CF ``long_name``/``units`` from the registry), and ``status``, ``error``, ``runtime_s``
  per cell.

Why groups rather than one hypercube: with every method in one dataset, each cell was
broadcast over every coordinate of every other family (a population risk over ``alpha``,
``lam``, ``D``) and every family's outputs became variables of all: the 50-cell quick sweep gave
95 variables, mostly NaN, and the ``paper`` preset's dataset would weigh over a hundred
megabytes in memory. Measured numbers are in the README ("Dataset layout").

One line gives a figure's numbers::

    xr.open_dataset("OUT/dataset.nc", group="erm", engine="h5netcdf").sel(
        {"method": "erm:softmax", "nu": 2.0})["test_error"].mean("seed")

Within a family a cell that leaves one of the family's dimensions unset (an ERM cell sized by
``sqrtND`` in a group that also has ``D``) holds for every value of it (its result is broadcast
along that dimension); where a broadcast and an explicit cell meet, the explicit cell wins.
Unvisited grid points are NaN (numbers) or ``""`` (text).

Coordinate types: ``variant``, ``L`` (a length label, ``"3"`` or ``"1,2,3"``) and ``method``
are text; ``nu`` (``inf`` allowed), ``delta``, ``alpha``, ``sqrtND`` are floats; ``D`` and
``seed`` integers; ``lam`` is float unless some cell of the family names a choice
(``"validation"``, ``"optimal"``), then text labels. Numbers are float64, flags 0/1.
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
from bayesslr.methods import MethodSpec, get_method
from bayesslr.sweep.config import PARAM_DIMS, SweepConfig, format_value
from bayesslr.sweep.storage import CellRecord

# option keys that size a Monte Carlo estimate or a sampler (collected into attrs)
MC_OPTION_KEYS: tuple[str, ...] = ("samples", "test_samples", "draws", "warmup", "chains",
                                   "n_test", "restarts", "seeds", "steps", "budget")

_EXTRA_VARS: dict[str, tuple[str, str]] = {
    "status": ("cell status: ok, failed, or empty where no cell was run", ""),
    "error": ("error text of a failed cell", ""),
    "runtime_s": ("wall time of the cell", "s"),
}

RESERVED = frozenset({"method", "seed", *PARAM_DIMS, "status", "error", "runtime_s", "cell"})


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


def output_name(key: str) -> str:
    """Dataset variable of a method output: a name taken by a dimension or by the runner's own
    variables gets the suffix ``_used`` (``lam`` -> ``lam_used``: the penalty a
    ``"validation"`` cell chose; ``D`` -> ``D_used``)."""
    return f"{key}_used" if key in RESERVED else key


def _lam_coord(values: list[Any]) -> tuple[np.ndarray, list[Any]]:
    if any(isinstance(v, str) for v in values):
        labels = sorted({format_value(v) for v in values},
                        key=lambda s: (not _is_number(s), float(s) if _is_number(s) else s))
        return np.array(labels, dtype=str), labels
    vals = sorted(set(values))
    return np.array(vals, dtype=float), vals


def _is_number(s: str) -> bool:
    try:
        float(s)
    except ValueError:
        return False
    return True


def _coords(spec: MethodSpec, records: Sequence[CellRecord],
            methods: Sequence[str]) -> dict[str, list[Any]]:
    coords: dict[str, list[Any]] = {"method": list(methods)}
    for d in PARAM_DIMS:
        if d not in spec.dims:
            continue
        vals = [getattr(r.cell, d) for r in records if getattr(r.cell, d) is not None]
        if not vals:
            continue
        if d == "L":
            coords[d] = sorted(set(vals), key=lambda s: (s.count(",") > 0, len(s), s))
        elif d == "lam":
            coords[d] = _lam_coord(vals)[1]
        else:
            coords[d] = sorted(set(vals))
    coords["seed"] = sorted({r.cell.seed for r in records})
    return coords


def _coord_key(dim: str, value: Any, lam_text: bool) -> Any:
    if dim == "lam" and lam_text:
        return format_value(value)
    return value


def _list_value(v: Any) -> list[Any] | None:
    """A list output as stored (JSON text of a list), or None."""
    if isinstance(v, list):
        return v
    if isinstance(v, str) and v.startswith("["):
        try:
            out = json.loads(v)
        except ValueError:
            return None
        return out if isinstance(out, list) else None
    return None


def family_dataset(spec: MethodSpec, records: Sequence[CellRecord],
                   methods: Sequence[str]) -> xr.Dataset:
    """The dense dataset of one family's records (see the module docstring)."""
    coords = _coords(spec, records, methods)
    dims = list(coords)
    shape = tuple(len(coords[d]) for d in dims)
    lam_text = "lam" in coords and any(isinstance(v, str) for v in coords["lam"])
    index = {d: {_coord_key(d, v, lam_text): i for i, v in enumerate(coords[d])} for d in dims}
    list_dims = {o.name: o.dim for o in spec.outputs if o.dim is not None}

    names: list[str] = []
    text_vars: set[str] = set()
    lengths: dict[str, int] = {}
    for r in records:
        for k, v in r.outputs.items():
            if k == "runtime_s":  # the runner's wall time of the cell is kept instead
                continue
            name = output_name(k)
            if name not in names:
                names.append(name)
            if k in list_dims:
                n = len(_list_value(v) or [])
                dim = list_dims[k]
                lengths[dim] = max(lengths.get(dim, 0), n)
            elif isinstance(v, str):
                text_vars.add(name)
    declared = [output_name(o.name) for o in spec.outputs]
    order = [k for k in declared if k in names] + [k for k in names if k not in declared]
    var_dims: dict[str, tuple[str, ...]] = {}
    arrays: dict[str, np.ndarray] = {}
    for k in order:
        extra = (list_dims[k],) if k in list_dims else ()
        var_dims[k] = (*dims, *extra)
        full = shape + tuple(lengths[e] for e in extra)
        arrays[k] = np.full(full, "", dtype=object) if k in text_vars else np.full(full, np.nan)
    for k in ("runtime_s", "status", "error"):
        var_dims[k] = tuple(dims)
        arrays[k] = np.full(shape, np.nan) if k == "runtime_s" else np.full(shape, "", object)

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
            if k in list_dims:
                vals = np.full(arrays[k].shape[-1], np.nan)
                lst = _list_value(v) or []
                vals[:len(lst)] = [np.nan if x is None else float(x) for x in lst]
                arrays[k][sel] = vals
            elif k in text_vars:
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
    for dim, n in lengths.items():
        coord_arrays[dim] = np.arange(n)
    data_vars = {}
    for k, arr in arrays.items():
        if arr.dtype == object:
            arr = arr.astype(str)
        base = k[:-5] if k.endswith("_used") and k[:-5] in RESERVED else k
        out = spec.output(base)
        long_name, units = ((out.long_name, out.units) if out is not None
                            else _EXTRA_VARS.get(k, (k.replace("_", " "), "1")))
        attrs = {"long_name": long_name}
        if units:
            attrs["units"] = units
        if out is not None and out.stderr:
            attrs["standard_error"] = out.stderr
        data_vars[k] = (var_dims[k], arr, attrs)
    ds = xr.Dataset(data_vars, coords=coord_arrays)
    _coord_attrs(ds)
    ds.attrs.update({"family": spec.family, "description": spec.description,
                     "code_version": spec.version})
    return ds


_COORD_ATTRS = {
    "method": ("method name (family or family:activation)", ""),
    "variant": ("how the hidden token is marked (docs/model.md)", ""),
    "L": ("sequence length or length law label", ""),
    "nu": ("signal strength nu", "1"),
    "delta": ("label-noise variance Delta", "1"),
    "alpha": ("sample ratio N/D", "1"),
    "lam": ("requested ridge penalty (a choice word: tuned)", ""),
    "D": ("token dimension", "1"),
    "sqrtND": ("sizing sqrt(N D)", "1"),
    "seed": ("seed of teacher, data and algorithm", "1"),
    "step": ("index of the record along a trajectory", "1"),
    "iteration": ("iteration index", "1"),
}


def _coord_attrs(ds: xr.Dataset) -> None:
    for d, (long_name, units) in _COORD_ATTRS.items():
        if d in ds.coords:
            ds[d].attrs["long_name"] = long_name
            if units:
                ds[d].attrs["units"] = units


def cells_table(records: Sequence[CellRecord]) -> xr.Dataset:
    """Every cell along ``cell``: method, key, status, error, runtime and settings (JSON)."""
    n = len(records)
    return xr.Dataset({
        "method": ("cell", np.array([r.cell.method for r in records], dtype=str).reshape(n),
                   {"long_name": "method of the cell"}),
        "status": ("cell", np.array([r.status for r in records], dtype=str).reshape(n),
                   {"long_name": "ok or failed"}),
        "error": ("cell", np.array([r.error for r in records], dtype=str).reshape(n),
                  {"long_name": "error text of a failed cell"}),
        "runtime_s": ("cell", np.array([r.runtime_s for r in records], dtype=float),
                      {"long_name": "wall time of the cell", "units": "s"}),
        "settings": ("cell", np.array([r.cell.to_json() for r in records], dtype=str
                                      ).reshape(n), {"long_name": "the cell as JSON"}),
    }, coords={"cell": np.array([r.key for r in records], dtype=str).reshape(n)})


def build_dataset(cfg: SweepConfig, records: Sequence[CellRecord]) -> xr.DataTree:
    """Assemble the records of a sweep into one tree (see the module docstring)."""
    root = cells_table(records)
    root.attrs.update(global_attrs(cfg, records))
    children = {}
    by_family: dict[str, list[CellRecord]] = {}
    for r in records:
        by_family.setdefault(r.cell.family, []).append(r)
    for family, recs in by_family.items():
        methods = [m for m in cfg.methods if m.split(":", 1)[0] == family
                   and any(r.cell.method == m for r in recs)]
        spec = get_method(methods[0])
        children[family] = xr.DataTree(family_dataset(spec, recs, methods))
    return xr.DataTree(root, children=children)


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
        "families": ",".join(dict.fromkeys(r.cell.family for r in records)),
        "conventions_slr": ("docs/model.md: tokens N(0, I_D); spiked x_eps += sqrt(nu/D) k*; "
                            "max eps* ~ softmax(nu chi*); y = z*_eps + sqrt(Delta) xi; "
                            "test_error is the excess risk (risk - Delta), stderr its standard "
                            "error, X_stderr that of X"),
        "layout": ("one group per method family (dims: method, the family's cell fields, "
                   "seed); the root lists every cell"),
        "history": f"{_dt.datetime.now(_dt.UTC).isoformat(timespec='seconds')} bayesslr run",
    }


def monte_carlo_sizes(cfg: SweepConfig) -> dict[str, dict[str, Any]]:
    """Per method, the option values that size its Monte Carlo estimates and samplers."""
    out: dict[str, dict[str, Any]] = {}
    for c in cfg.cells:
        sizes = {k: v for k, v in c.options.items() if k in MC_OPTION_KEYS}
        if sizes:
            out.setdefault(c.method, {}).update(sizes)
    return out


def comparable(tree: xr.DataTree) -> xr.DataTree:
    """The results without what legitimately differs between runs (wall times, timestamps,
    the revision)."""
    out = tree.copy()
    for node in out.subtree:
        ds = node.to_dataset().drop_vars(["runtime_s"], errors="ignore")
        ds.attrs = {k: v for k, v in ds.attrs.items() if k not in {"history", "git_revision"}}
        node.dataset = ds
    return out


def family_of(tree: xr.DataTree, family: str) -> xr.Dataset | None:
    """The dataset of one family's group, or None when the results have none."""
    return tree[family].to_dataset() if family in tree.children else None
