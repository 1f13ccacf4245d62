"""The multi-head claims (docs/multihead.md section 8; Sagitova, Duranthon, Zdeborová, arXiv
2603.03993, from its abstract): judged on the ``multihead`` group of a sweep, where every
estimator of a seed saw the same teacher, training set and test set.

The quantity judged is each estimator's **excess over the sampled Bayes-optimal estimator**:
``excess_over_oracle`` (its test error minus the teacher-known Bayes predictor's, on the same
test rows) minus that of ``multihead:bayes_sampling`` on the same seed. Both terms are paired
with the same oracle, so the difference is the difference of the two test errors exactly; no
estimator can appear better than the Bayes-optimal one by test-set noise in the oracle. Per
setting and ``alpha``, the differences are averaged over seeds, with the seed-to-seed standard
error and the Student-t quantile of its degrees of freedom (:mod:`~bayesslr.report.claims.verdict`:
two seeds cannot decide an ordering unless it is fourteen standard errors wide).

A seed whose sampler did not converge (``converged`` false) is not used as ground truth: its
points are left out and listed, never judged. A claim the results cannot decide says what it
needs.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

import numpy as np
import pandas as pd

from bayesslr.report.claims import verdict as vd
from bayesslr.results.query import Results, groups

GROUP = "multihead"
SAMPLER = "multihead:bayes_sampling"
ATTENTIONS = ("multihead:softmax", "multihead:softmax1", "multihead:bayes_softmax")

MULTIHEAD_CLAIMS = (
    "the sampled Bayes-optimal estimator is certified: every sampling cell passes the "
    "convergence rule on permutation-invariant quantities",
    "the sampled Bayes-optimal estimator has the lowest error: every attention student is above "
    "it at every alpha",
    "softmax-1 reduces the noise of plain softmax: lower excess at every alpha",
    "Bayes-softmax reaches optimal prediction better than the other attentions: lower excess "
    "than softmax-1 at every alpha, and its excess over the Bayes-optimal estimator shrinks "
    "towards the largest alpha (against an alpha at most a quarter of it)",
    "plain softmax keeps an error floor: towards the largest alpha (from one at most a quarter "
    "of it) its excess over the Bayes-optimal estimator falls by less than half (a vanishing "
    "excess, 1/alpha, would fall to a quarter)",
    "heads can be pruned: with more heads than directions (H > F), keeping the F most "
    "important heads (no retraining) does not raise the excess error",
    "heads specialise after an unspecialised phase: on most seeds, gradient descent passes "
    "through a phase where every head lies in the teacher's span on one common mixture of the "
    "directions, then ends with one head per direction",
)

# the stages rule (docs/multihead.md section 8.7), constants of the rule, fixed from the
# index's definition before any trajectory was judged: a head "in the span" has a cosine of
# at least ALIGNED with its projection on it (a random head: about sqrt(F / D)); heads
# "unspecialised" have a specialisation index of at most UNSPECIALISED, "specialised" of at
# least SPECIALISED (0: one common mixture, 1: one head per direction)
ALIGNED, UNSPECIALISED, SPECIALISED = 0.9, 0.15, 0.9
GD_GROUP = "multihead_gd"

# setting columns: a point of a claim is one setting and one alpha, over seeds
_SETTING = ("variant", "L", "nu", "delta", "D", "F", "lam", "H")


def _frame(results: Results) -> pd.DataFrame | None:
    """One row per computed cell of the ``multihead`` group: setting, ``alpha``, ``seed``,
    ``method``, the excess over the oracle and ``converged``."""
    ds = groups(results).get(GROUP)
    if ds is None or "excess_over_oracle" not in ds:
        return None
    names = [v for v in ("excess_over_oracle", "excess_over_oracle_stderr", "converged",
                         "n_heads", "n_directions") if v in ds]
    df = ds[names].to_dataframe().reset_index()
    df = df[np.isfinite(df["excess_over_oracle"].astype(float))]
    if df.empty:
        return None
    for col in _SETTING:
        if col not in df:
            df[col] = ""
    # the task's F and the student's H (options: dimensions only where they vary)
    if "n_directions" in df:
        df["F"] = df["n_directions"].map(lambda v: f"{v:g}" if np.isfinite(v) else "")
    if "n_heads" in df:
        df["H"] = df["n_heads"].map(lambda v: f"{v:g}" if np.isfinite(v) else "")
    return df


def _key(row: Mapping[str, object], *, with_student: bool = True) -> tuple:
    cols = _SETTING if with_student else _SETTING[:-2]
    return tuple(str(row[c]) for c in cols)


def _setting_text(row: Mapping[str, object], alpha: float) -> str:
    s = {c: row[c] for c in ("variant", "L", "nu", "delta", "D")}
    s["alpha"] = alpha
    if str(row.get("lam", "")) not in ("", "nan") and str(row.get("H", "")) not in ("", "nan"):
        s["lam"] = row["lam"]
    text = vd.cell_text(s)
    extra = f" F={row['F']}" if str(row.get("F", "")) not in ("", "nan") else ""
    if str(row.get("H", "")) not in ("", "nan"):
        extra += f" H={int(float(row['H']))}"
    return text + extra


def _bayes(df: pd.DataFrame) -> tuple[dict[tuple, float], list[str]]:
    """The sampler's ``excess_over_oracle`` by (setting without student, alpha, seed), from
    converged cells only, and the cells left out."""
    out, skipped = {}, []
    for _, r in df[df["method"] == SAMPLER].iterrows():
        where = (*_key(r, with_student=False), float(r["alpha"]), int(r["seed"]))
        if bool(r.get("converged", 1) == 1):
            out[where] = float(r["excess_over_oracle"])
        else:
            skipped.append(f"{_setting_text(r, float(r['alpha']))} seed {int(r['seed'])}")
    return out, skipped


def _gaps(df: pd.DataFrame, method: str, bayes: Mapping[tuple, float]
          ) -> dict[tuple, dict[int, float]]:
    """Per (setting, alpha): seed -> excess over the sampled Bayes-optimal estimator."""
    out: dict[tuple, dict[int, float]] = {}
    for _, r in df[df["method"] == method].iterrows():
        a, s = float(r["alpha"]), int(r["seed"])
        b = bayes.get((*_key(r, with_student=False), a, s))
        if b is None:
            continue
        out.setdefault((*_key(r), a), {})[s] = float(r["excess_over_oracle"]) - b
    return out


def _mean_se(values: Sequence[float]) -> tuple[float, float, int]:
    x = np.asarray(values, dtype=float)
    n = x.size
    if n == 0:
        return math.nan, math.nan, 0
    return float(x.mean()), (float(x.std(ddof=1) / math.sqrt(n)) if n > 1 else math.nan), n


def _row_of(df: pd.DataFrame, key: tuple) -> Mapping[str, object]:
    return dict(zip(_SETTING, key, strict=True))


def _skipped_note(skipped: Sequence[str]) -> str:
    if not skipped:
        return ""
    return (f"; left out (sampler not converged, not ground truth): {len(skipped)} cell"
            f"{'s' * (len(skipped) > 1)}: " + ", ".join(skipped[:4])
            + (" ..." if len(skipped) > 4 else ""))


def _ordering(df: pd.DataFrame, bayes: Mapping[tuple, float], low: str | None, high: str,
              claim: str) -> vd.Verdict:
    """``low < high`` in excess at every (setting, alpha), paired by seed; ``low=None``: the
    sampled Bayes-optimal estimator (a gap of 0)."""
    g_high = _gaps(df, high, bayes)
    g_low = _gaps(df, low, bayes) if low is not None else None
    pts = []
    keys = sorted(g_high)
    m = len(keys)
    for key in keys:
        hi = g_high[key]
        lo = g_low.get(key) if g_low is not None else None
        if g_low is not None and lo is None:
            continue
        seeds = sorted(set(hi) & set(lo)) if lo is not None else sorted(hi)
        d = [hi[s] - (lo[s] if lo is not None else 0.0) for s in seeds]
        mean, se, n = _mean_se(d)
        where = _setting_text(_row_of(df, key[:-1]), key[-1])
        if n < 2:
            pts.append((vd.undecided("needs two or more seeds with a converged sampler"),
                        f"{where}: {n} seed"))
            continue
        st = vd.less(0.0, 0.0, mean, se, dof_b=n - 1, tests=m)
        name_lo = low.partition(":")[2] if low else "Bayes (sampled)"
        pts.append((st, f"{where}: {high.partition(':')[2]} - {name_lo} = "
                        f"{vd.pm(mean, se)} over {n} seeds"))
    return vd.verdict_of(claim, pts, f"needs {high} and {low or SAMPLER} cells on the same "
                                     "seeds", tests=m)


def _certified(df: pd.DataFrame) -> vd.Verdict:
    s = df[df["method"] == SAMPLER]
    # a sampling cell sets no lam or H: the dataset broadcasts it along them; count it once
    s = s.drop_duplicates(subset=[*_SETTING[:-2], "alpha", "seed"])
    if s.empty:
        return vd.Verdict(MULTIHEAD_CLAIMS[0], vd.UNDECIDED, f"needs {SAMPLER} cells")
    bad = s[s["converged"] != 1]
    pts = [(vd.FAILS if not bad.empty else vd.HOLDS,
            f"{len(s) - len(bad)} of {len(s)} sampling cells converged")]
    if not bad.empty:
        pts[0] = (vd.FAILS, pts[0][1] + ": not "
                  + ", ".join(f"{_setting_text(r, float(r['alpha']))} seed {int(r['seed'])}"
                              for _, r in bad.head(4).iterrows()))
    return vd.verdict_of(MULTIHEAD_CLAIMS[0], pts, f"needs {SAMPLER} cells")


def _floor(df: pd.DataFrame, bayes: Mapping[tuple, float], method: str, claim: str,
           *, shrinks: bool) -> vd.Verdict:
    """Between the largest ``alpha`` of a setting and the largest one at most a quarter of it,
    the excess over the Bayes-optimal estimator: ``shrinks`` -- it is lower at the largest
    ``alpha`` (ordering); else (a floor) -- it falls by less than half: ``gap(alpha_max) >
    gap(alpha_min) / 2`` (ordering), paired by seed."""
    g = _gaps(df, method, bayes)
    by_setting: dict[tuple, dict[float, dict[int, float]]] = {}
    for key, seeds in g.items():
        by_setting.setdefault(key[:-1], {})[key[-1]] = seeds
    pts = []
    for setting, per_alpha in sorted(by_setting.items()):
        alphas = sorted(per_alpha)
        # the largest alpha against the largest one at most a quarter of it
        prev = [a for a in alphas if a <= alphas[-1] / 4]
        if not prev:
            pts.append((vd.undecided("needs two alpha a factor 4 or more apart"),
                        _setting_text(_row_of(df, setting), alphas[-1])))
            continue
        lo, hi = per_alpha[prev[-1]], per_alpha[alphas[-1]]
        seeds = sorted(set(lo) & set(hi))
        fac = 1.0 if shrinks else 0.5
        d = [(fac * lo[s] - hi[s]) if shrinks else (hi[s] - fac * lo[s]) for s in seeds]
        mean, se, n = _mean_se(d)
        where = (f"{_setting_text(_row_of(df, setting), alphas[-1])} against α="
                 f"{prev[-1]:g}")
        if n < 2:
            pts.append((vd.undecided("needs two or more seeds at both alpha"), where))
            continue
        st = vd.less(0.0, 0.0, mean, se, dof_b=n - 1, tests=len(by_setting))
        lo_m, hi_m = _mean_se([lo[s] for s in seeds])[:2], _mean_se([hi[s] for s in seeds])[:2]
        pts.append((st, f"{where}: excess over Bayes {vd.pm(*lo_m)} -> {vd.pm(*hi_m)}, "
                        f"{'drop' if shrinks else 'gap(max) - gap(min)/2'} "
                        f"{vd.pm(mean, se)} over {n} seeds"))
    return vd.verdict_of(claim, pts, f"needs {method} and {SAMPLER} at two alpha a factor 4 "
                                     "apart, two or more seeds", tests=max(len(by_setting), 1))


def _pruning(results: Results, df: pd.DataFrame) -> vd.Verdict:
    claim = MULTIHEAD_CLAIMS[5]
    ds = groups(results)[GROUP]
    if "prune_excess_over_oracle" not in ds:
        return vd.Verdict(claim, vd.UNDECIDED, "needs pruning curves (multihead attention cells)")
    rows = df[df["method"].isin(ATTENTIONS)]
    rows = rows[[str(h) not in ("", "nan") and str(f) not in ("", "nan") and float(h) > float(f)
                 for h, f in zip(rows["H"], rows["F"], strict=True)]]
    if rows.empty:
        return vd.Verdict(claim, vd.UNDECIDED, "needs attention cells with more heads than "
                                               "directions (option H > F)")
    per: dict[tuple, dict[int, float]] = {}
    curve = ds["prune_excess_over_oracle"]
    for _, r in rows.iterrows():
        sel = {d: r[d] for d in curve.dims if d in r and d != "heads_kept"}
        c = np.asarray(curve.sel(sel).values, dtype=float).ravel()
        H, F = int(float(r["H"])), int(float(r["F"]))
        if c.size <= H or not (math.isfinite(c[F]) and math.isfinite(c[H])):
            continue
        per.setdefault((r["method"], *_key(r), float(r["alpha"])), {})[int(r["seed"])] = (
            c[F] - c[H])
    pts = []
    for key, seeds in sorted(per.items()):
        mean, se, n = _mean_se(list(seeds.values()))
        where = f"{key[0].partition(':')[2]}, " + _setting_text(
            _row_of(df, key[1:-1]), key[-1])
        if n < 2:
            pts.append((vd.undecided("needs two or more seeds"), f"{where}: {n} seed"))
            continue
        # costs nothing: not above zero beyond the family threshold (below: pruning helped)
        st = vd.HOLDS if mean <= vd.critical(n - 1, tests=len(per)) * se else vd.FAILS
        pts.append((st, f"{where}: excess with F heads kept minus with all {vd.pm(mean, se)} "
                        f"over {n} seeds"))
    return vd.verdict_of(claim, pts, "needs attention cells with H > F", tests=max(len(per), 1))


def multihead_claims(results: Results) -> list[vd.Verdict]:
    """The multi-head model's claims (module docstring), one :class:`Verdict` each, in the
    order of :data:`MULTIHEAD_CLAIMS`."""
    df = _frame(results)
    if df is None:
        return [vd.Verdict(c, vd.UNDECIDED, "needs multihead results (bayesslr run --preset "
                                            "multihead-quick)") for c in MULTIHEAD_CLAIMS]
    bayes, skipped = _bayes(df)
    note = _skipped_note(skipped)
    out = [_certified(df)]
    lowest = [_ordering(df, bayes, None, m, "") for m in ATTENTIONS]
    pts = [p for v in lowest for p in v.points]
    out.append(vd.verdict_of(MULTIHEAD_CLAIMS[1], pts, f"needs attention and {SAMPLER} cells "
                             "on the same seeds", tests=max(len(pts), 1)))
    out.append(_ordering(df, bayes, "multihead:softmax1", "multihead:softmax",
                         MULTIHEAD_CLAIMS[2]))
    order = _ordering(df, bayes, "multihead:bayes_softmax", "multihead:softmax1", "")
    shrink = _floor(df, bayes, "multihead:bayes_softmax", "", shrinks=True)
    out.append(vd.verdict_of(MULTIHEAD_CLAIMS[3], [*order.points, *shrink.points],
                             "needs bayes_softmax, softmax1 and sampling cells at two alpha",
                             tests=max(len(order.points) + len(shrink.points), 1)))
    out.append(_floor(df, bayes, "multihead:softmax", MULTIHEAD_CLAIMS[4], shrinks=False))
    out.append(_pruning(results, df))
    if note:  # the GD claim uses no sampler: no note
        out = [vd.Verdict(v.claim, v.status, v.evidence + note, v.points) if i else v
               for i, v in enumerate(out)]
    out.append(_stages(results))
    return out


def shows_stages(alignment: Sequence[float], index: Sequence[float]) -> bool:
    """One trajectory (records in step order) passes through the unspecialised phase (a record
    with the heads in the teacher's span, ``alignment >= ALIGNED``, and ``index <=
    UNSPECIALISED``) and ends specialised (last ``index >= SPECIALISED``).

    >>> shows_stages([0.3, 0.98, 0.97, 0.98], [0.5, 0.02, 0.6, 0.99])
    True
    >>> shows_stages([0.3, 0.5, 0.97, 0.98], [0.5, 0.02, 0.95, 0.99])   # never in the span
    False
    >>> shows_stages([0.3, 0.98, 0.8, 0.8], [0.5, 0.02, 0.01, 0.01])    # stays unspecialised
    False
    """
    a, s = np.asarray(alignment, float), np.asarray(index, float)
    ok = np.isfinite(a) & np.isfinite(s)
    a, s = a[ok], s[ok]
    if s.size < 2 or s[-1] < SPECIALISED:
        return False
    return bool(np.any((a >= ALIGNED) & (s <= UNSPECIALISED)))


def _majority(k: int, n: int, tests: int) -> vd.Status:
    """``k`` of ``n`` seeds show the stages: is the fraction above one half? One-sided
    binomial tests at the level of one ``Z = 2`` comparison shared by ``tests`` points
    (:func:`bayesslr.report.claims.verdict.critical`); undecided: the seeds that would decide
    at the observed fraction."""
    from scipy import stats

    level = (1.0 - stats.norm.cdf(vd.Z)) / tests
    if n and stats.binomtest(k, n, 0.5, alternative="greater").pvalue < level:
        return vd.Status(vd.HOLDS)
    if n and stats.binomtest(k, n, 0.5, alternative="less").pvalue < level:
        return vd.Status(vd.FAILS)
    f = k / n if n else 0.5
    if abs(f - 0.5) < 1e-12:
        return vd.undecided(f"{k} of {n} seeds: at one half no number of seeds decides; "
                            "needs more seeds to move the fraction")
    for m in range(n + 1, 100_001):
        j = int(round(f * m))
        alt = "greater" if f > 0.5 else "less"
        if stats.binomtest(j, m, 0.5, alternative=alt).pvalue < level:
            return vd.undecided(f"needs about {m} seeds at the observed fraction {f:.2f}")
    return vd.undecided("needs more than 100000 seeds at the observed fraction")


def _stages(results: Results) -> vd.Verdict:
    """The stages claim on the ``multihead_gd`` group: per member, setting and ``alpha``, the
    seeds whose trajectory :func:`shows_stages`, judged by :func:`_majority`."""
    claim = MULTIHEAD_CLAIMS[6]
    need = ("needs gradient-descent trajectories of the multi-head student "
            "(multihead_gd cells, e.g. bayesslr run --preset multihead)")
    ds = groups(results).get(GD_GROUP)
    names = ("trajectory_alignment_K", "trajectory_specialisation_K")
    if ds is None or any(n not in ds for n in names) or "step" not in ds.dims:
        return vd.Verdict(claim, vd.UNDECIDED, need)
    other = [d for d in ds[names[1]].dims if d not in ("method", "seed", "step")]
    per: dict[tuple, list[bool]] = {}
    for m in ds["method"].values.tolist():
        sub = ds.sel({"method": m})
        a_all = sub[names[0]].transpose(*other, "seed", "step").values
        s_all = sub[names[1]].transpose(*other, "seed", "step").values
        for idx in np.ndindex(*a_all.shape[:-2]):
            where = {d: sub[d].values[i].item() for d, i in zip(other, idx, strict=True)}
            for j in range(a_all.shape[-2]):
                a, s = a_all[idx + (j,)], s_all[idx + (j,)]
                if not np.isfinite(s).any():
                    continue
                key = (m, *sorted((d, str(v)) for d, v in where.items()))
                per.setdefault(key, []).append(shows_stages(a, s))
    if not per:
        return vd.Verdict(claim, vd.UNDECIDED, need)
    pts = []
    for key, shown in sorted(per.items()):
        where = dict(key[1:])
        k, n = int(sum(shown)), len(shown)
        st = _majority(k, n, tests=len(per))
        setting = {d: where.get(d) for d in ("variant", "L", "nu", "delta", "alpha", "lam", "D")}
        setting = {d: (float(v) if d in ("nu", "delta", "alpha") and v is not None else v)
                   for d, v in setting.items()}
        extra = "".join(f" {d}={v}" for d, v in where.items() if d not in setting)
        text = (f"{key[0].partition(':')[2]}, {vd.cell_text(setting)}{extra}: {k} of {n} "
                f"seeds pass "
                f"the unspecialised phase (alignment >= {ALIGNED:g}, index <= "
                f"{UNSPECIALISED:g}) and end specialised (index >= {SPECIALISED:g})")
        pts.append((st, text))
    v = vd.verdict_of(claim, pts, need)
    from scipy import stats

    level = (1.0 - stats.norm.cdf(vd.Z)) / len(pts)
    return vd.Verdict(claim, v.status, f"one-sided binomial test of a fraction above one half "
                      f"at level {level:.3g} per point ({len(pts)} point"
                      f"{'s' * (len(pts) > 1)}); " + v.evidence, v.points)
