"""What every figure shares: the family styles, panel grids, legends, log axes, titles, and
flagged cells.

How a family is drawn (line or markers, label, colour) is its registry entry's
:class:`~bayesslr.registry.PlotStyle` (:func:`style`), so a family added later is drawn without
a change here. A cell whose method says it did not converge (output ``converged`` false on some
seed) is drawn flagged (:func:`draw_flagged`): a hollow grey marker with its own legend entry,
and the figure's title says why (:func:`flag_note`, :func:`figure_title`).
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Mapping

import numpy as np
import xarray as xr
from matplotlib.axes import Axes
from matplotlib.figure import Figure
from matplotlib.ticker import (
    LogFormatterSciNotation,
    LogLocator,
    NullFormatter,
    ScalarFormatter,
)

from bayesslr.registry import PlotStyle, get_method
from bayesslr.results.query import fmt_value, stats_of


class NothingToPlot(Exception):
    """The dataset holds nothing this figure draws; the message says why."""


def style(method: str) -> PlotStyle:
    """The registry's plot style of a method's family (a default one for unknown families)."""
    try:
        return get_method(method).plot
    except Exception:  # a family not loaded here (a plugin): draw it plainly
        return PlotStyle()


def label_of(m: str) -> str:
    return style(m).label_for(m)


def color_of(m: str) -> str:
    return style(m).color_for(m)


def title_of(sel: Mapping[str, object]) -> str:
    """Panel title of a setting (``delta = 0`` omitted)."""
    return ", ".join(fmt_value(k, v) for k, v in sel.items() if not (k == "delta" and v == 0))


def size_label(size: Mapping[str, object]) -> str:
    if not size:
        return ""
    d, v = next(iter(size.items()))
    return f"D={int(v)}" if d == "D" else f"\u221a(ND)={float(v):g}"


MIN_WIDTH = 8.0  # inches: room for the title and a legend below a single panel


def panel_grid(n: int, *, cols: int = 3, width: float = 4.4, height: float = 3.5
          ) -> tuple[Figure, list[Axes]]:
    cols = max(1, min(n, cols))
    rows = math.ceil(n / cols)
    fig = Figure(figsize=(max(width * cols, MIN_WIDTH), height * rows + 1.0),
                 layout="constrained")
    axes = fig.subplots(rows, cols, squeeze=False).ravel().tolist()
    for ax in axes[n:]:
        ax.set_visible(False)
    return fig, axes[:n]


def legend_below(fig: Figure, axes: Iterable[Axes], extra: Iterable = ()) -> None:
    """One legend for the whole figure, below the panels (entries deduplicated by label)."""
    seen: dict[str, object] = {}
    for ax in axes:
        for h, lab in zip(*ax.get_legend_handles_labels(), strict=True):
            if lab and not lab.startswith("_") and lab not in seen:
                seen[lab] = h
    for h in extra:
        lab = h.get_label()
        if lab not in seen:
            seen[lab] = h
    if seen:
        width = fig.get_size_inches()[0]
        longest = max(len(lab) for lab in seen)
        per_col = max(2.0, 0.062 * longest + 0.7)  # inches a legend column needs at 8 pt
        fig.legend(list(seen.values()), list(seen), loc="outside lower center",
                   ncols=max(1, min(len(seen), int(width // per_col))), fontsize=8,
                   frameon=False)


def plain_log(ax: Axes, axis: str = "y") -> bool:
    """A readable log scale, or none: linear when the data span less than a factor 4 (a log
    axis would carry one tick label there); decade ticks labelled ``10^k`` from two decades
    up (fixed decimals such as 0.00005 ... 0.05 are unreadable); plain labels (0.2, 0.5, 1)
    on 1, 2, 5 in between. Returns whether the axis is logarithmic."""
    a = ax.yaxis if axis == "y" else ax.xaxis
    lim = ax.dataLim
    lo, hi = (lim.y0, lim.y1) if axis == "y" else (lim.x0, lim.x1)
    vals = []
    for ln in ax.lines:
        d = np.asarray(ln.get_ydata() if axis == "y" else ln.get_xdata(), float)
        if (d[np.isfinite(d)] <= 0).any():
            return False  # a value a log axis cannot show
        vals += d[np.isfinite(d)].tolist()
    if vals:
        lo, hi = min(vals), max(vals)
    if not (lo > 0 and math.isfinite(hi)) or hi / lo < 4.0:
        return False
    (ax.set_yscale if axis == "y" else ax.set_xscale)("log")
    if math.log10(hi / lo) >= 2.0:
        a.set_major_locator(LogLocator(base=10, numticks=12))
        a.set_major_formatter(LogFormatterSciNotation())
    else:
        a.set_major_locator(LogLocator(base=10, subs=(1.0, 2.0, 5.0)))
        a.set_major_formatter(ScalarFormatter())
    a.set_minor_formatter(NullFormatter())
    return True


def xjitter(x: np.ndarray, i: int, n: int) -> np.ndarray:
    """Offsets markers of ``n`` series drawn at the same ``x`` (by 2.5% of ``x`` each) so their
    error bars separate."""
    if n <= 1:
        return x
    return x * (1.0 + 0.025 * (i - (n - 1) / 2))


# --------------------------------------------------------------------------------------------
# flagged cells: a method that says it did not converge is drawn apart, and the title says why
# --------------------------------------------------------------------------------------------
FLAG_COLOR = "0.55"


def flagged_of(sub: xr.Dataset, theory: xr.Dataset | None = None) -> xr.DataArray | None:
    """Per point of one method's dataset (method and size selected, ``lam`` chosen as
    :func:`stats_of` does): True where some seed's cell reports ``converged`` false."""
    if "converged" not in sub:
        return None
    conv, _ = stats_of(sub.assign(converged=sub["converged"].astype(float)), "converged",
                       theory)
    return (conv < 1.0).fillna(False)


