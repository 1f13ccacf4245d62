"""Load the results of a sweep: a directory written by ``bayesslr run``, or its ``dataset.nc``."""

from __future__ import annotations

from pathlib import Path

import xarray as xr

from bayesslr.core.task import ConfigError


def load_results(path: str | Path) -> xr.DataTree:
    """The results of a sweep (a directory written by ``bayesslr run``, or its ``.nc`` file),
    loaded in memory: the root holds the provenance and the table of cells, one child group per
    method family (:mod:`bayesslr.sweep.dataset`)."""
    p = Path(path)
    f = p / "dataset.nc" if p.is_dir() else p
    if not f.exists():
        raise ConfigError(f"results={str(path)!r} holds no dataset.nc; allowed: a directory "
                          "written by 'bayesslr run'")
    try:
        with xr.open_datatree(f, engine="h5netcdf") as tree:
            tree = tree.load()
    except (OSError, ValueError) as exc:
        raise ConfigError(f"results={str(f)!r} cannot be read ({exc})") from None
    if not is_results(tree):
        raise ConfigError(f"results={str(f)!r} is a netCDF file but not bayesslr results (no "
                          "'bayesslr_version' attribute, no 'cells' or method family group); "
                          "allowed: a directory written by 'bayesslr run', or its dataset.nc")
    return tree


def is_results(tree: xr.DataTree) -> bool:
    """Whether ``tree`` looks like bayesslr results: the provenance attribute of
    ``bayesslr run``, or a ``cells`` or method family group (results assembled by hand)."""
    from bayesslr.registry import FAMILY_MODULES

    groups = set(tree.children)
    return ("bayesslr_version" in tree.attrs
            or bool(groups & {"cells", "inference", *FAMILY_MODULES}))
