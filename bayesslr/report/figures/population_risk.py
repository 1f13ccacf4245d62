"""The population figures (docs/model.md §3; the paper's population figure, docs/paper.md):
population excess risk of each activation and the Bayes risk against ``nu`` or ``L``."""

from __future__ import annotations

import math

import numpy as np
import xarray as xr
from matplotlib.figure import Figure
from matplotlib.lines import Line2D

from bayesslr.report.figures.style import (
    NothingToPlot,
    color_of,
    draw_flagged,
    figure_title,
    label_of,
    legend_below,
    note_flagged,
    panel_grid,
    plain_log,
    style,
    title_of,
)
from bayesslr.results.query import Results, groups, largest_size, methods_of, settings, stats_of


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
    setting of the other dims: ``(setting, {method: {"x", "mean", "se", "at_bound",
    "flagged", "paired", "paired_se"}})``, only methods with at least two finite points
    (``x`` holds the coordinate values; ``paired``: the excess over the Bayes risk on the
    activation's own rows, ``excess_over_bayes``, NaN in files older than population
    version 4)."""
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
            paired, paired_se = stats_of(one, "excess_over_bayes")
            paired, paired_se = _collapse(paired.squeeze(drop=True),
                                          paired_se.squeeze(drop=True), keep=dim)
            if mean.ndim == 1 and int(np.isfinite(mean.values).sum()) >= 2:
                lines[m] = {"x": mean[dim].values, "mean": mean.values, "se": sem.values,
                            "at_bound": np.nan_to_num(bound.values) > 0.5
                            if bound.ndim == 1 else np.zeros(mean.shape, bool),
                            "flagged": np.asarray(conv.values < 0.5, bool)
                            if conv.ndim == 1 and conv.shape == mean.shape
                            else np.zeros(mean.shape, bool),
                            "paired": _same_shape(paired, mean),
                            "paired_se": _same_shape(paired_se, mean)}
        if lines:
            out.append((sel, lines))
    return out


def _same_shape(v: xr.DataArray, like: xr.DataArray) -> np.ndarray:
    """``v``'s values where they line up with ``like``'s, NaN otherwise."""
    if v.ndim == like.ndim and v.shape == like.shape:
        return np.asarray(v.values, float)
    return np.full(like.shape, np.nan)


def drawn_values(lines: dict[str, dict[str, np.ndarray]]
                 ) -> tuple[dict[str, tuple[np.ndarray, np.ndarray]], bool]:
    """What the population figures draw for each method of one panel, and whether any point
    is unpaired: the Bayes risk as measured; an activation at the Bayes risk plus its excess
    over it paired on the activation's own rows (``excess_over_bayes``, never below zero, so
    no activation can appear below the Bayes risk by Monte Carlo noise), with the paired
    standard error; where a point has no paired value (files older than population version
    4, or no Bayes risk in the panel) the activation's own estimate, unpaired.

    Examples
    --------
    >>> nan = float("nan")
    >>> se = np.array([0.01, 0.01])
    >>> lines = {"population:bayes": {"mean": np.array([0.30, 0.20]), "se": se},
    ...          "population:softmax": {"mean": np.array([0.29, 0.25]), "se": se,
    ...                                 "paired": np.array([1e-5, nan]),
    ...                                 "paired_se": np.array([1e-7, nan])}}
    >>> drawn, unpaired = drawn_values(lines)
    >>> [round(float(v), 5) for v in drawn["population:softmax"][0]], unpaired
    ([0.30001, 0.25], True)
    """
    bayes = lines.get("population:bayes")
    out, unpaired = {}, False
    for m, s in lines.items():
        y, e = np.asarray(s["mean"], float), np.asarray(s["se"], float)
        if m != "population:bayes":
            paired = np.asarray(s.get("paired", np.full(y.shape, np.nan)), float)
            ok = np.isfinite(paired)
            if bayes is not None:
                ok &= np.isfinite(bayes["mean"])
                y = np.where(ok, np.asarray(bayes["mean"], float) + paired, y)
                e = np.where(ok, np.asarray(s.get("paired_se", e), float), e)
            else:
                ok[:] = False
            unpaired |= bool((np.isfinite(s["mean"]) & ~ok).any())
        out[m] = (y, e)
    return out, unpaired


def _closest_first(drawn: dict[str, tuple[np.ndarray, np.ndarray]]) -> dict[str, int]:
    """The activations ranked by their mean distance to the Bayes risk in one panel (0: the
    closest), where the panel has one; else in their order."""
    acts = [m for m in drawn if m != "population:bayes"]
    bayes = drawn.get("population:bayes")
    if bayes is not None:
        def gap(m: str) -> float:
            d = drawn[m][0] - bayes[0]
            return float(np.nanmean(d)) if np.isfinite(d).any() else math.inf
        acts.sort(key=gap)
    return {m: i for i, m in enumerate(acts)}


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
    fig, axes = panel_grid(len(panels), cols=3)
    any_bound = any_unpaired = False
    for ax, (sel, lines) in zip(axes, panels, strict=True):
        drawn, unpaired = drawn_values(lines)
        any_unpaired |= unpaired
        shift_rank = _closest_first(drawn)
        if dim == "L":  # positions of the lengths this panel has
            present = [str(v) for i, v in enumerate(next(iter(lines.values()))["x"])
                       if any(np.isfinite(s["mean"][i]) for s in lines.values())]
            pos, ticks, split = _L_positions(np.asarray(present))
            where = dict(zip(present, pos, strict=True))
        for m, s in lines.items():
            x = s["x"]
            mean, se = drawn[m]
            if dim == "L":
                xs = np.array([where.get(str(v), np.nan) for v in x])
            else:
                xs = np.asarray(x, float)
            ok = np.isfinite(mean)
            is_law = np.array(["," in str(v) or ":" in str(v) for v in x]) if dim == "L" \
                else np.zeros(len(x), bool)
            kw = ({"ls": "--", "lw": 2, "zorder": 3, "marker": "None"}
                  if m == "population:bayes" else {"marker": style(m).marker, "ms": 5})
            lab = "Bayes risk" if m == "population:bayes" else label_of(m)
            line = ok & ~is_law
            # the activations side by side (equal risks, e.g. at L = 1, would hide each
            # other): the one closest to the Bayes risk at its own x, the others moved the
            # way the Bayes risk rises (left against L, right against nu), so that a shift
            # along the curve can only make a point read as further above it, never below
            if m == "population:bayes":
                xs_line = xs
            elif dim == "L":
                xs_line = xs - 0.08 * shift_rank[m]
            else:
                xs_line = xs * 1.06 ** shift_rank[m]
            cont = ax.errorbar(xs_line[line], mean[line],
                               yerr=np.nan_to_num(se[line]), color=color_of(m), label=lab,
                               capsize=2, **kw)
            bad = line & s["flagged"]
            if bad.any():  # the optimiser did not converge there: a hollow grey marker instead
                cont.lines[0].set_markevery([i for i, b in enumerate(bad[line]) if not b])
                draw_flagged(ax, xs_line[bad], mean[bad], np.nan_to_num(se[bad]),
                              style(m).marker if m != "population:bayes" else "o", lab, ms=6)
                note_flagged(ax, "population", ["optimiser not converged"])
            law = ok & is_law
            if law.any():  # side by side, so that close values do not hide each other
                shift = 0.12 * (list(lines).index(m) - (len(lines) - 1) / 2)
                ax.errorbar(xs[law] + shift, mean[law], yerr=np.nan_to_num(se[law]),
                            color=color_of(m), fmt="D" if m != "population:bayes" else "_",
                            ms=6 if m != "population:bayes" else 14, capsize=2, mew=2)
            bound = ok & s["at_bound"]
            if bound.any():
                any_bound = True
                ax.plot(xs_line[bound], mean[bound], "v", mfc="none", mec=color_of(m), ms=11,
                        mew=1.5, zorder=4)
        if dim == "L":
            ax.set_xticks(pos, ticks)
            if split is not None:
                ax.axvline(split, color="0.6", lw=0.8, ls=":")
            ax.set_xlabel("sequence length L (U{...}: variable length)")
        else:
            ax.set_xlabel("signal strength \u03bd")
        ax.set_ylabel("population excess risk")
        if dim == "nu" and all(np.nanmin(v[0]) > 0 for v in drawn.values()):
            plain_log(ax)
        if dim == "nu":  # nu from 0.25 to 10: a log axis spreads the small values apart
            plain_log(ax, "x")
        ax.set_title(title_of(sel), fontsize=10)
        ax.grid(alpha=0.3)
    bound = Line2D([], [], ls="none", marker="v", mfc="none", mec="0.3", ms=9,
                   label="optimum at |k|\u2192\u221e: value is an upper bound")
    extra = [bound] if any_bound else []
    legend_below(fig, axes, extra)
    what = "signal strength \u03bd" if dim == "nu" else "sequence length L"
    how = "activations drawn at the Bayes risk + their paired excess over it"
    if any_unpaired:
        how += "\n(unpaired where a point has no paired value: an older file)"
    figure_title(fig, f"Population excess risk against {what}\n{how}")
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
