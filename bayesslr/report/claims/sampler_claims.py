"""The sampler-health claims (docs/model.md §6): convergence, the Nishimori identity, trapping of
random starts against the state evolution's hard window."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd

from bayesslr.core.thresholds import (
    ESS_PER_CHAIN_MIN,
    PT_ROUND_TRIPS_PER_CHAIN_MIN,
    PT_SWAP_RATE_MIN,
    RHAT_MAX,
)
from bayesslr.report.claims.verdict import (
    FAILS,
    HOLDS,
    UNDECIDED,
    Verdict,
    Z,
    cell_text,
    combine,
    critical,
    equal,
    num,
    pm,
    se_or_zero,
    setting_text,
    undecided,
    verdict_of,
)
from bayesslr.report.tables import sampler_table
from bayesslr.results.query import Results, groups, methods_of, select, state_evolution_lines

# the sampler's convergence thresholds: RHAT_MAX, ESS_PER_CHAIN_MIN (bayesslr.core.thresholds,
# as bayes.method.verdict)
SAMPLER_CLAIMS = (
    f"teacher-started chains pass the convergence checks (R-hat <= {RHAT_MAX}, bulk and "
    f"tail ESS >= {ESS_PER_CHAIN_MIN:g} per chain, no divergence; for parallel tempering also "
    f"every swap rate >= {PT_SWAP_RATE_MIN:g} and {PT_ROUND_TRIPS_PER_CHAIN_MIN} round trip "
    "per chain) at the settings run",
    "the posterior mean satisfies the Nishimori identity m = q at the settings run",
    "random and annealed starts reach the teacher-started posterior at the settings run (no "
    "trapping; the teacher is an exact posterior draw, so R-hat from teacher starts alone "
    "cannot reveal it)",
    "at the settings and stored tasks checked, random starts are trapped only inside the state "
    "evolution's hard window",
    f"NUTS chains from the random and annealed starts pass the same convergence checks (R-hat "
    f"<= {RHAT_MAX}, bulk and tail ESS >= {ESS_PER_CHAIN_MIN:g} per chain, no divergence) at "
    "the settings run",
)
# Sokal's window constant: the integrated autocorrelation time is summed over about 5 of itself
SOKAL_C = 5.0


def rhat_mc_error(ess_bulk: float, chains: float) -> float:
    """Monte Carlo standard error of a converged split R-hat, from ``m = 2 chains`` split
    chains with ``ess_bulk`` effective draws in all: with ``W`` the within-chain variance,
    ``R^2 - 1 ~ B/(n W) - 1/n`` and ``B/n``, the variance of the ``m`` chain means, is
    ``W / ess_c * chi2(m - 1)/(m - 1)`` with ``ess_c = ess_bulk / m`` effective draws a split
    chain; so ``sd(R) ~ sqrt(2 / (m - 1)) / (2 ess_c) = m / (sqrt(2 (m - 1)) ess_bulk)``
    (Gelman-Rubin's variance ratio as an F statistic; it is the sd of one parameter's R-hat,
    a lower bound for the largest over parameters, so a verdict using it stays cautious only
    in the borderline direction). It is that of chains that mix: the convergence verdict uses
    it only where the bulk ESS per chain reaches its threshold."""
    m = 2.0 * max(chains, 1.0)
    if not (ess_bulk > 0 and math.isfinite(ess_bulk)):
        return math.nan
    return m / (math.sqrt(2.0 * (m - 1.0)) * ess_bulk)


def ess_rel_error(ess: float) -> float:
    """Relative Monte Carlo standard error of an effective sample size ``ess = N / tau``:
    Sokal's variance of the windowed autocorrelation time, ``var(tau)/tau^2 ~ 2 (2 M + 1) / N``
    with the window ``M ~ c tau`` (``c`` = :data:`SOKAL_C`), gives ``sqrt(4 c / ess)``
    (A. Sokal, Monte Carlo methods in statistical mechanics, 1997, eq. 3.19)."""
    return math.sqrt(4.0 * SOKAL_C / ess) if ess > 0 else math.nan


def threshold_check(name: str, value: float, limit: float, se: float, *, upper: bool,
                    rate: float, unit: str = "", digits: str = "fixed") -> tuple[str, str]:
    """A diagnostic against its threshold: passes when ``value <= limit`` (``upper``) or
    ``value >= limit``; *borderline* (not enough data) when it sits within ``Z`` Monte Carlo
    errors ``se`` of the threshold, saying how many times the draws would decide it (the error
    falls as ``draws ** -rate``). The value prints with the digits that show the comparison
    (``R-hat 1.0103 > 1.01``)."""
    if not math.isfinite(value):
        return undecided(f"needs {name} (missing)"), f"{name} missing"
    passed = value <= limit if upper else value >= limit
    op = ("<=" if passed else ">") if upper else (">=" if passed else "<")
    shown = _fixed(value, limit) if digits == "fixed" else (
        f"{value:.0f}" if abs(value) >= 10 and round(value) != limit else num(value, limit))
    text = f"{name} {shown}{unit} {op} {limit:g}"
    d = abs(value - limit)
    if math.isfinite(se) and se > 0 and d <= Z * se:
        more = (Z * se / d) ** (1.0 / rate) if d > 0 else math.inf
        times = f"about {more:.2g} times the draws" if math.isfinite(more) else "more draws"
        return (undecided(f"borderline: within {Z:g} Monte Carlo errors ({se:.2g}) of the "
                          f"threshold; needs {times}"),
                f"{text} (borderline: Monte Carlo error {se:.2g}; needs {times})")
    return (HOLDS if passed else FAILS), text


def _fixed(value: float, limit: float) -> str:
    """``value`` with the decimals (at least those of the threshold plus one, or three
    significant digits) that show it differs from ``limit``: ``1.0103`` against 1.01."""
    k = 0 if abs(value) >= 10 else max(3, len(f"{limit:g}".partition(".")[2]) + 1)
    while k < 12 and float(f"{value:.{k}f}") == limit and value != limit:
        k += 1
    return f"{value:.{k}f}"


def _convergence_point(r: pd.Series, pre: str = "") -> tuple[str, str]:
    """The convergence checks of one row of :func:`sampler_table` (one cell and start)."""
    chains = r.chains if math.isfinite(r.chains) else 1.0
    # the R-hat error rule holds for chains that mix (it is that of a converged R-hat): with
    # fewer effective draws per chain than the ESS threshold, R-hat is compared plainly
    mixed = r.ess_bulk_min / chains >= ESS_PER_CHAIN_MIN
    checks = [threshold_check("R-hat", r.r_hat_max, RHAT_MAX,
                              rhat_mc_error(r.ess_bulk_min, chains) if mixed else math.nan,
                              upper=True, rate=1.0)]
    for name, col in (("bulk ESS", "ess_bulk_min"), ("tail ESS", "ess_tail_min")):
        per = r[col] / chains
        checks.append(threshold_check(name, per, ESS_PER_CHAIN_MIN,
                                      per * ess_rel_error(r[col]), upper=False, rate=0.5,
                                      unit=f" per chain ({r[col]:.0f} over {chains:.0f})",
                                      digits="significant"))
    div = r.divergences
    checks.append((HOLDS if div == 0 else FAILS if div > 0 else
                   undecided("needs the divergence count (missing)"),
                   f"{div:.0f} divergences"))
    if r.get("sampler", "nuts") == "pt" and not (math.isfinite(r.swap_rate_min)
                                                  or math.isfinite(r.round_trips)):
        # bayes_sampling keeps the swap rates and round trips of the cell's first start only
        # (its other starts' outputs are test_error ... grad_evals): not stored, not NaN
        checks.append((undecided("needs the swap rates and round trips of this start, which "
                                 "bayes_sampling stores for the cell's first start only"),
                       "swap rates and round trips not stored for this start"))
    elif r.get("sampler", "nuts") == "pt":
        sw, trips = r.swap_rate_min, r.round_trips
        need = PT_ROUND_TRIPS_PER_CHAIN_MIN * chains
        checks.append((HOLDS if sw >= PT_SWAP_RATE_MIN else FAILS if sw < PT_SWAP_RATE_MIN
                       else undecided("needs the swap rates (missing)"),
                       f"swap rate {num(sw, PT_SWAP_RATE_MIN)} "
                       f"{'>=' if sw >= PT_SWAP_RATE_MIN else '<'} "
                       f"{PT_SWAP_RATE_MIN:g}"))
        checks.append((HOLDS if trips >= need else FAILS if trips < need
                       else undecided("needs the round trips (missing)"),
                       f"{trips:.0f} round trips {'>=' if trips >= need else '<'} {need:.0f}"))
    st = combine([c[0] for c in checks])
    pre = f"{pre}, parallel tempering" if r.get("sampler", "nuts") == "pt" else pre
    return st, (f"{setting_text(r, alpha=True)} D={r.D}{pre}: " + ", ".join(c[1] for c in checks)
                + f" ({r.ess_per_grad:.2g}/{r.ess_tail_per_grad:.2g} bulk/tail ESS per "
                "gradient)")


def sampler_claims(results: Results) -> list[Verdict]:
    """The sampler's reliability (docs/model.md §6): teacher-started chains pass the convergence
    checks; the posterior mean satisfies the Nishimori identity ``m = q``; random and
    annealed starts reach the teacher-started posterior; where random starts are trapped,
    the state evolution has its hard phase (trapping by computational hardness) or not
    (a sampler failure), judged at the sweep's settings and on the stored tasks of the
    inference benchmark's reference (:mod:`bayesslr.inference.reference`); the other starts'
    chains pass the convergence checks too.

    A threshold check (R-hat, ESS per chain) within ``Z`` Monte Carlo errors of its threshold
    is *borderline* (not enough data, with how many more draws would decide it), so a verdict
    never flips between machines: see :func:`rhat_mc_error` and :func:`ess_rel_error`.

    The Nishimori check (:func:`_nishimori_point`): for the posterior mean ``k_hat``,
    ``m - q = k_hat.(k* - k_hat)/D`` and, by the Nishimori identity, ``k*`` is a posterior
    draw: ``m - q`` has mean 0 and, with a posterior covariance close to ``(rho - m) I``
    (``rho = |k*|^2 / D``, which is ``1 +- sqrt(2 / D)``; bounded above by
    ``1 + 2 sqrt(2 / D)``), a standard deviation ``sqrt(q (rho - m) / D)``; a posterior mean
    from ``ESS`` effective draws raises ``q`` by ``(rho - m) / ESS`` on average, which is
    subtracted first.
    """
    t = sampler_table(results)
    if t.empty:
        return [Verdict(c, UNDECIDED, "needs bayes_sampling results") for c in SAMPLER_CLAIMS]
    teach = t[t.start == "teacher"]
    start_pts, trapped = _start_points(t)
    others = t[t.start != "teacher"]
    return [
        verdict_of(SAMPLER_CLAIMS[0], [_convergence_point(r) for _, r in teach.iterrows()],
                   "needs bayes_sampling with a teacher start"),
        _nishimori(teach),
        verdict_of(SAMPLER_CLAIMS[2], start_pts, "needs bayes_sampling with init = "
                   "'teacher,random' or 'teacher,random,anneal'", tests=len(start_pts)),
        verdict_of(SAMPLER_CLAIMS[3], _trapping_points(groups(results).get("theory_bayes"),
                                                       trapped),
                   "needs bayes_sampling with a random start and theory_bayes at the same "
                   "alpha"),
        verdict_of(SAMPLER_CLAIMS[4], [_convergence_point(r, f", {r.start} start")
                                       for _, r in others.iterrows()],
                   "needs bayes_sampling with init = 'teacher,random' or "
                   "'teacher,random,anneal'"),
    ]


def _nishimori(teach: pd.DataFrame) -> Verdict:
    """The Nishimori check over every teacher-start row, its comparisons (``k`` and ``v`` of
    each row with finite overlaps) judged as one family."""
    tests = max(sum(_overlaps_known(r, a) for _, r in teach.iterrows() for a in ("k", "v")), 1)
    pts = [p for _, r in teach.iterrows() if (p := _nishimori_point(r, tests))]
    return verdict_of(SAMPLER_CLAIMS[1], pts, "needs bayes_sampling overlaps", tests=tests)


def _overlaps_known(r: pd.Series, a: str) -> bool:
    D = float(r.D) if r.D != "" else math.nan
    return all(math.isfinite(x) for x in (float(r[f"m_{a}"]), float(r[f"q_{a}"]), D))


def _nishimori_point(r: pd.Series, tests: int = 1) -> tuple[str, str] | None:
    """``m - q`` of one teacher-start row against its expected scatter (see
    :func:`sampler_claims`), each overlap one of ``tests`` comparisons; None without finite
    overlaps."""
    D = float(r.D) if r.D != "" else math.nan
    zf = critical(tests=tests)
    sts, parts = [], []
    for a in ("k", "v"):
        if not _overlaps_known(r, a):
            continue
        m, q = float(r[f"m_{a}"]), float(r[f"q_{a}"])
        # posterior variance per coordinate rho - m, with the teacher's norm rho = |k*|^2/D
        # unknown here: 1 +- sqrt(2 / D), bounded above at two of its standard deviations
        # (with rho = 1 a teacher of norm above 1 gives m > 1 and a zero variance)
        bound = 1.0 + 2.0 * math.sqrt(2.0 / D)
        if not m < bound:
            # the bound says nothing here: a scatter of 0 would fail any gap (the finite-size
            # run's D = 25 cells read 'm_v - q_v = ... (expected 0 +- 0)'); the teacher's own
            # norm would decide it, the cells do not hold it
            sts.append(undecided(f"needs the teacher's norm |{a}*|^2/D (m_{a} = {m:.3g} is "
                                 f"above the prior's bound 1 + 2 sqrt(2/D) = {bound:.3g}, "
                                 "so the expected scatter cannot be bounded)"))
            parts.append(f"m_{a} - q_{a} = {m - q:+.3g} (m_{a} {m:.3g} above the bound "
                         f"{bound:.3g}: not judged)")
            continue
        var = bound - m
        sd = math.sqrt(max(q, 0.0) * var / D)
        bias = var / r.ess_bulk_min if r.ess_bulk_min > 0 else 0.0
        gap = m - q + bias
        sts.append(HOLDS if abs(gap) <= zf * sd else FAILS)
        parts.append(f"m_{a} - q_{a} = {m - q:+.3g} (expected {-bias:+.2g} \u00b1 {sd:.2g})")
    if not sts:
        return None
    return combine(sts), f"{setting_text(r, alpha=True)} D={r.D}: " + ", ".join(parts)


def _start_points(t: pd.DataFrame) -> tuple[list[tuple[str, str]], dict[tuple, str]]:
    """Each other start's test error against the teacher start's on the same cell; returns the
    points and, by cell, the random start's status (failing: trapped)."""
    pts, trapped, cells = [], {}, []
    for key, grp in t.groupby(["variant", "L", "nu", "delta", "alpha", "D", "seed"]):
        rows = {r.start: r for _, r in grp.iterrows()}
        if "teacher" in rows and len(rows) >= 2:
            cells.append((key, rows))
    tests = max(sum(len(rows) - 1 for _, rows in cells), 1)
    for key, rows in cells:
        base = rows["teacher"]
        scale = math.sqrt(2.0) * se_or_zero(base.se)
        for start, r in rows.items():
            if start == "teacher":
                continue
            st = equal(r.test_error, 0.0, base.test_error, scale, tests=tests)
            pooled = base.r_hat_max_pooled
            text = (f"{setting_text(base, alpha=True)} D={base.D}, {start}: test error "
                    f"{num(r.test_error, base.test_error)} vs teacher "
                    f"{pm(base.test_error, base.se, r.test_error)}")
            if math.isfinite(pooled):
                text += f", pooled R-hat {pooled:.3g}"
            if math.isfinite(base.log_lik_gap):
                text += f", log-lik gap {base.log_lik_gap:.3g} nats/sample"
            text = text.replace(f"D={base.D},", f"D={base.D} seed {base.seed},", 1)
            pts.append((st, text))
            if start == "random":
                trapped[key] = st
    return pts, trapped


