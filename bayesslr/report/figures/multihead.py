"""The multi-head figure (docs/multihead.md section 8): what the verdicts judge, per setting.

Left, **excess over the Bayes-optimal estimator** against ``alpha``: each attention student's
``excess_over_oracle`` minus the sampled posterior mean's on the same seed (same teacher,
training and test data: the difference of the two test errors exactly), mean over seeds with
one seed-to-seed standard error. The Bayes-optimal estimator is the zero line, so no estimator
can be read below it by Monte Carlo noise in the oracle. Seeds whose sampler did not converge
are left out of this panel (they are not ground truth) and the title says so.

Middle, the **raw view** (labelled so): every estimator's ``excess_over_oracle``, the
teacher-known Bayes predictor being 0, the sampled posterior mean drawn black; a point with a
seed that did not converge is drawn hollow grey.

Right, **pruning**: the excess over the oracle of each attention student with its ``m`` most
important heads kept (no retraining), at the largest ``alpha``.
"""

from __future__ import annotations

import math

import numpy as np
from matplotlib.figure import Figure
from matplotlib.ticker import MaxNLocator, NullLocator

from bayesslr.report.figures.style import (
    FLAG_COLOR,
    NothingToPlot,
    draw_flagged,
    figure_title,
    legend_below,
    note_flagged,
    panel_grid,
    title_of,
    xjitter,
)
from bayesslr.results.query import Results, groups

GROUP = "multihead"
SAMPLER = "multihead:bayes_sampling"
ATTENTIONS = ("multihead:softmax", "multihead:softmax1", "multihead:bayes_softmax")
COLORS = {"multihead:softmax": "C0", "multihead:softmax1": "C1",
          "multihead:bayes_softmax": "C2", SAMPLER: "k"}
LABELS = {"multihead:softmax": "softmax (ERM)", "multihead:softmax1": "softmax1 (ERM)",
          "multihead:bayes_softmax": "bayes_softmax (ERM)",
          SAMPLER: "Bayes-optimal (posterior mean by sampling)"}
SETTING_DIMS = ("variant", "L", "nu", "delta", "D", "lam")


def _settings(ds) -> list[dict[str, object]]:
    """The settings (every dimension but method, alpha, seed and list dimensions) with data."""
    dims = [d for d in ds["excess_over_oracle"].dims
            if d not in ("method", "alpha", "seed")]
    ex = ds["excess_over_oracle"].sel({"method": [m for m in ATTENTIONS if m in ds["method"]]})
    out = []
    stacked = ex.notnull().any(["method", "alpha", "seed"])
    for idx in zip(*np.nonzero(np.asarray(stacked.values)), strict=False):
        out.append({d: ds[d].values[i].item() for d, i in zip(dims, idx, strict=True)})
    return out


