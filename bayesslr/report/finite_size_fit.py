"""One finite-size study's fit and verdict (docs/finite-size.md): the seeds of each size fitted by
``e(D) = e_inf + b / D`` and ``e_inf`` judged against the theory; the study itself, reading the
results, is :mod:`bayesslr.report.finite_size_study`.

At each size ``D`` the mean ``e(D)`` of the seeds' test errors and its standard error
over seeds are fitted by weighted least squares with

    e(D) = e_inf + b / D                                                  (the 1/D form)

and ``e_inf`` is compared with the theory of the same point:

* ERM (``erm:<activation>``, quantity ``test_error``) with the replica fixed point at the same
  ``lam`` (``theory_erm`` at a fixed ``lam``; at ``lam = "replica"`` the ERM cells carry the
  theory's value, ``replica_test_error``);
* NUTS (``bayes_sampling``, quantity ``excess_over_oracle``, paired on the test set so that the
  fluctuations of the teacher's norm cancel) with the state evolution's test error minus the
  Bayes population risk (``theory_bayes - population:bayes``: the oracle's error in the limit).

**Why 1/D.** At fixed ``alpha`` the estimator's overlaps are averages over ``D`` coordinates
(``N = alpha D`` samples): they fluctuate by ``O(1/sqrt(D))`` about their limit, and the test
error, a smooth function of the overlaps, moves by the first-order term (mean zero to leading
order) plus the second-order one, ``O(1/D)``, which does not average out: the mean's leading
correction is ``b/D``. The rate is checked on the data: the fit's ``chi2`` (with its p-value)
and a free-exponent fit ``e_inf + b D^-p`` (profile of ``chi2`` over ``p``, the interval
``chi2 <= chi2_min + 4``, about two standard errors like the verdict), which should contain
``p = 1``. The exponent is the sharper check: on synthetic data with the measured error bars a
``1/sqrt(D)`` trend often passes the 1/D fit's ``chi2`` yet biases its ``e_inf`` by several
standard errors, while the exponent's interval covers the true exponent in 95% of draws
(tests/test_finite_size.py).

**Errors.** The weights are the per-size standard errors over seeds. The same seed at two
sizes is not independent: JAX draws a ``D``-vector as the prefix of a longer one, so seed ``s``
has the same first teacher coordinates at every size, and the teacher's norm, the largest part
of a seed's error, is correlated across sizes (measured: 0.6 softmax, 0.8 linear between
``D = 250`` and 447). ``se(e_inf)`` is therefore the sandwich error of the least-squares
coefficients under the covariance of the means estimated from the shared seeds
(:func:`mean_covariance`), multiplied by ``sqrt(chi2/dof)`` when that exceeds 1 (a fit worse
than its error bars widens its own error, it never narrows it). The theory's error is its
Monte Carlo error (``stderr``; for NUTS the two Monte Carlo errors combined).

**Verdict** (the issue's rule, with the suite's allowance for few seeds): the estimator
*reaches* its theory (``holds``) when ``|e_inf - theory| <= Z sqrt(se(e_inf)^2 +
se(theory)^2)``, *does not reach* it (``does not hold``) otherwise. ``Z = 2`` for large samples;
``se(e_inf)`` is estimated from the seeds, so, as in :mod:`bayesslr.report.claims.verdict`,
``Z`` is the Student-t quantile at the same level with the Welch-Satterthwaite degrees of
freedom (the fewest seeds of a size, less one, for ``e_inf``; the theory's Monte Carlo error
counts as exact): ``Z = 2.4`` for 8 seeds, so that few seeds cannot decide by luck.
``not enough data`` (with what is needed) when fewer than :data:`MIN_SIZES` sizes have at
least :data:`MIN_SEEDS` seeds, or the theory is missing. Each study says whether its sizes
meet the design (at least 5 sizes, the largest at the paper's ``sqrtND = 1e4``) and whether the
standard error at the largest size is at most 0.005.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np
from scipy import stats

from bayesslr.report.claims.verdict import (
    FAILS,
    HOLDS,
    UNDECIDED,
    Verdict,
    critical,
    welch_dof,
)

Z = 2.0  # the rule: |e_inf - theory| <= Z combined standard errors
MIN_SIZES = 3  # a line and one degree of freedom
MIN_SEEDS = 2  # a standard error over seeds
DESIGN_SIZES = 5  # the design: no fewer than 5 sizes ...
PAPER_SQRTND = 1e4  # ... up to the paper's sqrt(N D)
TARGET_SE = 0.005  # ... with a standard error of the mean <= 0.005 at the largest size
EXPONENTS = np.round(np.arange(0.1, 3.0001, 0.01), 2)  # the free-exponent profile's grid


def pm_4dp(x: float, s: float | None = None) -> str:
    """``x +- s`` to four decimals (the differences judged here are a few thousandths)."""
    if not math.isfinite(x):
        return "nan"
    if s is None or not math.isfinite(s):
        return f"{x:.4f}"
    return f"{x:.4f} \u00b1 {s:.4f}"


# --------------------------------------------------------------------------------------------
# the fit
# --------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Fit:
    """Weighted least-squares fit of ``e(D) = e_inf + b D^-power``.

    Attributes
    ----------
    e_inf, se : float
        The intercept (the ``D -> inf`` value) and its standard error (inflated by
        ``sqrt(chi2/dof)`` when that exceeds 1).
    b, se_b : float
        The slope in ``D^-power`` and its standard error (same inflation).
    chi2 : float
        Weighted sum of squared residuals.
    dof : int
        Sizes minus 2.
    p_value : float
        ``P(chi2_dof >= chi2)`` (NaN with no degree of freedom).
    power : float
        The exponent of ``D`` used.
    """

    e_inf: float
    se: float
    b: float
    se_b: float
    chi2: float
    dof: int
    p_value: float
    power: float = 1.0

    def predict(self, D: np.ndarray | float) -> np.ndarray:
        """The fitted line at ``D``."""
        return self.e_inf + self.b * np.asarray(D, dtype=float) ** (-self.power)


def _wls(x: np.ndarray, y: np.ndarray, se: np.ndarray) -> tuple[np.ndarray, np.ndarray, float]:
    """Coefficients ``(a, b)`` of ``y = a + b x`` weighted by ``1/se^2``, their covariance and
    the chi2."""
    w = 1.0 / se**2
    X = np.stack([np.ones_like(x), x], axis=1)
    A = X.T @ (w[:, None] * X)
    cov = np.linalg.inv(A)
    coef = cov @ (X.T @ (w * y))
    chi2 = float(np.sum(w * (y - X @ coef) ** 2))
    return coef, cov, chi2


def fit_inverse_size(D: Sequence[float], mean: Sequence[float], se: Sequence[float], *,
                     power: float = 1.0, cov: np.ndarray | None = None) -> Fit:
    """Fit ``mean(D) = e_inf + b D^-power`` by weighted least squares (weights ``1/se^2``).

    ``cov``: the full covariance matrix of the means (the same seeds at several sizes are
    correlated: :func:`mean_covariance`); the coefficients stay the weighted least-squares
    ones, their covariance is the sandwich ``A cov A^T`` (``A`` the least-squares map) instead
    of ``(X^T W X)^-1``, which assumes independent sizes.

    Raises
    ------
    ValueError
        Fewer than 2 sizes, a non-positive or non-finite standard error, or two equal sizes
        only.
    """
    D_, y, s = (np.asarray(v, dtype=float) for v in (D, mean, se))
    if not (D_.shape == y.shape == s.shape) or D_.ndim != 1:
        raise ValueError("D, mean and se must be 1-d arrays of the same length")
    if len(D_) < 2 or len(np.unique(D_)) < 2:
        raise ValueError(f"D={D_.tolist()} has fewer than 2 distinct sizes; allowed: at least 2")
    if not (np.all(np.isfinite(s)) and np.all(s > 0) and np.all(np.isfinite(y))):
        raise ValueError("mean and se must be finite, se > 0")
    x = D_ ** (-power)
    coef, cov_b, chi2 = _wls(x, y, s)
    if cov is not None:
        C = _psd(np.asarray(cov, dtype=float))
        if C.shape != (len(D_), len(D_)):
            raise ValueError(f"cov has shape {C.shape}; allowed: ({len(D_)}, {len(D_)})")
        X = np.stack([np.ones_like(x), x], axis=1)
        A = cov_b @ (X.T * (1.0 / s**2))
        cov_b = A @ C @ A.T
    cov = cov_b
    dof = len(D_) - 2
    scale = max(1.0, chi2 / dof) if dof > 0 else 1.0
    p = float(stats.chi2.sf(chi2, dof)) if dof > 0 else math.nan
    return Fit(float(coef[0]), float(math.sqrt(cov[0, 0] * scale)), float(coef[1]),
               float(math.sqrt(cov[1, 1] * scale)), chi2, dof, p, power)


def _psd(C: np.ndarray) -> np.ndarray:
    """The nearest positive semi-definite symmetric matrix (negative eigenvalues set to 0):
    a covariance estimated pairwise, over the seeds two sizes share, need not be one."""
    C = 0.5 * (C + C.T)
    w, V = np.linalg.eigh(C)
    return (V * np.clip(w, 0.0, None)) @ V.T


def mean_covariance(values: Sequence[Mapping[int, float]]) -> np.ndarray:
    """Covariance matrix of the per-size seed means, from ``{seed: value}`` per size: the
    diagonal ``var_i / n_i``; off the diagonal, where two sizes share ``n_ij >= 2`` seeds, their
    sample covariance over the shared seeds times ``n_ij / (n_i n_j)`` (0 when they share
    fewer). The same seed at two sizes shares its teacher's first coordinates (JAX draws a
    ``D``-vector as the prefix of a longer one), so its errors are correlated across sizes."""
    k = len(values)
    C = np.zeros((k, k))
    for i in range(k):
        for j in range(i, k):
            common = sorted(set(values[i]) & set(values[j]))
            if len(common) < 2:
                continue
            a = np.array([values[i][c] for c in common])
            b = np.array([values[j][c] for c in common])
            c = float(np.cov(a, b, ddof=1)[0, 1])
            C[i, j] = C[j, i] = c * len(common) / (len(values[i]) * len(values[j]))
    return C


def fit_exponent(D: Sequence[float], mean: Sequence[float], se: Sequence[float],
                 grid: np.ndarray = EXPONENTS, delta_chi2: float = 4.0
                 ) -> tuple[float, float, float]:
    """The exponent ``p`` of ``e_inf + b D^-p`` that minimises the fit's ``chi2`` over
    ``grid`` and its interval ``chi2(p) <= chi2_min + delta_chi2`` (4: about two standard
    errors; ends of the grid when it reaches them); needs at least 4 sizes (3 parameters and
    one degree of freedom)."""
    D_, y, s = (np.asarray(v, dtype=float) for v in (D, mean, se))
    if len(np.unique(D_)) < 4:
        raise ValueError(f"D={D_.tolist()} has fewer than 4 distinct sizes; allowed: at least 4")
    chi2 = np.array([_wls(D_ ** (-p), y, s)[2] for p in grid])
    i = int(np.argmin(chi2))
    inside = grid[chi2 <= chi2[i] + delta_chi2]
    return float(grid[i]), float(inside.min()), float(inside.max())


def reaches(e_inf: float, se: float, theory: float, theory_se: float, z: float = Z
            ) -> tuple[str, float]:
    """The verdict of ``|e_inf - theory| <= z sqrt(se^2 + theory_se^2)`` and the distance in
    combined standard errors (``not enough data`` when a number is missing)."""
    vals = (e_inf, se, theory, theory_se)
    if not all(isinstance(v, (int, float)) and math.isfinite(v) for v in vals):
        return UNDECIDED, math.nan
    s = math.hypot(se, theory_se)
    if s <= 0:
        return UNDECIDED, math.nan
    d = abs(e_inf - theory) / s
    return (HOLDS if d <= z else FAILS), d


# --------------------------------------------------------------------------------------------
# one study: a setting, an estimator, a lam
# --------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class SizePoint:
    """The seeds of one size: their mean, its standard error over seeds, the seed count, how
    many of the seeds' fits or chains did not converge, and the values by seed (``{seed:
    value}``, for the covariance across sizes; empty when unknown)."""

    D: int
    sqrtND: float
    mean: float
    se: float
    n: int
    unconverged: int = 0
    values: Mapping[int, float] = field(default_factory=dict, compare=False)


@dataclass(frozen=True)
class Study:
    """One finite-size study (module docstring) with its fit and verdict.

    ``extra`` holds evidence beyond the verdict (e.g. the training objective's extrapolation
    against the replica's) as ``{name: text}``; ``others`` the same quantity under other
    protocols on the same seeds (``(label, per-size points)``, e.g. the best of several random
    starts), drawn beside the study but neither fitted nor judged.
    """

    setting: str
    estimator: str
    lam: str
    quantity: str
    theory_name: str
    theory: float
    theory_se: float
    points: tuple[SizePoint, ...]
    fit: Fit | None
    exponent: tuple[float, float, float] | None
    status: str
    distance: float
    needs: str = ""
    extra: dict[str, str] = field(default_factory=dict)
    z: float = Z
    others: tuple[tuple[str, tuple[SizePoint, ...]], ...] = ()

    @property
    def used(self) -> tuple[SizePoint, ...]:
        """The sizes in the fit: those with at least :data:`MIN_SEEDS` seeds."""
        return tuple(p for p in self.points if p.n >= MIN_SEEDS and p.se > 0)

    @property
    def design_met(self) -> bool:
        """At least :data:`DESIGN_SIZES` sizes, the largest at the paper's size (or, sized by
        ``D``, the design's largest), the standard error there at most :data:`TARGET_SE`."""
        u = self.used
        if len(u) < DESIGN_SIZES:
            return False
        big = u[-1]
        return (not math.isfinite(big.sqrtND) or big.sqrtND >= PAPER_SQRTND) and (
            big.se <= TARGET_SE)

    def label(self) -> str:
        lam = "" if self.lam in ("", "nan") else f", lam={self.lam}"
        return f"{self.estimator}{lam}"

    def claim(self) -> str:
        return f"{self.label()} reaches {self.theory_name} as D -> inf ({self.setting})"

    def evidence(self) -> str:
        if self.fit is None:
            return f"{self.needs}; theory {pm_4dp(self.theory, self.theory_se)}"
        u = self.used
        f = self.fit
        sizes = f"{len(u)} sizes D={u[0].D}..{u[-1].D}, seeds {min(p.n for p in u)}-" \
                f"{max(p.n for p in u)}"
        txt = (f"{self.quantity} e_inf {pm_4dp(f.e_inf, f.se)} (fit e_inf + b/D, b={f.b:.3g}, "
               f"chi2/dof={f.chi2:.3g}/{f.dof}"
               + (f", p={f.p_value:.2g}" if math.isfinite(f.p_value) else "") + f"; {sizes}; "
               f"se at D={u[-1].D}: {u[-1].se:.3g}) vs theory "
               f"{pm_4dp(self.theory, self.theory_se)}: "
               f"{self.distance:.2g} combined se (threshold {self.z:.2g})")
        if self.z != Z and math.isfinite(self.distance):
            # the fixed large-sample rule beside the small-sample one, so neither is hidden
            fixed = "holds" if self.distance <= Z else "does not hold"
            txt += f" [at the fixed {Z:g}-se rule: {fixed}]"
        if self.exponent is not None:
            p, lo, hi = self.exponent
            txt += f"; free exponent p={p:.2g} [{lo:.2g}, {hi:.2g}]"
            if not lo <= 1.0 <= hi:
                txt += " (excludes 1: the 1/D extrapolation is in doubt)"
        unconv = sum(p.unconverged for p in self.points)
        if unconv:
            txt += f"; {unconv} seed(s) not converged (kept)"
        for k, v in self.extra.items():
            txt += f"; {k}: {v}"
        if not self.design_met:
            txt += f"; partial: {self.needs or 'below the design'}"
        return txt

    def verdict(self) -> Verdict:
        return Verdict(self.claim(), self.status, self.evidence())

    def row(self) -> dict[str, object]:
        """One row of the finite-size table."""
        f = self.fit
        return {"setting": self.setting, "estimator": self.label(), "quantity": self.quantity,
                "sizes": len(self.used), "D_max": self.used[-1].D if self.used else None,
                "e_inf": f.e_inf if f else math.nan, "e_inf_se": f.se if f else math.nan,
                "theory": self.theory, "theory_se": self.theory_se,
                "distance": self.distance, "verdict": self.status,
                "chi2_dof": f"{f.chi2:.3g}/{f.dof}" if f else "",
                "exponent": "" if self.exponent is None else
                "{:.2g} [{:.2g}, {:.2g}]".format(*self.exponent),
                "needs": self.needs}


def fit_points(points: Sequence[SizePoint]) -> Fit:
    """:func:`fit_inverse_size` of size points, with the covariance of their means across
    sizes (:func:`mean_covariance`) when every point knows its values by seed."""
    cov = None
    if all(len(p.values) == p.n for p in points):
        cov = mean_covariance([p.values for p in points])
        np.fill_diagonal(cov, [p.se**2 for p in points])
    return fit_inverse_size([p.D for p in points], [p.mean for p in points],
                            [p.se for p in points], cov=cov)


def make_study(setting: str, estimator: str, lam: str, quantity: str, theory_name: str,
               points: Sequence[SizePoint], theory: float, theory_se: float,
               extra: dict[str, str] | None = None,
               others: Sequence[tuple[str, Sequence[SizePoint]]] = ()) -> Study:
    """Fit and judge one study (module docstring); ``others`` are carried along
    (:class:`Study`)."""
    points = tuple(points)
    used = [p for p in points if p.n >= MIN_SEEDS and p.se > 0]
    needs = _needs(points, used)
    fit = exponent = None
    status, dist, z = UNDECIDED, math.nan, Z
    if len(used) >= MIN_SIZES and len({p.D for p in used}) >= MIN_SIZES:
        D = [p.D for p in used]
        fit = fit_points(used)
        if len(used) >= 4:
            exponent = fit_exponent(D, [p.mean for p in used], [p.se for p in used])
        dof = welch_dof(fit.se, min(p.n for p in used) - 1.0, theory_se, math.inf)
        z = critical(dof)
        status, dist = reaches(fit.e_inf, fit.se, theory, theory_se, z)
        if status == UNDECIDED:
            needs = "needs the theory value at this point" + (f"; {needs}" if needs else "")
    return Study(setting, estimator, lam, quantity, theory_name, float(theory),
                 float(theory_se), points, fit, exponent, status, dist, needs, dict(extra or {}),
                 z, tuple((label, tuple(pts)) for label, pts in others))


def _needs(points: Sequence[SizePoint], used: Sequence[SizePoint]) -> str:
    """What the data lacks for the design (empty when nothing)."""
    have = ", ".join(f"D={p.D}: {p.n}" for p in points) or "no cells"
    if len(used) < MIN_SIZES:
        return (f"not enough data: needs >= {MIN_SIZES} sizes with >= {MIN_SEEDS} seeds "
                f"(seeds per size: {have})")
    lacks = []
    if len(used) < DESIGN_SIZES:
        lacks.append(f">= {DESIGN_SIZES} sizes (has {len(used)})")
    big = used[-1]
    if math.isfinite(big.sqrtND) and big.sqrtND < PAPER_SQRTND:
        lacks.append(f"the paper's size sqrtND = {PAPER_SQRTND:g} (largest {big.sqrtND:g})")
    if big.se > TARGET_SE:
        lacks.append(f"se <= {TARGET_SE} at the largest size (has {big.se:.3g}: about "
                     f"{math.ceil(big.n * (big.se / TARGET_SE) ** 2)} seeds)")
    return ("needs " + ", ".join(lacks)) if lacks else ""
