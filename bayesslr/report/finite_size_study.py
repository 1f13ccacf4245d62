"""The finite-size study (issue 20; docs/finite-size.md): does each finite-``D`` estimator reach
its ``D -> inf`` theory?

For one setting (task and ``alpha``), one estimator and one ``lam``, the cells of a sweep give,
at each size ``D``, the test errors of several seeds; this module reads them from a results tree
(:func:`erm_studies`, :func:`nuts_studies`), the finished cells of a run in progress too
(:func:`assemble`), and tabulates the studies. Each study's fit ``e(D) = e_inf + b / D``, its
errors and its verdict against the theory are :mod:`bayesslr.report.finite_size_fit`.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path

import numpy as np
import pandas as pd
import xarray as xr

from bayesslr.core.task import ConfigError
from bayesslr.report.finite_size_fit import (
    MIN_SEEDS,
    MIN_SIZES,
    UNDECIDED,
    SizePoint,
    Study,
    fit_points,
    make_study,
    pm_4dp,
)


def _mean_se(x: np.ndarray) -> tuple[float, float]:
    """The mean of ``x`` and its standard error (NaN for one value)."""
    return float(np.mean(x)), (float(np.std(x, ddof=1) / math.sqrt(len(x))) if len(x) > 1
                               else math.nan)


def size_points(frame: pd.DataFrame, quantity: str) -> list[SizePoint]:
    """Per-size seed means of ``quantity`` (columns ``D``, ``sqrtND``, ``quantity`` and
    optionally ``converged``), sizes in increasing order; a size with one seed has ``se`` NaN."""
    out = []
    for D, g in frame.groupby("D", sort=True):
        g = g[np.isfinite(g[quantity].to_numpy(dtype=float))]
        x = g[quantity].to_numpy(dtype=float)
        if not len(x):
            continue
        mean, se = _mean_se(x)
        unconv = int((g["converged"] < 0.5).sum()) if "converged" in g else 0
        values = ({int(sd): float(v) for sd, v in zip(g["seed"], x, strict=True)}
                  if "seed" in g else {})
        out.append(SizePoint(int(D), float(g["sqrtND"].iloc[0]), mean, se, len(x),
                             unconv, values))
    return out


FLAG_KEY = "theory point flagged"  # evidence of a study against a flagged theory point


def _group(tree: xr.DataTree, family: str) -> xr.Dataset | None:
    return tree[family].to_dataset() if family in tree.children else None


def _frame(ds: xr.Dataset, names: Sequence[str]) -> pd.DataFrame:
    keep = [n for n in names if n in ds.data_vars]
    df = ds[keep].to_dataframe().reset_index()
    return df[np.isfinite(df[keep[0]].astype(float))]


def _nu_text(nu: float) -> str:
    return "inf" if math.isinf(float(nu)) else f"{float(nu):g}"


def setting_label(variant: str, L: str, nu: float, alpha: float, delta: float) -> str:
    """``spiked L=3 nu=2 alpha=5 Delta=0.01``."""
    return (f"{variant} L={L} nu={_nu_text(nu)} alpha={float(alpha):g} "
            f"Delta={float(delta):g}")


def _sizes(df: pd.DataFrame) -> pd.DataFrame:
    """Columns ``D`` (the cell's dimension) and ``sqrtND`` from whichever sizing the cells
    used (``D = round(sqrtND / sqrt(alpha))``, as :meth:`bayesslr.registry.Cell.dimension`)."""
    df = df.copy()
    if "sqrtND" in df and df["sqrtND"].notna().any():
        d = np.maximum(1, np.round(df["sqrtND"] / np.sqrt(df["alpha"])))
        df["D"] = np.where(df["sqrtND"].notna(), d, df["D"] if "D" in df else np.nan)
    else:
        df["sqrtND"] = np.nan
    if "D" in df:
        df = df[np.isfinite(df["D"].astype(float))]
    return df


def _match(df: pd.DataFrame, **sel: object) -> pd.DataFrame:
    m = np.ones(len(df), dtype=bool)
    for k, v in sel.items():
        if k not in df:
            continue
        col = df[k]
        if isinstance(v, float):
            m &= np.isclose(col.astype(float), v) | (np.isinf(v) & np.isinf(col.astype(float)))
        else:
            m &= (col.astype(str) == str(v)).to_numpy()
    return df[m]


def _theory_value(df: pd.DataFrame | None, **sel: object) -> tuple[float, float]:
    if df is None:
        return math.nan, math.nan
    rows = _match(df, **sel)
    if rows.empty:
        return math.nan, math.nan
    r = rows.iloc[0]
    return float(r["test_error"]), float(r.get("stderr", math.nan))


def _lam_float(lam: object) -> float | None:
    try:
        return float(lam)
    except (TypeError, ValueError):
        return None


def erm_studies(tree: xr.DataTree, *, min_sizes: int = MIN_SIZES) -> list[Study]:
    """One study per (setting, ERM activation, ``lam``) with at least ``min_sizes`` sizes:
    ``test_error`` against the replica's (``theory_erm`` at a fixed ``lam``; the cells'
    ``replica_test_error`` at ``lam = "replica"``); and, where the results hold the Bayes
    population risk of the task (``population:bayes``), a second one on the paired
    ``excess_over_oracle`` against the replica's test error less that risk (the oracle's
    error in the limit): the same question with the teacher-norm noise cancelled."""
    ds = _group(tree, "erm")
    if ds is None:
        return []
    df = _sizes(_frame(ds, ["test_error", "converged", "objective", "replica_test_error",
                            "replica_test_error_stderr", "lam_used", "excess_over_oracle"]))
    df, alt = _split_protocol(df)
    th = _group(tree, "theory_erm")
    thdf = _frame(th, ["test_error", "stderr", "objective", "converged", "reason"]
                  ) if th is not None else None
    pop_ds = _group(tree, "population")
    popdf = _frame(pop_ds, ["test_error", "stderr"]) if pop_ds is not None else None
    keys = ["method", "variant", "L", "nu", "delta", "alpha", "lam"]
    out = []
    for key, g in df.groupby([k for k in keys if k in df], sort=False):
        kv = dict(zip([k for k in keys if k in df], key, strict=True))
        if g["D"].nunique() < min_sizes:
            continue
        act = str(kv["method"]).split(":", 1)[1]
        lam = str(kv.get("lam", ""))
        lamf = _lam_float(lam)
        setting = setting_label(kv["variant"], kv["L"], kv["nu"], kv["alpha"], kv["delta"])
        sel = {"variant": kv["variant"], "L": kv["L"], "nu": float(kv["nu"]),
               "delta": float(kv["delta"]), "alpha": float(kv["alpha"])}
        extra: dict[str, str] = {}
        flag: dict[str, str] = {}  # evidence for both verdicts against the replica point
        if lamf is not None:
            theory, theory_se = _theory_value(thdf, method=f"theory_erm:{act}", lam=lamf, **sel)
            objective = _theory_objective(thdf, method=f"theory_erm:{act}", lam=lamf, **sel)
            flagged = _theory_flag(thdf, method=f"theory_erm:{act}", lam=lamf, **sel)
            if flagged:
                flag[FLAG_KEY] = flagged
                extra.update(flag)
            pts = size_points(g, "objective")
            used = [p for p in pts if p.n >= MIN_SEEDS and p.se > 0]
            if math.isfinite(objective) and len({p.D for p in used}) >= MIN_SIZES:
                fo = fit_points(used)
                extra["training objective"] = (f"e_inf {pm_4dp(fo.e_inf, fo.se)} vs replica's "
                                               f"{objective:.4g}")
        else:
            r = g["replica_test_error"].to_numpy(dtype=float) if "replica_test_error" in g \
                else np.array([])
            r = r[np.isfinite(r)]
            rs = g["replica_test_error_stderr"].to_numpy(dtype=float) \
                if "replica_test_error_stderr" in g else np.array([])
            rs = rs[np.isfinite(rs)]
            theory = float(np.median(r)) if len(r) else math.nan
            theory_se = float(np.median(rs)) if len(rs) else math.nan
            if len(r) and np.ptp(r) > 1e-12:
                extra["replica values differ between cells"] = f"{r.min():.4g}..{r.max():.4g}"
            lam_used = g["lam_used"] if "lam_used" in g else None
            if lam_used is not None:
                extra["lam used"] = f"{float(np.median(lam_used)):.3g}"
        others = []
        for label, a in _protocols(_match(alt, **kv)):
            others.append((label, size_points(a, "test_error")))
            evidence = restart_evidence(g, a)
            if evidence:
                extra[label] = evidence
        out.append(make_study(setting, str(kv["method"]), lam, "test_error",
                              "the replica line", size_points(g, "test_error"), theory,
                              theory_se, extra, others))
        pop, pop_se = _theory_value(popdf, method="population:bayes", variant=kv["variant"],
                                    L=kv["L"], nu=float(kv["nu"]))
        if "excess_over_oracle" in g and math.isfinite(pop):
            out.append(make_study(
                setting, str(kv["method"]), lam, "excess_over_oracle",
                "the replica line less the Bayes population risk",
                size_points(g, "excess_over_oracle"), theory - pop,
                math.hypot(theory_se, pop_se if math.isfinite(pop_se) else 0.0),
                {"theory parts": f"replica {pm_4dp(theory, theory_se)} - Bayes population "
                                 f"{pm_4dp(pop, pop_se)}", **flag}))
    return out


# The ERM protocol the studies are about (the paper's): one informed start per seed. Cells of the
# same settings run with other starts (options init, restarts: dataset dimensions when they
# differ between cells) are kept apart, as evidence on the minima the informed start finds.
PROTOCOL = {"init": "informed", "restarts": "1"}


def _split_protocol(df: pd.DataFrame) -> tuple[pd.DataFrame, pd.DataFrame]:
    """``(rows of the paper's protocol, rows of other starts)`` (:data:`PROTOCOL`)."""
    keys = [k for k in PROTOCOL if k in df]
    if not keys:
        return df, df.iloc[:0]
    default = np.logical_and.reduce([(df[k].astype(str) == PROTOCOL[k]).to_numpy()
                                     for k in keys])
    return df[default], df[~default]


def _protocols(alt: pd.DataFrame) -> list[tuple[str, pd.DataFrame]]:
    """The other protocols of ``alt`` with their rows: ``best of 8 random starts``."""
    keys = [k for k in PROTOCOL if k in alt]
    if alt.empty or not keys:
        return []
    out = []
    for key, rows in alt.groupby(keys, sort=True):
        kv = dict(zip(keys, key if isinstance(key, tuple) else (key,), strict=True))
        init = kv.get("init", PROTOCOL["init"])
        restarts = kv.get("restarts", PROTOCOL["restarts"])
        label = (f"best of {restarts} {init} starts" if str(restarts) != PROTOCOL["restarts"]
                 else f"one {init} start")
        out.append((label, rows))
    return out


def restart_evidence(main: pd.DataFrame, other: pd.DataFrame) -> str:
    """Another start protocol against the paper's on the same seeds and sizes (same teacher and
    data): in how many pairs its minimum has the lower training objective, the mean paired
    differences of the objective and of ``test_error`` with their standard errors, and both
    means of ``test_error``; ``""`` with fewer than 2 pairs. Near-equal objectives at different
    test errors are minima that the objective cannot tell apart but generalisation can."""
    cols = ["D", "seed", "test_error", "objective"]
    if any(c not in main or c not in other for c in cols):
        return ""
    m = main[cols].dropna().set_index(["D", "seed"])
    o = other[cols].dropna().set_index(["D", "seed"])
    common = m.index.intersection(o.index)
    if len(common) < 2:
        return ""
    m, o = m.loc[common], o.loc[common]
    d_obj = (o["objective"] - m["objective"]).to_numpy(dtype=float)
    d_err = (o["test_error"] - m["test_error"]).to_numpy(dtype=float)
    sizes = ",".join(str(int(d)) for d in sorted({d for d, _ in common}))
    mo, so = _mean_se(d_obj)
    me, se = _mean_se(d_err)
    e_o, e_o_se = _mean_se(o["test_error"].to_numpy(dtype=float))
    e_m, e_m_se = _mean_se(m["test_error"].to_numpy(dtype=float))
    return (f"{len(common)} seed-size pairs (D={sizes}): lower objective in "
            f"{int((d_obj < 0).sum())}, objective difference {mo:+.2e} ± {so:.1e}; "
            f"test_error {pm_4dp(e_o, e_o_se)} against the informed start's "
            f"{pm_4dp(e_m, e_m_se)} (paired difference {pm_4dp(me, se)})")


def _theory_flag(df: pd.DataFrame | None, **sel: object) -> str:
    """The reason of a replica point that failed its own diagnostics (``converged`` false),
    or ``""``: a verdict against it says so, as the point is not trusted there
    (docs/theory.md, "The bounds")."""
    if df is None or "converged" not in df:
        return ""
    rows = _match(df, **sel)
    if rows.empty or float(rows["converged"].iloc[0]) > 0.5:
        return ""
    why = str(rows["reason"].iloc[0]) if "reason" in rows else ""
    return " ".join(why.split())[:160] or "converged is false"


def _theory_objective(df: pd.DataFrame | None, **sel: object) -> float:
    if df is None or "objective" not in df:
        return math.nan
    rows = _match(df, **sel)
    return float(rows["objective"].iloc[0]) if not rows.empty else math.nan


def nuts_studies(tree: xr.DataTree, *, min_sizes: int = MIN_SIZES) -> list[Study]:
    """One study per setting of ``bayes_sampling`` with at least ``min_sizes`` sizes: the
    paired ``excess_over_oracle`` against ``theory_bayes - population:bayes``."""
    ds = _group(tree, "bayes_sampling")
    if ds is None:
        return []
    df = _sizes(_frame(ds, ["excess_over_oracle", "converged"]))
    se_ds, pop_ds = _group(tree, "theory_bayes"), _group(tree, "population")
    sedf = _frame(se_ds, ["test_error", "stderr"]) if se_ds is not None else None
    popdf = _frame(pop_ds, ["test_error", "stderr"]) if pop_ds is not None else None
    keys = [k for k in ["method", "variant", "L", "nu", "delta", "alpha"] if k in df]
    out = []
    for key, g in df.groupby(keys, sort=False):
        kv = dict(zip(keys, key, strict=True))
        if g["D"].nunique() < min_sizes:
            continue
        sel = {"variant": kv["variant"], "L": kv["L"], "nu": float(kv["nu"])}
        se_v, se_s = _theory_value(sedf, method="theory_bayes", delta=float(kv["delta"]),
                                   alpha=float(kv["alpha"]), **sel)
        pop_v, pop_s = _theory_value(popdf, method="population:bayes", **sel)
        theory = se_v - pop_v
        theory_se = math.hypot(se_s, pop_s if math.isfinite(pop_s) else 0.0)
        setting = setting_label(kv["variant"], kv["L"], kv["nu"], kv["alpha"], kv["delta"])
        extra = {"theory parts": f"state evolution {pm_4dp(se_v, se_s)} - Bayes population "
                                 f"{pm_4dp(pop_v, pop_s)}"}
        study = make_study(setting, "bayes_sampling (teacher start)", "",
                           "excess_over_oracle", "the state evolution",
                           size_points(g, "excess_over_oracle"), theory, theory_se, extra)
        out.append(_unconverged_not_judged(study))
    return out


def _unconverged_not_judged(study: Study) -> Study:
    """A sampler study with seeds whose chains did not converge is not judged (not enough
    data), as the paper claim does not judge such a point (finite_sample_claims): an
    agreement of chains that have not mixed is no evidence either way. The fit is still
    computed and shown."""
    bad = [(p.D, p.unconverged, p.n) for p in study.points if p.unconverged]
    if not bad:
        return study
    where = ", ".join(f"D={D}: {k} of {n}" for D, k, n in bad)
    why = (f"needs chains that pass the convergence checks at every seed ({where} seeds not "
           "converged): not judged")
    return replace(study, status=UNDECIDED, needs=why,
                   extra={**study.extra, "not judged": why})


def finite_size_studies(tree: xr.DataTree) -> list[Study]:
    """Every study the results hold (ERM, then NUTS)."""
    return erm_studies(tree) + nuts_studies(tree)


def applies(tree: xr.DataTree) -> bool:
    """Whether the results hold a finite-size study: some estimator at >= 3 sizes."""
    return bool(finite_size_studies(tree))


def markdown_table(studies: Sequence[Study]) -> str:
    """The table as Markdown: setting, estimator, quantity, sizes, ``e_inf +- se``,
    ``theory +- se``, distance, verdict (or what is needed)."""
    lines = ["| setting | estimator | quantity | sizes (D max) | e_inf | theory | "
             "|diff| / se | chi2/dof | free exponent | verdict |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    for s in studies:
        r = s.row()
        e = pm_4dp(r["e_inf"], r["e_inf_se"]) if s.fit else "-"
        verdict = s.status if s.fit else s.needs
        if s.fit and s.needs:
            verdict += f" ({s.needs})"
        lines.append(f"| {r['setting']} | {r['estimator']} | {r['quantity']} | "
                     f"{r['sizes']} ({r['D_max']}) | {e} | {pm_4dp(s.theory, s.theory_se)} | "
                     + (f"{s.distance:.2g}" if math.isfinite(s.distance) else "-")
                     + f" | {r['chi2_dof']} | {r['exponent']} | {verdict} |")
    return "\n".join(lines)


# --------------------------------------------------------------------------------------------
# a run in progress (or stopped): its finished cells as one results file
# --------------------------------------------------------------------------------------------
def assemble(out: str | Path, preset: str = "finite-size") -> xr.DataTree:
    """The finished cells of a run of ``preset`` in ``out`` (``bayesslr run --out OUT``) as a
    results tree, read-only (safe beside the running process): the dataset the run will write
    when it completes, restricted to the cells done so far (failures listed; cells of another
    code version of their method left out, as a resumed run would recompute them).

    Raises
    ------
    ConfigError
        ``out`` holds no run of ``preset`` (another config, or no config), or no cell yet.
    """
    from bayesslr.sweep.config import cell_key, load_preset
    from bayesslr.sweep.dataset import build_dataset
    from bayesslr.sweep.storage import ResultStore

    cfg = load_preset(preset)
    store = ResultStore(out)
    stored = store.stored_config()
    if stored is None or stored.get("digest") != cfg.digest():
        raise ConfigError(f"out={str(out)!r} holds no run of the preset {preset!r}; allowed: "
                          f"a directory written by 'bayesslr run --preset {preset}'")
    scan = store.scan(cfg.cells, retry_failed=False)
    records = [scan.done[cell_key(c)] for c in cfg.cells if cell_key(c) in scan.done]
    if not records:
        raise ConfigError(f"out={str(out)!r} holds no finished cell yet")
    return build_dataset(cfg, records)


def write_partial(out: str | Path, path: str | Path | None = None,
                  preset: str = "finite-size") -> Path:
    """Write :func:`assemble` to ``path`` (default ``OUT/partial.nc``), for
    ``bayesslr report OUT/partial.nc``; returns the path."""
    from bayesslr.core.files import write_netcdf_atomic

    target = Path(path) if path is not None else Path(out) / "partial.nc"
    write_netcdf_atomic(assemble(out, preset), target)
    return target
