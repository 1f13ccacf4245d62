"""Sweeps: a TOML grid -> validated cells -> stored per-cell results -> one xarray Dataset.

Floors, each importing only the ones above it: :mod:`.config` (TOML and presets -> cells),
:mod:`.storage` (one atomic netCDF file per cell, resume, config guard), :mod:`.dataset`
(records -> tidy dataset with provenance), :mod:`.executors` (in-process, dask.distributed),
:mod:`.progress`, :mod:`.cost` (``--dry-run`` estimate) and :mod:`.runner` (the whole run).
The sweep talks to methods only through :mod:`bayesslr.registry`.
"""

from bayesslr.sweep.config import SweepConfig, load_config, load_preset, parse_config, preset_names
from bayesslr.sweep.runner import RunSummary, run_sweep

__all__ = ["RunSummary", "SweepConfig", "load_config", "load_preset", "parse_config",
           "preset_names", "run_sweep"]
