"""Optimal ridge penalty of the ERM replica theory (what the paper's grid search approximates).

For each ``alpha`` the penalty ``lam = lam_k = lam_v`` minimising the theoretical test error of
:func:`bayesslr.theory.erm.solve_erm`: a coarse logarithmic grid swept from large to small
``lam`` (each solve warm-started from the previous one: large ``lam`` is the well-conditioned
end), then a bounded scalar search in ``log10 lam`` around the best grid point. The channel
samples and the test-error Monte Carlo use fixed common random numbers, so the objective is a
deterministic function of ``lam``; its resolution is the Monte Carlo error of the test error.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import scipy.optimize

from bayesslr.task import ConfigError, TaskConfig, check_real
from bayesslr.theory.erm import ErmTheoryOptions, ErmTheoryResult, solve_erm

DEFAULT_LAM_GRID: tuple[float, ...] = (10.0, 3.0, 1.0, 0.3, 0.1, 0.03, 0.01, 0.001)


@dataclass(frozen=True)
class LamOptResult:
    """Optimal penalty at one ``alpha``.

    Attributes
    ----------
    alpha : float
    lam : float
        Minimiser found (NaN if no solve converged).
    test_error : float
        Test error at ``lam``.
    result : ErmTheoryResult
        The full fixed point at ``lam``.
    evaluations : tuple of (float, float)
        Every ``(lam, test_error)`` tried (NaN for a non-converged solve).
    at_boundary : bool
        The optimum sits at an end of the searched range (extend ``lam_grid``).
    solves : tuple of ErmTheoryResult
        Every fixed point computed, in order of ``lam``.
    """

    alpha: float
    lam: float
    test_error: float
    result: ErmTheoryResult
    evaluations: tuple[tuple[float, float], ...]
    at_boundary: bool
    solves: tuple[ErmTheoryResult, ...] = ()


def optimal_lambda(task: TaskConfig, activation: str, alpha: Any,
                   options: ErmTheoryOptions | None = None, *,
                   lam_grid: Sequence[float] = DEFAULT_LAM_GRID, refine_iter: int = 8,
                   x0: np.ndarray | None = None, start: str = "informed") -> LamOptResult:
    """Minimise the ERM theory test error over ``lam`` at one ``alpha``.

    Parameters
    ----------
    task, activation, alpha, options :
        As for :func:`bayesslr.theory.erm.solve_erm`.
    lam_grid : sequence of float
        Coarse grid (sorted descending internally; all ``> 0``).
    refine_iter : int
        Evaluations of the bounded search in ``log10 lam`` (0: grid only).
    x0 : numpy.ndarray, optional
        Warm start of the first (largest) ``lam``.
    start : str
        Named start used when ``x0`` is None.

    Returns
    -------
    LamOptResult
    """
    alpha = check_real("alpha", alpha, low=0.0, low_open=True)
    grid = sorted((check_real("lam_grid", g, low=0.0, low_open=True) for g in lam_grid),
                  reverse=True)
    if len(grid) < 2:
        raise ConfigError(f"lam_grid={list(lam_grid)} has {len(grid)} values; allowed: >= 2")
    opt_final = options or ErmTheoryOptions()
    # the search compares test errors on common random numbers: the channel error of each
    # trial is not needed, only that of the winner (computed once, below)
    opt = dataclasses.replace(opt_final, channel_error=False)
    solved: dict[float, ErmTheoryResult] = {}
    x_warm = x0

    def solve(lam: float) -> ErmTheoryResult:
        nonlocal x_warm
        key = round(math.log10(lam), 9)
        if key not in solved:
            r = solve_erm(task, activation, alpha, lam, lam, opt, start=start, x0=x_warm)
            if not r.converged and x_warm is not None:  # the warm start can mislead: go cold
                r = solve_erm(task, activation, alpha, lam, lam, opt, start=start)
            solved[key] = r
            if r.converged:
                x_warm = r.x
        return solved[key]

    def err(lam: float) -> float:
        e = solve(lam).test_error
        return e if math.isfinite(e) else math.inf

    errs = [err(g) for g in grid]
    i = int(np.argmin(errs))
    if refine_iter > 0 and math.isfinite(errs[i]):
        lo = math.log10(grid[min(i + 1, len(grid) - 1)])
        hi = math.log10(grid[max(i - 1, 0)])
        x_warm = solve(grid[i]).x
        scipy.optimize.minimize_scalar(lambda t: err(10.0**t), bounds=(lo, hi),
                                       method="bounded",
                                       options={"maxiter": refine_iter, "xatol": 0.02})
    best = min(solved.values(), key=lambda r: r.test_error if math.isfinite(r.test_error)
               else math.inf)
    evals = tuple(sorted((r.lam_k, r.test_error) for r in solved.values()))
    lam_best = best.lam_k if best.converged else math.nan
    if best.converged and opt_final.channel_error:  # warm restart at the winner: ~2 iterations
        again = solve_erm(task, activation, alpha, lam_best, lam_best, opt_final, start=start,
                          x0=best.x)
        if again.converged:
            best = again
    return LamOptResult(alpha, lam_best, best.test_error, best, evals,
                        bool(best.converged and lam_best in (grid[0], grid[-1])),
                        tuple(sorted(solved.values(), key=lambda r: r.lam_k)))


def optimal_lambda_curve(task: TaskConfig, activation: str, alphas: Sequence[float],
                         options: ErmTheoryOptions | None = None, *,
                         lam_grid: Sequence[float] = DEFAULT_LAM_GRID,
                         refine_iter: int = 8) -> list[LamOptResult]:
    """:func:`optimal_lambda` for each ``alpha``; the largest ``lam`` of each grid is
    warm-started from the neighbouring ``alpha``'s solution at that ``lam``."""
    out: dict[float, LamOptResult] = {}
    x0 = None
    top = max(lam_grid)
    for a in sorted(alphas):
        r = optimal_lambda(task, activation, a, options, lam_grid=lam_grid,
                           refine_iter=refine_iter, x0=x0)
        out[a] = r
        at_top = [s for s in r.solves if s.lam_k == top and s.converged]
        x0 = at_top[0].x if at_top else None
    return [out[a] for a in alphas]
