"""The numbers behind the report's figures, as tables (one row per point).

Each function takes the results of a sweep (:mod:`bayesslr.sweep.dataset`) and returns a
:class:`pandas.DataFrame` with the same reductions as the figures
(:mod:`bayesslr.report.figures`: seed mean, one standard error, ``lam`` tuned per ``alpha``);
an empty frame when the results hold none of it. The verdicts
(:mod:`bayesslr.report.claims`) are computed from these tables, and the notebooks print them,
so a reader can check every number a verdict quotes.
"""

from __future__ import annotations

import itertools
import math

import numpy as np
import pandas as pd
import xarray as xr

from bayesslr.core.activations import ACTIVATIONS
from bayesslr.results.query import (
    SETTING_DIMS,
    Results,
    groups,
    lam_choice,
    largest_size,
    methods_of,
    sampler_starts_of,
    sizes_of,
    stats_of,
)

POPULATION_COLUMNS = ["variant", "L", "nu", "method", "excess_risk", "se", "at_bound",
                      "over_bayes", "over_bayes_se", "search_excess", "search_excess_sd"]
FINITE_COLUMNS = ["variant", "L", "nu", "delta", "alpha", "method", "size", "lam", "test_error",
                  "se", "seeds", "dof", "excess", "excess_se"]


def _value(da: xr.DataArray) -> float:
    v = np.asarray(da.values, dtype=float)
    return float(v.ravel()[0]) if v.size else math.nan


def _coords_product(ds: xr.Dataset, dims: list[str]):
    for vals in itertools.product(*(ds[d].values.tolist() for d in dims)):
        yield dict(zip(dims, vals, strict=True))


def population_table(results: Results) -> pd.DataFrame:
    """Population excess risk per setting and method (``population:*``), with its standard
    error and the ``at_bound`` flag (the optimum at ``|k| -> inf``: an upper bound); the
    excess over the Bayes risk paired on the same rows (``over_bayes``, ``over_bayes_se``:
    NaN for files older than population version 4) and the part of it expected from the
    search on a finite set (``search_excess``, ``search_excess_sd``)."""
    ds = groups(results).get("population")
    rows = []
    for m in methods_of(ds, "population"):
        sub = largest_size(ds, m)
        mean, sem = stats_of(sub)
        bound, _ = stats_of(sub, "at_bound")
        paired, paired_se = stats_of(sub, "excess_over_bayes")
        pen, _ = stats_of(sub, "search_excess")
        pen_sd, _ = stats_of(sub, "search_excess_sd")
        dims = [d for d in mean.dims]
        for sel in _coords_product(mean, dims):
            v = _value(mean.sel(sel))
            if not math.isfinite(v):
                continue
            rows.append({"variant": sel.get("variant", ""), "L": str(sel.get("L", "")),
                         "nu": float(sel.get("nu", math.nan)), "method": m,
                         "excess_risk": v, "se": _value(sem.sel(sel)),
                         "at_bound": bool(np.nan_to_num(_value(bound.sel(sel))) > 0.5),
                         "over_bayes": _value(paired.sel(sel)),
                         "over_bayes_se": _value(paired_se.sel(sel)),
                         "search_excess": _value(pen.sel(sel)),
                         "search_excess_sd": _value(pen_sd.sel(sel))})
    df = pd.DataFrame(rows, columns=POPULATION_COLUMNS).astype(
        {"L": str, "nu": float, "excess_risk": float, "se": float, "at_bound": bool,
         "over_bayes": float, "over_bayes_se": float, "search_excess": float,
         "search_excess_sd": float})
    return df.drop_duplicates(subset=["variant", "L", "nu", "method"]).reset_index(drop=True)


