"""Reports: the standard figures of a sweep's results, for the CLI and the notebooks.

:func:`load_results` opens ``RESULTS/dataset.nc`` (or a results file) as a tree with one group
per method family; :func:`write_report` draws every figure of
:data:`~bayesslr.report.figures.FIGURES` that the results support and writes each as PNG and
PDF.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import xarray as xr

from bayesslr.report.figures import FIGURES, NothingToPlot
from bayesslr.task import ConfigError

__all__ = ["FIGURES", "NothingToPlot", "load_results", "write_report"]


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


def write_report(results: str | Path, out: str | Path | None = None, *,
                 formats: Sequence[str] = ("png", "pdf"), dpi: int = 150
                 ) -> tuple[list[Path], list[tuple[str, str]]]:
    """Write the figures of ``results`` (raster ones at ``dpi``); returns (files written,
    [(figure, why skipped)])."""
    tree = load_results(results)
    out_dir = Path(out) if out is not None else (
        Path(results) / "figures" if Path(results).is_dir() else Path(results).parent / "figures")
    out_dir.mkdir(parents=True, exist_ok=True)
    written: list[Path] = []
    skipped: list[tuple[str, str]] = []
    for name, fn in FIGURES.items():
        try:
            fig = fn(tree)
        except NothingToPlot as why:
            skipped.append((name, str(why)))
            continue
        for fmt in formats:
            path = out_dir / f"{name}.{fmt}"
            fig.savefig(path, dpi=dpi)
            written.append(path)
    return written, skipped
