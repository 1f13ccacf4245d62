"""Figure functions shared by ``bayesslr report`` and the notebooks under ``reports/``.

Each function takes the results of a sweep (:mod:`bayesslr.sweep.dataset`: a tree with one
group per method family, or a mapping ``family -> Dataset``) and returns a
:class:`matplotlib.figure.Figure`, or raises :class:`NothingToPlot` with the reason when the
results hold none of what it draws (a method family absent, a dimension with one value), so
callers degrade gracefully. Figures are built without pyplot (no global state, any backend);
how a family is drawn (line or markers, label, colour) is its registry entry's
:class:`~bayesslr.methods.PlotStyle`.

Reductions, stated once: seeds are averaged (error bars: standard error over seeds, or the
method's own ``stderr`` when there is one seed); ``lam`` is tuned per ``alpha`` by taking, for
each method, the value with the lowest seed-averaged test error (the paper's grid search,
spec section 4); of several sizes (``D`` or ``sqrtND``) each method shows its largest.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Iterable, Mapping

import numpy as np
import xarray as xr
from matplotlib.figure import Figure

from bayesslr.methods import PlotStyle, get_method

SETTING_DIMS = ("variant", "L", "nu", "delta")
Results = xr.DataTree | Mapping[str, xr.Dataset]


class NothingToPlot(Exception):
    """The dataset holds nothing this figure draws; the message says why."""


# --------------------------------------------------------------------------------------------
# selection helpers
# --------------------------------------------------------------------------------------------
def groups(results: Results) -> dict[str, xr.Dataset]:
    """``family -> Dataset`` of a results tree (or of a mapping, returned as a dict)."""
    if isinstance(results, xr.DataTree):
        return {name: node.to_dataset() for name, node in results.children.items()}
    return dict(results)


def methods_of(results: Results | xr.Dataset, family: str) -> list[str]:
    """Methods of ``family`` with at least one finite test error."""
    ds = results if isinstance(results, xr.Dataset) else groups(results).get(family)
    if ds is None or "method" not in ds.dims or "test_error" not in ds:
        return []
    out = []
    for m in ds["method"].values.tolist():
        if m.split(":", 1)[0] == family and bool(
                np.isfinite(ds["test_error"].sel({"method": m}).values).any()):
            out.append(m)
    return out


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


def _fmt(dim: str, v: object) -> str:
    if isinstance(v, float | np.floating):
        v = "inf" if math.isinf(v) else f"{float(v):g}"
    return f"{dim}={v}"


SIZE_DIMS = ("D", "sqrtND")


def largest_size(ds: xr.Dataset, method: str) -> xr.Dataset:
    """``ds`` at the largest ``D`` (and ``sqrtND``) where ``method`` has a finite test error
    (methods of one sweep may be sized differently: sampling at small ``D``, ERM at the paper's
    ``sqrt(N D)``)."""
    sub = ds.sel({"method": method})
    for d in SIZE_DIMS:
        if d in sub.dims:
            te = sub["test_error"]
            finite = np.isfinite(te).any([o for o in te.dims if o != d]).values
            sub = sub.isel({d: int(np.flatnonzero(finite)[-1]) if finite.any() else -1})
    return sub


def seed_stats(da: xr.DataArray, se: xr.DataArray | None = None
               ) -> tuple[xr.DataArray, xr.DataArray]:
    """Seed mean and its standard error (the method's ``stderr`` when one seed only)."""
    if "seed" not in da.dims:
        return da, se if se is not None else xr.full_like(da, np.nan)
    n = da.notnull().sum("seed")
    with np.errstate(all="ignore"):
        mean = da.mean("seed", skipna=True)
        sem = da.std("seed", ddof=1, skipna=True) / np.sqrt(n)
    if se is not None:
        own = np.sqrt((se**2).mean("seed", skipna=True) / n.where(n > 0))
        sem = sem.where(n > 1, own)
    return mean, sem


def _tune_lam(mean: xr.DataArray, sem: xr.DataArray) -> tuple[xr.DataArray, xr.DataArray]:
    if "lam" not in mean.dims:
        return mean, sem
    filled = mean.fillna(np.inf)
    if filled.sizes["lam"] == 1:
        return mean.isel(lam=0, drop=True), sem.isel(lam=0, drop=True)
    best = filled.argmin("lam")
    return mean.isel(lam=best, drop=True), sem.isel(lam=best, drop=True)


def curve(ds: xr.Dataset, method: str, var: str = "test_error"
          ) -> tuple[xr.DataArray, xr.DataArray]:
    """Seed-averaged ``var`` of one method with its error bar, ``lam`` tuned."""
    sub = largest_size(ds, method)
    se = sub["stderr"] if (var == "test_error" and "stderr" in sub) else None
    mean, sem = seed_stats(sub[var], se)
    if var == "test_error":
        return _tune_lam(mean, sem)
    if "lam" in mean.dims:  # diagnostics follow the lam chosen for the test error
        tmean, _ = seed_stats(sub["test_error"])
        best = tmean.fillna(np.inf).argmin("lam")
        return mean.isel(lam=best, drop=True), sem.isel(lam=best, drop=True)
    return mean, sem


def settings(ds: xr.Dataset | Iterable[xr.Dataset], keep: Iterable[str]
             ) -> list[dict[str, object]]:
    """Every combination of the setting dims (variant, L, nu, delta) not in ``keep``, over one
    dataset or the union of several (in order of first appearance)."""
    datasets = [ds] if isinstance(ds, xr.Dataset) else list(ds)
    keep = set(keep)
    dims = [d for d in SETTING_DIMS if d not in keep and any(d in x.dims for x in datasets)]
    out: list[dict[str, object]] = []
    for x in datasets:
        own = [d for d in dims if d in x.dims]
        for vals in itertools.product(*(x[d].values.tolist() for d in own)):
            sel = dict(zip(own, vals, strict=True))
            if sel not in out:
                out.append(sel)
    return out


def select(ds: xr.Dataset, sel: Mapping[str, object]) -> xr.Dataset | None:
    """``ds`` at the setting ``sel`` (dims it does not have are ignored); None if absent."""
    own = {d: v for d, v in sel.items() if d in ds.dims}
    try:
        return ds.sel(own)
    except KeyError:
        return None


def _title(sel: dict[str, object]) -> str:
    return ", ".join(_fmt(k, v) for k, v in sel.items() if not (k == "delta" and v == 0))


def _grid(n: int, *, width: float = 4.2, height: float = 3.4) -> tuple[Figure, list]:
    cols = min(n, 3)
    rows = math.ceil(n / cols)
    fig = Figure(figsize=(width * cols, height * rows), layout="constrained")
    axes = fig.subplots(rows, cols, squeeze=False).ravel().tolist()
    for ax in axes[n:]:
        ax.set_visible(False)
    return fig, axes[:n]


def _finite(a: xr.DataArray) -> bool:
    return bool(np.isfinite(a.values).any())


# --------------------------------------------------------------------------------------------
# population risk (spec section 3; the paper's population figure, spec section 7)
# --------------------------------------------------------------------------------------------
def _collapse(mean: xr.DataArray, sem: xr.DataArray, keep: str
              ) -> tuple[xr.DataArray, xr.DataArray]:
    """Drop the dims other than ``keep`` that a population result does not depend on (the
    sweep broadcasts it along ``alpha``): take the first index holding a finite value."""
    for d in [d for d in mean.dims if d != keep]:
        other = [o for o in mean.dims if o != d]
        finite = np.isfinite(mean).any(other).values if other else np.isfinite(mean).values
        i = int(np.argmax(finite))
        mean, sem = mean.isel({d: i}, drop=True), sem.isel({d: i}, drop=True)
    return mean, sem


def _population_vs(results: Results, dim: str) -> Figure:
    ds = groups(results).get("population")
    methods = methods_of(ds, "population") if ds is not None else []
    if not methods:
        raise NothingToPlot("no population:* method in the results")
    if dim not in ds.dims or ds.sizes[dim] < 2:
        raise NothingToPlot(f"the population results have fewer than two values of {dim}")
    panels = []
    for sel in settings(ds, keep=(dim,)):
        sub = ds.sel(sel)
        lines = {}
        for m in methods:
            mean, sem = curve(sub, m)
            mean, sem = _collapse(mean.squeeze(drop=True), sem.squeeze(drop=True), keep=dim)
            if mean.ndim == 1 and int(np.isfinite(mean.values).sum()) >= 2:
                lines[m] = (mean, sem)
        if lines:
            panels.append((sel, lines))
    if not panels:
        raise NothingToPlot(f"no setting has population results at two values of {dim}")
    fig, axes = _grid(len(panels))
    for ax, (sel, lines) in zip(axes, panels, strict=True):
        for m, (mean, sem) in lines.items():
            x = mean[dim].values
            xs = np.arange(len(x)) if x.dtype.kind in "UO" else x
            ok = np.isfinite(mean.values)
            kw = ({"ls": "--", "lw": 2, "zorder": 3} if m == "population:bayes"
                  else {"marker": style(m).marker})
            ax.errorbar(xs[ok], mean.values[ok], yerr=np.nan_to_num(sem.values[ok]),
                        color=_color(m), label=_label(m), capsize=2, **kw)
            if x.dtype.kind in "UO":
                ax.set_xticks(xs, [str(v) for v in x])
        ax.set_xlabel(dim if dim != "nu" else r"$\nu$")
        ax.set_ylabel("population excess risk")
        ax.set_title(_title(sel), fontsize=9)
        if dim == "nu":
            ax.set_yscale("log")
        ax.legend(fontsize=8)
    fig.suptitle(f"Population excess risk vs {dim}")
    return fig


def population_vs_nu(results: Results) -> Figure:
    """Population excess risk of each activation (and the Bayes risk) against ``nu``."""
    return _population_vs(results, "nu")


def population_vs_L(results: Results) -> Figure:
    """Population excess risk of each activation (and the Bayes risk) against ``L``."""
    return _population_vs(results, "L")


# --------------------------------------------------------------------------------------------
# finite sample: error vs alpha (the paper's finite-sample figure)
# --------------------------------------------------------------------------------------------
# drawing order of the finite-sample families (others with an alpha dimension follow)
FINITE_SAMPLE = ("theory_bayes", "theory_erm", "erm", "bayes_sampling", "amp")


def finite_sample_groups(results: Results) -> dict[str, xr.Dataset]:
    """The groups drawn against ``alpha``: families with an ``alpha`` dimension and a test
    error whose plot style is a line or markers (trajectory families are drawn elsewhere)."""
    g = groups(results)
    order = [f for f in FINITE_SAMPLE if f in g] + [f for f in g if f not in FINITE_SAMPLE]
    out = {}
    for fam in order:
        ds = g[fam]
        if "alpha" in ds.dims and methods_of(ds, fam) and style(
                str(ds["method"].values[0])).kind in ("line", "marker"):
            out[fam] = ds
    return out


def bayes_risk_at(results: Results, sel: Mapping[str, object]) -> float | None:
    """The population Bayes risk (the ``alpha -> inf`` limit) at a setting, if computed (the
    excess risk does not depend on ``Delta``, so ``delta`` is not matched)."""
    pop = groups(results).get("population")
    if pop is None or "population:bayes" not in methods_of(pop, "population"):
        return None
    sub = select(pop, {d: v for d, v in sel.items() if d != "delta"})
    if sub is None:
        return None
    lm, _ = curve(sub, "population:bayes")
    vals = lm.values[np.isfinite(lm.values)]
    return float(vals.mean()) if vals.size else None


def error_vs_alpha(results: Results) -> Figure:
    """Test excess error against ``alpha``, one panel per setting: theory lines
    (``theory_erm:*``, the Bayes-optimal ``theory_bayes``), finite-``D`` markers with error bars
    (``erm:*``, ``bayes_sampling``, ``amp``, ...) and the Bayes risk (``population:bayes``, the
    ``alpha -> inf`` limit) where present; each family drawn with its registry plot style."""
    fams = finite_sample_groups(results)
    if not fams:
        raise NothingToPlot("no finite-sample method (erm, theory_erm, bayes_sampling, "
                            "theory_bayes, ...) in the results")
    panels = []
    for sel in settings(fams.values(), keep=("alpha",)):
        items = []
        for fam, ds in fams.items():
            sub = select(ds, sel)
            if sub is None:
                continue
            for m in methods_of(ds, fam):
                mean, sem = curve(sub, m)
                mean, sem = mean.squeeze(drop=True), sem.squeeze(drop=True)
                if mean.ndim == 1 and "alpha" in mean.dims and _finite(mean):
                    items.append((m, mean, sem))
        if items:
            panels.append((sel, items, bayes_risk_at(results, sel)))
    if not panels:
        raise NothingToPlot("no setting has finite-sample results")
    fig, axes = _grid(len(panels), width=4.6, height=3.6)
    for ax, (sel, items, limit) in zip(axes, panels, strict=True):
        for m, mean, sem in items:
            st = style(m)
            x, y, e = mean["alpha"].values, mean.values, np.nan_to_num(sem.values)
            ok = np.isfinite(y)
            if st.kind == "line":
                ax.plot(x[ok], y[ok], st.linestyle, color=_color(m), label=_label(m),
                        lw=2 if st.color == "k" else 1.5, zorder=st.zorder)
            else:
                ax.errorbar(x[ok], y[ok], yerr=e[ok], fmt=st.marker, color=_color(m),
                            capsize=3, mfc=None if st.filled else "white", label=_label(m),
                            zorder=st.zorder)
        if limit is not None:
            ax.axhline(limit, color="k", ls=":", lw=1, label="Bayes risk (alpha=inf)")
        ax.set_xlabel(r"$\alpha = N/D$")
        ax.set_ylabel("test excess error")
        ax.set_title(_title(sel), fontsize=9)
        ax.legend(fontsize=7)
    fig.suptitle("Test excess error vs sample ratio (lam tuned per alpha)")
    return fig


# --------------------------------------------------------------------------------------------
# sampler diagnostics (spec section 6)
# --------------------------------------------------------------------------------------------
DIAGNOSTICS = (("r_hat_max", "max split R-hat", 1.01), ("ess_bulk_min", "min bulk ESS", None),
               ("nishimori_gap", "Nishimori gap max|m - q|", None),
               ("divergences", "divergent transitions", None))


def sampler_diagnostics(results: Results) -> Figure:
    """R-hat, bulk ESS, Nishimori gap and divergences of ``bayes_sampling`` against ``alpha``
    (one line per setting)."""
    ds = groups(results).get("bayes_sampling")
    methods = methods_of(ds, "bayes_sampling") if ds is not None else []
    if not methods:
        raise NothingToPlot("no bayes_sampling results in the results")
    diags = [d for d in DIAGNOSTICS if d[0] in ds and _finite(ds[d[0]].sel({"method": methods}))]
    if not diags:
        raise NothingToPlot("bayes_sampling results carry no diagnostics")
    if "alpha" not in ds.dims:
        raise NothingToPlot("the bayes_sampling results have no alpha dimension")
    fig, axes = _grid(len(diags), width=4.2, height=3.2)
    for ax, (var, label, ref) in zip(axes, diags, strict=True):
        for i, sel in enumerate(settings(ds, keep=("alpha",))):
            for m in methods:
                sub = largest_size(ds.sel(sel), m)
                if not _finite(sub[var]):
                    continue
                vals = sub[var]
                if "lam" in vals.dims:
                    vals = vals.isel(lam=0)
                vals = vals.squeeze(drop=True)
                if vals.ndim != 2:  # (alpha, seed)
                    continue
                x = vals["alpha"].values
                for s in range(vals.sizes["seed"]):
                    ax.plot(x, vals.isel(seed=s).values, "o", color=f"C{i % 10}", alpha=0.6,
                            ms=4, label=_title(sel) if s == 0 else None)
        if ref is not None:
            ax.axhline(ref, color="r", ls="--", lw=1)
        if var == "ess_bulk_min":
            ax.set_yscale("log")
        ax.set_xlabel(r"$\alpha$")
        ax.set_ylabel(label)
        ax.legend(fontsize=6)
    fig.suptitle("Bayes sampling diagnostics (each point one seed)")
    return fig


FIGURES = {
    "population_vs_nu": population_vs_nu,
    "population_vs_L": population_vs_L,
    "error_vs_alpha": error_vs_alpha,
    "sampler_diagnostics": sampler_diagnostics,
}