def population_pivot(results: Results) -> pd.DataFrame:
    """:func:`population_table` as one row per setting and one column per method, each cell
    ``value \u00b1 s.e.`` (``\u2264 value`` where the optimum is at the bound: an upper
    bound)."""
    t = population_table(results)
    if t.empty:
        return t

    def cell(r: pd.Series) -> str:
        text = f"{r.excess_risk:.3g} \u00b1 {r.se:.2g}"
        return "\u2264 " + text if r.at_bound else text

    t = t.assign(value=t.apply(cell, axis=1),
                 nu=t.nu.map(lambda x: "inf" if math.isinf(x) else f"{x:g}"),
                 method=t.method.str.partition(":")[2])
    out = t.pivot(index=["variant", "L", "nu"], columns="method", values="value")
    order = [m for m in ("bayes", *ACTIVATIONS) if m in out.columns]
    out = out[order + [c for c in out.columns if c not in order]].fillna("").reset_index()
    out.columns.name = None

    def key(col: pd.Series) -> pd.Series:  # fixed lengths by value, then laws; nu by value
        if col.name == "L":
            return col.map(lambda x: (1, 0) if ("," in x or ":" in x) else (0, int(x)))
        if col.name == "nu":
            return col.map(float)
        return col

    return out.sort_values(["variant", "L", "nu"], key=key).reset_index(drop=True)


def _size_text(size: dict) -> str:
    if not size:
        return "inf"
    d, v = next(iter(size.items()))
    return f"D={int(v)}" if d == "D" else f"sqrtND={float(v):g}"


def finite_sample_table(results: Results, *, all_lams: bool = False) -> pd.DataFrame:
    """Test excess error per setting, ``alpha``, method and size (``size`` is ``inf`` for the
    theories, ``D=...`` or ``sqrtND=...`` for finite-size estimators), seed mean with its
    standard error and the number of seeds; ``lam`` chosen per ``alpha`` without the test
    data (:func:`~bayesslr.results.query.lam_choice`; the chosen value in column ``lam``), or
    one row per ``lam`` when ``all_lams``. ``excess`` and ``excess_se``: the same for the
    paired ``excess_over_oracle`` (the test error less the oracle's on the same teacher and
    test set; NaN where the family has none). ``dof`` is the degrees of
    freedom of ``se``: ``seeds - 1`` when it is the spread over seeds, ``inf`` when it is a
    Monte Carlo error of a large sample (a theory; one seed, whose ``se`` is then the test-set
    error alone, without the teacher-to-teacher spread). Trajectory families (``gd``) are not
    included."""
    from bayesslr.report.figures.error_vs_alpha import finite_sample_groups

    rows: list[dict] = []
    theory = groups(results).get("theory_erm")
    for fam, ds in finite_sample_groups(results).items():
        for m in methods_of(ds, fam):
            for size in sizes_of(ds, m):
                sub = ds.sel({"method": m, **size})
                has_lam = "lam" in sub["test_error"].dims
                if has_lam and all_lams:
                    for i in range(sub.sizes["lam"]):
                        _rows_of(rows, m, size, sub.isel(lam=[i]))
                else:
                    _rows_of(rows, m, size, sub, theory)
    return pd.DataFrame(rows, columns=FINITE_COLUMNS).astype(
        {"L": str, "nu": float, "delta": float, "alpha": float, "test_error": float,
         "se": float, "seeds": int, "dof": float, "excess": float, "excess_se": float})


def _rows_of(rows: list, m: str, size: dict, sub: xr.Dataset,
             theory: xr.Dataset | None = None) -> None:
    """Append the rows of one method at one size (``lam`` chosen over what ``sub`` holds by
    :func:`~bayesslr.results.query.lam_choice`, never on the test error)."""
    mean, sem = stats_of(sub, theory=theory)
    ex_mean, ex_sem = stats_of(sub, "excess_over_oracle", theory=theory)
    te = sub["test_error"]
    n_seeds = te.notnull().sum("seed") if "seed" in te.dims else xr.ones_like(te)
    best = lam_choice(sub, theory)
    for sel in _coords_product(mean, list(mean.dims)):
        v = _value(mean.sel(sel))
        if not math.isfinite(v):
            continue
        at = {d: x for d, x in sel.items()}
        lam: object = ""
        if best is not None:
            idx = int(np.asarray(best.sel(at).values).ravel()[0])
            if idx < 0:
                continue
            lam = sub["lam"].values.tolist()[idx]
            seeds = n_seeds.sel(at).isel(lam=idx)
        else:
            seeds = n_seeds.sel(at)
        full = {d: sub[d].values.tolist()[0] for d in SETTING_DIMS
                if d in sub.dims and sub.sizes[d] == 1}
        full.update(at)
        n = int(np.nanmax(np.asarray(seeds.values, float)))
        rows.append({"variant": full.get("variant", ""), "L": str(full.get("L", "")),
                     "nu": float(full.get("nu", math.nan)),
                     "delta": float(full.get("delta", math.nan)),
                     "alpha": float(full.get("alpha", math.nan)), "method": m,
                     "size": _size_text(size), "lam": f"{lam:g}" if isinstance(lam, float)
                     else str(lam), "test_error": v, "se": _value(sem.sel(at)),
                     "seeds": n, "dof": float(n - 1) if n > 1 and not m.startswith("theory")
                     else math.inf, "excess": _value(ex_mean.sel(at)),
                     "excess_se": _value(ex_sem.sel(at))})


