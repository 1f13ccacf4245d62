"""Cell records -> one results file: an :class:`xarray.DataTree` with one dense group per family.

Layout of ``OUT/dataset.nc`` (netCDF4 groups, h5netcdf):

* the root group holds the provenance (config JSON, version, git revision, Monte Carlo sizes,
  conventions); its group ``cells`` is a table of every cell along the dimension ``cell``
  (``method``, ``key``, ``status``, ``error``, ``runtime_s``, ``method_version`` and the cell's
  settings as JSON),
  so that failures are listed in one place;
* one group per method family (``population``, ``erm``, ``theory_erm``, ``theory_bayes``,
  ``bayes_sampling``, ...), named after it, with dimensions ``method``, the cell fields that
  index the family (its registry ``dims``: ``variant, L, nu, delta, alpha, lam, D | sqrtND``,
  those that some cell of the family sets) and ``seed``, plus one extra dimension per list
  output (``step``, ``iteration``). Its variables are the family's outputs (declared ones first,
  with CF ``long_name``/``units`` from the registry), and ``status``, ``error``, ``runtime_s``
  per cell.
* an option that tells apart cells which otherwise coincide (two ``gd`` runs that differ only
  in ``init``) becomes a dimension of its family named after the option (coordinate: the
  option's values as text), placed before ``seed``; without it one run would overwrite the
  other. A list output named like its own dimension (``gd``'s ``step``) gives that dimension's
  coordinate when every cell recorded the same values, else it is stored as ``<name>_used``.

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
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import xarray as xr

import bayesslr
from bayesslr.core.provenance import environment, git_revision
from bayesslr.registry import MethodSpec, get_method
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


def output_name(key: str, extra: frozenset[str] | set[str] = frozenset()) -> str:
    """Dataset variable of a method output: a name taken by a dimension (``extra``: a
    family's own ones, option or list dimensions) or by the runner's own variables gets the
    suffix ``_used`` (``lam`` -> ``lam_used``: the penalty a ``"validation"`` cell chose;
    ``D`` -> ``D_used``; ``init`` -> ``init_used`` where ``init`` is a dimension)."""
    return f"{key}_used" if key in RESERVED or key in extra else key


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


def _option_text(spec: MethodSpec, cell: Any, key: str) -> str:
    """The value of option ``key`` of a cell (its default when unset) as coordinate text."""
    v = cell.options.get(key, spec.schema[key].default if key in spec.schema else None)
    if isinstance(v, list | tuple):
        return ",".join(format_value(x) for x in v)
    return "" if v is None else format_value(v)


def split_options(spec: MethodSpec, records: Sequence[CellRecord]) -> list[str]:
    """Options whose values differ between cells that share every coordinate (method, the
    family's dims, seed): they become dimensions (see the module docstring)."""
    dims = [d for d in PARAM_DIMS if d in spec.dims]
    by_point: dict[tuple, list[CellRecord]] = {}
    for r in records:
        point = (r.cell.method, r.cell.seed, *(getattr(r.cell, d) for d in dims))
        by_point.setdefault(point, []).append(r)
    keys: list[str] = []
    for recs in by_point.values():
        if len(recs) < 2:
            continue
        for k in sorted({k for r in recs for k in r.cell.options}):
            if k not in keys and len({_option_text(spec, r.cell, k) for r in recs}) > 1:
                keys.append(k)
    return keys


def _coords(spec: MethodSpec, records: Sequence[CellRecord],
            methods: Sequence[str], split: Sequence[str] = ()) -> dict[str, list[Any]]:
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
    for k in split:
        coords[k] = sorted({_option_text(spec, r.cell, k) for r in records})
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


@dataclass(frozen=True)
class _Layout:
    """Where each output of a family goes: variable order, text variables, the extra dimension
    of each list output (by variable name) and its length, the coordinate values a list
    output named like its dimension gives, and the names outputs must not take (the family's
    option and list dimensions)."""

    order: list[str]
    text: set[str]
    list_dims: dict[str, str]
    lengths: dict[str, int]
    dim_values: dict[str, list[Any]]
    taken: frozenset[str]


def _layout(spec: MethodSpec, records: Sequence[CellRecord], split: Sequence[str] = ()
            ) -> _Layout:
    raw_dims = {o.name: o.dim for o in spec.outputs if o.dim is not None}
    # a list output named like its dimension: the coordinate if every cell recorded the same
    dim_values: dict[str, list[Any]] = {}
    for k, dim in raw_dims.items():
        seen = {json.dumps(_list_value(r.outputs.get(k)) or []) for r in records}
        if k == dim and len(seen) == 1 and (vals := _list_value(records[0].outputs.get(k))):
            dim_values[dim] = vals
    taken = frozenset(split) | frozenset(raw_dims.values())
    list_dims = {output_name(k, taken): d for k, d in raw_dims.items() if k not in dim_values}
    names: list[str] = []
    text: set[str] = set()
    lengths: dict[str, int] = {}
    for r in records:
        for k, v in r.outputs.items():
            if k == "runtime_s" or k in dim_values:  # runner's wall time kept; coordinate
                continue
            name = output_name(k, taken)
            if name not in names:
                names.append(name)
            if name in list_dims:
                dim = list_dims[name]
                lengths[dim] = max(lengths.get(dim, 0), len(_list_value(v) or []))
            elif isinstance(v, str):
                text.add(name)
    declared = [output_name(o.name, taken) for o in spec.outputs]
    order = [k for k in declared if k in names] + [k for k in names if k not in declared]
    return _Layout(order, text, list_dims, lengths, dim_values, taken)


def _put(arr: np.ndarray, sel: Any, v: Any, kind: str) -> None:
    """Write one cell's value of an output (a list along the extra dimension, text, or a
    number) at ``sel``; a missing value stays NaN / empty."""
    if kind == "list":
        vals = np.full(arr.shape[-1], np.nan)
        lst = _list_value(v) or []
        vals[:len(lst)] = [np.nan if x is None else float(x) for x in lst]
        arr[sel] = vals
    elif kind == "text":
        arr[sel] = "" if v is None else (v if isinstance(v, str) else format_value(v))
    else:
        arr[sel] = np.nan if v is None or isinstance(v, str) else v


def _coord_arrays(coords: Mapping[str, list[Any]], lay: _Layout, split: Sequence[str] = ()
                  ) -> dict[str, np.ndarray]:
    out: dict[str, np.ndarray] = {}
    for d, vals in coords.items():
        if d == "lam":
            out[d] = _lam_coord(vals)[0]
        elif d in {"method", "variant", "L"} or d in split:
            out[d] = np.array(vals, dtype=str)
        elif d in {"D", "seed"}:
            out[d] = np.array(vals, dtype=np.int64)
        else:
            out[d] = np.array(vals, dtype=float)
    for dim, n in lay.lengths.items():
        vals = lay.dim_values.get(dim)
        out[dim] = np.asarray(vals) if vals is not None and len(vals) == n else np.arange(n)
    return out


def _var_attrs(spec: MethodSpec, name: str) -> dict[str, str]:
    base = name[:-5] if name.endswith("_used") and name[:-5] in RESERVED else name
    out = spec.output(base)
    long_name, units = ((out.long_name, out.units) if out is not None
                        else _EXTRA_VARS.get(name, (name.replace("_", " "), "1")))
    attrs = {"long_name": long_name}
    if units:
        attrs["units"] = units
    if out is not None and out.stderr:
        attrs["standard_error"] = out.stderr
    return attrs


def family_dataset(spec: MethodSpec, records: Sequence[CellRecord],
                   methods: Sequence[str]) -> xr.Dataset:
    """The dense dataset of one family's records (see the module docstring)."""
    split = split_options(spec, records)
    coords = _coords(spec, records, methods, split)
    dims = list(coords)
    lam_text = "lam" in coords and any(isinstance(v, str) for v in coords["lam"])
    index = {d: {_coord_key(d, v, lam_text): i for i, v in enumerate(coords[d])} for d in dims}
    lay = _layout(spec, records, split)
    kinds = {k: "list" if k in lay.list_dims else "text" if k in lay.text else "number"
             for k in lay.order}
    kinds.update({"runtime_s": "number", "status": "text", "error": "text"})
    var_dims = {k: (*dims, lay.list_dims[k]) if kinds[k] == "list" else tuple(dims)
                for k in kinds}
    arrays = {k: np.full(tuple(len(coords[d]) if d in coords else lay.lengths[d]
                               for d in var_dims[k]),
                         "" if kinds[k] == "text" else np.nan,
                         dtype=object if kinds[k] == "text" else float)
              for k in kinds}

    # broadcast cells first (most unset fields first), explicit cells overwrite them
    def n_unset(r: CellRecord) -> int:
        return sum(getattr(r.cell, d) is None for d in dims
                   if d not in {"method", "seed", *split})

    for r in sorted(records, key=n_unset, reverse=True):
        idx = []
        for d in dims:
            if d in split:
                idx.append([index[d][_option_text(spec, r.cell, d)]])
                continue
            v = r.cell.seed if d == "seed" else getattr(r.cell, d)
            idx.append(list(range(len(coords[d]))) if v is None
                       else [index[d][_coord_key(d, v, lam_text)]])
        sel = np.ix_(*idx)
        values = {output_name(k, lay.taken): v for k, v in r.outputs.items()}
        values.update({"runtime_s": r.runtime_s, "status": r.status, "error": r.error})
        for k, kind in kinds.items():
            _put(arrays[k], sel, values.get(k), kind)
    data_vars = {k: (var_dims[k], arr.astype(str) if arr.dtype == object else arr,
                     _var_attrs(spec, k)) for k, arr in arrays.items()}
    ds = xr.Dataset(data_vars, coords=_coord_arrays(coords, lay, split))
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
    """Every cell along ``cell``: method, key, status, error, runtime, the method's code version
    and the settings (JSON)."""
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
        "cpu_s": ("cell", np.array([r.cpu_s for r in records], dtype=float),
                  {"long_name": "process CPU time of the cell, all threads (NaN: not "
                                "recorded)", "units": "s"}),
        "method_version": ("cell", np.array([r.method_version for r in records], dtype=str
                                            ).reshape(n),
                           {"long_name": "code version of the method that computed the cell "
                                         "(empty: unknown)"}),
        "settings": ("cell", np.array([r.cell.to_json() for r in records], dtype=str
                                      ).reshape(n), {"long_name": "the cell as JSON"}),
    }, coords={"cell": np.array([r.key for r in records], dtype=str).reshape(n)})


