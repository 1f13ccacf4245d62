"""Sweeps from Python: :func:`run` a preset, a TOML file or a dict; :func:`load` the results.

The same runner as ``bayesslr run`` (validation before any work, per-cell storage, resume,
in-process or dask executors) and the same results file as ``bayesslr report`` reads.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import xarray as xr

from bayesslr.sweep.config import SweepConfig, load_config, load_preset, parse_config
from bayesslr.sweep.executors import make_executor
from bayesslr.sweep.runner import RunSummary, run_sweep


def _config(config: str | Path | Mapping[str, Any] | SweepConfig) -> SweepConfig:
    if isinstance(config, SweepConfig):
        return config
    if isinstance(config, Mapping):
        return parse_config(config)
    p = Path(config)
    if p.suffix == ".toml" or p.exists():
        return load_config(p)
    return load_preset(str(config))


def run(config: str | Path | Mapping[str, Any] | SweepConfig, out: str | Path, *,
        workers: int | None = None, scheduler: str | None = None, force: bool = False,
        progress: bool = False, keep_stale: bool = False, keep_draws: bool = False,
        log: Callable[[str], None] | None = print) -> RunSummary:
    """Run (or resume) a sweep into the directory ``out``.

    Parameters
    ----------
    config : str, path, dict or SweepConfig
        A preset name (``"quick"``), a TOML file, or the TOML document as a dict.
    out : path
        Results directory (``cells/``, ``dataset.nc``, ``manifest.json``).
    workers, scheduler : optional
        A dask LocalCluster of ``workers`` processes, or an existing scheduler address.
    force : bool
        Replace a different config stored in ``out`` (matching cells are kept).
    progress : bool
        Show the progress bar.
    keep_stale : bool
        Reuse stored cells computed by another code version of their method (default: they
        are recomputed).
    keep_draws : bool
        Sampling cells computed by this run write their draws as ArviZ ``InferenceData``,
        ``out/draws/<cell key>.nc`` (``arviz.from_netcdf`` reads them).
    log : callable, optional
        Receives one line per anomaly found when resuming (corrupt or stale cells);
        ``None`` silences them.

    Returns
    -------
    RunSummary
        Counts of the cells reused, computed and failed, and the results file.

    Examples
    --------
    >>> import tempfile, bayesslr as bs
    >>> cfg = {"name": "demo", "grid": [{"methods": ["population:bayes"], "nu": [1.0, 2.0]}],
    ...        "options": {"population": {"samples": 2000}}}
    >>> out = tempfile.mkdtemp()
    >>> summary = bs.run(cfg, out)
    >>> summary.computed, summary.failed
    (2, 0)
    >>> tree = bs.load(out)
    >>> tree["population"].ds.sel({"method": "population:bayes"}).sizes["nu"]
    2
    """
    cfg = _config(config)
    return run_sweep(cfg, out, make_executor(workers, scheduler), force=force,
                     progress=progress, keep_stale=keep_stale, keep_draws=keep_draws,
                     log=log)


def load(path: str | Path) -> xr.DataTree:
    """The results of a sweep directory (or its ``dataset.nc``) as a tree: the root holds the
    provenance and the table of cells, one group per method family.

    Examples
    --------
    See :func:`run`.
    """
    from bayesslr.results.load import load_results

    return load_results(path)