SAMPLER_COLUMNS = ["variant", "L", "nu", "delta", "alpha", "D", "seed", "start", "test_error", "se",
                   "r_hat_max", "ess_bulk_min", "ess_tail_min", "ess_per_grad",
                   "ess_tail_per_grad", "divergences", "grad_evals", "nishimori_gap",
                   "m_k", "q_k", "m_v", "q_v", "log_lik_gap", "r_hat_max_pooled",
                   "disagreement", "chains", "converged", "reason", "sampler",
                   "swap_rate_min", "round_trips"]


def sampler_table(results: Results) -> pd.DataFrame:
    """One row per ``bayes_sampling`` cell and start (``teacher``, ``random``, ``anneal``):
    test error (standard error for the cell's main start only), R-hat, bulk and tail ESS
    (and per gradient evaluation), divergences, overlaps, the Nishimori gap and, on the main
    start's row, the comparison across starts (``log_lik_gap``, ``r_hat_max_pooled``,
    ``disagreement``) and the sampler's ``converged`` verdict with its ``reason``; the
    ``sampler`` (``nuts`` or ``pt``) and, for parallel tempering, ``swap_rate_min`` and
    ``round_trips`` (NaN for NUTS)."""
    ds = groups(results).get("bayes_sampling")
    rows = []
    if not methods_of(ds, "bayes_sampling"):
        return pd.DataFrame(rows, columns=SAMPLER_COLUMNS)
    dims = [d for d in (*SETTING_DIMS, "alpha", "D", "sqrtND", "seed") if d in ds.dims]
    for m in methods_of(ds, "bayes_sampling"):
        sub = ds.sel({"method": m})
        for sel in _coords_product(sub, dims):
            cell = sub.sel(sel)
            if not math.isfinite(_value(cell["test_error"])):
                continue
            main = str(cell["init"].values.item()) if "init" in cell else "teacher"
            for start in sampler_starts_of(cell):
                pre = "" if start == main else f"{start}_"
                if pre and f"{pre}test_error" not in cell:
                    continue

                def get(name: str, pre: str = pre, cell: xr.Dataset = cell) -> float:
                    key = f"{pre}{name}"
                    return _value(cell[key]) if key in cell else math.nan

                grads = get("grad_evals")
                row = {d: sel.get(d, "") for d in ("variant", "L", "nu", "delta", "alpha", "D",
                                                   "seed")}
                row.update({
                    "start": start, "test_error": get("test_error"),
                    "se": get("stderr") if not pre else math.nan,
                    "r_hat_max": get("r_hat_max"), "ess_bulk_min": get("ess_bulk_min"),
                    "ess_tail_min": get("ess_tail_min"),
                    "ess_per_grad": get("ess_bulk_min") / grads if grads > 0 else math.nan,
                    "ess_tail_per_grad": get("ess_tail_min") / grads if grads > 0 else math.nan,
                    "divergences": get("divergences"), "grad_evals": grads,
                    "nishimori_gap": get("nishimori_gap"),
                    **{k: get(k) for k in ("m_k", "q_k", "m_v", "q_v")},
                    "chains": _value(cell["chains"]) if "chains" in cell else math.nan,
                    # cells from before the option have no sampler output: they are NUTS's
                    "sampler": (str(cell["sampler"].values.item()) if "sampler" in cell
                                else "") or "nuts",
                    "swap_rate_min": get("swap_rate_min"), "round_trips": get("round_trips"),
                })
                if not pre:
                    row.update({k: _value(cell[k]) if k in cell else math.nan
                                for k in ("log_lik_gap", "r_hat_max_pooled", "disagreement")})
                    row["converged"] = bool(_value(cell["converged"]) > 0.5) if \
                        "converged" in cell else None
                    row["reason"] = str(cell["reason"].values.item()) if "reason" in cell \
                        else ""
                else:
                    row.update({"log_lik_gap": math.nan, "r_hat_max_pooled": math.nan,
                                "disagreement": math.nan, "converged": None, "reason": ""})
                rows.append(row)
    return pd.DataFrame(rows, columns=SAMPLER_COLUMNS)