def _trapping_points(tb, trapped: dict[tuple, str]) -> list[tuple[str, str]]:
    """Trapping against the state evolution's hard window: the sweep's cells (``trapped``, from
    :func:`_start_points`), then the stored tasks of the inference benchmark's reference
    (random-start NUTS on each, paired with its teacher-start reference)."""
    pts = []
    for key, st in trapped.items():
        variant, L, nu, delta, alpha, D, seed = key
        where = cell_text({"variant": variant, "L": L, "nu": nu, "alpha": alpha, "D": D}, seed)
        if st == FAILS:
            pts.append(_hard_window_point(tb, variant, L, nu, delta, alpha, True,
                                          f"{where}: random start trapped"))
        elif st == HOLDS:
            pts.append(_hard_window_point(tb, variant, L, nu, delta, alpha, False,
                                          f"{where}: random start not trapped"))
        else:
            pts.append((undecided("needs the random-vs-teacher comparison decided at this "
                                  "setting (more seeds or draws)"),
                        f"{where}: random vs teacher undecided"))
    return pts + _stored_task_points(tb)


def _hard_window_point(tb, variant, L, nu, delta, alpha, is_trapped: bool, text: str
                       ) -> tuple[str, str]:
    """One point of the trapping claim: trapped where the state evolution is hard holds,
    trapped outside it fails (a sampler failure), not trapped inside it is undecided."""
    sel = {"variant": variant, "L": str(L), "nu": nu, "delta": delta}
    sub = select(tb, sel) if "theory_bayes" in methods_of(tb, "theory_bayes") else None
    se = state_evolution_lines(sub) if sub is not None else None
    if se is None or not np.any(np.isclose(se["alpha"], alpha)):
        here = cell_text({"variant": variant, "L": L, "nu": nu, "delta": delta, "alpha": alpha})
        return (undecided(f"needs theory_bayes at {here}"),
                f"{text}; no state evolution at this setting and \u03b1")
    hard = bool(np.nan_to_num(se["hard"][np.isclose(se["alpha"], alpha)]).max() > 0.5)
    if is_trapped:
        return (HOLDS if hard else FAILS,
                f"{text}; state evolution " + ("in its hard phase" if hard else
                                               "has one fixed point here (no hard phase): a "
                                               "sampler failure, not computational hardness"))
    if hard:
        return (undecided("needs a random start that is trapped in the hard phase, or more "
                          "seeds there: escaping where AMP would not is allowed"),
                f"{text}; state evolution in its hard phase (the sampler escapes where AMP "
                "would not)")
    return HOLDS, f"{text}; state evolution outside any hard phase"


