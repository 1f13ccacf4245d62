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
otherwise; the evidence lists every point, so the reader sees how close each call was. With
many points, one spurious failure per twenty equality checks is expected at ``Z = 2``.
Thresholds that are not statistical (R-hat 1.01, ESS per chain) are the sampler's own
(:mod:`bayesslr.bayes.method`).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import pandas as pd

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


def digits(*values: float, at_least: int = 3) -> int:
    """Significant digits that print distinct values distinctly (at least ``at_least``, at
    most 10): a comparison never shows two equal numbers for two different values."""
    vals = [float(v) for v in values if v is not None and math.isfinite(float(v))]
    for d in range(at_least, 11):
        shown = [float(f"{v:.{d}g}") for v in vals]
        if all(shown[i] != shown[j] or vals[i] == vals[j]
               for i in range(len(vals)) for j in range(i + 1, len(vals))):
            return d
    return 10


def num(x: float, *others: float) -> str:
    """``x`` with three significant digits, more where it would print like one of
    ``others`` (the values it is compared with)."""
    if x is None or not math.isfinite(float(x)):
        return "nan"
    return f"{float(x):.{digits(x, *others)}g}"


def pm(x: float, s: float | None = None, *others: float) -> str:
    """``x +- s`` with three significant digits (``s`` with two), more where ``x`` would print
    like one of ``others`` (the values it is compared with)."""
    if x is None or not math.isfinite(float(x)):
        return "nan"
    if s is None or not math.isfinite(s):
        return num(x, *others)
    return f"{num(x, *others)} \u00b1 {s:.2g}"


def critical(dof: float = math.inf) -> float:
    """The decision threshold in standard errors: ``Z = 2`` for Monte Carlo errors, the
    Student-t quantile at the same level (``Phi(2)``) for ``dof`` degrees of freedom."""
    if not dof < math.inf:
        return Z
    from scipy import stats

    return float(stats.t.ppf(stats.norm.cdf(Z), max(dof, 1.0)))


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
         dof_b: float = math.inf) -> str:
    """Verdict of the claim ``a < b`` (see the module docstring)."""
    d, s = b - a, math.hypot(se_or_zero(sa), se_or_zero(sb))
    if not (math.isfinite(d) and math.isfinite(s)):
        return _missing()
    z = critical(welch_dof(sa, dof_a, sb, dof_b))
    if d > z * s:
        return HOLDS
    if d < -z * s:
        return FAILS
    return _within(d, s, z)


def equal(a: float, sa: float, b: float, sb: float, dof_a: float = math.inf,
          dof_b: float = math.inf) -> str:
    """Verdict of the claim ``a = b`` (see the module docstring); two exact, equal values
    (no error at all) agree."""
    d, s = abs(b - a), math.hypot(se_or_zero(sa), se_or_zero(sb))
    if not (math.isfinite(d) and math.isfinite(s)):
        return _missing()
    if s == 0:
        return HOLDS if d == 0 else undecided("needs a standard error on either value (both "
                                              "are given without one)")
    return HOLDS if d <= critical(welch_dof(sa, dof_a, sb, dof_b)) * s else FAILS


def not_above(a: float, sa: float, b: float, sb: float) -> str:
    """Verdict of the claim ``a = b`` where ``a >= b`` holds by construction (an estimator's
    risk against the Bayes risk): only ``a`` above ``b`` by more than the threshold counts
    against it; ``a`` below ``b`` is Monte Carlo noise (the population cells of one seed share
    their draws, so such noise repeats across settings)."""
    d, s = a - b, math.hypot(se_or_zero(sa), se_or_zero(sb))
    if not (math.isfinite(d) and math.isfinite(s)):
        return _missing()
    if s == 0:
        return HOLDS if d <= 0 else undecided("needs a standard error on either value")
    return HOLDS if d <= Z * s else FAILS


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


def verdict_of(claim: str, points: Sequence[tuple[str, str]], missing: str) -> Verdict:
    """A claim's verdict from its points (each ``(status, text)``): the evidence lists every
    point checked, an undecided one with what it needs; with no point, not enough data and
    ``missing`` (what is needed)."""
    if not points:
        return Verdict(claim, UNDECIDED, missing)
    pts = []
    for st, text in points:
        need = getattr(st, "need", "")
        if st == UNDECIDED and "needs" not in text and "borderline" not in text:
            text += f" ({need or 'needs a decided comparison'})"
        pts.append((str(st), text))
    status = combine([p[0] for p in pts])
    where = f"checked at {len(pts)} point{'s' if len(pts) > 1 else ''}: "
    return Verdict(claim, str(status), where + "; ".join(f"{text} [{st}]" for st, text in pts),
                   tuple(pts))


def nu_text(nu: float) -> str:
    return "inf" if math.isinf(nu) else f"{nu:g}"


def setting_text(row: pd.Series | dict, *, alpha: bool = False) -> str:
    parts = [str(row["variant"]), f"L={row['L']}", f"\u03bd={nu_text(float(row['nu']))}"]
    if alpha:
        parts.append(f"\u03b1={float(row['alpha']):g}")
    return " ".join(parts)
