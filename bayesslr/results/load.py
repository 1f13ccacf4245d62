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
            return tree.load()
    except (OSError, ValueError) as exc:
        raise ConfigError(f"results={str(f)!r} cannot be read ({exc})") from None
