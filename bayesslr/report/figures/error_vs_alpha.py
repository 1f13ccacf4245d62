"""The finite-sample figure (the paper's): test excess error against ``alpha``, the
Bayes-optimal state evolution, the replica lines, the finite-``D`` markers and the Bayes risk.

Which families are drawn here is their registry ``ReportRole`` (:func:`finite_sample_groups`).
The state evolution's drawing (:func:`draw_state_evolution`) serves the sampler figures too.
"""

from __future__ import annotations

import math
from collections.abc import Mapping

import numpy as np
import xarray as xr
from matplotlib.axes import Axes
from matplotlib.figure import Figure

from bayesslr.core.lam import LAM_MODES
from bayesslr.registry import report_order
from bayesslr.report.figures.style import (
    NothingToPlot,
    color_of,
    draw_flagged,
    figure_title,
    flag_reasons,
    flagged_of,
    label_of,
    legend_below,
    note_flagged,
    panel_grid,
    size_label,
    style,
    title_of,
    xjitter,
)
from bayesslr.results.query import (
    Results,
    any_finite,
    bayes_risk_at,
    fmt_value,
    groups,
    hard_windows,
    largest_size,
    methods_of,
    select,
    settings,
    sizes_of,
    state_evolution_lines,
    stats_of,
)


def finite_sample_groups(results: Results) -> dict[str, xr.Dataset]:
    """The groups drawn against ``alpha``, in their drawing order: the families whose registry
    ``ReportRole`` has a ``finite_sample`` place, with an ``alpha`` dimension and a test error,
    drawn as a line or markers. A family without that place (a trajectory family, the
    inference benchmark, a plugin) never enters, whatever its dimensions."""
    g = groups(results)
    out = {}
    for fam in report_order("finite_sample"):
        ds = g.get(fam)
        if ds is not None and "alpha" in ds.dims and methods_of(ds, fam) and style(
                str(ds["method"].values[0])).kind in ("line", "marker"):
            out[fam] = ds
    return out


def draw_state_evolution(ax: Axes, se: Mapping[str, np.ndarray],
                         shift: tuple[float, float] = (0.0, 0.0), suffix: str = "") -> None:
    """The state evolution of one setting; ``shift = (value, its se)`` is subtracted (the
    Bayes risk, for the excess view: the band then holds both errors) and ``suffix`` added to
    the labels."""
    x, ok = se["alpha"], np.isfinite(se["best"])
    st = style("theory_bayes")
    best = se["best"] - shift[0]
    band = np.hypot(se["se"], shift[1])
    ax.plot(x[ok], best[ok], st.linestyle, color=st.color_for("theory_bayes"), lw=2,
            label=st.label_for("theory_bayes") + suffix, zorder=st.zorder)
    ax.fill_between(x[ok], (best - band)[ok], (best + band)[ok], color="k", alpha=0.15, lw=0)
    bad = ok & np.asarray(se.get("flagged", np.zeros(x.shape, bool)), bool)
    if bad.any():
        draw_flagged(ax, x[bad], best[bad], band[bad], "o", st.label_for("theory_bayes"), ms=6)
        note_flagged(ax, "theory_bayes", se.get("reasons", []))
    differ = np.nan_to_num(se["differ"]) > 0.5
    if differ.any():
        for name, ls, lab in (("informed", "-", "SE from the informed start"),
                              ("uninformed", "--", "SE from the uninformed start")):
            y = se[name] - shift[0]
            good = np.isfinite(y)
            ax.plot(x[good], y[good], ls, color="0.35", lw=1.2, label=lab + suffix, zorder=2)
    for lo, hi in hard_windows(x, np.nan_to_num(se["hard"])):
        ax.axvspan(lo, hi, color="C1", alpha=0.15, lw=0,
                   label="hard phase of the state evolution")


