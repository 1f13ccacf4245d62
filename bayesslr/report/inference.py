"""Figures and tables of the inference benchmark (issue 13; docs/theory.md, docs/model.md §6).

Everything starts from a *tidy table* (:func:`tidy`): one row per cell of the ``inference``
family (and of the other families set on the same leaderboard: :func:`leaderboard_families`,
from each family's registry ``ReportRole``),
with the method name split into ``algorithm``, ``start`` and ``budget``. Then:

* :func:`error_vs_cost`: excess test error over the Bayes-optimal reference against the
  gradient evaluations actually used, one line per algorithm and start (budgets joined), one
  panel per task setting;
* :func:`leaderboard`: the table at one budget: error, excess over the reference, cost (gradient
  evaluations, run and compile seconds), and how many seeds converged / reached the reference;
* :func:`trapped`: which algorithms are trapped where: the excess over the reference in units
  of its standard error, per algorithm and setting, at the largest budget.

Reductions, stated once: seeds are averaged; the error bar is the standard error over seeds
(the cell's own standard error when there is one seed). A family without draws of its own
(``erm``, ``amp``) gets ``excess_over_reference`` from the stored reference here, unpaired,
and ``reaches_reference`` by the same rule as the samplers (excess at most 3 standard errors).
GAMP (``amp``) has no gradient budget: its cost is its ``iterations`` and ``run_s`` = iterations
x median seconds per iteration (the data draw, compilation and prediction left out, as
``run_s`` of the samplers leaves compilation out); ``grad_evals`` stays empty for it.
Figures are built without pyplot and raise :class:`~bayesslr.report.figures.NothingToPlot`
when the table holds nothing they draw.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
from matplotlib.figure import Figure
from matplotlib.ticker import NullFormatter

from bayesslr.report.figures import NothingToPlot
from bayesslr.report.output import prepare_out, save_figure, save_text
from bayesslr.results.query import CHOSEN_LAMS

SETTING = ("variant", "L", "nu", "delta", "alpha", "D")
ALGO_COLORS = {"nuts": "C0", "hmc": "C1", "gibbs": "C2", "dgibbs": "C9", "advi": "C3",
               "lowrank": "C4", "map": "C5", "smc": "C6", "erm": "C7", "amp": "C8"}


def algo_color(alg: str) -> str:
    """The colour of an algorithm or family (``erm:softmax`` takes ``erm``'s); black when it
    has none (a colour never decides whether a row is drawn)."""
    return ALGO_COLORS.get(alg, ALGO_COLORS.get(alg.split(":")[0], "k"))


START_STYLES = {"teacher": ":", "random": "-", "anneal": "--", "prior": "-", "": "-."}
START_MARKERS = {"teacher": "s", "random": "o", "anneal": "^", "prior": "D"}
COLUMNS = ("test_error", "stderr", "excess_over_reference", "excess_over_reference_stderr",
           "excess_over_oracle", "excess_over_oracle_stderr", "reference_error",
           "reference_source", "grad_evals", "compile_s", "run_s", "converged", "reason",
           "reaches_reference", "lam", "iterations", "seconds_per_iteration", "cost",
           "cost_unit")


def leaderboard_families() -> tuple[str, ...]:
    """The families on the leaderboard, in order (each entry's ``ReportRole.leaderboard``)."""
    from bayesslr.registry import report_order

    return report_order("leaderboard")


def __getattr__(name: str) -> tuple[str, ...]:
    if name == "LEADERBOARD_FAMILIES":  # the old constant's name, now from the registry
        return leaderboard_families()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def split_method(method: str) -> tuple[str, str, float]:
    """``inference:nuts-random-1e5`` -> ``("nuts", "random", 1e5)``; other families give
    ``(family or activation label, "", nan)``."""
    family, _, suffix = method.partition(":")
    if family == "entry":  # an outside algorithm (bayesslr.posteriors.entries)
        return suffix, "outside", math.nan
    if family == "inference":
        alg, start, tier = suffix.split("-")
        return alg, start, float(tier)
    return (family if not suffix else f"{family}:{suffix}"), "", math.nan


# ------------------------------------------------------------------------------------------
# the tidy table
# ------------------------------------------------------------------------------------------
def tidy(source: Any) -> pd.DataFrame:
    """One row per leaderboard cell.

    Parameters
    ----------
    source
        A results directory or ``dataset.nc`` written by ``bayesslr run`` (the family groups
        ``inference``, ``erm``, ``amp``), a directory of JSON cell records, or an iterable of
        cell records
        ``{"cell": {...}, "status": "ok", "result": {...}}``, or a DataFrame already tidy.
    """
    if isinstance(source, pd.DataFrame):
        return source
    if isinstance(source, str | Path):
        p = Path(source)
        if p.is_dir() and not (p / "dataset.nc").exists() and any(p.glob("*.json")):
            return tidy(records_from_dir(p) + records_from_dir(p / "entries"))
        rows = list(_rows_from_dataset(p)) if not p.is_dir() or (p / "dataset.nc").exists() \
            else []
        if p.is_dir():  # outside algorithms' entries (bayesslr.posteriors.entries)
            rows += [_row(r["cell"], r["result"]) for r in records_from_dir(p / "entries")]
    else:
        rows = [_row(r["cell"], r["result"]) for r in source if r.get("status", "ok") == "ok"]
    if not rows:
        raise NothingToPlot("no inference (or erm, amp) results in the source")
    df = pd.DataFrame(rows)
    return _with_reference(df)


def _row(cell: Mapping[str, Any], res: Mapping[str, Any]) -> dict[str, Any]:
    alg, start, budget = split_method(cell["method"])
    row = {"method": cell["method"], "algorithm": alg, "start": start, "budget": budget,
           "seed": int(cell.get("seed", 0))}
    for k in SETTING:
        row[k] = cell.get(k)
    row["nu"] = float(row["nu"]) if row["nu"] is not None else math.nan
    row["L"] = str(row["L"])
    for k in COLUMNS:
        row[k] = res.get(k, cell.get(k) if k == "lam" else None)
    if row["run_s"] is None and _finite(row["iterations"]) and _finite(
            row["seconds_per_iteration"]):  # GAMP: no gradient budget, cost in iterations
        row["run_s"] = float(row["iterations"]) * float(row["seconds_per_iteration"])
    return row


def _rows_from_dataset(path: Path) -> Iterable[dict[str, Any]]:
    import xarray as xr

    f = path / "dataset.nc" if path.is_dir() else path
    if not f.exists():
        raise NothingToPlot(f"{path} holds no dataset.nc")
    for family in leaderboard_families():
        try:
            ds = xr.open_dataset(f, group=family, engine="h5netcdf").load()
        except (OSError, KeyError, ValueError):
            continue
        keep = [v for v in COLUMNS if v in ds.data_vars]
        if "status" in ds:
            keep.append("status")
        frame = ds[keep].to_dataframe().reset_index()
        if "status" in frame:
            frame = frame[frame["status"].astype(str) == "ok"]
        frame = frame.dropna(subset=["test_error"])
        for rec in frame.to_dict("records"):
            cell = {k: rec.get(k) for k in ("method", "seed", *SETTING, "lam")}
            yield _row(cell, rec)


def _leaderboard_role(field: str) -> Callable[..., Any] | None:
    """A hook of the leaderboard's Bayes-optimal reference (``reference`` or
    ``reference_data``): that of the first leaderboard family whose registry ``ReportRole``
    has it (the ``inference`` family's); None when none has."""
    from bayesslr.registry import families

    for fam in leaderboard_families():
        hook = getattr(families()[fam].report, field)
        if hook is not None:
            return hook
    return None


def _with_reference(df: pd.DataFrame) -> pd.DataFrame:
    """Fill ``excess_over_reference`` of families that do not compute it (unpaired)."""
    lookup = _leaderboard_role("reference")
    df = df.copy()
    need = df["excess_over_reference"].isna() if "excess_over_reference" in df else (
        pd.Series(True, index=df.index))
    if lookup is None:
        return df
    for i in df.index[need]:
        r = df.loc[i]
        if not all(_finite(r[k]) for k in ("alpha", "D", "nu", "delta")) or math.isinf(r["nu"]):
            continue  # no task to look up (population or sqrtND-sized cells, nu = inf)
        look = lookup(r["variant"], r["L"], r["nu"], r["delta"], int(r["D"]), float(r["alpha"]),
                      int(r["seed"]))
        if look is None:
            continue
        df.loc[i, "reference_error"] = look["test_error"]
        df.loc[i, "reference_source"] = look["source"]
        df.loc[i, "excess_over_reference"] = float(r["test_error"]) - look["test_error"]
        df.loc[i, "excess_over_reference_stderr"] = math.hypot(float(r["stderr"]),
                                                               look["stderr"])
        if not _finite(r.get("reaches_reference")):  # the samplers' rule: within 3 stderr
            df.loc[i, "reaches_reference"] = bool(
                df.loc[i, "excess_over_reference"] <= 3 * df.loc[i, "excess_over_reference_stderr"])
    return df


def _finite(x: Any) -> bool:
    try:
        return x is not None and not math.isnan(float(x))
    except (TypeError, ValueError):
        return False


def best_lam(df: pd.DataFrame) -> pd.DataFrame:
    """ERM rows at a ``lam`` chosen without the test data: per method and setting, the rows run
    with ``lam = "replica"`` or ``"validation"`` (chosen inside the cell) when there are any,
    else the only ``lam`` run; with several numeric ``lam`` and none chosen, every ``lam`` is
    kept as its own entry (``algorithm`` ``erm (lam=0.3)``), never picked on the test error."""
    is_erm = df["algorithm"].astype(str).str.startswith("erm")
    erm = df[is_erm].copy()
    if erm.empty or "lam" not in erm:
        return df
    keys = ["method", *SETTING]
    erm["_setting"] = ["|".join(map(str, t)) for t in erm[keys].itertuples(index=False)]
    keep = []
    for _, g in erm.groupby("_setting", sort=False):
        lams = g["lam"].astype(str)
        chosen = g[lams.isin(CHOSEN_LAMS)]
        if not chosen.empty:
            keep.append(chosen)
        elif lams.nunique() == 1:
            keep.append(g)
        else:
            keep.append(g.assign(algorithm=[f"{a} (lam={lam})" for a, lam in
                                            zip(g["algorithm"], lams, strict=True)]))
    out = pd.concat(keep).drop(columns="_setting")
    return pd.concat([df[~is_erm], out], ignore_index=True)


def summarize(df: pd.DataFrame) -> pd.DataFrame:
    """Seed means per method and setting, with standard errors over seeds (or the cell's own
    when one seed), the convergence and reach counts."""
    df = best_lam(tidy(df))
    keys = ["method", "algorithm", "start", "budget", *SETTING]
    out = []
    for key, g in df.groupby(keys, dropna=False):
        n = len(g)
        row = dict(zip(keys, key, strict=True))
        for v, own in (("test_error", "stderr"),
                       ("excess_over_reference", "excess_over_reference_stderr"),
                       ("excess_over_oracle", "excess_over_oracle_stderr")):
            x = pd.to_numeric(g[v], errors="coerce")
            row[v] = float(x.mean())
            if n > 1:
                row[f"{v}_se"] = float(x.std(ddof=1) / math.sqrt(n))
            else:
                row[f"{v}_se"] = float(pd.to_numeric(g[own], errors="coerce").iloc[0])
        for v in ("grad_evals", "compile_s", "run_s", "reference_error", "iterations", "cost"):
            row[v] = float(pd.to_numeric(g[v], errors="coerce").mean())
        row["cost_unit"] = g["cost_unit"].dropna().iloc[0] if g["cost_unit"].notna().any() \
            else None
        row["seeds"] = n
        row["converged"] = int(g["converged"].fillna(False).astype(bool).sum())
        row["reaches_reference"] = int(g["reaches_reference"].fillna(False).astype(bool).sum())
        out.append(row)
    return pd.DataFrame(out)


# ------------------------------------------------------------------------------------------
# figures and tables
# ------------------------------------------------------------------------------------------
def _settings(s: pd.DataFrame) -> list[tuple]:
    return sorted({tuple(r) for r in s[list(SETTING)].itertuples(index=False)},
                  key=lambda t: (t[3], t[5], t[4]))


def _title(t: tuple) -> str:
    d = dict(zip(SETTING, t, strict=True))
    return (f"{d['variant']} L={d['L']} nu={d['nu']:g} Delta={d['delta']:g}\n"
            f"alpha={d['alpha']:g}, D={int(d['D'])}")


def error_vs_cost(df: pd.DataFrame) -> Figure:
    """Excess test error over the reference against gradient evaluations used."""
    s = summarize(df)
    s = s[np.isfinite(s["excess_over_reference"])]  # membership: leaderboard_families()
    inf = s[~s["start"].isin(["", "outside"])]
    if inf.empty:
        raise NothingToPlot("no inference:* results with a reference")
    panels = _settings(inf)
    cols = min(len(panels), 3)
    rows = math.ceil(len(panels) / cols)
    fig = Figure(figsize=(4.8 * cols, 3.8 * rows), layout="constrained")
    axes = fig.subplots(rows, cols, squeeze=False).ravel()
    for ax in axes[len(panels):]:
        ax.set_visible(False)
    for ax, t in zip(axes, panels, strict=False):
        sel = np.all([s[k] == v for k, v in zip(SETTING, t, strict=True)], axis=0)
        sub = s[sel]
        for (alg, start), g in sub.groupby(["algorithm", "start"]):
            g = g.sort_values("grad_evals")
            x = g["grad_evals"].to_numpy(float)
            y = g["excess_over_reference"].to_numpy(float)
            e = g["excess_over_reference_se"].to_numpy(float)
            if start == "outside" and not np.isfinite(x).all():  # own cost unit: a line
                ax.axhline(y.mean(), color="k", lw=1, ls=(0, (1, 1)),
                           label=f"{alg} (outside; {g['cost'].mean():.3g} "
                                 f"{g['cost_unit'].iloc[0]})")
                continue
            if start == "outside":  # in gradient evaluations: on the cost axis
                ax.errorbar(x, y, yerr=np.nan_to_num(e), color="k", ls="none", marker="*",
                            ms=8, capsize=2, label=f"{alg} (outside)")
                continue
            if start == "":  # ERM / AMP: a horizontal band (no budget)
                label = alg
                if alg == "amp" and np.isfinite(g["iterations"]).any():
                    label = f"GAMP ({g['iterations'].mean():.0f} iterations, no gradients)"
                ax.axhline(y.mean(), color=algo_color(alg), lw=1,
                           ls="-.", label=label)
                continue
            ax.errorbar(x, y, yerr=np.nan_to_num(e), color=algo_color(alg),
                        ls=START_STYLES.get(start, "-"), marker=START_MARKERS.get(start, "o"),
                        ms=4, capsize=2,
                        label=f"{alg} ({start})")
        ax.axhline(0.0, color="k", lw=1)
        ax.set_xscale("log")
        lo, hi = float(sub["grad_evals"].min()), float(sub["grad_evals"].max())
        ax.set_xlim(10 ** math.floor(math.log10(lo)), 10 ** math.ceil(math.log10(hi) + 1e-9))
        ax.xaxis.set_minor_formatter(NullFormatter())
        ax.set_yscale("symlog", linthresh=0.01)
        ax.set_xlabel("gradient evaluations used")
        ax.set_ylabel("excess error over the reference")
        ax.set_title(_title(t), fontsize=8)
        ax.legend(fontsize=6, ncol=2)
    fig.suptitle("Error against cost\n(0 = the Bayes-optimal reference)", fontsize=10)
    return fig


def leaderboard(df: pd.DataFrame, budget: float | None = None) -> pd.DataFrame:
    """The leaderboard at ``budget`` (default: the largest in the table), one row per method
    and setting, sorted by the excess over the reference within each setting. Families without
    a budget (ERM, GAMP) appear in every budget's table; GAMP's cost is ``iterations`` and
    ``run_s`` (no ``grad_evals``)."""
    s = summarize(df)
    inf = s[~s["start"].isin(["", "outside"])]
    if inf.empty:
        raise NothingToPlot("no inference:* results")
    b = float(inf["budget"].max()) if budget is None else float(budget)
    s = s[(s["budget"] == b) | s["start"].isin(["", "outside"])]
    if s[~s["start"].isin(["", "outside"])].empty:
        raise NothingToPlot(f"no inference:* results at budget {b:g}")
    cols = ["algorithm", "start", *SETTING, "test_error", "test_error_se",
            "excess_over_reference", "excess_over_reference_se", "reference_error",
            "grad_evals", "iterations", "run_s", "compile_s", "cost", "cost_unit", "seeds",
            "converged", "reaches_reference"]
    out = s[cols].sort_values(["delta", "D", "alpha", "excess_over_reference"])
    out.attrs["budget"] = b
    return out.reset_index(drop=True)


def trapped(df: pd.DataFrame) -> Figure:
    """Which algorithms are trapped where: excess over the reference (colour: in units of its
    standard error, clipped at 10) per algorithm and start (rows) and setting (columns), at the
    largest budget of each; the number printed is the excess error itself."""
    s = summarize(df)
    s = s[~s["start"].isin(["", "outside"]) & np.isfinite(s["excess_over_reference"])]
    if s.empty:
        raise NothingToPlot("no inference:* results with a reference")
    s = s.loc[s.groupby(["algorithm", "start", *SETTING])["budget"].idxmax()]
    rows = sorted({(a, st) for a, st in zip(s["algorithm"], s["start"], strict=True)},
                  key=lambda r: (list(ALGO_COLORS).index(r[0]) if r[0] in ALGO_COLORS
                                 else len(ALGO_COLORS), r[0], r[1]))
    cols = _settings(s)
    z = np.full((len(rows), len(cols)), np.nan)
    txt = [["" for _ in cols] for _ in rows]
    for _, r in s.iterrows():
        i = rows.index((r["algorithm"], r["start"]))
        j = cols.index(tuple(r[k] for k in SETTING))
        se = max(float(r["excess_over_reference_se"]), 1e-12)
        z[i, j] = min(max(float(r["excess_over_reference"]) / se, -10.0), 10.0)
        txt[i][j] = f"{r['excess_over_reference']:+.3f}\n({int(r['budget']):.0e})"
    fig = Figure(figsize=(1.9 * len(cols) + 2.5, 0.42 * len(rows) + 1.8), layout="constrained")
    ax = fig.subplots()
    im = ax.imshow(z, cmap="RdYlGn_r", vmin=-10, vmax=10, aspect="auto")
    for i in range(len(rows)):
        for j in range(len(cols)):
            ax.text(j, i, txt[i][j], ha="center", va="center", fontsize=6)
    ax.set_yticks(range(len(rows)), [f"{a} ({st})" for a, st in rows], fontsize=7)
    ax.set_xticks(range(len(cols)), [_title(c).replace("\n", "\n") for c in cols], fontsize=6)
    fig.colorbar(im, ax=ax, label="excess / its stderr (clipped at 10)")
    ax.set_title("Trapped where?\nexcess error over the reference (largest budget)", fontsize=9)
    return fig


INFERENCE_FIGURES = {"inference_error_vs_cost": error_vs_cost, "inference_trapped": trapped}


def write_inference_figures(source: Any, out: str | Path, *,
                            formats: tuple[str, ...] = ("png",), dpi: int = 120
                            ) -> tuple[list[Path], list[tuple[str, str]]]:
    """Draw :data:`INFERENCE_FIGURES` and write the leaderboard tables (CSV, one per budget)."""
    df = tidy(source)
    out = prepare_out(out)
    written: list[Path] = []
    skipped: list[tuple[str, str]] = []
    for name, fn in INFERENCE_FIGURES.items():
        try:
            fig = fn(df)
        except NothingToPlot as why:
            skipped.append((name, str(why)))
            continue
        for fmt in formats:
            written.append(save_figure(fig, out / f"{name}.{fmt}", dpi=dpi))
    budgets = sorted(b for b in df["budget"].dropna().unique())
    for b in budgets:
        p = out / f"inference_leaderboard_{int(b):.0e}.csv"
        save_text(leaderboard(df, b).to_csv(index=False), p)
        written.append(p)
    return written, skipped


def records_from_dir(path: str | Path) -> list[dict[str, Any]]:
    """Cell records stored as JSON files (``{"cell", "status", "result"}``) in a directory."""
    out = []
    for f in sorted(Path(path).glob("*.json")):
        rec = json.loads(f.read_text())
        if isinstance(rec, dict) and "cell" in rec and "result" in rec:
            out.append(rec)
    return out


def reference_table() -> pd.DataFrame:
    """The stored Bayes-optimal reference tasks (one row each) and their checks (the
    ``reference_data`` of a leaderboard family's registry ``ReportRole``)."""
    load = _leaderboard_role("reference_data")
    ds = load() if load is not None else None
    if ds is None:
        raise NothingToPlot("the reference dataset is not installed")
    cols = ["variant", "L", "nu", "delta", "D", "alpha", "seed", "test_error", "stderr",
            "oracle_error", "mc_bias", "r_hat_max", "ess_bulk_min", "divergences",
            "checks_passed", "random_test_error", "random_excess_over_reference",
            "random_excess_over_reference_stderr", "pooled_r_hat_max", "grad_evals"]
    return ds[[c for c in cols if c in ds]].to_dataframe().reset_index(drop=True)