def flag_reasons(sub: xr.Dataset, flagged: xr.DataArray | None = None) -> list[str]:
    """The reasons flagged cells give, with their numbers dropped (``r_hat_max > 1.01``)."""
    if "reason" not in sub:
        return []
    conv = np.asarray(sub["converged"].values, float) if "converged" in sub else None
    reasons = np.asarray(sub["reason"].values).ravel()
    keep = (conv.ravel() < 0.5) if conv is not None and conv.size == reasons.size \
        else np.ones(reasons.size, bool)
    out: list[str] = []
    for text in reasons[keep]:
        for part in str(text).split(";"):
            part = re.sub(r" [-+0-9.eE]+ ([<>]=?) ", r" \1 ", part.strip())
            if part and part != "converged" and part not in out:
                out.append(part)
    return out


def note_flagged(ax: Axes, family: str, reasons: Iterable[str]) -> None:
    fig = ax.get_figure(root=True) if hasattr(ax, "get_figure") else ax.figure
    notes = fig.__dict__.setdefault("_bayesslr_flagged", {})
    have = notes.setdefault(family, [])
    have += [r for r in reasons if r not in have]


def flag_note(fig: Figure) -> str:
    """The title note of a figure that drew flagged cells (empty when none): which family and
    why (the reasons the cells give)."""
    notes = fig.__dict__.get("_bayesslr_flagged", {})
    if not notes:
        return ""
    parts = []
    for fam, reasons in notes.items():
        why = ", ".join(reasons[:3]) + (" ..." if len(reasons) > 3 else "")
        parts.append(f"{fam}" + (f" ({why})" if why else ""))
    return "hollow grey: not converged, flagged \u2014 " + "; ".join(parts)


def figure_title(fig: Figure, title: str, **kw) -> None:
    """The figure title, with the flagged-cells note on a second line when there is one."""
    import textwrap

    note = flag_note(fig)
    if note:  # wrapped to the figure's width (about 11 characters an inch at this size)
        note = "\n".join(textwrap.wrap(note, max(40, int(fig.get_size_inches()[0] * 11))))
    fig.suptitle(title + (f"\n{note}" if note else ""), **kw)


def draw_flagged(ax: Axes, x: np.ndarray, y: np.ndarray, e: np.ndarray | None, marker: str,
                  label: str, ms: float = 7.0) -> None:
    ax.errorbar(x, y, yerr=e, fmt=marker, color=FLAG_COLOR, mfc="none", mec=FLAG_COLOR,
                mew=1.5, ms=ms, capsize=3, label=f"{label}: not converged (flagged)", zorder=5)
