"""The finite-size figure and verdicts (docs/finite-size.md; the analysis is
:mod:`bayesslr.report.finite_size_study`).

One panel per setting, estimator and quantity: the per-size seed means against ``1/D`` with
their standard errors, the fitted line ``e_inf + b/D`` down to ``1/D = 0``, the extrapolated
``e_inf`` with its error bar (a diamond at ``1/D = 0``), and the theory as a dashed line with
its one-standard-error band, one colour per ``lam``. A size where some seed's fit or chains
did not converge is drawn hollow (and counted in the verdict's evidence); a study whose
``e_inf`` misses its theory says so in its legend entry (``[does not hold]``). A theory point
that failed its own diagnostics (a replica point with ``converged`` false: the replica-symmetric
solution is not trusted there) is drawn grey and dotted, its band hatched, with its own legend
entry that gives the theory's reason, and the figure's title says what grey dotted means.
The same estimator under other start protocols on the same seeds (``Study.others``: e.g. the
best of 8 random starts) is drawn beside it as grey filled squares, not fitted; "hollow" means
one thing in this figure: a size with a seed that did not converge. Each panel's legend
sits under the panel, never on its data.
:func:`write_finite_size_figures` writes ``finite_size.<fmt>`` and :func:`verdict_lines` the
``# finite-size`` section of ``verdicts.txt``; both do nothing on results without a study (no
estimator at three sizes or more).
"""

from __future__ import annotations

import math
import textwrap
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import xarray as xr

from bayesslr.report.finite_size_fit import Study, pm_4dp
from bayesslr.report.finite_size_study import FLAG_KEY, finite_size_studies
from bayesslr.report.output import save_figure

THEME = "finite-size"
COLORS = ("C0", "C3", "C2", "C1", "C4", "C5")
FLAGGED_THEORY = {"color": "0.45", "ls": ":", "lw": 1.4}  # a theory point not trusted
OTHER_STYLES = (("s", "0.3"), ("^", "0.5"))  # other start protocols (Study.others)


def _panel_key(s: Study) -> tuple[str, str, str]:
    return s.setting, s.estimator, s.quantity


def finite_size_figure(studies: Sequence[Study]):
    """The figure of ``studies`` (module docstring); raises ``ValueError`` when none has a
    size to draw."""
    import matplotlib.pyplot as plt

    studies = [s for s in studies if s.points]
    if not studies:
        raise ValueError("no finite-size study to draw")
    panels: dict[tuple[str, str, str], list[Study]] = {}
    for s in studies:
        panels.setdefault(_panel_key(s), []).append(s)
    n = len(panels)
    ncols = 2 if n > 1 else 1
    nrows = math.ceil(n / ncols)
    # each panel's legend sits under it, never on the data: room for it in the height
    fig, axes = plt.subplots(nrows, ncols, figsize=(6.4 * ncols, 6.2 * nrows), squeeze=False,
                             constrained_layout=True)
    for ax, ((setting, estimator, _), group) in zip(axes.flat, panels.items(), strict=False):
        xmax = 0.0
        for color, s in zip(COLORS * 4, group, strict=False):
            _draw(ax, s, color)
            xmax = max([xmax] + [1.0 / p.D for p in s.points])
        ax.set_xlim(-0.04 * xmax, 1.08 * xmax)
        ax.set_xlabel("1 / D")
        ax.set_ylabel(group[0].quantity)
        ax.set_title(f"{estimator}\n{setting}", fontsize=9)
        ax.legend(fontsize=6.5, loc="upper center", bbox_to_anchor=(0.5, -0.16),
                  borderaxespad=0.0)
        ax.grid(alpha=0.3)
    for ax in list(axes.flat)[n:]:
        ax.set_visible(False)
    title = ("finite-size study: seed means +- se vs 1/D, fit e_inf + b/D (diamond at 1/D = 0), "
             "theory +- se (hollow: a seed did not converge, and only that)")
    if any(FLAG_KEY in s.extra for s in studies):
        title += ("\ngrey dotted, hatched band: a theory point that failed its own diagnostics "
                  "(converged false; the reason in its legend entry): not trusted as the limit")
    fig.suptitle(title, fontsize=9)
    return fig


