"""Optimal ridge penalty of the ERM replica theory (what the paper's grid search approximates).

For each ``alpha`` the penalty ``lam = lam_k = lam_v`` minimising the theoretical test error of
:func:`bayesslr.theory.erm.solve_erm`: a coarse logarithmic grid swept from large to small
``lam`` (each solve warm-started from the nearest solved ``lam``, or along a curve from the
neighbouring ``alpha`` at the same ``lam``), then successive parabolic interpolation in
``log10 lam`` between the grid neighbours of the best grid point. The sweep stops once the error
has risen at ``grid_stop`` consecutive grid points past its best (default 2): below the optimum
the error grows fast and the small-``lam`` fixed points are the ones that do not converge
(measured on the paper's softmax curve at ``alpha = 4``: ``lam = 0.01`` and ``0.001``, test
errors far above 1 or no fixed point, cost 85% of the point's time). Only the grid points past
the stop are skipped; the best point, its neighbours and so the parabolic search are those of
the whole grid whenever the error has one minimum in ``lam`` on the grid. The channel
samples and the test-error Monte Carlo use fixed common random numbers, so the objective is a
deterministic function of ``lam``; its resolution is the Monte Carlo error of the test error.
"""

from __future__ import annotations

import dataclasses
import math
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from bayesslr.core.task import ConfigError, TaskConfig, check_real
from bayesslr.theory.checkpoint import PathCheckpoint
from bayesslr.theory.erm import (
    ErmTheoryOptions,
    ErmTheoryResult,
    solve_erm,
    with_channel_error,
)

REPLICA_LAM_GRID: tuple[float, ...] = (10.0, 3.0, 1.0, 0.3, 0.1, 0.03, 0.01, 0.001)


