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

from bayesslr.core.task import ConfigError
from bayesslr.report.claims import CLAIMS, Verdict, all_verdicts
from bayesslr.report.figures import FIGURES, THEMES, NothingToPlot, draw
from bayesslr.report.output import prepare_out, save_figure, save_text
from bayesslr.results.load import load_results
from bayesslr.results.reference import load_reference

__all__ = ["CLAIMS", "FIGURES", "THEMES", "NothingToPlot", "Verdict", "all_verdicts",
           "load_reference", "load_results", "write_report"]


def _roles(tree: xr.DataTree) -> dict:
    from bayesslr.registry import families

    return {f: s.report for f, s in families().items() if f in tree.children}


def family_figures(tree: xr.DataTree) -> dict:
    """The figures the families in ``tree`` contribute (their registry ``ReportRole``)."""
    return {n: fn for role in _roles(tree).values() for n, fn in role.figures.items()}


def family_verdicts(tree: xr.DataTree) -> dict[str, list[Verdict]]:
    """The verdicts of the families in ``tree`` that declare claims, headed by family."""
    return {f: role.claims(tree) for f, role in _roles(tree).items() if role.claims}


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
    out_dir = prepare_out(out if out is not None else default_out(results))
    written: list[Path] = []
    skipped: list[tuple[str, str]] = []
    for name, fn in {**FIGURES, **family_figures(tree)}.items():
        try:
            fig = draw(fn, tree)
        except NothingToPlot as why:
            skipped.append((name, str(why)))
            continue
        for fmt in formats:
            written.append(save_figure(fig, out_dir / f"{name}.{fmt}", dpi=dpi))
    lines = []
    for theme, vs in {**all_verdicts(tree), **family_verdicts(tree)}.items():
        lines.append(f"# {theme}")
        lines += [v.line() for v in vs]
    from bayesslr.report import finite_size  # the finite-size study, where the results hold one

    lines += finite_size.verdict_lines(tree)
    written.append(save_text("\n".join(lines) + "\n", out_dir / "verdicts.txt"))
    if "inference" in tree.children and not isinstance(results, xr.DataTree):
        from bayesslr.report import inference

        more, why = inference.write_inference_figures(results, out_dir, formats=tuple(formats),
                                                      dpi=dpi)
        written += more
        skipped += why
    more, why = finite_size.write_finite_size_figures(tree, out_dir, formats=tuple(formats),
                                                      dpi=dpi)
    return written + more, skipped + why