TRAJECTORY_COLUMNS = ["method", "init", "seed", "variant", "L", "nu", "alpha", "lam", "D",
                      "steps", "what", "m_k", "q_k", "m_v", "q_v", "test_error"]


def trajectory_table(results: Results) -> pd.DataFrame:
    """The end of every gradient-descent trajectory (``what = "GD final"``) beside the ERM
    fixed point at its setting: the replica prediction (``"replica"``, with ``lam`` and
    ``alpha`` matched) and L-BFGS ERM at the same size (``"L-BFGS (seed mean)"``)."""
    from bayesslr.results.query import fixed_points, trajectory_runs

    rows = []
    for r in trajectory_runs(results):
        s = dict(r["setting"])
        base = {"method": r["method"], "init": r["init"], "seed": r["seed"],
                "variant": s.get("variant", ""), "L": str(s.get("L", "")),
                "nu": s.get("nu", math.nan), "alpha": s.get("alpha", math.nan),
                "lam": s.get("lam", ""), "D": s.get("D", ""),
                "steps": float(np.asarray(r["step"])[-1])}
        rows.append({**base, "what": "GD final",
                     **{v: float(np.asarray(r[v])[-1]) for v in
                        ("m_k", "q_k", "m_v", "q_v", "test_error") if v in r}})
        for key, what in (("replica", "replica"), ("lbfgs", "L-BFGS (seed mean)")):
            fp = fixed_points(results, r).get(key)
            if fp:
                rows.append({**base, "what": what, "steps": math.nan,
                             **{v: fp[v] for v in ("m_k", "q_k", "m_v", "q_v", "test_error")
                                if v in fp}})
    return pd.DataFrame(rows, columns=TRAJECTORY_COLUMNS)


def multihead_table(results: Results) -> pd.DataFrame:
    """One row per estimator, setting and ``alpha`` of the ``multihead`` group: the mean over
    seeds of ``excess_over_oracle`` with its seed-to-seed standard error (the method's own
    standard error with one seed), seeds, converged seeds, and the sampler's worst R-hat and
    smallest bulk ESS (empty frame without that group)."""
    ds = groups(results).get("multihead")
    if ds is None or "excess_over_oracle" not in ds:
        return pd.DataFrame()
    names = [v for v in ("excess_over_oracle", "excess_over_oracle_stderr", "converged",
                         "r_hat_max", "ess_bulk_min", "n_heads", "n_directions") if v in ds]
    df = ds[names].to_dataframe().reset_index()
    df = df[np.isfinite(df["excess_over_oracle"].astype(float))]
    if df.empty:
        return pd.DataFrame()
    keys = [d for d in ds["excess_over_oracle"].dims if d != "seed" and d in df]
    if "lam" in df:  # a sampling cell sets no lam: the dataset broadcasts it along lam
        df.loc[df["method"] == "multihead:bayes_sampling", "lam"] = np.nan
    df = df.drop_duplicates(subset=[*keys, "seed"])
    rows = []
    for key, g in df.groupby(keys, sort=True, dropna=False):
        x = g["excess_over_oracle"].to_numpy(float)
        n = x.size
        se = (float(np.std(x, ddof=1) / np.sqrt(n)) if n > 1
              else float(g["excess_over_oracle_stderr"].iloc[0]))
        row = dict(zip(keys, key, strict=True))
        row.update(F=g["n_directions"].iloc[0] if "n_directions" in g else np.nan,
                   H=g["n_heads"].iloc[0] if "n_heads" in g else np.nan,
                   excess_over_oracle=float(x.mean()), se=se, seeds=n,
                   converged=int(np.sum(g["converged"].to_numpy(float) == 1)))
        if "r_hat_max" in g and np.isfinite(g["r_hat_max"].to_numpy(float)).any():
            row.update(r_hat_max=float(np.nanmax(g["r_hat_max"])),
                       ess_bulk_min=float(np.nanmin(g["ess_bulk_min"])))
        rows.append(row)
    return pd.DataFrame(rows)
