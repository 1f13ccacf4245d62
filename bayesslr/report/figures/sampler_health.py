"""The sampler-health figures (docs/model.md §6): NUTS diagnostics against ``alpha`` and the
test error of each start against the state evolution."""

from __future__ import annotations

import math

import numpy as np
import xarray as xr
from matplotlib.axes import Axes
from matplotlib.figure import Figure
from matplotlib.lines import Line2D
from matplotlib.ticker import MaxNLocator

from bayesslr.report.figures.error_vs_alpha import draw_state_evolution, with_flags
from bayesslr.report.figures.style import (
    FLAG_COLOR,
    MIN_WIDTH,
    NothingToPlot,
    figure_title,
    flag_reasons,
    flagged_of,
    legend_below,
    note_flagged,
    plain_log,
    title_of,
    xjitter,
)
from bayesslr.results.query import (
    START_STYLE,
    Results,
    any_finite,
    groups,
    hard_windows,
    largest_size,
    methods_of,
    sampler_starts_of,
    seed_stats,
    select,
    settings,
    start_var,
    state_evolution_lines,
)


def _start_series(sub: xr.Dataset, start: str, var: str
                  ) -> tuple[np.ndarray, np.ndarray, np.ndarray] | None:
    """(alpha, seed mean, s.e.) of one start's ``var`` in a setting, at the largest size; the
    main start's value only where the cell's main start is ``start``."""
    name = start_var(sub, start, var)
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
    if mean.ndim != 1 or "alpha" not in mean.dims or not any_finite(mean):
        return None
    return mean["alpha"].values, mean.values, np.nan_to_num(sem.values)


SAMPLER_NAMES = {"nuts": "NUTS", "pt": "parallel tempering"}


def sampler_name(ds: xr.Dataset | None) -> str:
    """The sampler the cells of ``ds`` ran, in words (their ``sampler`` output: "NUTS",
    "parallel tempering", or both joined with "/" where the cells differ; cells from before
    the option have none and are NUTS's)."""
    if ds is None or "sampler" not in ds:
        return SAMPLER_NAMES["nuts"]
    used = sorted({str(v) for v in np.asarray(ds["sampler"].values).ravel() if str(v)})
    return "/".join(SAMPLER_NAMES.get(u, u) for u in used) or SAMPLER_NAMES["nuts"]


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


_DODGE = 0.03  # ESS panel: bulk and tail markers this fraction of the alpha span apart


def _span(x: np.ndarray) -> float:
    """The extent of ``x`` (1 for a single value), what a dodge is a fraction of."""
    ok = np.asarray(x, float)[np.isfinite(np.asarray(x, float))]
    return float(ok.max() - ok.min()) if ok.size > 1 and ok.max() > ok.min() else 1.0


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
        if any_finite(sub["test_error"]):
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
                for k, (x, y, e, fill, label) in enumerate(series):
                    xs, fl = xjitter(x, j, len(starts)), xjitter(flagged, j, len(starts))
                    if len(series) > 1:  # bulk left, tail right of the start's position:
                        # a tail ESS close to the bulk one would hide it (log axis)
                        dx = _DODGE * (k - (len(series) - 1) / 2) * _span(x)
                        xs, fl = xs + dx, fl + dx
                    any_flag |= _sampler_points(ax, xs, y, e, mk, col, fill, label, fl)
            if var == "r_hat_max":
                if "r_hat_max_pooled" in sub:
                    mean, sem = seed_stats(sub["r_hat_max_pooled"])
                    mean, sem = mean.squeeze(drop=True), sem.squeeze(drop=True)
                    if mean.ndim == 1 and any_finite(mean):
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
                plain_log(ax)
            ax.set_xlabel("sample ratio \u03b1")
            ax.set_ylabel(lab)
            ax.set_title(title_of(sel), fontsize=9)
            ax.grid(alpha=0.3)
            drawn.append(ax)
        if any_flag:
            note_flagged(axes[0], "bayes_sampling", flag_reasons(sub))
    legend_below(fig, drawn, [
        Line2D([], [], ls="none", marker="s", color="0.4", label="ESS: filled bulk, open tail",
               mfc="0.4"),
    ])
    figure_title(fig, f"{sampler_name(ds)} health against the sample ratio \u03b1 (seed means "
                      "\u00b1 1 s.e.)")
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
        if len(starts) > 1 or "log_lik_gap" in sub and any_finite(sub["log_lik_gap"]):
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
        se = with_flags(state_evolution_lines(tsub), tsub) if tsub is not None else None
        if se is not None:
            draw_state_evolution(ax, se)
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
            any_flag |= _sampler_points(ax, xjitter(x, i, len(starts)), y, e, mk, col, col,
                                        f"{sampler_name(sub)} posterior mean, {start} "
                                        "start",
                                        xjitter(flagged, i, len(starts)))
        if any_flag:
            note_flagged(ax, "bayes_sampling", flag_reasons(sub))
        ax.set_xlabel("sample ratio \u03b1")
        ax.set_ylabel("test excess error")
        ax.set_title(title_of(sel), fontsize=10)
        ax.grid(alpha=0.3)
        top = 0.05
        if "log_lik_gap" in sub:
            mean, sem = seed_stats(sub["log_lik_gap"])
            mean, sem = mean.squeeze(drop=True), sem.squeeze(drop=True)
            if mean.ndim == 1 and any_finite(mean):
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
    legend_below(fig, axes.ravel())
    figure_title(fig, f"Teacher, random and annealed {sampler_name(ds)} starts against the "
                      "state evolution")
    return fig