def with_flags(se: dict[str, np.ndarray] | None, ds: xr.Dataset | None
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
    return {**se, "flagged": np.asarray(flag.values, bool), "reasons": flag_reasons(sub)}


def _draw_markers(ax: Axes, ds: xr.Dataset, m: str, theory: xr.Dataset | None = None,
                  dodge: tuple[int, int, float] | None = None, var: str = "test_error"
                  ) -> None:
    """One marker family at every size it ran; ``dodge = (first slot, slots, unit)`` shifts
    each (method, size) series by ``unit`` along ``alpha`` so that series of a panel with
    equal values stand side by side (default: 2.5% of ``alpha`` between sizes). ``var`` is
    the quantity drawn (``test_error``, with the sampler's oracle beside it, or
    ``excess_over_oracle``)."""
    st = style(m)
    sizes = sizes_of(ds, m)
    for i, size in enumerate(sizes):
        sub = ds.sel({"method": m, **size})
        mean, sem = stats_of(sub, var, theory=theory)
        mean, sem = mean.squeeze(drop=True), sem.squeeze(drop=True)
        if mean.ndim != 1 or "alpha" not in mean.dims or not any_finite(mean):
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
        lab = label_of(m) + (f", {size_label(size)}" if len(sizes) > 1 or size else "")
        xj = (xjitter(x, i, len(sizes)) if dodge is None
              else x + dodge[2] * (dodge[0] + i - (dodge[1] - 1) / 2))
        good = ok & ~bad
        if good.any():
            ax.errorbar(xj[good], y[good], yerr=e[good], fmt=st.marker, color=color_of(m),
                        capsize=3, ms=4 + 3 * rank, alpha=0.45 + 0.55 * rank,
                        label=lab, zorder=st.zorder + 1)
        if bad.any():
            draw_flagged(ax, xj[bad], y[bad], e[bad], st.marker, lab, ms=4 + 3 * rank)
            note_flagged(ax, m.split(":")[0], flag_reasons(sub))
        if var == "test_error" and "oracle_error" in sub and \
                m.split(":")[0] == "bayes_sampling":
            om, os_ = stats_of(sub, "oracle_error")
            om, os_ = om.squeeze(drop=True), os_.squeeze(drop=True)
            if om.ndim == 1 and any_finite(om):
                ok = np.isfinite(om.values)
                ax.errorbar(xj[ok], om.values[ok],
                            yerr=np.nan_to_num(os_.values)[ok], fmt="x", color="0.45",
                            capsize=2, ms=6, zorder=st.zorder,
                            label="oracle (teacher known), same test set"
                            + (f", {size_label(size)}" if len(sizes) > 1 else ""))


def _draw_line(ax: Axes, ds: xr.Dataset, m: str, shift: tuple[float, float] = (0.0, 0.0),
               suffix: str = "") -> None:
    """A theory line at its largest size; ``shift = (value, its se)`` subtracted (the Bayes
    risk, for the excess view) and ``suffix`` added to the label."""
    st = style(m)
    sub = largest_size(ds, m)
    mean, sem = stats_of(sub)
    mean, sem = mean.squeeze(drop=True), sem.squeeze(drop=True)
    if mean.ndim != 1 or "alpha" not in mean.dims or not any_finite(mean):
        return
    x = mean["alpha"].values
    y, e = mean.values - shift[0], np.hypot(np.nan_to_num(sem.values), shift[1])
    ok = np.isfinite(y)
    lam = ""
    if "lam" in ds.dims:
        te = ds["test_error"].sel({"method": m})
        finite = np.isfinite(te).any([d for d in te.dims if d != "lam"]).values
        vals = [fmt_value("lam", v).split("=")[1] for v, f in
                zip(ds["lam"].values.tolist(), finite, strict=True) if f]
        # a tuned lam (any word of LAM_MODES) has one spelling in the figures: "lam optimal"
        lam = (f", \u03bb={vals[0]}" if len(vals) == 1 and vals[0] not in LAM_MODES
               else ", \u03bb optimal")
    ax.plot(x[ok], y[ok], st.linestyle, color=color_of(m), label=label_of(m) + lam + suffix,
            lw=2 if st.color == "k" else 1.6, zorder=st.zorder, marker="." if ok.sum() < 4
            else None)
    ax.fill_between(x[ok], (y - e)[ok], (y + e)[ok], color=color_of(m), alpha=0.15, lw=0)
    flag = flagged_of(sub)
    if flag is not None:
        flag = flag.squeeze(drop=True)
        if flag.shape == ok.shape and (bad := ok & np.asarray(flag.values, bool)).any():
            draw_flagged(ax, x[bad], y[bad], e[bad], "o", label_of(m), ms=6)
            note_flagged(ax, m.split(":")[0], flag_reasons(sub))


_RISK_CACHE: dict[tuple, tuple[float, float]] = {}


def bayes_risk_line(results: Results, sel: Mapping[str, object]
                    ) -> tuple[float, float, str] | None:
    """The Bayes risk (``alpha -> inf``) at a setting with its standard error and where it
    comes from: the results' ``population:bayes`` when they hold it, else that cell computed
    here through the registry (200 000 Monte Carlo samples, seed 0; a second or two), so that
    every panel of the finite-sample figure has its limit."""
    have = bayes_risk_at(results, sel)
    if have is not None:
        return have[0], have[1], "population"
    try:
        from bayesslr.registry import Cell, run_cell

        L = str(sel.get("L", ""))
        key = (sel.get("variant"), L, float(sel.get("nu", math.nan)))
        if key not in _RISK_CACHE:
            out = run_cell(Cell("population:bayes", variant=str(sel["variant"]), L=L,
                                nu=float(sel["nu"]), delta=0.0, seed=0,
                                options={"samples": 200_000}))
            _RISK_CACHE[key] = (float(out["test_error"]), float(out["stderr"]))
        v, e = _RISK_CACHE[key]
        return v, e, "computed"
    except Exception:  # a setting the population method cannot take: no line
        return None


def _panels(results: Results) -> list[tuple]:
    """``(setting, its groups, the Bayes risk line)`` per panel of the finite-sample figures."""
    fams = finite_sample_groups(results)
    if not fams:
        raise NothingToPlot("no finite-sample method (erm, theory_erm, bayes_sampling, "
                            "theory_bayes, ...) in the results")
    panels = []
    for sel in settings(fams.values(), keep=("alpha",)):
        subs = {f: s for f, ds in fams.items() if (s := select(ds, sel)) is not None}
        subs = {f: s for f, s in subs.items() if methods_of(s, f)}
        if subs:
            panels.append((sel, subs, bayes_risk_line(results, sel)))
    if not panels:
        raise NothingToPlot("no setting has finite-sample results")
    return panels


def _draw_panel(ax: Axes, results: Results, sel: Mapping[str, object],
                subs: Mapping[str, xr.Dataset], limit: tuple | None, *, excess: bool) -> None:
    """One setting: theories as lines, finite-size estimators as markers side by side (1.2% of
    the ``alpha`` range apart, so that equal errors do not hide each other), the Bayes risk;
    ``excess``: every theory less the Bayes risk and every estimator's paired excess over its
    oracle (the view the verdicts judge)."""
    theory_all = groups(results).get("theory_erm")
    theory = select(theory_all, sel) if theory_all is not None else None
    series = [(f, m) for f, sub in subs.items() for m in methods_of(sub, f)
              if f != "theory_bayes" and style(m).kind != "line"]
    slots = [len(sizes_of(subs[f], m)) for f, m in series]
    alphas = np.concatenate([np.asarray(sub["alpha"].values, float)
                             for sub in subs.values() if "alpha" in sub.dims])
    unit = 0.012 * float(np.ptp(alphas)) if alphas.size > 1 else 0.0
    shift, suffix = ((limit[0], limit[1]), " − Bayes risk") if excess else ((0.0, 0.0), "")
    var = "excess_over_oracle" if excess else "test_error"
    for fam, sub in subs.items():
        for m in methods_of(sub, fam):
            if fam == "theory_bayes":
                se = with_flags(state_evolution_lines(sub), sub)
                if se is not None:
                    draw_state_evolution(ax, se, shift, suffix)
            elif style(m).kind == "line":
                _draw_line(ax, sub, m, shift, suffix)
            else:
                k = series.index((fam, m))
                _draw_markers(ax, sub, m, theory, (sum(slots[:k]), sum(slots), unit), var)
    if excess:
        ax.axhline(0.0, color="k", ls=":", lw=1.2, label="Bayes risk (excess 0)")
        ax.set_ylabel("excess over the Bayes risk\n(estimators: over their oracle, paired)")
    else:
        if limit is not None:
            ax.axhline(limit[0], color="k", ls=":", lw=1.2,
                       label="Bayes risk (\u03b1\u2192\u221e, population"
                       + (", computed by the report)" if limit[2] == "computed" else ")"))
            ax.axhspan(limit[0] - limit[1], limit[0] + limit[1], color="k", alpha=0.08, lw=0)
        ax.set_ylabel("test excess error (raw)")
    ax.set_xlabel("sample ratio \u03b1 = N/D")
    ax.set_title(title_of(sel), fontsize=10)
    ax.grid(alpha=0.3)


def error_vs_alpha(results: Results) -> Figure:
    """Test excess error against ``alpha``, one panel per (variant, L, nu, delta), the raw
    view: the Bayes-optimal state evolution (both branches where they differ, the hard window
    shaded), replica lines (``theory_erm:*`` at their optimal ``lam`` or the ``lam`` run),
    finite-``D`` markers with error bars at every size run (``erm:*`` at the ``lam`` chosen
    without the test data, ``bayes_sampling`` with its oracle, ``amp``, ...) and the Bayes risk
    (``population:bayes``, the ``alpha -> inf`` limit; computed here when the results lack
    it) in every panel; each family drawn with its registry plot style; flagged cells hollow
    grey. Raw errors of finite-``D`` estimators and ``D -> inf`` theories are not paired: at
    finite ``D`` a teacher's norm moves every estimator on its data, the oracle too, so a
    marker may sit below its theory by more than its error bar; the verdicts judge
    :func:`excess_vs_alpha`'s paired view, and the title says so."""
    return _figure(results, _panels(results), excess=False,
                   title="Test excess error against \u03b1 (raw, not paired)")


def excess_vs_alpha(results: Results) -> Figure:
    """What the finite-sample verdicts judge: each estimator's excess over its oracle (its test
    error less the oracle's, the teacher known, on the same teacher and test set; seed mean
    and standard error) against each theory's excess over the Bayes risk (the state
    evolution, the replica lines, less ``alpha -> inf``'s Bayes risk, their bands holding
    both errors), one panel per setting, the Bayes risk at 0. Pairing removes the
    teacher-to-teacher and test-set noise that the raw view (:func:`error_vs_alpha`) keeps,
    so a Bayes estimator sits below the state evolution only by its own Monte Carlo error. A
    panel without a Bayes risk cannot place its theories and is left out."""
    panels = [p for p in _panels(results) if p[2] is not None]
    if not panels:
        raise NothingToPlot("no setting has a Bayes risk to pair the theories with")
    return _figure(results, panels, excess=True,
                   title="Excess over the Bayes risk against \u03b1 (paired)")


def _figure(results: Results, panels: list[tuple], *, excess: bool, title: str) -> Figure:
    """The panels of :func:`_panels` drawn by :func:`_draw_panel`, one legend, the title."""
    fig, axes = panel_grid(len(panels), cols=3, width=5.0, height=4.0)
    for ax, (sel, subs, limit) in zip(axes, panels, strict=True):
        _draw_panel(ax, results, sel, subs, limit, excess=excess)
    legend_below(fig, axes)
    figure_title(fig, title)
    return fig
