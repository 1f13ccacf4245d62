"""Compare two sweep datasets group by group, number for number, except provenance.

    python benchmarks/studies/compare_datasets.py BEFORE/dataset.nc AFTER/dataset.nc

Every group, variable, coordinate and attribute must be ``identical`` (xarray: same values,
dims, coordinates and attributes; NaN equal to NaN). Left out: provenance that differs between
two runs of the same code (the git revision, the history line with its timestamp) and wall
times (variables whose CF ``units`` are seconds, ``"s"``: ``runtime_s``, ``time_fit_s``, ...,
and ``sampling_s``, which bayes_sampling returns undeclared).
Exit status 0 when identical, 1 otherwise (each difference printed on one line).
"""

from __future__ import annotations

import sys

import numpy as np
import xarray as xr

PROVENANCE_ATTRS = ("git_revision", "history")
# wall times a family returns without declaring them (stored with units "1")
UNDECLARED_WALL_TIMES = ("sampling_s",)


def _strip(ds: xr.Dataset) -> xr.Dataset:
    timed = [v for v in ds.variables if ds[v].attrs.get("units") == "s"
             or v == "runtime_s" or v in UNDECLARED_WALL_TIMES]
    ds = ds.drop_vars(timed)
    ds.attrs = {k: v for k, v in ds.attrs.items() if k not in PROVENANCE_ATTRS}
    return ds


def _describe(a: xr.Dataset, b: xr.Dataset) -> list[str]:
    lines = []
    if a.attrs != b.attrs:
        keys = sorted(k for k in set(a.attrs) | set(b.attrs) if a.attrs.get(k) != b.attrs.get(k))
        lines.append(f"attrs differ: {keys}")
    for v in sorted(set(a.variables) | set(b.variables)):
        if v not in a.variables or v not in b.variables:
            lines.append(f"{v}: only in {'after' if v in b.variables else 'before'}")
            continue
        if not a[v].identical(b[v]):
            x, y = a[v].values, b[v].values
            if x.shape == y.shape and np.issubdtype(x.dtype, np.number) and \
                    np.issubdtype(y.dtype, np.number):
                diff = np.nanmax(np.abs(x.astype(float) - y.astype(float)), initial=0.0)
                lines.append(f"{v}: differs (max |diff| {diff:.3g}, dtype {x.dtype}/{y.dtype})")
            else:
                lines.append(f"{v}: differs (shape {x.shape}/{y.shape}, dtype "
                             f"{x.dtype}/{y.dtype}, attrs equal: {a[v].attrs == b[v].attrs})")
    return lines


def compare(before: str, after: str) -> list[str]:
    """One line per difference (empty: identical outside provenance)."""
    ta, tb = xr.open_datatree(before), xr.open_datatree(after)
    pa = {n.path: n for n in ta.subtree}
    pb = {n.path: n for n in tb.subtree}
    out = [f"group {g}: only in {'after' if g in pb else 'before'}"
           for g in sorted(set(pa) ^ set(pb))]
    for g in sorted(set(pa) & set(pb)):
        a, b = _strip(pa[g].to_dataset()), _strip(pb[g].to_dataset())
        if not a.identical(b):
            out += [f"group {g}: {line}" for line in _describe(a, b)] or [
                f"group {g}: not identical (coordinates or encoding)"]
        else:
            print(f"group {g}: identical ({len(a.data_vars)} variables)")
    return out


if __name__ == "__main__":
    diffs = compare(sys.argv[1], sys.argv[2])
    for line in diffs:
        print(line)
    print("IDENTICAL" if not diffs else f"{len(diffs)} differences")
    sys.exit(1 if diffs else 0)
