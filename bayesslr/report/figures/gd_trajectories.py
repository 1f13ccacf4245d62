"""The gradient-dynamics figure (docs/estimators.md, docs/paper.md: the link with gradient-based
algorithms): overlaps and test error along GD / Adam trajectories against the ERM fixed
point."""

from __future__ import annotations

import math

from matplotlib.axes import Axes
from matplotlib.figure import Figure

from bayesslr.report.figures.style import NothingToPlot, color_of, legend_below, title_of
from bayesslr.results.query import Results, cross_zscore, fixed_points, trajectory_runs

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
            color = color_of(str(r["method"]))
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
    legend_below(fig, all_axes)
    fig.suptitle("Gradient-descent trajectories against the ERM fixed point", fontsize=12)
    return fig