def multihead_excess(results: Results) -> Figure:
    """Excess over the sampled Bayes-optimal estimator, the raw excess over the oracle, and
    the pruning curves (module docstring); one row per setting."""
    ds = groups(results).get(GROUP)
    if ds is None or "excess_over_oracle" not in ds:
        raise NothingToPlot("no multihead results (bayesslr run --preset multihead-quick)")
    sets = _settings(ds)
    if not sets:
        raise NothingToPlot("no multihead attention cells with a finite excess")
    fig, axes = panel_grid(3 * len(sets), cols=3, width=4.2, height=3.4)
    skipped = 0
    for row, sel in enumerate(sets):
        sub = ds.sel(sel)
        samp = _sampler(ds, sel)
        ex_b = (np.asarray(samp["excess_over_oracle"].values, float)
                if samp is not None else None)
        ok_b = (np.asarray(samp["converged"].values, float) == 1) if samp is not None else None
        alpha = np.asarray(sub["alpha"].values, float)
        ax_gap, ax_raw, ax_pr = axes[3 * row: 3 * row + 3]
        ax_gap.axhline(0.0, color="k", lw=1.2, label=LABELS[SAMPLER])
        for i, m in enumerate(ATTENTIONS):
            if m not in sub["method"]:
                continue
            # (alpha, seed)
            ex = np.asarray(sub.sel({"method": m})["excess_over_oracle"].values, float)
            conv = np.asarray(sub.sel({"method": m})["converged"].values, float)
            # raw view
            have = np.isfinite(ex)
            mean = np.array([np.nanmean(r) if r[np.isfinite(r)].size else np.nan for r in ex])
            se = np.array([_se(r) for r in ex])
            flag = np.array([bool(np.any(c[np.isfinite(e)] < 1)) for c, e in zip(conv, ex,
                                                                                  strict=True)])
            x = xjitter(alpha, i, 4)
            good = np.isfinite(mean) & ~flag
            ax_raw.errorbar(x[good], mean[good], yerr=se[good], fmt="o", color=COLORS[m],
                            capsize=3, label=LABELS[m])
            if np.any(flag & np.isfinite(mean)):
                draw_flagged(ax_raw, x[flag], mean[flag], se[flag], "o", "ERM")
                note_flagged(ax_raw, "multihead ERM", ["L-BFGS gradient tolerance not met"])
            if ex_b is None:
                continue
            # what the verdict judges: paired by seed, converged sampler only
            d = np.where(ok_b & have, ex - ex_b, np.nan)
            skipped += int(np.sum(have & ~ok_b & np.isfinite(ex_b)))
            dm = np.array([np.nanmean(r) if np.isfinite(r).any() else np.nan for r in d])
            ds_ = np.array([_se(r) for r in d])
            g = np.isfinite(dm)
            ax_gap.errorbar(x[g], dm[g], yerr=ds_[g], fmt="o-", color=COLORS[m], capsize=3,
                            label=LABELS[m])
        if ex_b is not None:
            mean = np.array([np.nanmean(r) if np.isfinite(r).any() else np.nan for r in ex_b])
            se = np.array([_se(r) for r in ex_b])
            flag = np.array([bool(np.any(~o[np.isfinite(e)])) for o, e in zip(ok_b, ex_b,
                                                                              strict=True)])
            x = xjitter(alpha, 3, 4)
            good = np.isfinite(mean) & ~flag
            ax_raw.errorbar(x[good], mean[good], yerr=se[good], fmt="s", color="k", capsize=3,
                            label=LABELS[SAMPLER])
            if np.any(flag & np.isfinite(mean)):
                draw_flagged(ax_raw, x[flag], mean[flag], se[flag], "s", "Bayes (sampling)")
                note_flagged(ax_raw, "multihead bayes_sampling",
                             _reasons(samp))
        _pruning(ax_pr, sub, alpha)
        where = title_of({k: v for k, v in sel.items() if k not in ("lam", "H")})
        heads = sel.get("H")
        if heads not in (None, ""):
            where += f", H={heads}"
        lam = sel.get("lam")
        ax_gap.set_title(f"{where}\nexcess over Bayes-optimal (paired)", fontsize=9)
        ax_raw.set_title("raw: excess over the teacher-known oracle"
                         + (f", λ={float(lam):g}" if lam is not None else ""), fontsize=9)
        for ax in (ax_gap, ax_raw):
            ax.set_xscale("log")
            ax.set_xticks(alpha, [f"{a:g}" for a in alpha])
            ax.xaxis.set_minor_locator(NullLocator())
            ax.set_xlabel("α = N/D")
        ax_gap.set_ylabel("test error minus Bayes-optimal's")
        ax_raw.set_ylabel("test error minus oracle's")
        ax_raw.axhline(0.0, color="0.3", lw=0.8, ls=":")
    legend_below(fig, axes)
    note = (f"; {skipped} attention point(s) without a converged sampler left out of the "
            "paired panel" if skipped else "")
    figure_title(fig, "Multi-head SLR: attention students against the sampled Bayes-optimal "
                      f"estimator\n(mean over seeds ± 1 se{note})", fontsize=10)
    return fig


def _sampler(ds, sel):
    """The sampler's cells of a setting: it sets no ``lam`` nor ``H`` (dimensions of the
    attention students), so it is taken at any value of them where it has data."""
    if SAMPLER not in ds["method"]:
        return None
    free = [d for d in ("lam", "H") if d in sel]
    samp = ds.sel({"method": SAMPLER, **{k: v for k, v in sel.items() if k not in free}})
    for d in free:
        have = samp["excess_over_oracle"].notnull().any([x for x in samp["excess_over_oracle"]
                                                         .dims if x != d])
        if not bool(have.any()):
            return None
        samp = samp.isel({d: int(np.argmax(np.asarray(have.values)))})
    return samp


def _se(r: np.ndarray) -> float:
    r = r[np.isfinite(r)]
    return float(np.std(r, ddof=1) / math.sqrt(r.size)) if r.size > 1 else math.nan


def _reasons(samp) -> list[str]:
    from bayesslr.report.figures.style import flag_reasons

    return flag_reasons(samp)


