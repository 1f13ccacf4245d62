"""Reports: the figures, tables and verdicts of a sweep's results, for the CLI and the notebooks.

:func:`load_results` opens ``RESULTS/dataset.nc`` (or a results file) as a tree with one group
per method family; :func:`write_report` draws every figure of
:data:`~bayesslr.report.figures.FIGURES` that the results support (PNG and PDF) and writes the
verdicts of :mod:`bayesslr.report.claims` to ``verdicts.txt``;
:func:`bayesslr.report.notebooks.write_notebooks` executes the notebooks of ``reports/`` on
the results and writes them as self-contained HTML beside the figures
(``bayesslr report RESULTS --notebooks``).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import xarray as xr

from bayesslr.reference import load_reference
from bayesslr.report.claims import CLAIMS, Verdict, all_verdicts
from bayesslr.report.figures import FIGURES, THEMES, NothingToPlot
from bayesslr.task import ConfigError

__all__ = ["CLAIMS", "FIGURES", "THEMES", "NothingToPlot", "Verdict", "all_verdicts",
           "load_reference", "load_results", "write_report"]


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


def default_out(results: str | Path) -> Path:
    """Where the report of ``results`` goes: ``RESULTS/figures`` (beside a results file)."""
    p = Path(results)
    return p / "figures" if p.is_dir() else p.parent / "figures"


def write_report(results: str | Path | xr.DataTree, out: str | Path | None = None, *,
                 formats: Sequence[str] = ("png", "pdf"), dpi: int = 150
                 ) -> tuple[list[Path], list[tuple[str, str]]]:
    """Write the figures of ``results`` (a results directory or file, or a loaded tree such as
    :func:`load_reference`; raster figures at ``dpi``), ``verdicts.txt`` (every theme's verdict
    lines) and, when the results hold an ``inference`` group, the inference benchmark's figures
    and leaderboards; returns (files written, [(figure, why skipped)])."""
    tree = results if isinstance(results, xr.DataTree) else load_results(results)
    if out is None and isinstance(results, xr.DataTree):
        raise ConfigError("out is not set; allowed: a directory for the figures of loaded "
                          "results")
    out_dir = Path(out) if out is not None else default_out(results)
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
    lines = []
    for theme, vs in all_verdicts(tree).items():
        lines.append(f"# {theme}")
        lines += [v.line() for v in vs]
    from bayesslr.report import finite_size  # the finite-size study, where the results hold one

    lines += finite_size.verdict_lines(tree)
    path = out_dir / "verdicts.txt"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    written.append(path)
    if "inference" in tree.children and not isinstance(results, xr.DataTree):
        from bayesslr.report import inference

        more, why = inference.write_figures(results, out_dir, formats=tuple(formats), dpi=dpi)
        written += more
        skipped += why
    more, why = finite_size.write_figures(tree, out_dir, formats=tuple(formats), dpi=dpi)
    return written + more, skipped + why