def _stored_task_points(tb) -> list[tuple[str, str]]:
    """The trapping claim on the stored tasks of the inference benchmark's reference: random
    start trapped when its excess over the teacher-start reference exceeds ``Z`` paired
    standard errors."""
    try:
        from bayesslr.report.inference import reference_table

        refs = reference_table()
    except Exception:  # no stored tasks in this installation
        return []
    pts = []
    for _, r in refs.iterrows():
        ex, se = float(r.random_excess_over_reference), float(
            r.random_excess_over_reference_stderr)
        if not (math.isfinite(ex) and math.isfinite(se)):
            continue
        where = ("stored task " + cell_text({"variant": r.variant, "L": r.L, "nu": r.nu,
                                             "delta": r.delta, "alpha": r.alpha,
                                             "D": int(r.D)}, int(r.seed))
                 + f": random-start excess {pm(ex, se, 0.0)}")
        if ex > Z * se:
            pts.append(_hard_window_point(tb, r.variant, r.L, float(r.nu), float(r.delta),
                                          float(r.alpha), True, where + " (trapped)"))
        elif ex < Z * se and ex > -Z * se:
            pts.append(_hard_window_point(tb, r.variant, r.L, float(r.nu), float(r.delta),
                                          float(r.alpha), False, where + " (not trapped)"))
    return pts