def build_dataset(cfg: SweepConfig, records: Sequence[CellRecord]) -> xr.DataTree:
    """Assemble the records of a sweep into one tree (see the module docstring)."""
    root = xr.Dataset(attrs=global_attrs(cfg, records))
    children = {"cells": xr.DataTree(cells_table(records))}
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
    """Provenance: config JSON, version, git revision, the environment (Python, numeric
    libraries, CPU: :func:`~bayesslr.core.provenance.environment`), Monte Carlo sizes,
    conventions."""
    return {
        "title": f"bayesslr sweep {cfg.name}",
        "Conventions": "CF-1.8",
        "source": f"bayesslr {bayesslr.__version__}",
        "bayesslr_version": bayesslr.__version__,
        "git_revision": git_revision(),
        "environment": json.dumps(environment(), sort_keys=True),
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
                   "seed); the group 'cells' lists every cell"),
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
        ds = node.to_dataset().drop_vars(["runtime_s", "cpu_s"], errors="ignore")
        ds.attrs = {k: v for k, v in ds.attrs.items() if k not in {"history", "git_revision"}}
        node.dataset = ds
    return out


def family_of(tree: xr.DataTree, family: str) -> xr.Dataset | None:
    """The dataset of one family's group, or None when the results have none."""
    return tree[family].to_dataset() if family in tree.children else None
