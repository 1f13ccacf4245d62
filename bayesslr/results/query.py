"""Query a results tree: the selection helpers the figures, tables and claims share.

A results tree (:mod:`bayesslr.sweep.dataset`) holds one group per method family. The helpers
here pick families and methods, reduce over seeds (mean and standard error), choose ``lam`` per
``alpha`` (never on the data the error is measured on: see :func:`stats_of`), and extract
curves, state-evolution lines and optimiser trajectories. Nothing here draws.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Iterable, Mapping

import numpy as np
import xarray as xr

from bayesslr.core.lam import LAM_REPLICA, LAM_VALIDATION
from bayesslr.registry import trajectory_families

SETTING_DIMS = ("variant", "L", "nu", "delta")


SIZE_DIMS = ("D", "sqrtND")


# dataset dimensions of trajectory families (an optimiser's records): drawn by
# :func:`gd_trajectories`, not against alpha
TRAJECTORY_DIMS = ("step",)


Results = xr.DataTree | Mapping[str, xr.Dataset]


# the sampler's start strategies (bayesslr.bayes.sampler.INITS) and how they are drawn
START_STYLE = {"teacher": ("s", "k"), "random": ("o", "C3"), "anneal": ("^", "C2")}


def groups(results: Results) -> dict[str, xr.Dataset]:
    """``family -> Dataset`` of a results tree (or of a mapping, returned as a dict)."""
    if isinstance(results, xr.DataTree):
        return {name: node.to_dataset() for name, node in results.children.items()
                if name != "cells"}
    return dict(results)


def methods_of(results: Results | xr.Dataset | None, family: str) -> list[str]:
    """Methods of ``family`` with at least one finite test error."""
    if results is None:
        return []
    ds = results if isinstance(results, xr.Dataset) else groups(results).get(family)
    if ds is None or "method" not in ds.dims or "test_error" not in ds:
        return []
    out = []
    for m in ds["method"].values.tolist():
        if m.split(":", 1)[0] == family and bool(
                np.isfinite(ds["test_error"].sel({"method": m}).values).any()):
            out.append(m)
    return out


def fmt_value(dim: str, v: object) -> str:
    """``dim=value`` as a figure title shows it (``nu=inf``, ``L=1,2,3``)."""
    if isinstance(v, float | np.floating):
        v = "inf" if math.isinf(v) else f"{float(v):g}"
    name = {"nu": "\u03bd", "alpha": "\u03b1", "lam": "\u03bb", "delta": "\u0394"}.get(dim, dim)
    return f"{name}={v}"


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


def sizes_of(ds: xr.Dataset, method: str) -> list[dict[str, object]]:
    """Every size selection (``{"D": 100}``, ``{"sqrtND": 1e4}``, ``{}`` for a size-free
    family) at which ``method`` has a finite test error, smallest first."""
    sub = ds.sel({"method": method})
    dims = [d for d in SIZE_DIMS if d in sub.dims]
    if not dims:
        return [{}]
    out = []
    for vals in itertools.product(*(sub[d].values.tolist() for d in dims)):
        sel = dict(zip(dims, vals, strict=True))
        if any_finite(sub["test_error"].sel(sel)):
            out.append(sel)
    return out


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


# lam labels chosen without the test data, in order of preference: the replica theory's optimum
# at the cell's task and alpha, the grid search on a validation split of the training data
CHOSEN_LAMS: tuple[str, ...] = (LAM_REPLICA, LAM_VALIDATION)


def _family(sub: xr.Dataset) -> str:
    m = sub["method"].values if "method" in sub.coords else ""
    return str(np.asarray(m).ravel()[0]).split(":", 1)[0] if np.asarray(m).size == 1 else ""


def _theory_method(sub: xr.Dataset) -> str:
    m = str(np.asarray(sub["method"].values).ravel()[0])
    return "theory_erm:" + m.partition(":")[2]


def lam_choice(sub: xr.Dataset, theory: xr.Dataset | None = None) -> xr.DataArray | None:
    """Which ``lam`` of one method's dataset (method and size selected) each point shows: an
    index along ``lam`` per remaining point, ``-1`` where none can be chosen; None when the
    dataset has no ``lam`` dimension.

    Never chosen on the test error it reports (docs/reports.md, "Reading the figures"):

    * a theory family (``theory_erm``): its own optimum over ``lam`` (the replica's optimal
      ``lam``, a property of the ``D -> inf`` theory, not of data);
    * a finite-size family: ``lam = "replica"`` or ``"validation"`` where run (chosen inside the
      cell without the test set); else, among numeric ``lam``, the one where the replica theory
      of the same activation (``theory``: the ``theory_erm`` group at the same setting) has the
      lowest test error at that ``alpha``; else the only ``lam`` run; else none (``-1``: the
      point is not drawn, and the tables and verdicts say what is needed).
    """
    te = sub["test_error"]
    if "lam" not in te.dims:
        return None
    tmean, _ = seed_stats(te)
    finite = np.isfinite(tmean)
    if _family(sub).startswith("theory"):
        best = tmean.fillna(np.inf).argmin("lam")
        return best.where(finite.any("lam"), -1).astype(int)
    labels = [str(v) for v in sub["lam"].values.tolist()]
    idx = xr.full_like(finite.isel(lam=0, drop=True), -1, dtype=int)
    for lab in CHOSEN_LAMS:
        if lab in labels:
            i = labels.index(lab)
            idx = idx.where((idx >= 0) | ~finite.isel(lam=i, drop=True), i)
    numeric = [i for i, v in enumerate(sub["lam"].values.tolist())
               if isinstance(v, int | float | np.number) and not isinstance(v, bool)]
    if theory is not None and numeric and "lam" in theory.dims and "method" in theory.dims \
            and _theory_method(sub) in theory["method"].values.tolist():
        th = theory.sel({"method": _theory_method(sub)})
        th_mean, _ = seed_stats(th["test_error"])
        th_lams = th_mean["lam"].values.tolist()
        scores = []
        for i in numeric:
            v = sub["lam"].values.tolist()[i]
            if v not in th_lams:
                scores.append(xr.full_like(finite.isel(lam=i, drop=True), np.nan, dtype=float))
                continue
            one = th_mean.sel(lam=v, drop=True)
            one = one.drop_vars([c for c in one.coords if c not in one.dims], errors="ignore")
            shared = {d: finite[d].values for d in one.dims if d in finite.dims}
            one = one.reindex(shared) if shared else one
            one = one.squeeze([d for d in one.dims if d not in finite.dims], drop=True) \
                if any(d not in finite.dims for d in one.dims) else one
            ok = finite.isel(lam=i, drop=True)
            scores.append(xr.where(ok, one, np.nan).broadcast_like(ok))
        score = xr.concat(scores, "lam_numeric")
        has = np.isfinite(score).any("lam_numeric")
        arg = score.fillna(np.inf).argmin("lam_numeric")
        best = arg.copy(data=np.asarray(numeric)[np.asarray(arg.values)])
        idx = idx.where((idx >= 0) | ~has, best)
    only = finite.sum("lam") == 1
    idx = idx.where((idx >= 0) | ~only, finite.argmax("lam"))
    return idx.astype(int)


def _at_lam(mean: xr.DataArray, sem: xr.DataArray, idx: xr.DataArray | None
            ) -> tuple[xr.DataArray, xr.DataArray]:
    if idx is None or "lam" not in mean.dims:
        return mean, sem
    safe = idx.clip(min=0)
    out_m = mean.isel(lam=safe, drop=True).where(idx >= 0)
    out_s = sem.isel(lam=safe, drop=True).where(idx >= 0)
    return out_m, out_s


def stats_of(sub: xr.Dataset, var: str = "test_error", theory: xr.Dataset | None = None
             ) -> tuple[xr.DataArray, xr.DataArray]:
    """Seed-averaged ``var`` of one method's dataset (method and size already selected) with
    its error bar, at the ``lam`` of :func:`lam_choice` (never chosen on the test error:
    ``theory`` is the ``theory_erm`` group at the same setting, whose optimum picks among a
    numeric ``lam`` grid); diagnostics follow the same ``lam``."""
    idx = lam_choice(sub, theory)
    if var not in sub:
        nan = xr.full_like(sub["test_error"], np.nan)
        return _at_lam(*seed_stats(nan), idx)
    own_se = {"test_error": "stderr"}.get(var, f"{var}_stderr")
    se = sub[own_se] if own_se in sub else None
    mean, sem = seed_stats(sub[var], se)
    return _at_lam(mean, sem, idx)


def curve(ds: xr.Dataset, method: str, var: str = "test_error",
          theory: xr.Dataset | None = None) -> tuple[xr.DataArray, xr.DataArray]:
    """Seed-averaged ``var`` of one method at its largest size with its error bar, at the
    ``lam`` of :func:`lam_choice`."""
    return stats_of(largest_size(ds, method), var, theory)


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


def any_finite(a: xr.DataArray) -> bool:
    """Whether any value of ``a`` is finite (a figure has something to draw)."""
    return bool(np.isfinite(np.asarray(a.values, dtype=float)).any())


def __getattr__(name: str) -> tuple[str, ...]:
    # FINITE_SAMPLE: drawing order of the finite-sample families (others with an alpha
    # dimension follow), from each family's registry entry (ReportRole.finite_sample); looked
    # up lazily, so that importing the results layer imports no family
    if name == "FINITE_SAMPLE":
        from bayesslr.registry import report_order

        return report_order("finite_sample")
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def is_trajectory(ds: xr.Dataset) -> bool:
    """A trajectory family (records along ``step``), drawn by :func:`gd_trajectories`."""
    return any(d in ds.dims for d in TRAJECTORY_DIMS)


def bayes_risk_at(results: Results, sel: Mapping[str, object]) -> tuple[float, float] | None:
    """The population Bayes risk (the ``alpha -> inf`` limit) at a setting and its standard
    error, if computed (the excess risk does not depend on ``Delta``, so ``delta`` is not
    matched)."""
    pop = groups(results).get("population")
    if "population:bayes" not in methods_of(pop, "population"):
        return None
    own = {d: v for d, v in sel.items() if d != "delta" and d in pop.dims}
    if any(v not in pop[d].values.tolist() for d, v in own.items()):
        return None
    lm, ls = curve(pop.sel(own), "population:bayes")
    ok = np.isfinite(lm.values)
    if not ok.any():
        return None
    return float(lm.values[ok].ravel()[0]), float(np.nan_to_num(ls.values[ok].ravel()[0]))


def hard_windows(alpha: np.ndarray, hard: np.ndarray) -> list[tuple[float, float]]:
    """Intervals of ``alpha`` where the state evolution flags a hard phase, each widened to
    half-way to the neighbouring grid points (the window is known to grid resolution)."""
    alpha = np.asarray(alpha, float)
    hard = np.asarray(hard, float) > 0.5
    out = []
    i = 0
    while i < len(alpha):
        if not hard[i]:
            i += 1
            continue
        j = i
        while j + 1 < len(alpha) and hard[j + 1]:
            j += 1
        lo = alpha[i] - (alpha[i] - alpha[i - 1]) / 2 if i > 0 else alpha[i] * 0.9
        hi = alpha[j] + (alpha[j + 1] - alpha[j]) / 2 if j + 1 < len(alpha) else alpha[j] * 1.1
        out.append((float(lo), float(hi)))
        i = j + 1
    return out


def state_evolution_lines(ds: xr.Dataset) -> dict[str, np.ndarray] | None:
    """The Bayes-optimal state evolution of one setting (``theory_bayes`` group at a
    setting): ``alpha``, ``best``/``se``, the ``informed`` and ``uninformed`` branches, the
    flags ``differ`` and ``hard``; None when absent."""
    if "theory_bayes" not in methods_of(ds, "theory_bayes"):
        return None
    sub = largest_size(ds, "theory_bayes")
    best, se = stats_of(sub)
    best, se = best.squeeze(drop=True), se.squeeze(drop=True)
    if best.ndim != 1 or "alpha" not in best.dims:
        return None
    out = {"alpha": best["alpha"].values, "best": best.values, "se": np.nan_to_num(se.values)}
    for name, var in (("informed", "test_error_informed"),
                      ("uninformed", "test_error_uninformed"),
                      ("differ", "branches_differ"), ("hard", "hard_phase")):
        v, _ = stats_of(sub, var)
        v = v.squeeze(drop=True)
        out[name] = v.values if v.ndim == 1 else np.full(best.shape, np.nan)
    return out


def trajectory_groups(results: Results) -> dict[str, xr.Dataset]:
    """The trajectory families: those whose registry ``ReportRole`` declares ``trajectories``
    (``gd``), with recorded trajectories in the results."""
    declared = trajectory_families()
    return {f: ds for f, ds in groups(results).items() if f in declared
            and is_trajectory(ds) and "trajectory_m_k" in ds}


def _run_dims(ds: xr.Dataset) -> list[str]:
    return [d for d in ("variant", "L", "nu", "delta", "alpha", "lam", *SIZE_DIMS)
            if d in ds.dims]


def trajectory_runs(results: Results) -> list[dict[str, object]]:
    """Every recorded trajectory: ``{"family", "method", "init", "seed", "setting" (dims ->
    value), "step", one array per recorded variable}`` (``init`` from the dataset's ``init``
    dimension when the results split one, else the ``init`` output, else ``"?"``)."""
    out = []
    for fam, ds in trajectory_groups(results).items():
        dims = _run_dims(ds)
        inits = ds["init"].values.tolist() if "init" in ds.dims else [None]
        for m in ds["method"].values.tolist():
            for init in inits:
                for vals in itertools.product(*(ds[d].values.tolist() for d in dims)):
                    setting = dict(zip(dims, vals, strict=True))
                    for seed in ds["seed"].values.tolist():
                        sel = {"method": m, **setting, "seed": seed}
                        if init is not None:
                            sel["init"] = init
                        one = ds.sel(sel)
                        mk = one["trajectory_m_k"].values
                        ok = np.isfinite(mk)
                        if not ok.any():
                            continue
                        run = {"family": fam, "method": m, "seed": int(seed),
                               "setting": setting,
                               "init": init if init is not None else _text(one, "init")}
                        step = (one["trajectory_step"].values if "trajectory_step" in one
                                else one["step"].values)
                        run["step"] = np.asarray(step, float)[ok]
                        for v in one.data_vars:
                            if v.startswith("trajectory_") and "step" in one[v].dims:
                                run[v[len("trajectory_"):]] = np.asarray(
                                    one[v].values, float)[ok]
                        out.append(run)
    return out


def _text(ds: xr.Dataset, var: str) -> str:
    if var not in ds:
        return "?"
    v = ds[var].values
    return str(v.item() if v.size == 1 else v.ravel()[0]) or "?"


def cross_zscore(run: Mapping[str, np.ndarray], D: float) -> np.ndarray:
    """Largest cross overlap along a trajectory in units of its finite-``D`` noise level:
    for vectors independent of the teacher, ``k.v*/D`` has standard deviation
    ``sqrt(q_k / D)``, ``v.k*/D`` ``sqrt(q_v / D)`` and ``k.v/D`` ``sqrt(q_k q_v / D)``."""
    with np.errstate(all="ignore"):
        z = np.stack([np.abs(run["m_kv"]) / np.sqrt(run["q_k"] / D),
                      np.abs(run["m_vk"]) / np.sqrt(run["q_v"] / D),
                      np.abs(run["q_kv"]) / np.sqrt(run["q_k"] * run["q_v"] / D)])
    return np.nanmax(np.where(np.isfinite(z), z, np.nan), axis=0)


def fixed_points(results: Results, run: Mapping[str, object]) -> dict[str, dict[str, float]]:
    """The ERM fixed point at a trajectory's setting, from ``theory_erm`` (same activation,
    alpha and lam: ``"replica"``, value and ``<var>_se``) and ``erm`` (same activation, alpha,
    lam and size: ``"lbfgs"``, seed mean, its ``<var>_se``, the seed-to-seed standard
    deviation ``<var>_sd`` and the number of seeds ``n``; ``"lbfgs_seed"``, L-BFGS on the
    trajectory's own seed, i.e. on the same data)."""
    g = groups(results)
    act = str(run["method"]).partition(":")[2]
    setting = dict(run["setting"])  # type: ignore[arg-type]
    out: dict[str, dict[str, float]] = {}
    for fam, key in (("theory_erm", "replica"), ("erm", "lbfgs")):
        ds = g.get(fam)
        m = f"{fam}:{act}"
        if m not in methods_of(ds, fam):
            continue
        own = {d: v for d, v in setting.items() if d in ds.dims}
        if fam == "theory_erm":
            own = {d: v for d, v in own.items() if d not in SIZE_DIMS}
        try:
            sub = ds.sel({"method": m, **own})
        except KeyError:
            continue
        if any(d in sub.dims and d != "seed" for d in (*SETTING_DIMS, "alpha", "lam",
                                                        *SIZE_DIMS)):
            continue  # the trajectory's setting does not pin the point down
        vals: dict[str, float] = {}
        same: dict[str, float] = {}
        for v in ("m_k", "q_k", "m_v", "q_v", "test_error"):
            if v not in sub:
                continue
            mean, sem = seed_stats(sub[v], sub.get("stderr") if v == "test_error" else
                                   sub.get(f"{v}_stderr"))
            vals[v] = float(mean.values)
            vals[f"{v}_se"] = float(sem.values)
            if "seed" in sub[v].dims:  # seed-to-seed spread: a single run's finite-D scatter
                x = sub[v].values[np.isfinite(sub[v].values)]
                vals[f"{v}_sd"] = float(np.std(x, ddof=1)) if x.size > 1 else math.nan
                vals["n"] = float(x.size)
                if run.get("seed") in sub["seed"].values.tolist():
                    same[v] = float(sub[v].sel(seed=run["seed"]).values)
        if vals and math.isfinite(vals.get("test_error", math.nan)):
            out[key] = vals
        if same and all(math.isfinite(x) for x in same.values()):
            out["lbfgs_seed"] = same
    return out


def sampler_starts_of(ds: xr.Dataset) -> list[str]:
    """The start strategies a ``bayes_sampling`` group reports: the first one (the cell's
    main run, output ``init``) and every ``<init>_test_error`` of the other starts."""
    out = []
    if "init" in ds:
        vals = [str(v) for v in np.asarray(ds["init"].values).ravel() if str(v)]
        out += list(dict.fromkeys(vals))
    out += [s for s in START_STYLE if f"{s}_test_error" in ds and any_finite(ds[f"{s}_test_error"])]
    return list(dict.fromkeys(out)) or ["teacher"]


def start_var(ds: xr.Dataset, start: str, var: str) -> str | None:
    """The variable holding ``var`` of a start: ``<start>_<var>`` for the other starts, the
    plain name for the main start (where the cells' ``init`` says so)."""
    if f"{start}_{var}" in ds:
        return f"{start}_{var}"
    if var in ds and "init" in ds:
        mains = {str(v) for v in np.asarray(ds["init"].values).ravel() if str(v)}
        if start in mains or not mains:
            return var
    return var if var in ds and "init" not in ds and start == "teacher" else None
