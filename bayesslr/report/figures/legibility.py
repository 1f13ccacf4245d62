"""What makes a figure hard to read, found on the laid-out figure (checked by the tests on every
figure)."""

from __future__ import annotations

import re

import numpy as np
from matplotlib.axes import Axes
from matplotlib.figure import Figure


def _area(a, b) -> float:
    w = min(a.x1, b.x1) - max(a.x0, b.x0)
    h = min(a.y1, b.y1) - max(a.y0, b.y0)
    return max(w, 0.0) * max(h, 0.0)


def _inside(box, outer, tol: float = 1.0) -> bool:
    return (box.x0 >= outer.x0 - tol and box.y0 >= outer.y0 - tol and box.x1 <= outer.x1 + tol
            and box.y1 <= outer.y1 + tol)


def _drawn_ticklabels(axis) -> list:
    """The tick labels an axis draws (those of ticks inside its view interval)."""
    lo, hi = sorted(axis.get_view_interval())
    tol = 1e-9 * max(abs(lo), abs(hi), 1.0)
    out = []
    for tick in axis.get_major_ticks():
        if lo - tol <= tick.get_loc() <= hi + tol:
            out += [t for t in (tick.label1, tick.label2) if t.get_visible()]
    return out


def _elements(ax: Axes, renderer) -> list:
    """Boxes of what a reader sees of a panel: its plot area, titles, axis labels and the tick
    labels drawn."""
    texts = [ax.title, ax._left_title, ax._right_title, ax.xaxis.label, ax.yaxis.label,
             *_drawn_ticklabels(ax.xaxis), *_drawn_ticklabels(ax.yaxis)]
    boxes = [ax.bbox]
    for t in texts:
        if t.get_visible() and t.get_text().strip():
            boxes.append(t.get_window_extent(renderer))
    return boxes


_FIXED = re.compile(r"^[-\u2212]?\d*\.\d+$")
_CAPS = {"_", "|", "None", "none", "", " ", ",", "."}


def _tick_problems(name: str, ax: Axes) -> list[str]:
    """A log axis with fewer than two tick labels; fixed-decimal tick labels spanning three
    decades or more (0.00005 ... 0.05: unreadable)."""
    out = []
    for which, axis in (("x", ax.xaxis), ("y", ax.yaxis)):
        texts = [t.get_text().strip() for t in _drawn_ticklabels(axis)]
        texts = [t for t in texts if t]
        if axis.get_scale() == "log" and len(texts) < 2:
            out.append(f"{name}: log {which} axis with {len(texts)} tick label(s)")
        fixed = [abs(float(t.replace("\u2212", "-"))) for t in texts if _FIXED.match(t)]
        fixed = [v for v in fixed if v > 0]
        if len(fixed) >= 2 and max(fixed) / min(fixed) >= 1000.0:
            out.append(f"{name}: fixed-decimal {which} tick labels span three decades or more "
                       f"({min(fixed):g} to {max(fixed):g})")
    return out


def _marker_problems(name: str, ax: Axes) -> list[str]:
    """Filled markers drawn on top of each other (closer than a third of their size): seeds or
    series that hide each other."""
    pts = []
    dpi = ax.figure.dpi
    for ln in ax.lines:
        mk = ln.get_marker()
        if not ln.get_visible() or (isinstance(mk, str) and mk in _CAPS) or mk is None:
            continue
        if str(ln.get_markerfacecolor()).lower() == "none":
            continue  # hollow overlays (bounds, flags) are meant to sit on a point
        xy = np.column_stack([np.asarray(ln.get_xdata(), float),
                              np.asarray(ln.get_ydata(), float)])
        xy = xy[np.isfinite(xy).all(axis=1)]
        if not len(xy):
            continue
        disp = ax.transData.transform(xy)
        size = ln.get_markersize() * dpi / 72.0
        pts += [(p, size, id(ln)) for p in disp]
    for i in range(len(pts)):
        for j in range(i + 1, len(pts)):
            (p, s1, _), (q, s2, _) = pts[i], pts[j]
            if float(np.hypot(*(p - q))) < min(s1, s2) / 3.0:
                return [f"{name}: markers drawn on top of each other (jitter or summarise)"]
    return []


def legibility_problems(fig: Figure) -> list[str]:
    """What makes a figure hard to read once laid out (drawn on an Agg canvas): a visible
    panel without an x or y label; a title, axis label or tick label of one panel over
    another panel's plot area or text; a panel, legend or title outside the figure or over a
    panel; labelled artists with no legend; a log axis with fewer than two tick labels;
    fixed-decimal tick labels spanning three decades; filled markers on top of each other.
    Returns one sentence per problem (empty: legible)."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    canvas = FigureCanvasAgg(fig)
    canvas.draw()
    renderer = canvas.get_renderer()
    outer = fig.bbox
    problems: list[str] = []
    axes = [ax for ax in fig.get_axes() if ax.get_visible()]
    panels = []
    labelled = False
    for i, ax in enumerate(axes):
        name = f"panel {i} ({ax.get_title() or ax.get_ylabel() or 'untitled'})"
        if not ax.get_xlabel().strip():
            problems.append(f"{name}: no x label")
        if not ax.get_ylabel().strip():
            problems.append(f"{name}: no y label")
        if not _inside(ax.get_tightbbox(renderer), outer):
            problems.append(f"{name}: outside the figure")
        panels.append((name, _elements(ax, renderer)))
        problems += _tick_problems(name, ax) + _marker_problems(name, ax)
        labelled |= any(not lab.startswith("_") for lab in ax.get_legend_handles_labels()[1])
    for i, (n1, e1) in enumerate(panels):
        for n2, e2 in panels[i + 1:]:
            if any(_area(a, b) > 4.0 for a in e1 for b in e2):  # square pixels
                problems.append(f"{n1} and {n2} overlap")
    legends = list(fig.legends) + [ax.get_legend() for ax in axes if ax.get_legend()]
    for sub in fig.subfigs:
        legends += list(sub.legends)
    if labelled and not legends:
        problems.append("labelled lines but no legend")
    texts = [t for t in (getattr(f, "_suptitle", None) for f in [fig, *fig.subfigs]) if t]
    for what, artist in [("legend", leg) for leg in fig.legends] + [("title", t) for t in texts]:
        box = artist.get_window_extent(renderer)
        label = f"{what} {artist.get_text()!r}" if what == "title" else what
        if not _inside(box, outer):
            problems.append(f"{label} is cut off by the figure's edge")
        for n, elements in panels:
            if any(_area(box, b) > 4.0 for b in elements):
                problems.append(f"{label} overlaps {n}")
    return problems
