"""The leaderboard's figure: excess over the reference against gradient evaluations.

One panel per target, one line per library; each point is a budget's prefix of one run
(:mod:`bayesslr.crosslibrary.checkpoints`) at its gradient evaluations, with its paired
standard error. A point whose chains did not converge (R-hat above 1.05, bulk ESS below 100
or a divergence) is drawn hollow grey, as in every figure of the report; a budget at which a
library had no draws (its warm-up was not finished) has no point, and a panel says which
libraries were not run. The excess axis is linear, each panel its own range (the excesses of
teacher-started chains are of the size of their standard errors, 1e-4 - 1e-3).
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

COLORS = {"numpyro": "#1f77b4", "blackjax": "#d62728", "nutpie": "#2ca02c"}
MARKERS = {"numpyro": "o", "blackjax": "s", "nutpie": "^"}
FLAG_COLOR = "0.55"


def short_title(name: str) -> str:
    """``slr_spiked_L3_nu2_delta0.01-D50_alpha5_seed0`` -> ``Δ=0.01 D=50 α=5 seed 0``.

    Examples
    --------
    >>> short_title("slr_spiked_L3_nu2_delta0.01-D50_alpha5_seed0")
    'Δ=0.01, D=50, α=5, seed 0'
    """
    model, data = name.split("-", 1)
    delta = model.split("_delta")[-1]
    D, alpha, seed = data.split("_")
    return f"Δ={delta}, D={D[1:]}, α={alpha[5:]}, seed {seed[4:]}"


def error_vs_grads(board: Any = None, *, cols: int = 4) -> Any:
    """The figure (a matplotlib ``Figure``) of ``board`` (default the shipped one).

    Examples
    --------
    >>> from bayesslr.crosslibrary.figure import error_vs_grads
    >>> fig = error_vs_grads()
    >>> len(fig.axes) >= 16
    True
    """
    import matplotlib

    matplotlib.use("Agg", force=False)
    import matplotlib.pyplot as plt
    from matplotlib.lines import Line2D

    from bayesslr.crosslibrary.board import leaderboard

    board = leaderboard() if board is None else board
    names = [str(x) for x in board["target"].values]
    rows = math.ceil(len(names) / cols)
    fig, axes = plt.subplots(rows, cols, figsize=(3.6 * cols, 2.9 * rows + 0.9),
                             squeeze=False, layout="constrained")
    for ax, name in zip(axes.flat, names, strict=False):
        sub = board.sel(target=name)
        notes = []
        for alg in sub["algorithm"].values:
            for lib in sub["library"].values:
                r = sub.sel(library=lib, algorithm=alg)
                x, y, e = (np.asarray(r[v].values, float) for v in
                           ("grad_evals", "excess", "excess_stderr"))
                conv = np.asarray(r["converged"].values, float) == 1
                ok = np.isfinite(x) & np.isfinite(y)
                st = set(map(str, np.asarray(r["status"].values).ravel()))
                if st <= {"missing", "failed"}:
                    notes.append(f"{lib}: not run" if st == {"missing"} else f"{lib}: failed")
                elif not ok.any():
                    notes.append(f"{lib}: warm-up > every budget")
                color = COLORS.get(str(lib), "k")
                ax.plot(x[ok], y[ok], "-", color=color, lw=1.2, alpha=0.8)
                good, bad = ok & conv, ok & ~conv
                ax.errorbar(x[good], y[good], yerr=e[good], fmt=MARKERS.get(str(lib), "o"),
                            color=color, ms=5, capsize=2)
                ax.errorbar(x[bad], y[bad], yerr=e[bad], fmt=MARKERS.get(str(lib), "o"),
                            color=FLAG_COLOR, mfc="none", mec=FLAG_COLOR, mew=1.2, ms=5,
                            capsize=2)
        ax.axhline(0.0, color="k", lw=0.6)
        ax.set_xscale("log")
        ax.ticklabel_format(axis="y", style="sci", scilimits=(-2, 2))
        if notes:
            ax.text(0.03, 0.97, "\n".join(notes), transform=ax.transAxes, va="top",
                    fontsize=7, color="0.3")
        ax.set_title(short_title(name), fontsize=9)
        ax.tick_params(labelsize=7)
        ax.set_xlim(float(board["budget"].min()) / 2, float(board["budget"].max()) * 1.5)
    for ax in axes.flat[len(names):]:
        ax.set_visible(False)
    for ax in axes[-1]:
        ax.set_xlabel("gradient evaluations (all chains, warm-up included)", fontsize=8)
    for ax in axes[:, 0]:
        ax.set_ylabel("excess over reference", fontsize=8)
    handles = [Line2D([], [], color=COLORS[lib], marker=MARKERS[lib], label=lib)
               for lib in COLORS if lib in set(map(str, board["library"].values))]
    handles.append(Line2D([], [], color=FLAG_COLOR, marker="o", mfc="none", ls="none",
                          label="hollow grey: not converged (R-hat > 1.05, ESS < 100 or a "
                                "divergence)"))
    fig.legend(handles=handles, loc="outside lower center", ncols=len(handles), fontsize=8,
               frameon=False)
    fig.suptitle("NUTS in three libraries at equal gradient budgets: excess test error over "
                 "the Bayes-optimal reference (± paired se), 4 chains from the teacher",
                 fontsize=10)
    return fig
