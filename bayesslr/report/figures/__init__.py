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
marker with its own legend entry, and the figure's title says why
(:func:`~bayesslr.report.figures.style.flag_note`).

The figures, by theme: :mod:`~bayesslr.report.figures.population_risk`,
:mod:`~bayesslr.report.figures.error_vs_alpha`, :mod:`~bayesslr.report.figures.gd_trajectories`,
:mod:`~bayesslr.report.figures.sampler_health`; what they share (styles, grids, legends, flagged
cells) is :mod:`~bayesslr.report.figures.style`, and the legibility check the tests run on
every figure :mod:`~bayesslr.report.figures.legibility`. This module holds the catalogue
(:data:`FIGURES`, :data:`THEMES`) and :func:`draw`.
"""

from __future__ import annotations

from collections.abc import Callable

import xarray as xr
from matplotlib.figure import Figure

from bayesslr.report.figures.error_vs_alpha import error_vs_alpha, excess_vs_alpha
from bayesslr.report.figures.gd_trajectories import gd_trajectories
from bayesslr.report.figures.multihead import multihead_excess, multihead_specialisation
from bayesslr.report.figures.population_risk import population_vs_L, population_vs_nu
from bayesslr.report.figures.sampler_health import sampler_diagnostics, sampler_starts
from bayesslr.report.figures.style import NothingToPlot
from bayesslr.results.query import Results

__all__ = ["FIGURES", "THEMES", "NothingToPlot", "draw", "error_vs_alpha", "excess_vs_alpha",
           "gd_trajectories", "is_reference", "multihead_excess", "multihead_specialisation",
           "population_vs_L",
           "population_vs_nu", "sampler_diagnostics", "sampler_starts", "shipped_label"]


def is_reference(results: Results) -> bool:
    """Whether ``results`` are the shipped reference (:func:`bayesslr.load_reference`: its root
    attributes carry ``reference``)."""
    return isinstance(results, xr.DataTree) and "reference" in results.attrs


def shipped_label(name: str) -> str:
    """How a figure or a message names the shipped file ``name``
    (:func:`bayesslr.load_reference`): "shipped reference" (the reduced sizes), "shipped
    reference, paper sizes" (``"paper"``), else "shipped <name> results" (``"dynamics"``:
    its own sizes, not the paper's)."""
    return {"reference": "shipped reference",
            "paper": "shipped reference, paper sizes"}.get(name, f"shipped {name} results")


def draw(which: str | Callable[[Results], Figure], results: Results) -> Figure:
    """Draw one figure (a name of :data:`FIGURES` or a figure function); a figure drawn from
    the shipped results says which file in its title (:func:`shipped_label`: "shipped
    reference"; "shipped reference, paper sizes" for :func:`bayesslr.load_reference`'s
    ``"paper"``; "shipped dynamics results" for ``"dynamics"``), so it is never taken for
    the user's own results."""
    fn = FIGURES[which] if isinstance(which, str) else which
    fig = fn(results)
    title = getattr(fig, "_suptitle", None)
    if is_reference(results):
        label = shipped_label(str(results.attrs.get("shipped", "reference")))
        if title is None:
            fig.suptitle(f"{label} results")
        else:
            first, nl, rest = title.get_text().partition("\n")
            title.set_text(f"{first} ({label}){nl}{rest}")
    return fig


FIGURES: dict[str, Callable[[Results], Figure]] = {
    "population_vs_nu": population_vs_nu,
    "population_vs_L": population_vs_L,
    "excess_vs_alpha": excess_vs_alpha,
    "error_vs_alpha": error_vs_alpha,
    "gd_trajectories": gd_trajectories,
    "sampler_diagnostics": sampler_diagnostics,
    "sampler_starts": sampler_starts,
    "multihead_excess": multihead_excess,
    "multihead_specialisation": multihead_specialisation,
}

# the figures each report notebook draws (``bayesslr report`` draws them all)
THEMES: dict[str, tuple[str, ...]] = {
    "population": ("population_vs_nu", "population_vs_L"),
    "finite_sample": ("excess_vs_alpha", "error_vs_alpha"),
    "dynamics": ("gd_trajectories",),
    "sampler_health": ("sampler_diagnostics", "sampler_starts"),
    "multihead": ("multihead_excess", "multihead_specialisation"),
}
