"""The verdict engine: :class:`Verdict`, the decision rule, and how evidence is printed.

The theme modules of :mod:`bayesslr.report.claims` judge their claims with it.

The decision rule, stated once. A comparison of two estimates ``a +- s_a`` and ``b +- s_b``
uses the difference ``d`` and its standard error ``s = sqrt(s_a^2 + s_b^2)`` (independent
estimates; for paired ones the combined error overstates ``s``, which makes a verdict
cautious, never bolder):

* an ordering claim ``a < b`` *holds* when ``d = b - a > Z s``, *does not hold* when
  ``d < -Z s``, and otherwise there is *not enough data* to tell;
* an equality claim ``a = b`` *holds* when ``|d| <= Z s`` and *does not hold* when
  ``|d| > Z s``; with no error bar at all there is not enough data;

with ``Z = 2`` (a two-sided 95% band for one comparison) when both errors are Monte Carlo
errors of large samples; when a standard error is the spread of a few seeds, ``Z`` is the
Student-t quantile of the same level, ``t(Phi(2), dof)``, with the Welch-Satterthwaite degrees
of freedom of the difference (2 seeds: 1 degree of freedom, ``Z = 14.0``; 4 seeds: ``Z = 3.3``),
so that few seeds cannot decide by luck. A claim checked at several points
holds when it holds at every point, does not hold when it fails at one, and is undecided
otherwise; the evidence lists every point, so the reader sees how close each call was.

Many points. A claim that fails when *any* of its ``m`` comparisons fails would, at ``Z = 2``
per comparison, fail by chance alone with probability up to ``1 - 0.954^m`` (72 comparisons:
97 %), so a correct sampler would fail the Nishimori check most of the time. The failing side
is therefore judged at the family level (Bonferroni): a comparison counts against the claim
only beyond ``Z_m``, the quantile of the two-sided level ``2 (1 - Phi(2)) / m`` (``m = 1``:
``Z``; 36: 3.22; 72: 3.42; with seeds, the Student-t quantile of that level), so that the
whole claim fails by chance no more often than one comparison at ``Z = 2`` does. The holding
side of an ordering needs no correction (a claim that holds at every point is an
intersection of tests, each at its own level), so an ordering point holds beyond ``Z`` and
fails beyond ``-Z_m``; an equality point holds within ``Z_m``. The evidence states ``m`` and
``Z_m``. Thresholds that are not statistical (R-hat 1.01, ESS per chain) are the sampler's own
(:mod:`bayesslr.bayes.method`).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from functools import lru_cache

import pandas as pd

# the claims print numbers with these (kept in core: the samplers' reasons use them too)
from bayesslr.core.thresholds import digits, num  # noqa: F401

Z = 2.0
HOLDS, FAILS, UNDECIDED = "holds", "does not hold", "not enough data"
STATUSES = (HOLDS, FAILS, UNDECIDED)


@dataclass(frozen=True)
class Verdict:
    """What the data says about one claim.

    Attributes
    ----------
    claim : str
        The claim, in words (the paper's, or one the paper could not check).
    status : {"holds", "does not hold", "not enough data"}
        The verdict (see the module docstring for the rule).
    evidence : str
        The numbers behind it, with their standard errors.
    points : tuple of (status, text)
        The points checked, each with its own verdict (``evidence`` joins them).
    """

    claim: str
    status: str
    evidence: str
    points: tuple[tuple[str, str], ...] = ()

    def line(self) -> str:
        """One printable line: ``VERDICT [status] claim \u2014 evidence`` (the evidence: each
        point checked, ``text [status]``, separated by ``; ``)."""
        return f"VERDICT [{self.status}] {self.claim} \u2014 {self.evidence}"

    def __str__(self) -> str:
        return self.line()


class Status(str):
    """A verdict status (one of :data:`STATUSES`) that, when it is *not enough data*, carries
    what data would decide it (``need``)."""

    need: str = ""


def undecided(need: str) -> Status:
    """*Not enough data*, saying what is needed (``"needs ..."``)."""
    st = Status(UNDECIDED)
    st.need = need
    return st


def pm(x: float, s: float | None = None, *others: float) -> str:
    """``x +- s`` with three significant digits (``s`` with two), more where ``x`` would print
    like one of ``others`` (the values it is compared with)."""
    if x is None or not math.isfinite(float(x)):
        return "nan"
    if s is None or not math.isfinite(s):
        return num(x, *others)
    return f"{num(x, *others)} \u00b1 {s:.2g}"


@lru_cache(maxsize=1024)
def critical(dof: float = math.inf, tests: int = 1) -> float:
    """The decision threshold in standard errors: ``Z = 2`` for Monte Carlo errors, the
    Student-t quantile at the same level (``Phi(2)``) for ``dof`` degrees of freedom; with
    ``tests > 1``, the family threshold ``Z_m`` of one comparison among ``m = tests`` (the
    level shared by Bonferroni, module docstring).

    Examples
    --------
    >>> critical()
    2.0
    >>> round(critical(tests=72), 2)
    3.42
    """
    if tests < 1:
        raise ValueError(f"tests must be >= 1, got {tests}")
    if not dof < math.inf and tests == 1:
        return Z
    from scipy import stats

    upper = 1.0 - (1.0 - stats.norm.cdf(Z)) / tests
    if not dof < math.inf:
        return float(stats.norm.ppf(upper))
    return float(stats.t.ppf(upper, max(dof, 1.0)))


def welch_dof(sa: float, dof_a: float, sb: float, dof_b: float) -> float:
    """Welch-Satterthwaite degrees of freedom of the difference of two estimates."""
    va, vb = se_or_zero(sa) ** 2, se_or_zero(sb) ** 2
    den = (va**2 / dof_a if dof_a < math.inf else 0.0) + (vb**2 / dof_b if dof_b < math.inf
                                                          else 0.0)
    return (va + vb) ** 2 / den if den > 0 else math.inf


def _missing(*values: float) -> Status:
    return undecided("needs both values and their standard errors (one is missing or not "
                     "finite)")


def _within(d: float, s: float, z: float) -> Status:
    return undecided(f"needs a smaller error: the difference {d:+.3g} is within {z:.3g} "
                     f"combined standard errors ({s:.2g}); deciding needs a combined standard "
                     f"error below {abs(d) / z:.2g} (more seeds or Monte Carlo samples)")


def less(a: float, sa: float, b: float, sb: float, dof_a: float = math.inf,
         dof_b: float = math.inf, tests: int = 1) -> str:
    """Verdict of the claim ``a < b`` (see the module docstring): holds beyond ``Z``, fails
    beyond ``-Z_m`` with ``m = tests`` the comparisons of the claim."""
    d, s = b - a, math.hypot(se_or_zero(sa), se_or_zero(sb))
    if not (math.isfinite(d) and math.isfinite(s)):
        return _missing()
    dof = welch_dof(sa, dof_a, sb, dof_b)
    z, zf = critical(dof), critical(dof, tests)
    if d > z * s:
        return HOLDS
    if d < -zf * s:
        return FAILS
    if d < -z * s:
        return undecided(f"needs a smaller error: the difference {d:+.3g} is {abs(d) / s:.3g} "
                         f"combined standard errors ({s:.2g}) the wrong way, short of the "
                         f"{zf:.3g} at which one of {tests} comparisons counts against the "
                         f"claim (more seeds or Monte Carlo samples)")
    return _within(d, s, z)


def equal(a: float, sa: float, b: float, sb: float, dof_a: float = math.inf,
          dof_b: float = math.inf, tests: int = 1) -> str:
    """Verdict of the claim ``a = b`` (see the module docstring): holds within ``Z_m``
    combined standard errors, ``m = tests`` the comparisons of the claim; two exact, equal
    values (no error at all) agree."""
    d, s = abs(b - a), math.hypot(se_or_zero(sa), se_or_zero(sb))
    if not (math.isfinite(d) and math.isfinite(s)):
        return _missing()
    if s == 0:
        return HOLDS if d == 0 else undecided("needs a standard error on either value (both "
                                              "are given without one)")
    return HOLDS if d <= critical(welch_dof(sa, dof_a, sb, dof_b), tests) * s else FAILS


def not_above(a: float, sa: float, b: float, sb: float, tests: int = 1) -> str:
    """Verdict of the claim ``a = b`` where ``a >= b`` holds by construction (an estimator's
    risk against the Bayes risk): only ``a`` above ``b`` by more than the threshold counts
    against it; ``a`` below ``b`` is Monte Carlo noise (the population cells of one seed share
    their draws, so such noise repeats across settings); beyond ``Z_m``, ``m = tests`` the
    comparisons of the claim."""
    d, s = a - b, math.hypot(se_or_zero(sa), se_or_zero(sb))
    if not (math.isfinite(d) and math.isfinite(s)):
        return _missing()
    if s == 0:
        return HOLDS if d <= 0 else undecided("needs a standard error on either value")
    return HOLDS if d <= critical(tests=tests) * s else FAILS


def se_or_zero(s: float) -> float:
    return 0.0 if s is None or (isinstance(s, float) and math.isnan(s)) else float(s)


def combine(statuses: Sequence[str]) -> str:
    """A claim checked at several points: fails if one fails, holds if all hold; otherwise not
    enough data, with what each undecided point needs."""
    if not statuses:
        return undecided("needs at least one point to check")
    if FAILS in statuses:
        return FAILS
    if all(s == HOLDS for s in statuses):
        return HOLDS
    needs = list(dict.fromkeys(getattr(s, "need", "") for s in statuses if s == UNDECIDED))
    return undecided("; ".join(n for n in needs if n) or "needs a decided comparison")


# how a family threshold reads when a point's error is over seeds (critical(dof, tests))
_T_NOTE = ("where an error is over n seeds, the Student-t quantile of n - 1 degrees of "
           "freedom at that level instead")


def verdict_of(claim: str, points: Sequence[tuple[str, str]], missing: str,
               tests: int = 1, offsets: int = 0) -> Verdict:
    """A claim's verdict from its points (each ``(status, text)``): the evidence lists every
    point checked, an undecided one with what it needs; with no point, not enough data and
    ``missing`` (what is needed). ``tests``: the comparisons the points were judged as one
    family of (module docstring); above one, the evidence states the family threshold.
    ``offsets``: the :func:`offset_point` checks among the points, when the level is split
    half over the ``tests / 2`` points and half over the offset checks (:func:`family`)."""
    if not points:
        return Verdict(claim, UNDECIDED, missing)
    pts = []
    for st, text in points:
        need = getattr(st, "need", "")
        if st == UNDECIDED and "needs" not in text and "borderline" not in text:
            text += f" ({need or 'needs a decided comparison'})"
        pts.append((str(st), text))
    status = combine([p[0] for p in pts])
    where = f"checked at {len(pts)} point{'s' if len(pts) > 1 else ''}"
    if offsets:
        where += (f" (judged as one family: half the level of one 2-se comparison shared by "
                  f"the {tests // 2} points, so that one counts against the claim beyond "
                  f"{critical(tests=tests):.3g} standard errors ({_T_NOTE}), half "
                  f"by the {offsets} sign test{'s' * (offsets > 1)} for a common offset)")
    elif tests > 1:
        where += (f" ({tests} comparisons, judged as one family: one counts against the claim "
                  f"beyond {critical(tests=tests):.3g} standard errors; {_T_NOTE})")
    return Verdict(claim, str(status),
                   where + ": " + "; ".join(f"{text} [{st}]" for st, text in pts), tuple(pts))


def nu_text(nu: float) -> str:
    return "inf" if math.isinf(nu) else f"{nu:g}"


def setting_text(row: pd.Series | dict, *, alpha: bool = False) -> str:
    parts = [str(row["variant"]), f"L={row['L']}", f"\u03bd={nu_text(float(row['nu']))}"]
    if alpha:
        parts.append(f"\u03b1={float(row['alpha']):g}")
    return " ".join(parts)


def cell_text(setting, seed=None, *, lead: str = "") -> str:
    """Where a point was checked, one way for every theme: ``[lead, ]variant L= ν=`` and, where
    the setting has them, ``Δ= α= λ= D=``, then ``seed s`` (``setting``: a mapping
    of dimension -> value, as :func:`bayesslr.results.query.trajectory_runs` gives)."""
    parts = [str(setting.get("variant")), f"L={setting.get('L')}",
             f"ν={nu_text(float(setting.get('nu', math.nan)))}"]
    for key, sym in (("delta", "Δ"), ("alpha", "α"), ("lam", "λ"), ("D", "D")):
        if setting.get(key) is not None:
            val = setting[key]
            parts.append(f"{sym}={float(val):g}" if key in ("delta", "alpha") else f"{sym}={val}")
    text = " ".join(parts) + ("" if seed is None else f" seed {seed}")
    return f"{lead}, {text}" if lead else text


def family(points: int, offsets: int) -> tuple[int, int]:
    """The ``tests`` to judge each of ``points`` comparisons with, and each of ``offsets``
    sign tests, when an equality claim's level is split half and half between them (one
    point: the whole level to the point, no offset check)."""
    if offsets == 0:
        return max(points, 1), 1
    return 2 * max(points, 1), 2 * offsets


def offset_point(gaps: Sequence[float], what: str, tests: int = 1) -> tuple[str, str] | None:
    """A claim of equality at many points, read as one more comparison: no common offset. The
    signs of the gaps (estimate minus theory) of a correct estimator are a fair coin at each
    point, whatever each point's error; a systematic offset, which the per-point family test
    cannot see when each point's error is wide (few seeds), shows as too many of one sign.
    Two-sided sign test at the level of one ``Z = 2`` comparison, shared by ``tests`` such
    checks (Bonferroni); the points are taken as independent (points computed on shared data
    make the test bolder than stated). None with fewer than 6 non-zero gaps (the test could
    not reach the level)."""
    from scipy import stats

    signs = [g for g in gaps if g is not None and math.isfinite(g) and g != 0]
    n, below = len(signs), sum(g < 0 for g in signs)
    if n < 6:
        return None
    level = 2.0 * (1.0 - stats.norm.cdf(Z)) / tests
    p = float(stats.binomtest(below, n, 0.5).pvalue)
    st = FAILS if p < level else HOLDS
    return st, (f"{what}: {below} of {n} gaps below zero, {n - below} above (two-sided sign "
                f"test p = {p:.2g}, {'below' if p < level else 'above'} the level "
                f"{level:.2g}: {'a common offset' if p < level else 'no common offset seen'})")