@dataclass(frozen=True)
class LamOptResult:
    """Optimal penalty at one ``alpha``.

    Attributes
    ----------
    alpha : float
    lam : float
        Minimiser found (NaN if no solve reached a fixed point).
    test_error : float
        Test error at ``lam``.
    result : ErmTheoryResult
        The full fixed point at ``lam``.
    evaluations : tuple of (float, float)
        Every ``(lam, test_error)`` tried (NaN where no fixed point was reached).
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
                   lam_grid: Sequence[float] = REPLICA_LAM_GRID, refine_iter: int = 8,
                   x0: np.ndarray | None = None, start: str = "informed",
                   warm: Mapping[float, np.ndarray] | None = None,
                   xatol: float = 0.05, grid_stop: int = 2) -> LamOptResult:
    """Minimise the ERM theory test error over ``lam`` at one ``alpha``.

    Every solve is warm-started: a grid ``lam`` from ``warm[lam]`` (the fixed point at the
    same ``lam`` and a neighbouring ``alpha``, what :func:`optimal_lambda_curve` passes) when
    given, else from the nearest ``lam`` already solved here (``x0`` for the first); a warm
    solve that reaches no fixed point is repeated from the named ``start``.

    Parameters
    ----------
    task, activation, alpha, options :
        As for :func:`bayesslr.theory.erm.solve_erm`.
    lam_grid : sequence of float
        Coarse grid (sorted descending internally; all ``> 0``).
    refine_iter : int
        Most evaluations of the search in ``log10 lam`` between the grid neighbours of the
        best grid value (0: grid only; none when the best is at an end of the grid).
    x0 : numpy.ndarray, optional
        Warm start of the first (largest) ``lam``.
    start : str
        Named start used when no warm start is known.
    warm : mapping of float to numpy.ndarray, optional
        Starts per grid ``lam`` (from a neighbouring ``alpha``).
    xatol : float
        The search stops when its next ``log10 lam`` is within ``xatol`` of one evaluated.
    grid_stop : int
        The grid sweep stops after this many consecutive grid points past the best whose errors
        rise (each above the best and at least the one before it; no fixed point counts as an
        infinite error); 0: the whole grid.

    Returns
    -------
    LamOptResult
        ``result`` reports, in ``iterations`` and ``update_calls``, the work of the whole
        search (every ``lam`` solved, and the winner's channel error).
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
    warm = dict(warm or {})

    def start_for(key: float) -> np.ndarray | None:
        near = [(abs(k - key), r.x) for k, r in solved.items() if r.reached]
        if near:
            return min(near, key=lambda t: t[0])[1]
        return x0

    def solve(lam: float) -> ErmTheoryResult:
        key = round(math.log10(lam), 9)
        if key not in solved:
            x_start = warm.get(lam)
            if x_start is None:
                x_start = start_for(key)
            r = solve_erm(task, activation, alpha, lam, lam, opt, start=start, x0=x_start)
            if not r.reached and x_start is not None:  # the warm start can mislead: go cold
                cold = solve_erm(task, activation, alpha, lam, lam, opt, start=start)
                r = dataclasses.replace(cold, iterations=cold.iterations + r.iterations,
                                        update_calls=cold.update_calls + r.update_calls,
                                        exact_calls=cold.exact_calls + r.exact_calls)
            solved[key] = r
        return solved[key]

    def err(lam: float) -> float:
        e = solve(lam).test_error
        return e if math.isfinite(e) else math.inf

    errs: list[float] = []
    for g in grid:
        errs.append(err(g))
        if grid_stop and _risen(errs, grid_stop):
            break
    i = int(np.argmin(errs))
    if refine_iter > 0 and math.isfinite(errs[i]) and 0 < i < len(grid) - 1:
        _parabolic_search(lambda t: err(10.0**t),
                          {math.log10(g): e for g, e in zip(grid, errs, strict=False)},
                          refine_iter, xatol)
    best = min(solved.values(), key=lambda r: r.test_error if math.isfinite(r.test_error)
               else math.inf)
    evals = tuple(sorted((r.lam_k, r.test_error) for r in solved.values()))
    lam_best = best.lam_k if math.isfinite(best.test_error) else math.nan
    # the point reports the work of the whole search that found it
    best = dataclasses.replace(
        best, iterations=sum(r.iterations for r in solved.values()),
        update_calls=sum(r.update_calls for r in solved.values()),
        exact_calls=sum(r.exact_calls for r in solved.values()))
    if opt_final.channel_error:
        best = with_channel_error(task, best, opt_final)
    return LamOptResult(alpha, lam_best, best.test_error, best, evals,
                        bool(math.isfinite(lam_best) and lam_best in (grid[0], grid[-1])),
                        tuple(sorted(solved.values(), key=lambda r: r.lam_k)))


def _risen(errs: Sequence[float], n: int) -> bool:
    """The last ``n`` of ``errs`` lie past the best and rise: each above the best and at least
    the one before it."""
    i = int(np.argmin(errs))
    if len(errs) - 1 - i < n:
        return False
    return all(errs[k] > errs[i] and errs[k] >= errs[k - 1]
               for k in range(len(errs) - n, len(errs)))


def _parabolic_search(f, evaluated: dict[float, float], max_evals: int, xatol: float) -> None:
    """Successive parabolic interpolation for the minimum of ``f`` (in ``log10 lam``).

    ``evaluated`` maps points to values (updated in place) and brackets a minimum: its lowest
    point has a neighbour on each side. Each step evaluates the vertex of the parabola through
    the lowest point and its two neighbours (kept ``xatol`` inside the bracket; the midpoint of
    the wider side where a value is not finite or the parabola opens downwards), and stops
    after ``max_evals`` evaluations or when the next point is within ``xatol`` of one already
    evaluated. Near a smooth minimum the error is quadratic in ``log lam``: a vertex from the
    coarse grid is typically within a few hundredths of a decade after one or two steps, where
    the test error no longer changes at the resolution of the channel Monte Carlo error (the
    bounded Brent search used before spent all of its 8 evaluations for the same answer).
    """
    for _ in range(max_evals):
        ts = sorted(evaluated)
        j = min(range(len(ts)), key=lambda k: evaluated[ts[k]])
        if j == 0 or j == len(ts) - 1:
            return
        a, b, c = ts[j - 1], ts[j], ts[j + 1]
        fa, fb, fc = evaluated[a], evaluated[b], evaluated[c]
        den = (b - a) * (fb - fc) - (b - c) * (fb - fa)
        t = math.nan
        if all(map(math.isfinite, (fa, fb, fc))) and den < 0:  # den < 0: opens upwards
            t = b - 0.5 * ((b - a) ** 2 * (fb - fc) - (b - c) ** 2 * (fb - fa)) / den
        if not math.isfinite(t):
            t = 0.5 * (b + (a if b - a > c - b else c))
        t = min(max(t, a + xatol), c - xatol)
        if min(abs(t - u) for u in ts) < xatol:
            return
        evaluated[t] = f(t)


def optimal_lambda_curve(task: TaskConfig, activation: str, alphas: Sequence[float],
                         options: ErmTheoryOptions | None = None, *,
                         lam_grid: Sequence[float] = REPLICA_LAM_GRID,
                         refine_iter: int = 8, grid_stop: int = 2,
                         checkpoint: PathCheckpoint | None = None) -> list[LamOptResult]:
    """:func:`optimal_lambda` for each ``alpha`` (ascending): every grid ``lam`` is
    warm-started from the neighbouring ``alpha``'s fixed point at the same ``lam``
    (continuation in ``alpha`` along each ``lam`` of the grid).

    With a ``checkpoint`` (:class:`bayesslr.theory.checkpoint.PathCheckpoint` of this very
    curve), each solved ``alpha`` is written there with the warm starts of the next, the points
    already written are restored instead of solved, and the checkpoint is removed at the end:
    a curve stopped half-way resumes after its last point, with the same numbers."""
    order = sorted(alphas)
    out: dict[float, LamOptResult] = {}
    warm: dict[float, np.ndarray] = {}
    if checkpoint is not None:
        for a, (r, state) in zip(order, checkpoint.restore(order), strict=False):
            out[a] = r
            warm = state
    grid = {float(g) for g in lam_grid}
    for a in order[len(out):]:
        t0, c0 = time.perf_counter(), time.process_time()
        r = optimal_lambda(task, activation, a, options, lam_grid=lam_grid,
                           refine_iter=refine_iter, warm=warm, grid_stop=grid_stop)
        out[a] = r
        warm = {s.lam_k: s.x for s in r.solves if s.lam_k in grid and s.reached}
        if checkpoint is not None:
            checkpoint.save(a, r, warm, time.perf_counter() - t0,
                            cpu_seconds=time.process_time() - c0)
    if checkpoint is not None:
        checkpoint.clear()
    return [out[a] for a in alphas]
