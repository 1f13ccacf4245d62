"""Figure functions shared by ``bayesslr report`` and the notebooks under ``reports/``.

Each function takes the results of a sweep (:mod:`bayesslr.sweep.dataset`: a tree with one
group per method family, or a mapping ``family -> Dataset``) and returns a
:class:`matplotlib.figure.Figure`, or raises :class:`NothingToPlot` with the reason when the
results hold none of what it draws (a method family absent, a dimension with one value), so
callers degrade gracefully. Figures are built without pyplot (no global state, any backend);
how a family is drawn (line or markers, label, colour) is its registry entry's
:class:`~bayesslr.registry.PlotStyle`, so a family added later (GAMP, another sampler) is drawn
without a change here.

Reductions, stated once: seeds are averaged (error bars: standard error over seeds, or the
method's own ``stderr`` when there is one seed); ``lam`` is chosen per ``alpha`` without the
test data (:func:`~bayesslr.results.query.lam_choice`: ERM's ``lam = "replica"`` or
``"validation"``, else the replica theory's optimum among the grid run, the replica line at its
own optimum); finite-size estimators are drawn at every size (``D`` or ``sqrtND``) they
were run at, so the reader sees how the gap to the ``D -> inf`` theory closes; elsewhere a
method shows its largest size. Error bars are one standard error. A cell whose method says it
did not converge (output ``converged`` false on some seed) is drawn flagged: a hollow grey
marker with its own legend entry, and the figure's title says why (:func:`flag_note`).
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Iterable, Mapping

import numpy as np
import xarray as xr
from matplotlib.axes import Axes
from matplotlib.figure import Figure
from matplotlib.lines import Line2D
from matplotlib.ticker import (
    LogFormatterSciNotation,
    LogLocator,
    MaxNLocator,
    NullFormatter,
    ScalarFormatter,
)

from bayesslr.registry import PlotStyle, get_method, report_order
from bayesslr.results.query import (  # noqa: F401  (re-exported for report modules)
    SETTING_DIMS,
    SIZE_DIMS,
    START_STYLE,
    TRAJECTORY_DIMS,
    Results,
    _finite,
    _run_dims,
    _start_var,
    _text,
    bayes_risk_at,
    cross_zscore,
    curve,
    fixed_points,
    fmt_value,
    groups,
    hard_windows,
    is_trajectory,
    lam_choice,
    largest_size,
    methods_of,
    sampler_starts_of,
    seed_stats,
    select,
    settings,
    sizes_of,
    state_evolution_lines,
    stats_of,
    trajectory_groups,
    trajectory_runs,
)


class NothingToPlot(Exception):
    """The dataset holds nothing this figure draws; the message says why."""


# --------------------------------------------------------------------------------------------
# selection helpers
# --------------------------------------------------------------------------------------------




def style(method: str) -> PlotStyle:
    """The registry's plot style of a method's family (a default one for unknown families)."""
    try:
        return get_method(method).plot
    except Exception:  # a family not loaded here (a plugin): draw it plainly
        return PlotStyle()


def _label(m: str) -> str:
    return style(m).label_for(m)


def _color(m: str) -> str:
    return style(m).color_for(m)






















def title_of(sel: Mapping[str, object]) -> str:
    """Panel title of a setting (``delta = 0`` omitted)."""
    return ", ".join(fmt_value(k, v) for k, v in sel.items() if not (k == "delta" and v == 0))


def _size_label(size: Mapping[str, object]) -> str:
    if not size:
        return ""
    d, v = next(iter(size.items()))
    return f"D={int(v)}" if d == "D" else f"\u221a(ND)={float(v):g}"


MIN_WIDTH = 8.0  # inches: room for the title and a legend below a single panel


def _grid(n: int, *, cols: int = 3, width: float = 4.4, height: float = 3.5
          ) -> tuple[Figure, list[Axes]]:
    cols = max(1, min(n, cols))
    rows = math.ceil(n / cols)
    fig = Figure(figsize=(max(width * cols, MIN_WIDTH), height * rows + 1.0),
                 layout="constrained")
    axes = fig.subplots(rows, cols, squeeze=False).ravel().tolist()
    for ax in axes[n:]:
        ax.set_visible(False)
    return fig, axes[:n]




def _legend_below(fig: Figure, axes: Iterable[Axes], extra: Iterable = ()) -> None:
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


def _plain_log(ax: Axes, axis: str = "y") -> bool:
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


def _xjitter(x: np.ndarray, i: int, n: int) -> np.ndarray:
    """Offsets markers of ``n`` series drawn at the same ``x`` (by 2.5% of ``x`` each) so their
    error bars separate."""
    if n <= 1:
        return x
    return x * (1.0 + 0.025 * (i - (n - 1) / 2))


# --------------------------------------------------------------------------------------------
# population risk (docs/model.md §3; the paper's population figure, docs/paper.md)
# --------------------------------------------------------------------------------------------
def _collapse(mean: xr.DataArray, sem: xr.DataArray, keep: str
              ) -> tuple[xr.DataArray, xr.DataArray]:
    """Drop the dims other than ``keep`` that a population result does not depend on (older
    datasets broadcast it along ``alpha``): take the first index holding a finite value."""
    for d in [d for d in mean.dims if d != keep]:
        other = [o for o in mean.dims if o != d]
        finite = np.isfinite(mean).any(other).values if other else np.isfinite(mean).values
        i = int(np.argmax(finite))
        mean, sem = mean.isel({d: i}, drop=True), sem.isel({d: i}, drop=True)
    return mean, sem


def population_series(results: Results, dim: str
                      ) -> list[tuple[dict[str, object], dict[str, dict[str, np.ndarray]]]]:
    """The population results as series against ``dim`` (``"nu"`` or ``"L"``), one entry per
    setting of the other dims: ``(setting, {method: {"x", "mean", "se", "at_bound"}})``, only
    methods with at least two finite points (``x`` holds the coordinate values)."""
    ds = groups(results).get("population")
    methods = methods_of(ds, "population")
    if not methods or dim not in ds.dims or ds.sizes[dim] < 2:
        return []
    out = []
    for sel in settings(ds, keep=(dim,)):
        sub = ds.sel(sel)
        lines = {}
        for m in methods:
            one = largest_size(sub, m)
            mean, sem = stats_of(one)
            mean, sem = _collapse(mean.squeeze(drop=True), sem.squeeze(drop=True), keep=dim)
            bound, _ = stats_of(one, "at_bound")
            bound, _ = _collapse(bound.squeeze(drop=True), bound.squeeze(drop=True), keep=dim)
            conv, _ = stats_of(one, "converged")
            conv, _ = _collapse(conv.squeeze(drop=True), conv.squeeze(drop=True), keep=dim)
            if mean.ndim == 1 and int(np.isfinite(mean.values).sum()) >= 2:
                lines[m] = {"x": mean[dim].values, "mean": mean.values, "se": sem.values,
                            "at_bound": np.nan_to_num(bound.values) > 0.5
                            if bound.ndim == 1 else np.zeros(mean.shape, bool),
                            "flagged": np.asarray(conv.values < 0.5, bool)
                            if conv.ndim == 1 and conv.shape == mean.shape
                            else np.zeros(mean.shape, bool)}
        if lines:
            out.append((sel, lines))
    return out


def _L_positions(labels: np.ndarray) -> tuple[np.ndarray, list[str], float | None]:
    """x positions of length labels: fixed lengths at their value, length laws after them
    (one unit apart); returns (positions, tick labels, where the laws start)."""
    fixed = [int(s) for s in labels if "," not in str(s) and ":" not in str(s)]
    right = max(fixed) if fixed else 0
    pos, ticks, k = [], [], 0
    for s in labels:
        s = str(s)
        if "," in s or ":" in s:
            k += 1
            pos.append(right + 0.5 + k)
            ticks.append("U{" + s + "}" if ":" not in s else s)
        else:
            pos.append(int(s))
            ticks.append(s)
    return np.asarray(pos, float), ticks, (right + 0.75 if k and fixed else None)


def _population_vs(results: Results, dim: str) -> Figure:
    ds = groups(results).get("population")
    if not methods_of(ds, "population"):
        raise NothingToPlot("no population:* method in the results")
    if dim not in ds.dims or ds.sizes[dim] < 2:
        raise NothingToPlot(f"the population results have fewer than two values of {dim}")
    panels = population_series(results, dim)
    if not panels:
        raise NothingToPlot(f"no setting has population results at two values of {dim}")
    fig, axes = _grid(len(panels), cols=3)
    any_bound = False
    for ax, (sel, lines) in zip(axes, panels, strict=True):
        if dim == "L":  # positions of the lengths this panel has
            present = [str(v) for i, v in enumerate(next(iter(lines.values()))["x"])
                       if any(np.isfinite(s["mean"][i]) for s in lines.values())]
            pos, ticks, split = _L_positions(np.asarray(present))
            where = dict(zip(present, pos, strict=True))
        for m, s in lines.items():
            x = s["x"]
            if dim == "L":
                xs = np.array([where.get(str(v), np.nan) for v in x])
            else:
                xs = np.asarray(x, float)
            ok = np.isfinite(s["mean"])
            is_law = np.array(["," in str(v) or ":" in str(v) for v in x]) if dim == "L" \
                else np.zeros(len(x), bool)
            kw = ({"ls": "--", "lw": 2, "zorder": 3, "marker": "None"}
                  if m == "population:bayes" else {"marker": style(m).marker, "ms": 5})
            lab = "Bayes risk" if m == "population:bayes" else _label(m)
            line = ok & ~is_law
            # the activations side by side (equal risks, e.g. at L = 1, would hide each other)
            k = list(lines).index(m)
            if m != "population:bayes":
                off = k - (len(lines) - 1) / 2
                xs_line = xs + 0.06 * off if dim == "L" else xs * 1.06 ** off
            else:
                xs_line = xs
            cont = ax.errorbar(xs_line[line], s["mean"][line],
                               yerr=np.nan_to_num(s["se"][line]), color=_color(m), label=lab,
                               capsize=2, **kw)
            bad = line & s["flagged"]
            if bad.any():  # the optimiser did not converge there: a hollow grey marker instead
                cont.lines[0].set_markevery([i for i, b in enumerate(bad[line]) if not b])
                _draw_flagged(ax, xs_line[bad], s["mean"][bad], np.nan_to_num(s["se"][bad]),
                              style(m).marker if m != "population:bayes" else "o", lab, ms=6)
                _note_flagged(ax, "population", ["optimiser not converged"])
            law = ok & is_law
            if law.any():  # side by side, so that close values do not hide each other
                shift = 0.12 * (list(lines).index(m) - (len(lines) - 1) / 2)
                ax.errorbar(xs[law] + shift, s["mean"][law], yerr=np.nan_to_num(s["se"][law]),
                            color=_color(m), fmt="D" if m != "population:bayes" else "_",
                            ms=6 if m != "population:bayes" else 14, capsize=2, mew=2)
            bound = ok & s["at_bound"]
            if bound.any():
                any_bound = True
                ax.plot(xs_line[bound], s["mean"][bound], "v", mfc="none", mec=_color(m), ms=11,
                        mew=1.5, zorder=4)
        if dim == "L":
            ax.set_xticks(pos, ticks)
            if split is not None:
                ax.axvline(split, color="0.6", lw=0.8, ls=":")
            ax.set_xlabel("sequence length L (U{...}: variable length)")
        else:
            ax.set_xlabel("signal strength \u03bd")
        ax.set_ylabel("population excess risk")
        if dim == "nu" and all(np.nanmin(s["mean"]) > 0 for s in lines.values()):
            _plain_log(ax)
        if dim == "nu":  # nu from 0.25 to 10: a log axis spreads the small values apart
            _plain_log(ax, "x")
        ax.set_title(title_of(sel), fontsize=10)
        ax.grid(alpha=0.3)
    bound = Line2D([], [], ls="none", marker="v", mfc="none", mec="0.3", ms=9,
                   label="optimum at |k|\u2192\u221e: value is an upper bound")
    extra = [bound] if any_bound else []
    _legend_below(fig, axes, extra)
    what = "signal strength \u03bd" if dim == "nu" else "sequence length L"
    _suptitle(fig, f"Population excess risk against {what}")
    return fig


def population_vs_nu(results: Results) -> Figure:
    """Population excess risk of each activation (and the Bayes risk) against ``nu``, one panel
    per (variant, L); an open downward triangle marks a value at the optimiser's bound
    (``at_bound``: an upper bound on the infimum)."""
    return _population_vs(results, "nu")


def population_vs_L(results: Results) -> Figure:
    """Population excess risk of each activation (and the Bayes risk) against ``L``, one panel
    per (variant, nu): fixed lengths joined by lines, length laws (``U{1,2,3}``) as diamonds
    to the right of the dotted separator."""
    return _population_vs(results, "L")


# --------------------------------------------------------------------------------------------
# finite sample: error vs alpha (the paper's finite-sample figure)
# --------------------------------------------------------------------------------------------




def finite_sample_groups(results: Results) -> dict[str, xr.Dataset]:
    """The groups drawn against ``alpha``: families with an ``alpha`` dimension and a test
    error whose plot style is a line or markers (trajectory families are drawn elsewhere)."""
    g = groups(results)
    first = report_order("finite_sample")  # each family's ReportRole, from the registry
    order = [f for f in first if f in g] + [f for f in g if f not in first]
    out = {}
    for fam in order:
        ds = g[fam]
        if "alpha" in ds.dims and not is_trajectory(ds) and methods_of(ds, fam) and style(
                str(ds["method"].values[0])).kind in ("line", "marker"):
            out[fam] = ds
    return out








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


def _why(sub: xr.Dataset, flagged: xr.DataArray | None = None) -> list[str]:
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


def _note_flagged(ax: Axes, family: str, reasons: Iterable[str]) -> None:
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


def _suptitle(fig: Figure, title: str, **kw) -> None:
    """The figure title, with the flagged-cells note on a second line when there is one."""
    import textwrap

    note = flag_note(fig)
    if note:  # wrapped to the figure's width (about 11 characters an inch at this size)
        note = "\n".join(textwrap.wrap(note, max(40, int(fig.get_size_inches()[0] * 11))))
    fig.suptitle(title + (f"\n{note}" if note else ""), **kw)


def _draw_flagged(ax: Axes, x: np.ndarray, y: np.ndarray, e: np.ndarray | None, marker: str,
                  label: str, ms: float = 7.0) -> None:
    ax.errorbar(x, y, yerr=e, fmt=marker, color=FLAG_COLOR, mfc="none", mec=FLAG_COLOR,
                mew=1.5, ms=ms, capsize=3, label=f"{label}: not converged (flagged)", zorder=5)


def _draw_state_evolution(ax: Axes, se: Mapping[str, np.ndarray]) -> None:
    x, ok = se["alpha"], np.isfinite(se["best"])
    st = style("theory_bayes")
    ax.plot(x[ok], se["best"][ok], st.linestyle, color=st.color_for("theory_bayes"), lw=2,
            label=st.label_for("theory_bayes"), zorder=st.zorder)
    ax.fill_between(x[ok], (se["best"] - se["se"])[ok], (se["best"] + se["se"])[ok],
                    color="k", alpha=0.15, lw=0)
    bad = ok & np.asarray(se.get("flagged", np.zeros(x.shape, bool)), bool)
    if bad.any():
        _draw_flagged(ax, x[bad], se["best"][bad], se["se"][bad], "o",
                      st.label_for("theory_bayes"), ms=6)
        _note_flagged(ax, "theory_bayes", se.get("reasons", []))
    differ = np.nan_to_num(se["differ"]) > 0.5
    if differ.any():
        for name, ls, lab in (("informed", "-", "SE from the informed start"),
                              ("uninformed", "--", "SE from the uninformed start")):
            y = se[name]
            good = np.isfinite(y)
            ax.plot(x[good], y[good], ls, color="0.35", lw=1.2, label=lab, zorder=2)
    for lo, hi in hard_windows(x, np.nan_to_num(se["hard"])):
        ax.axvspan(lo, hi, color="C1", alpha=0.15, lw=0,
                   label="hard phase of the state evolution")


def _with_flags(se: dict[str, np.ndarray] | None, ds: xr.Dataset | None
                ) -> dict[str, np.ndarray] | None:
    """The state evolution with its flagged points (``converged`` false) and their reasons."""
    if se is None or ds is None or "converged" not in ds:
        return se
    sub = largest_size(ds, "theory_bayes")
    flag = flagged_of(sub)
    if flag is None:
        return se
    flag = flag.squeeze(drop=True)
    if flag.ndim != 1:
        return se
    return {**se, "flagged": np.asarray(flag.values, bool), "reasons": _why(sub)}


def _draw_markers(ax: Axes, ds: xr.Dataset, m: str, theory: xr.Dataset | None = None,
                  dodge: tuple[int, int, float] | None = None) -> None:
    """One marker family at every size it ran; ``dodge = (first slot, slots, unit)`` shifts
    each (method, size) series by ``unit`` along ``alpha`` so that series of a panel with
    equal values stand side by side (default: 2.5% of ``alpha`` between sizes)."""
    st = style(m)
    sizes = sizes_of(ds, m)
    for i, size in enumerate(sizes):
        sub = ds.sel({"method": m, **size})
        mean, sem = stats_of(sub, theory=theory)
        mean, sem = mean.squeeze(drop=True), sem.squeeze(drop=True)
        if mean.ndim != 1 or "alpha" not in mean.dims or not _finite(mean):
            continue
        x, y, e = mean["alpha"].values, mean.values, np.nan_to_num(sem.values)
        ok = np.isfinite(y)
        flag = flagged_of(sub, theory)
        bad = np.zeros(ok.shape, bool)
        if flag is not None:
            flag = flag.squeeze(drop=True)
            if flag.shape == ok.shape:
                bad = np.asarray(flag.values, bool) & ok
        rank = (i + 1) / len(sizes)  # smaller sizes lighter and smaller
        lab = _label(m) + (f", {_size_label(size)}" if len(sizes) > 1 or size else "")
        xj = (_xjitter(x, i, len(sizes)) if dodge is None
              else x + dodge[2] * (dodge[0] + i - (dodge[1] - 1) / 2))
        good = ok & ~bad
        if good.any():
            ax.errorbar(xj[good], y[good], yerr=e[good], fmt=st.marker, color=_color(m),
                        capsize=3, ms=4 + 3 * rank, alpha=0.45 + 0.55 * rank,
                        mfc=None if st.filled else "white", label=lab, zorder=st.zorder + 1)
        if bad.any():
            _draw_flagged(ax, xj[bad], y[bad], e[bad], st.marker, lab, ms=4 + 3 * rank)
            _note_flagged(ax, m.split(":")[0], _why(sub))
        if "oracle_error" in sub and m.split(":")[0] == "bayes_sampling":
            om, os_ = stats_of(sub, "oracle_error")
            om, os_ = om.squeeze(drop=True), os_.squeeze(drop=True)
            if om.ndim == 1 and _finite(om):
                ok = np.isfinite(om.values)
                ax.errorbar(xj[ok], om.values[ok],
                            yerr=np.nan_to_num(os_.values)[ok], fmt="x", color="0.45",
                            capsize=2, ms=6, zorder=st.zorder,
                            label="oracle (teacher known), same test set"
                            + (f", {_size_label(size)}" if len(sizes) > 1 else ""))


def _draw_line(ax: Axes, ds: xr.Dataset, m: str) -> None:
    st = style(m)
    sub = largest_size(ds, m)
    mean, sem = stats_of(sub)
    mean, sem = mean.squeeze(drop=True), sem.squeeze(drop=True)
    if mean.ndim != 1 or "alpha" not in mean.dims or not _finite(mean):
        return
    x, y, e = mean["alpha"].values, mean.values, np.nan_to_num(sem.values)
    ok = np.isfinite(y)
    lam = ""
    if "lam" in ds.dims:
        te = ds["test_error"].sel({"method": m})
        finite = np.isfinite(te).any([d for d in te.dims if d != "lam"]).values
        vals = [fmt_value("lam", v).split("=")[1] for v, f in
                zip(ds["lam"].values.tolist(), finite, strict=True) if f]
        lam = (f", \u03bb={vals[0]}" if len(vals) == 1 and vals[0] not in TUNED_LABELS
               else ", \u03bb optimal")
    ax.plot(x[ok], y[ok], st.linestyle, color=_color(m), label=_label(m) + lam,
            lw=2 if st.color == "k" else 1.6, zorder=st.zorder, marker="." if ok.sum() < 4
            else None)
    ax.fill_between(x[ok], (y - e)[ok], (y + e)[ok], color=_color(m), alpha=0.15, lw=0)
    flag = flagged_of(sub)
    if flag is not None:
        flag = flag.squeeze(drop=True)
        if flag.shape == ok.shape and (bad := ok & np.asarray(flag.values, bool)).any():
            _draw_flagged(ax, x[bad], y[bad], e[bad], "o", _label(m), ms=6)
            _note_flagged(ax, m.split(":")[0], _why(sub))


# lam labels of a theory's optimum (one spelling in the figures: "lam optimal")
TUNED_LABELS = ("optimal", "auto", "replica", "validation")


_RISK_CACHE: dict[tuple, tuple[float, float]] = {}


def bayes_risk_line(results: Results, sel: Mapping[str, object]
                    ) -> tuple[float, float, str] | None:
    """The Bayes risk (``alpha -> inf``) at a setting with its standard error and where it
    comes from: the results' ``population:bayes`` when they hold it, else computed here by
    Monte Carlo (:func:`bayesslr.population.method.bayes_risk`, 200 000 samples, seed 0; a
    second or two), so that every panel of the finite-sample figure has its limit."""
    have = bayes_risk_at(results, sel)
    if have is not None:
        return have[0], have[1], "population"
    try:
        from bayesslr.core.task import make_task
        from bayesslr.population.method import bayes_risk

        L = str(sel.get("L", ""))
        key = (sel.get("variant"), L, float(sel.get("nu", math.nan)))
        if key not in _RISK_CACHE:
            law = "," in L or ":" in L
            task = make_task(str(sel["variant"]), L=3 if law else int(L),
                             L_dist=L if law else None, nu=float(sel["nu"]), delta=0.0)
            r = bayes_risk(task, samples=200_000, seed=0)
            _RISK_CACHE[key] = (float(r.excess_risk), float(r.stderr))
        v, e = _RISK_CACHE[key]
        return v, e, "computed"
    except Exception:  # a setting the population method cannot take: no line
        return None


def error_vs_alpha(results: Results) -> Figure:
    """Test excess error against ``alpha``, one panel per (variant, L, nu, delta): the
    Bayes-optimal state evolution (both branches where they differ, the hard window shaded),
    replica lines (``theory_erm:*`` at their optimal ``lam`` or the ``lam`` run), finite-``D``
    markers with error bars at every size run (``erm:*`` at the ``lam`` chosen without the
    test data, ``bayes_sampling`` with its oracle, ``amp``, ...) and the Bayes risk
    (``population:bayes``, the ``alpha -> inf`` limit; computed here when the results lack
    it) in every panel; each family drawn with its registry plot style; flagged cells hollow
    grey."""
    fams = finite_sample_groups(results)
    if not fams:
        raise NothingToPlot("no finite-sample method (erm, theory_erm, bayes_sampling, "
                            "theory_bayes, ...) in the results")
    theory_all = groups(results).get("theory_erm")
    panels = []
    for sel in settings(fams.values(), keep=("alpha",)):
        subs = {f: s for f, ds in fams.items() if (s := select(ds, sel)) is not None}
        subs = {f: s for f, s in subs.items() if methods_of(s, f)}
        if subs:
            panels.append((sel, subs, bayes_risk_line(results, sel)))
    if not panels:
        raise NothingToPlot("no setting has finite-sample results")
    fig, axes = _grid(len(panels), cols=3, width=5.0, height=4.0)
    for ax, (sel, subs, limit) in zip(axes, panels, strict=True):
        theory = select(theory_all, sel) if theory_all is not None else None
        # every marker series of the panel (method x size) side by side, 1.2% of the alpha
        # range apart: estimators with equal errors at small alpha would hide each other
        series = [(f, m) for f, sub in subs.items() for m in methods_of(sub, f)
                  if f != "theory_bayes" and style(m).kind != "line"]
        slots = [len(sizes_of(subs[f], m)) for f, m in series]
        alphas = np.concatenate([np.asarray(sub["alpha"].values, float)
                                 for sub in subs.values() if "alpha" in sub.dims])
        unit = 0.012 * float(np.ptp(alphas)) if alphas.size > 1 else 0.0
        for fam, sub in subs.items():
            for m in methods_of(sub, fam):
                if fam == "theory_bayes":
                    se = _with_flags(state_evolution_lines(sub), sub)
                    if se is not None:
                        _draw_state_evolution(ax, se)
                elif style(m).kind == "line":
                    _draw_line(ax, sub, m)
                else:
                    k = series.index((fam, m))
                    _draw_markers(ax, sub, m, theory, (sum(slots[:k]), sum(slots), unit))
        if limit is not None:
            ax.axhline(limit[0], color="k", ls=":", lw=1.2,
                       label="Bayes risk (\u03b1\u2192\u221e, population"
                       + (", computed by the report)" if limit[2] == "computed" else ")"))
            ax.axhspan(limit[0] - limit[1], limit[0] + limit[1], color="k", alpha=0.08, lw=0)
        ax.set_xlabel("sample ratio \u03b1 = N/D")
        ax.set_ylabel("test excess error")
        ax.set_title(title_of(sel), fontsize=10)
        ax.grid(alpha=0.3)
    _legend_below(fig, axes)
    _suptitle(fig, "Test excess error against the sample ratio \u03b1")
    return fig


# --------------------------------------------------------------------------------------------
# gradient dynamics (docs/estimators.md, docs/paper.md: the link with gradient-based algorithms)
# --------------------------------------------------------------------------------------------
TRAJECTORY_PANELS = (("m_k", "m_k = k\u00b7k*/D"), ("q_k", "q_k = |k|\u00b2/D"),
                     ("m_v", "m_v = v\u00b7v*/D"), ("q_v", "q_v = |v|\u00b2/D"),
                     ("cross", "cross overlaps (z-score)"), ("test_error", "test excess error"))
INIT_LINESTYLES = {"informed": "-", "random": "--"}
# the two fixed points GD is compared with, apart from the activations' colours
REPLICA_COLOR, LBFGS_COLOR = "k", "C3"














def gd_trajectories(results: Results) -> Figure:
    """Overlaps and test error along gradient-descent / Adam trajectories (``gd`` family):
    one row of panels per setting, line style by start (informed solid, random dashed),
    colour by activation, against the ERM fixed point at the same ``alpha`` and ``lam``: the
    replica prediction (black dotted line, band one s.e.) and L-BFGS ERM on the same data
    (red dash-dot: the same seed, the statistic the dynamics verdict compares with). The
    cross-overlap panel shows the largest of ``|k.v*|``,
    ``|v.k*|``, ``|k.v|`` in units of its finite-``D`` noise level (dashed at 4): the
    symmetric manifold is invariant under GD on the population (docs/paper.md)."""
    runs = trajectory_runs(results)
    if not runs:
        raise NothingToPlot("no trajectory family (gd) in the results")
    keys = []
    for r in runs:
        k = tuple(r["setting"].items())
        if k not in keys:
            keys.append(k)
    n = len(TRAJECTORY_PANELS)
    cols = 3
    rows_per = math.ceil(n / cols)
    fig = Figure(figsize=(4.4 * cols, 3.1 * rows_per * len(keys) + 1.1), layout="constrained")
    sub_figs = fig.subfigures(len(keys), 1, squeeze=False).ravel()
    all_axes: list[Axes] = []
    for sf, key in zip(sub_figs, keys, strict=True):
        setting = dict(key)
        axes = sf.subplots(rows_per, cols, squeeze=False).ravel().tolist()
        all_axes += axes
        D = float(setting.get("D", math.nan))
        for r in [r for r in runs if tuple(r["setting"].items()) == key]:
            color = _color(str(r["method"]))
            ls = INIT_LINESTYLES.get(str(r["init"]), ":")
            lab = f"{str(r['method']).partition(':')[2]} GD, {r['init']} start"
            for ax, (var, _) in zip(axes, TRAJECTORY_PANELS, strict=False):
                y = cross_zscore(r, D) if var == "cross" else r.get(var)
                if y is None:
                    continue
                ax.plot(r["step"], y, ls, color=color, lw=1.5, label=lab,
                        alpha=0.9 if r["seed"] == runs[0]["seed"] else 0.5)
            fp = fixed_points(results, r)
            act = str(r["method"]).partition(":")[2]
            for ax, (var, _) in zip(axes, TRAJECTORY_PANELS, strict=False):
                if "replica" in fp and var in fp["replica"]:
                    v, e = fp["replica"][var], fp["replica"].get(f"{var}_se", 0.0)
                    ax.axhline(v, color=REPLICA_COLOR, ls=":", lw=1.5,
                               label=f"{act} replica fixed point (D\u2192\u221e, band 1 s.e.)")
                    ax.axhspan(v - e, v + e, color=REPLICA_COLOR, alpha=0.12, lw=0)
                # the statistic the verdict compares with: L-BFGS on the same data (same
                # seed), not the mean over seeds
                if "lbfgs_seed" in fp and var in fp["lbfgs_seed"]:
                    ax.axhline(fp["lbfgs_seed"][var], color=LBFGS_COLOR, ls="-.", lw=1.2,
                               label=f"{act} L-BFGS ERM on the same data (seed {r['seed']})")
        first = min((float(r["step"][1]) for r in runs if len(r["step"]) > 1), default=1.0)
        for ax, (var, lab) in zip(axes, TRAJECTORY_PANELS, strict=False):
            # early dynamics (the escape from a random start) on a log scale past one record
            ax.set_xscale("symlog", linthresh=first, linscale=0.5)
            ax.set_xlim(0, max(float(r["step"][-1]) for r in runs))
            ax.set_xlabel(f"optimiser step (log scale above {first:g})")
            ax.set_ylabel(lab)
            ax.grid(alpha=0.3)
            if var == "cross":
                ax.axhline(4.0, color="0.5", ls="--", lw=0.8)
                ax.set_ylim(bottom=0)
        for ax in axes[n:]:
            ax.set_visible(False)
        sf.suptitle(title_of(setting), fontsize=10)
    _legend_below(fig, all_axes)
    fig.suptitle("Gradient-descent trajectories against the ERM fixed point", fontsize=12)
    return fig


# --------------------------------------------------------------------------------------------
# sampler health (docs/model.md §6)
# --------------------------------------------------------------------------------------------




def _start_series(sub: xr.Dataset, start: str, var: str
                  ) -> tuple[np.ndarray, np.ndarray, np.ndarray] | None:
    """(alpha, seed mean, s.e.) of one start's ``var`` in a setting, at the largest size; the
    main start's value only where the cell's main start is ``start``."""
    name = _start_var(sub, start, var)
    if name is None:
        return None
    da = sub[name]
    if name == var and "init" in sub:  # the main run's value: only cells whose init is start
        da = da.where(sub["init"] == start)
    se = None
    if var == "test_error" and name == var and "stderr" in sub:
        se = sub["stderr"]
    mean, sem = seed_stats(da, se)
    mean, sem = mean.squeeze(drop=True), sem.squeeze(drop=True)
    if mean.ndim != 1 or "alpha" not in mean.dims or not _finite(mean):
        return None
    return mean["alpha"].values, mean.values, np.nan_to_num(sem.values)


def _sampler_panels(results: Results) -> tuple[xr.Dataset, list[str], list[dict]]:
    ds = groups(results).get("bayes_sampling")
    methods = methods_of(ds, "bayes_sampling")
    if not methods:
        raise NothingToPlot("no bayes_sampling results in the results")
    if "alpha" not in ds.dims:
        raise NothingToPlot("the bayes_sampling results have no alpha dimension")
    return ds, methods, settings(ds, keep=("alpha",))


SAMPLER_DIAGNOSTICS = (
    ("r_hat_max", "largest split R-hat", "auto"),
    ("ess_per_grad", "ESS per gradient evaluation", "log"),
    ("divergences", "divergent transitions", "linear"),
    ("nishimori_gap", "Nishimori gap max|m \u2212 q|", "linear"),
)


def _flagged_alphas(sub: xr.Dataset) -> np.ndarray:
    """The ``alpha`` of a sampler setting whose cells (some seed) did not converge."""
    flag = flagged_of(sub)
    if flag is None:
        return np.array([])
    flag = flag.squeeze(drop=True)
    if flag.ndim != 1 or "alpha" not in flag.dims:
        return np.array([])
    return flag["alpha"].values[np.asarray(flag.values, bool)]


def _sampler_points(ax: Axes, x: np.ndarray, y: np.ndarray, e: np.ndarray, mk: str, col: str,
                    fill: str, label: str, flagged: np.ndarray) -> bool:
    """Seed means with their standard errors, cells that did not converge hollow grey;
    returns whether any was flagged."""
    ok = np.isfinite(y)
    bad = ok & np.isin(x, flagged)
    good = ok & ~bad
    if good.any():
        ax.errorbar(x[good], y[good], yerr=e[good], fmt=mk, color=col, mfc=fill, ms=7,
                    capsize=2, label=label, ls="none")
    if bad.any():
        flag_label = label if label.startswith("_") else label + ": not converged (flagged)"
        ax.errorbar(x[bad], y[bad], yerr=e[bad], fmt=mk, color=FLAG_COLOR, mfc="none",
                    mec=FLAG_COLOR, mew=1.5, ms=7, capsize=2, label=flag_label, ls="none")
    return bool(bad.any())


def _nishimori_band(ax: Axes, sub: xr.Dataset) -> None:
    """Two standard deviations of ``m - q`` that the Nishimori identity allows at the seed-mean
    overlaps (as the Nishimori verdict computes them: ``sqrt(q (1 - m + 2 sqrt(2/D)) / D)``,
    the larger of ``k`` and ``v``)."""
    if "D" not in sub.coords:
        return
    D = float(np.asarray(sub["D"].values).ravel()[0])
    sds = []
    for a in ("k", "v"):
        if f"m_{a}" not in sub or f"q_{a}" not in sub:
            continue
        m, _ = seed_stats(sub[f"m_{a}"])
        q, _ = seed_stats(sub[f"q_{a}"])
        m, q = m.squeeze(drop=True), q.squeeze(drop=True)
        if m.ndim != 1 or "alpha" not in m.dims:
            continue
        var = np.maximum(1.0 - m.values + 2.0 * math.sqrt(2.0 / D), 0.0)
        sds.append(np.sqrt(np.maximum(q.values, 0.0) * var / D))
    if not sds:
        return
    x = m["alpha"].values
    sd = np.nanmax(np.vstack(sds), axis=0)
    ok = np.isfinite(sd)
    if ok.sum() >= 1:
        ax.fill_between(x[ok], 0.0, 2.0 * sd[ok], color="C2", alpha=0.18, lw=0, step="mid",
                        label="expected scatter of |m \u2212 q| (2 s.d., Nishimori)")


def sampler_diagnostics(results: Results) -> Figure:
    """R-hat (per start, and pooled over starts), bulk and tail ESS per gradient evaluation,
    divergent transitions and the Nishimori gap of ``bayes_sampling`` against ``alpha``: one
    row per setting, marker by start (teacher square, random circle, anneal triangle), each
    the mean over seeds with its standard error (seeds summarised, not drawn over each
    other); the R-hat panel marks the 1.01 threshold of the convergence verdict, the
    Nishimori panel the scatter the identity allows; cells that did not converge hollow
    grey."""
    ds, methods, sels = _sampler_panels(results)
    rows = []
    for sel in sels:
        sub = largest_size(select(ds, sel), methods[0])
        if _finite(sub["test_error"]):
            rows.append((sel, sub))
    if not rows:
        raise NothingToPlot("no bayes_sampling setting has results")
    cols = len(SAMPLER_DIAGNOSTICS)
    fig = Figure(figsize=(4.0 * cols, 3.3 * len(rows) + 1.4), layout="constrained")
    axes_all = fig.subplots(len(rows), cols, squeeze=False)
    drawn: list[Axes] = []
    for (sel, sub), axes in zip(rows, axes_all, strict=True):
        starts = sampler_starts_of(sub)
        flagged = _flagged_alphas(sub)
        any_flag = False
        for ax, (var, lab, scale) in zip(axes, SAMPLER_DIAGNOSTICS, strict=True):
            for j, start in enumerate(starts):
                mk, col = START_STYLE.get(start, ("D", "C4"))
                series = []
                if var == "ess_per_grad":
                    bulk = _start_series(sub, start, "ess_bulk_min")
                    tail = _start_series(sub, start, "ess_tail_min")
                    grads = _start_series(sub, start, "grad_evals")
                    if grads is not None:
                        for s, fill, name in ((bulk, col, f"{start} start"),
                                              (tail, "white", "_tail")):
                            if s is not None:
                                series.append((s[0], s[1] / grads[1], s[2] / grads[1], fill,
                                               name))
                else:
                    s = _start_series(sub, start, var)
                    if s is not None:
                        series.append((s[0], s[1], s[2], col, f"{start} start"))
                for x, y, e, fill, label in series:
                    any_flag |= _sampler_points(ax, _xjitter(x, j, len(starts)), y, e, mk,
                                                col, fill, label, _xjitter(flagged, j,
                                                                           len(starts)))
            if var == "r_hat_max":
                if "r_hat_max_pooled" in sub:
                    mean, sem = seed_stats(sub["r_hat_max_pooled"])
                    mean, sem = mean.squeeze(drop=True), sem.squeeze(drop=True)
                    if mean.ndim == 1 and _finite(mean):
                        ok = np.isfinite(mean.values)
                        ax.errorbar(mean["alpha"].values[ok], mean.values[ok],
                                    yerr=np.nan_to_num(sem.values)[ok], fmt="*", color="C4",
                                    ms=11, capsize=2, label="pooled over all starts",
                                    ls="none")
                ax.axhline(1.01, color="r", ls="--", lw=1, label="R-hat threshold 1.01")
            if var == "divergences":
                top = max([1.0] + [float(np.nanmax(ln.get_ydata())) for ln in ax.lines
                                   if np.isfinite(ln.get_ydata()).any()])
                ax.set_ylim(-0.05 * top - 0.2, 1.1 * top + 0.2)
                ax.yaxis.set_major_locator(MaxNLocator(integer=True))
            if var == "nishimori_gap":
                _nishimori_band(ax, sub)
                ax.axhline(0.0, color="0.5", lw=0.8)
            if scale in ("log", "auto"):
                _plain_log(ax)
            ax.set_xlabel("sample ratio \u03b1")
            ax.set_ylabel(lab)
            ax.set_title(title_of(sel), fontsize=9)
            ax.grid(alpha=0.3)
            drawn.append(ax)
        if any_flag:
            _note_flagged(axes[0], "bayes_sampling", _why(sub))
    _legend_below(fig, drawn, [
        Line2D([], [], ls="none", marker="s", color="0.4", label="ESS: filled bulk, open tail",
               mfc="0.4"),
    ])
    _suptitle(fig, "NUTS health against the sample ratio \u03b1 (seed means \u00b1 1 s.e.)")
    return fig


def sampler_starts(results: Results) -> Figure:
    """Test excess error of the posterior mean from each start (teacher, random, anneal)
    against ``alpha``, one column per setting, over the Bayes-optimal state evolution (both
    branches, hard window shaded), every point with its error bar (the seed spread, or with
    one seed the teacher start's test-set error: the same test set); below, the mean
    log-likelihood gap per sample (teacher start minus the worst other start) with its error
    bar over seeds, on an axis of at least +-0.05 nats/sample so that noise does not look
    like a gap, and the pooled R-hat: where a start is trapped."""
    ds, methods, sels = _sampler_panels(results)
    cols = []
    for sel in sels:
        sub = largest_size(select(ds, sel), methods[0])
        starts = sampler_starts_of(sub)
        if len(starts) > 1 or "log_lik_gap" in sub and _finite(sub["log_lik_gap"]):
            cols.append((sel, sub, starts))
    if not cols:
        raise NothingToPlot("no bayes_sampling cell ran more than one start (option init = "
                            "'teacher,random,anneal')")
    tb = groups(results).get("theory_bayes")
    fig = Figure(figsize=(max(5.5 * len(cols), MIN_WIDTH), 7.8), layout="constrained")
    axes = fig.subplots(2, len(cols), squeeze=False, height_ratios=(2.0, 1.0))
    for j, (sel, sub, starts) in enumerate(cols):
        ax, ax2 = axes[0, j], axes[1, j]
        tsub = select(tb, sel) if tb is not None else None
        se = _with_flags(state_evolution_lines(tsub), tsub) if tsub is not None else None
        if se is not None:
            _draw_state_evolution(ax, se)
        flagged = _flagged_alphas(sub)
        main = _start_series(sub, starts[0], "test_error")
        any_flag = False
        for i, start in enumerate(starts):
            s = _start_series(sub, start, "test_error")
            if s is None:
                continue
            x, y, e = s
            if start != starts[0] and main is not None and not np.any(e > 0):
                # one seed: the other starts' error bar is the main start's test-set error
                # (the same test set and estimator)
                e = np.interp(x, main[0], main[2])
            mk, col = START_STYLE.get(start, ("D", "C4"))
            any_flag |= _sampler_points(ax, _xjitter(x, i, len(starts)), y, e, mk, col, col,
                                        f"NUTS posterior mean, {start} start",
                                        _xjitter(flagged, i, len(starts)))
        if any_flag:
            _note_flagged(ax, "bayes_sampling", _why(sub))
        ax.set_xlabel("sample ratio \u03b1")
        ax.set_ylabel("test excess error")
        ax.set_title(title_of(sel), fontsize=10)
        ax.grid(alpha=0.3)
        top = 0.05
        if "log_lik_gap" in sub:
            mean, sem = seed_stats(sub["log_lik_gap"])
            mean, sem = mean.squeeze(drop=True), sem.squeeze(drop=True)
            if mean.ndim == 1 and _finite(mean):
                ok = np.isfinite(mean.values)
                n = int(sub["log_lik_gap"].notnull().sum("seed").max()) if "seed" in \
                    sub["log_lik_gap"].dims else 1
                e = np.nan_to_num(sem.values)
                ax2.errorbar(mean["alpha"].values[ok], mean.values[ok], yerr=e[ok], fmt="o",
                             color="C0", ms=7, capsize=3, ls="none",
                             label="log-likelihood gap, teacher minus other start"
                             + (" (1 seed: no error bar)" if n < 2 else
                                f" (mean \u00b1 s.e. of {n} seeds)"))
                top = max(top, 1.3 * float(np.nanmax(np.abs(mean.values[ok]) + e[ok])))
        ax2.set_ylim(-top, top)
        ax2.axhline(0.0, color="0.5", lw=0.8)
        if se is not None:
            for lo, hi in hard_windows(se["alpha"], np.nan_to_num(se["hard"])):
                ax2.axvspan(lo, hi, color="C1", alpha=0.15, lw=0)
        ax2.set_xlim(ax.get_xlim())
        ax2.set_xlabel("sample ratio \u03b1")
        ax2.set_ylabel("log-lik gap (nats/sample)")
        ax2.grid(alpha=0.3)
    _legend_below(fig, axes.ravel())
    _suptitle(fig, "Teacher, random and annealed NUTS starts against the state evolution")
    return fig


# --------------------------------------------------------------------------------------------
# legibility (checked by the tests on every figure)
# --------------------------------------------------------------------------------------------
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


def is_reference(results: Results) -> bool:
    """Whether ``results`` are the shipped reference (:func:`bayesslr.load_reference`: its root
    attributes carry ``reference``)."""
    return isinstance(results, xr.DataTree) and "reference" in results.attrs


def draw(which: str | Callable[[Results], Figure], results: Results) -> Figure:
    """Draw one figure (a name of :data:`FIGURES` or a figure function); a figure drawn from
    the shipped reference says so in its title ("shipped reference"), so it is never taken for
    the user's own results."""
    fn = FIGURES[which] if isinstance(which, str) else which
    fig = fn(results)
    title = getattr(fig, "_suptitle", None)
    if is_reference(results):
        if title is None:
            fig.suptitle("shipped reference results")
        else:
            first, nl, rest = title.get_text().partition("\n")
            title.set_text(f"{first} (shipped reference){nl}{rest}")
    return fig


FIGURES: dict[str, Callable[[Results], Figure]] = {
    "population_vs_nu": population_vs_nu,
    "population_vs_L": population_vs_L,
    "error_vs_alpha": error_vs_alpha,
    "gd_trajectories": gd_trajectories,
    "sampler_diagnostics": sampler_diagnostics,
    "sampler_starts": sampler_starts,
}

# the figures each report notebook draws (``bayesslr report`` draws them all)
THEMES: dict[str, tuple[str, ...]] = {
    "population": ("population_vs_nu", "population_vs_L"),
    "finite_sample": ("error_vs_alpha",),
    "dynamics": ("gd_trajectories",),
    "sampler_health": ("sampler_diagnostics", "sampler_starts"),
}