def _draw(ax, s: Study, color: str) -> None:
    lam = f"lam={s.lam}" if s.lam else s.estimator.split(" ")[0]
    x = np.array([1.0 / p.D for p in s.points])
    y = np.array([p.mean for p in s.points])
    e = np.array([p.se if math.isfinite(p.se) else 0.0 for p in s.points])
    flagged = np.array([p.unconverged > 0 for p in s.points])
    single = np.array([p.n < 2 for p in s.points])
    for mask, face, suffix in ((~flagged & ~single, color, ""),
                               (flagged & ~single, "white", ", not converged")):
        if mask.any():
            ax.errorbar(x[mask], y[mask], e[mask], fmt="o", color=color, mfc=face, ms=5,
                        capsize=2, label=f"{lam}: seed mean +- se{suffix}")
    if single.any():
        ax.plot(x[single], y[single], "x", color=color, ms=6,
                label=f"{lam}: one seed (no se, not fitted)")
    for (label, pts), (mk, shade) in zip(s.others, OTHER_STYLES * 4, strict=False):
        xo = np.array([1.0 / p.D for p in pts])
        eo = np.array([p.se if math.isfinite(p.se) else 0.0 for p in pts])
        ax.errorbar(xo, [p.mean for p in pts], eo, fmt=mk, color=shade, mfc=shade, ms=5,
                    capsize=2, alpha=0.7, label=f"{lam}: {label} (same seeds; not fitted)")
    if s.fit is not None:
        xs = np.linspace(0.0, x.max(), 50)
        ax.plot(xs, s.fit.e_inf + s.fit.b * xs, "-", color=color, lw=1, alpha=0.8)
        ax.errorbar([0.0], [s.fit.e_inf], [s.fit.se], fmt="D", color=color, mfc=color,
                    mec="k", ms=6, capsize=3,
                    label=f"{lam}: D -> inf {pm_4dp(s.fit.e_inf, s.fit.se)} [{s.status}]")
    if math.isfinite(s.theory):
        band = s.theory_se if math.isfinite(s.theory_se) else 0.0
        label = f"{lam}: theory ({s.theory_name}) {pm_4dp(s.theory, band)}"
        flag = s.extra.get(FLAG_KEY, "")
        if flag:
            label = "\n".join(textwrap.wrap(f"{label}, FLAGGED: {flag}", 70))
            ax.axhline(s.theory, label=label, **FLAGGED_THEORY)
            ax.axhspan(s.theory - band, s.theory + band, facecolor="none",
                       edgecolor=FLAGGED_THEORY["color"], hatch="///", lw=0, alpha=0.5)
        else:
            ax.axhline(s.theory, color=color, ls="--", lw=1, label=label)
            ax.axhspan(s.theory - band, s.theory + band, color=color, alpha=0.12, lw=0)


def write_finite_size_figures(tree: xr.DataTree, out_dir: Path, *,
                              formats: Sequence[str] = ("png",), dpi: int = 150
                              ) -> tuple[list[Path], list[tuple[str, str]]]:
    """Write ``finite_size.<fmt>``; returns (files written, [(figure, why skipped)])."""
    import matplotlib.pyplot as plt

    studies = finite_size_studies(tree)
    if not studies:
        return [], []
    fig = finite_size_figure(studies)
    written = []
    try:
        for fmt in formats:  # encoded in memory, written durably (never half a file)
            written.append(save_figure(fig, Path(out_dir) / f"finite_size.{fmt}", dpi=dpi))
    finally:
        plt.close(fig)
    return written, []


def verdict_lines(tree: xr.DataTree) -> list[str]:
    """The ``# finite-size`` section of ``verdicts.txt`` (empty without a study)."""
    studies = finite_size_studies(tree)
    if not studies:
        return []
    return [f"# {THEME}"] + [s.verdict().line() for s in studies]


def section(lines: Sequence[str]) -> list[str]:
    """The verdict lines of the ``# finite-size`` section of a ``verdicts.txt``."""
    out, inside = [], False
    for ln in lines:
        if ln.startswith("# "):
            inside = ln == f"# {THEME}"
            continue
        if inside:
            out.append(ln)
    return out