def _pruning(ax, sub, alpha: np.ndarray) -> None:
    """Excess over the oracle against the heads kept, at the largest ``alpha`` with data."""
    if "prune_excess_over_oracle" not in sub:
        ax.set_visible(False)
        return
    curve = sub["prune_excess_over_oracle"]
    drawn = False
    for i, m in enumerate(ATTENTIONS):
        if m not in sub["method"]:
            continue
        c = np.asarray(curve.sel({"method": m}).values, float)  # (alpha, seed, heads_kept)
        for ia in range(len(alpha) - 1, -1, -1):
            block = c[ia]
            if np.isfinite(block).any():
                keep = np.isfinite(block).any(axis=0)
                k = np.asarray(sub["heads_kept"].values)[keep] if "heads_kept" in sub else (
                    np.arange(block.shape[-1])[keep])
                mean = np.nanmean(block[:, keep], axis=0)
                se = np.array([_se(block[:, j]) for j in np.nonzero(keep)[0]])
                ax.errorbar(k + 0.08 * (i - 1), mean, yerr=se, fmt="o-", color=COLORS[m],
                            capsize=3, label=LABELS[m])
                ax.set_title(f"pruning at α={alpha[ia]:g} (no retraining)", fontsize=9)
                drawn = True
                break
    if not drawn:
        ax.set_visible(False)
        return
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.set_xlabel("heads kept (most important first)")
    ax.set_ylabel("test error minus oracle's")
    ax.axhline(0.0, color=FLAG_COLOR, lw=0.8, ls=":")


GD_GROUP = "multihead_gd"


def multihead_specialisation(results: Results) -> Figure:
    """Gradient-descent trajectories of the multi-head student (family ``multihead_gd``), what
    the stages claim judges: per attention (columns) and setting (rows of panel pairs), the key
    specialisation index (top) and the key alignment with the teacher's span (bottom) of every
    seed against the step. A seed that passes the unspecialised phase and ends specialised
    (:func:`bayesslr.report.claims.multihead_claims.shows_stages`) is drawn in the member's
    colour, the others thin and pale; dotted lines mark the rule's thresholds."""
    from bayesslr.report.claims.multihead_claims import (
        ALIGNED,
        SPECIALISED,
        UNSPECIALISED,
        shows_stages,
    )

    ds = groups(results).get(GD_GROUP)
    names = ("trajectory_specialisation_K", "trajectory_alignment_K")
    if ds is None or any(n not in ds for n in names) or "step" not in ds.dims:
        raise NothingToPlot("no multihead_gd trajectories (bayesslr run --preset multihead)")
    other = [d for d in ds[names[0]].dims if d not in ("method", "seed", "step")]
    members = [m for m in ds["method"].values.tolist()]
    blocks = []
    for m in members:
        sub = ds.sel({"method": m})
        s_all = sub[names[0]].transpose(*other, "seed", "step").values
        a_all = sub[names[1]].transpose(*other, "seed", "step").values
        for idx in np.ndindex(*s_all.shape[:-2]):
            if np.isfinite(s_all[idx]).any():
                where = {d: sub[d].values[i].item() for d, i in zip(other, idx, strict=True)}
                blocks.append((m, where, s_all[idx], a_all[idx]))
    if not blocks:
        raise NothingToPlot("no finite multihead_gd trajectories")
    fig, axes = panel_grid(2 * len(blocks), cols=2, width=4.2, height=3.0)
    step = np.asarray(ds["step"].values, float)
    for b, (m, where, s, a) in enumerate(blocks):
        ax_s, ax_a = axes[2 * b], axes[2 * b + 1]
        color = COLORS.get(m.replace(GD_GROUP, GROUP), "C3")
        shown = n = 0
        for j in range(s.shape[0]):
            ok = np.isfinite(s[j])
            if not ok.any():
                continue
            n += 1
            passes = shows_stages(a[j], s[j])
            shown += passes
            style = dict(color=color, lw=1.0, alpha=0.9) if passes else dict(
                color="0.6", lw=0.6, alpha=0.5)
            ax_s.plot(step[ok], s[j][ok], **style)
            ax_a.plot(step[ok], a[j][ok], **style)
        for ax, levels, label in ((ax_s, (UNSPECIALISED, SPECIALISED), "key specialisation"),
                                  (ax_a, (ALIGNED,), "key alignment with the span")):
            for y in levels:
                ax.axhline(y, color="k", lw=0.7, ls=":")
            ax.set_ylim(-0.03, 1.03)
            ax.set_xlabel("GD step")
            ax.set_ylabel(label)
            ax.set_xscale("symlog", linthresh=max(step[1] if step.size > 1 else 1.0, 1.0))
            ax.set_xlim(0.0, step[-1] if step.size else 1.0)
        name = m.partition(":")[2]
        task = {k: v for k, v in where.items() if k in ("variant", "L", "nu", "delta", "D")}
        rest = {k: v for k, v in where.items() if k not in task}
        ax_s.set_title(f"{name}, {title_of(rest)}\n{shown} of {n} seeds show the stages "
                       "(coloured)", fontsize=9)
        ax_a.set_title(f"{title_of(task)}\nin the span when alignment >= {ALIGNED:g}",
                       fontsize=9)
    figure_title(fig, "Multi-head SLR: gradient-descent trajectories of the heads (H-head "
                      "student)\nunspecialised phase (index <= "
                      f"{UNSPECIALISED:g} in the span), then one head per direction (index >= "
                      f"{SPECIALISED:g})", fontsize=10)
    return fig
