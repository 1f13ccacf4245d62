"""Damped fixed-point iteration and continuation in ``alpha`` (docs/theory.md).

Shared by the ERM replica equations and the Bayes-optimal state evolution. The contract a sweep
relies on:

* :func:`solve_fixed_point` never raises on a numerical failure: a point that does not converge
  (iteration cap, non-finite update, an exception inside the update, the watchdog) comes back
  with ``converged=False``, the order parameters set to NaN, and a ``reason``;
* converged means the relative residual ``max_i |F(x)_i - x_i| / max(|x_i|, scale_floor)``
  stayed below ``tol`` over ``confirm`` consecutive iterations (default 3): a single residual
  under the tolerance is luck where the iteration oscillates or sits at a noise floor (the ERM
  map on common random numbers jumps by ``O(1/samples)`` wherever a channel sample's global
  minimum switches branch). A caller may pass a cheaper approximate map for the iterations and
  the ``exact`` one, which then verifies the returned point (one more call); what else a
  fixed point must satisfy to be trusted (the ERM theory's diagnostics) is checked by the caller;
* the residual history is kept, so a slow or oscillating point can be inspected;
* ``accel="anderson"`` replaces the plain damped step by safeguarded Anderson mixing (type II,
  Walker & Ni 2011) on the scaled residual: the fixed points are the same, far fewer update
  calls reach them. The safeguard keeps the lowest-residual point seen; an extrapolated point
  whose update is non-finite, or whose residual exceeds ``anderson_restart`` times the best,
  is abandoned for a damped step from the best point with the history cleared, and after
  ``anderson_max_restarts`` such restarts the solve goes on with plain damping. Anderson
  mixing is a quasi-Newton method: it can also land on a fixed point that plain iteration
  would leave (an unstable one), so state evolution, whose plain iteration *is* the algorithm
  being described, keeps ``accel="none"``;
* every update call runs under a watchdog (a daemon thread with a time limit; docs/theory.md
  notes that a jitted multi-start proximal solver once hung on CPU), and the whole solve under a
  wall-clock budget.

:func:`continuation` sweeps a grid of ``alpha`` warm-starting each point from its converged
neighbour; :func:`sweep_both` runs it upwards and downwards so that hysteresis (two branches)
shows up.
"""

from __future__ import annotations

import math
import queue
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol, TypeVar

import numpy as np

from bayesslr.core.options import Validated, option
from bayesslr.core.task import ConfigError

UpdateFn = Callable[[np.ndarray], tuple[np.ndarray, dict[str, Any]]]
ACCELS: tuple[str, ...] = ("none", "anderson")


@dataclass(frozen=True)
class SolverOptions(Validated):
    """Settings of the damped fixed-point iteration (each field checked on construction).

    Attributes
    ----------
    damping : float
        Weight of the old iterate, ``x <- (1 - damping) F(x) + damping x``; in ``[0, 0.99]``.
    tol : float
        Convergence when ``max_i |F(x)_i - x_i| / max(|x_i|, scale_floor) < tol``.
    max_iter : int
        Iteration cap.
    min_iter : int
        Iterations always done (guards against a start that happens to sit on the map's
        plateau).
    confirm : int
        Consecutive iterations whose residual must stay below ``tol`` (one residual under the
        tolerance can be luck: an oscillating or noise-limited iteration dips below it now and
        then); with an ``exact`` map (:func:`solve_fixed_point`) its verification at the
        returned point is one more.
    call_timeout_s : float
        Watchdog: the longest one update call may take before the point is abandoned.
    max_seconds : float
        Wall-clock budget of one solve.
    scale_floor : float
        Floor of the relative residual's denominator.
    accel : {"none", "anderson"}
        Plain damped iteration, or safeguarded Anderson mixing (module docstring).
    anderson_m : int
        Anderson memory (number of past residual differences).
    anderson_restart : float
        An extrapolated point whose residual exceeds this multiple of the best residual so far
        is abandoned (history cleared, damped step from the best point).
    anderson_max_restarts : int
        Restarts after which the solve continues with plain damping.
    """

    damping: float = option(0.5, low=0.0, high=0.99, doc="weight of the old iterate")
    tol: float = option(1e-5, low=0.0, low_open=True, doc="relative residual tolerance")
    max_iter: int = option(400, low=1, high=10**6, doc="iteration cap")
    min_iter: int = option(2, low=1, high=10**6, doc="iterations always done")
    confirm: int = option(3, low=1, high=1000,
                          doc="consecutive iterations with the residual below tol")
    call_timeout_s: float = option(600.0, low=0.0, low_open=True,
                                   doc="watchdog: longest one update call may take (s)")
    max_seconds: float = option(3600.0, low=0.0, low_open=True,
                                doc="wall-clock budget of one solve (s)")
    scale_floor: float = option(1e-3, low=0.0, low_open=True,
                                doc="floor of the relative residual's denominator")
    accel: str = option("none", choices=ACCELS,
                        doc="plain damped iteration, or safeguarded Anderson mixing")
    anderson_m: int = option(5, low=1, high=100, doc="Anderson memory")
    anderson_restart: float = option(2.0, low=1.0,
                                     doc="residual growth that abandons an Anderson step")
    anderson_max_restarts: int = option(5, low=0, high=1000,
                                        doc="restarts before falling back to damping")


SOLVER_KEYS: tuple[str, ...] = ("damping", "tol", "max_iter", "min_iter", "confirm",
                                "call_timeout_s", "max_seconds", "accel", "anderson_m")


@dataclass(frozen=True)
class FixedPointResult:
    """Outcome of one damped fixed-point solve.

    Attributes
    ----------
    x : numpy.ndarray
        Fixed point (all NaN when not converged).
    x_last : numpy.ndarray
        Last iterate reached (finite when possible; useful to diagnose and to warm-start).
    converged : bool
        The residual stayed below ``tol`` over ``confirm`` consecutive iterations (and, with an
        ``exact`` map, at its verification call) within the caps.
    iterations : int
        Map calls made (``update`` and ``exact`` together).
    residual : float
        Last relative residual (NaN if none); with an ``exact`` map and ``converged``, the
        residual of the exact map at ``x``.
    history : tuple of float
        Residual after each call.
    reason : str
        ``"converged"``, ``"max_iter"``, ``"non-finite"``, ``"watchdog"``, ``"time budget"`` or
        ``"error: ..."``.
    aux : dict
        Auxiliary outputs of the last update call (with an ``exact`` map and ``converged``:
        of its call at ``x`` itself).
    runtime_s : float
        Wall time.
    exact_calls : int
        Calls of the ``exact`` map among ``iterations``.
    """

    x: np.ndarray
    x_last: np.ndarray
    converged: bool
    iterations: int
    residual: float
    history: tuple[float, ...]
    reason: str
    aux: dict[str, Any] = field(default_factory=dict)
    runtime_s: float = 0.0
    exact_calls: int = 0


class _Timeout(Exception):
    pass


def _call_with_watchdog(fn: Callable[[], Any], timeout_s: float) -> Any:
    """Run ``fn()`` in a daemon thread; raise :class:`_Timeout` past ``timeout_s``.

    A hung call cannot be killed from Python; its daemon thread is abandoned (it does not block
    interpreter exit) and the solve reports ``reason="watchdog"``.
    """
    out: queue.Queue = queue.Queue(maxsize=1)

    def target() -> None:
        try:
            out.put((True, fn()))
        except BaseException as exc:  # noqa: BLE001  (re-raised in the caller's thread)
            out.put((False, exc))

    th = threading.Thread(target=target, daemon=True, name="bayesslr-theory-update")
    th.start()
    try:
        ok, val = out.get(timeout=timeout_s)
    except queue.Empty:
        raise _Timeout from None
    if not ok:
        raise val
    return val


def solve_fixed_point(update: UpdateFn, x0: Sequence[float] | np.ndarray,
                      options: SolverOptions | None = None, *,
                      exact: UpdateFn | None = None) -> FixedPointResult:
    """Damped (or Anderson-accelerated) iteration ``x <- (1 - d) F(x) + d x`` until the relative
    residual stays below ``tol``.

    Convergence needs ``confirm`` consecutive residuals below ``tol`` (and ``min_iter``
    iterations). With ``exact``, ``update`` may be a cheaper approximation of the map (e.g. one
    that tracks per-sample minima from the previous call instead of searching afresh) and the
    point to be returned is then verified by one call of ``exact``: converged only if the
    exact map's residual there is below ``tol`` too; otherwise the iteration resumes from the
    exact image with the acceleration history cleared, and after a second failed verification
    with the exact map alone (where the two maps disagree by more than ``tol`` the
    approximation's fixed point is not the map's).

    Parameters
    ----------
    update : callable
        ``F(x) -> (x_new, aux)``; ``x_new`` an array like ``x``, ``aux`` a dict of diagnostics.
    x0 : array-like
        Start.
    options : SolverOptions, optional
        Damping, tolerance, caps, watchdog.
    exact : callable, optional
        The map itself, called only to verify a candidate (same signature as ``update``).

    Returns
    -------
    FixedPointResult
        Never raises on numerical failure: see ``converged`` and ``reason``.
    """
    opt = options or SolverOptions()
    x = np.asarray(x0, dtype=np.float64).copy()
    t0 = time.perf_counter()
    history: list[float] = []
    aux: dict[str, Any] = {}
    reason = "max_iter"
    res = math.nan
    it = 0
    exact_calls = 0
    below = 0  # consecutive residuals below tol
    converged = False
    beta = 1.0 - opt.damping
    anderson = _Anderson(opt.anderson_m) if opt.accel == "anderson" else None
    restarts = 0
    extrapolated = False  # x came from an Anderson step (may be abandoned)
    best: tuple[float, np.ndarray, np.ndarray] | None = None  # residual, x, F(x)

    def call(fn: UpdateFn, at: np.ndarray) -> tuple[np.ndarray | None, dict[str, Any], str | None]:
        """One map call under the watchdog: ``(F(at), aux, None)`` or ``(None, {}, failure)``;
        raises :class:`_Timeout`."""
        try:
            out, extra = _call_with_watchdog(lambda: fn(at), opt.call_timeout_s)
            out = np.asarray(out, dtype=np.float64)
            return out, extra, None if np.all(np.isfinite(out)) else "non-finite"
        except _Timeout:
            raise
        except (ArithmeticError, ValueError, np.linalg.LinAlgError, RuntimeError) as exc:
            return None, {}, f"error: {type(exc).__name__}: {exc}"
        except ConfigError as exc:  # an update that refuses its input is a failed point too
            return None, {}, f"error: {exc}"

    def rel(fx: np.ndarray, at: np.ndarray) -> float:
        return float(np.max(np.abs(fx - at) / np.maximum(np.abs(at), opt.scale_floor)))

    try:  # a map call past the watchdog ends the solve (its daemon thread is abandoned)
        while it < opt.max_iter:
            if time.perf_counter() - t0 > opt.max_seconds:
                reason = "time budget"
                break
            x_new, new_aux, failed = call(update, x)
            it += 1
            scale = np.maximum(np.abs(x), opt.scale_floor)
            if failed is None:
                res = rel(x_new, x)
            if extrapolated and best is not None and (
                    failed is not None or res > opt.anderson_restart * best[0]):
                # safeguard: abandon the extrapolated point, damped step from the best one
                history.append(math.inf if failed is not None else res)
                below = 0
                restarts += 1
                if anderson is not None:
                    anderson.clear()
                    if restarts > opt.anderson_max_restarts:
                        anderson = None
                _, bx, bF = best
                x = (1.0 - beta) * bx + beta * bF
                extrapolated = False
                continue
            if failed is not None:
                reason = failed
                break
            aux = new_aux
            history.append(res)
            if best is None or res <= best[0]:
                best = (res, x.copy(), x_new.copy())
            below = below + 1 if res < opt.tol else 0
            if below >= opt.confirm and it >= opt.min_iter:
                x_ret = (1.0 - beta) * x + beta * x_new
                if exact is None:
                    x = x_ret
                    converged = True
                    reason = "converged"
                    break
                if it >= opt.max_iter:
                    break
                f_e, aux_e, failed = call(exact, x_ret)
                it += 1
                exact_calls += 1
                if failed is not None:
                    reason = failed
                    break
                res = rel(f_e, x_ret)
                history.append(res)
                if res < opt.tol:
                    x, aux = x_ret, aux_e
                    converged = True
                    reason = "converged"
                    break
                # the exact map disagrees: resume from its image, acceleration history cleared (an
                # approximation that tracks state, refreshed by this call, often agrees the next
                # time); after a second disagreement with the exact map alone
                below = 0
                if exact_calls >= 2:
                    update = exact
                if anderson is not None:
                    anderson.clear()
                best = (res, x_ret.copy(), f_e.copy())
                x = (1.0 - beta) * x_ret + beta * f_e
                extrapolated = False
                continue
            if anderson is not None:
                x_next = anderson.step(x, x_new, scale, beta)
                extrapolated = x_next is not None
                x = x_next if x_next is not None else (1.0 - beta) * x + beta * x_new
            else:
                x = (1.0 - beta) * x + beta * x_new
    except _Timeout:
        reason = "watchdog"
    x_out = x if converged else np.full_like(x, np.nan)
    return FixedPointResult(x_out, x, converged, it, res, tuple(history), reason, dict(aux),
                            time.perf_counter() - t0, exact_calls)


class _Anderson:
    """Anderson mixing state (type II): past iterates and their residuals ``F(x) - x``."""

    def __init__(self, m: int) -> None:
        self.m = m
        self.xs: list[np.ndarray] = []
        self.rs: list[np.ndarray] = []

    def clear(self) -> None:
        self.xs, self.rs = [], []

    def step(self, x: np.ndarray, fx: np.ndarray, scale: np.ndarray,
             beta: float) -> np.ndarray | None:
        """Next iterate from ``x`` and ``F(x)``; ``None`` while the history is too short.

        ``x_next = (x - dX g) + beta (r - dR g)`` with ``r = F(x) - x`` and ``g`` the
        least-squares fit of ``r`` by the past residual differences ``dR``, each component
        weighted by ``1/scale`` (the relative residual the convergence test uses).
        """
        r = fx - x
        self.xs.append(x.copy())
        self.rs.append(r)
        if len(self.rs) > self.m + 1:
            self.xs.pop(0)
            self.rs.pop(0)
        if len(self.rs) < 2:
            return None
        dR = np.stack([b - a for a, b in zip(self.rs[:-1], self.rs[1:], strict=True)], axis=1)
        dX = np.stack([b - a for a, b in zip(self.xs[:-1], self.xs[1:], strict=True)], axis=1)
        W = dR / scale[:, None]
        # Tikhonov-regularised least squares (columns can be nearly dependent near convergence)
        reg = 1e-10 * float(np.sum(W * W)) + 1e-300
        gamma = np.linalg.solve(W.T @ W + reg * np.eye(W.shape[1]), W.T @ (r / scale))
        x_next = x - dX @ gamma + beta * (r - dR @ gamma)
        return x_next if np.all(np.isfinite(x_next)) else None


class HasState(Protocol):
    """What continuation needs of a solved point: its state vector and whether it converged."""

    @property
    def x(self) -> np.ndarray: ...

    @property
    def converged(self) -> bool: ...


R = TypeVar("R", bound=HasState)


def continuation(solve_at: Callable[[float, np.ndarray | None], R], alphas: Sequence[float],
                 x_start: np.ndarray | None = None, *, descending: bool = False) -> list[R]:
    """Solve along ``alphas`` warm-starting each point from the last converged neighbour.

    Parameters
    ----------
    solve_at : callable
        ``solve_at(alpha, x0) -> result`` with ``.x`` and ``.converged``; ``x0`` is ``None`` for
        a cold start (the solver's named start) and the neighbour's fixed point otherwise (a
        neighbour whose fixed point was reached but flagged, ``converged`` false with a finite
        ``x``, still serves as a start: it lies on the branch being followed).
    alphas : sequence of float
        Grid (any order; it is sorted ascending, or descending with ``descending``).
    x_start : numpy.ndarray, optional
        Start of the first point (``None``: cold start); kept until a point converges.
    descending : bool
        Sweep from the largest ``alpha`` down.

    Returns
    -------
    list
        Results in the order of the *input* ``alphas``.
    """
    order = sorted(range(len(alphas)), key=lambda i: alphas[i], reverse=descending)
    out: list[R | None] = [None] * len(alphas)
    x0 = None if x_start is None else np.asarray(x_start, dtype=np.float64)
    for i in order:
        r = solve_at(float(alphas[i]), x0)
        out[i] = r
        x_r = np.asarray(r.x, dtype=np.float64)
        if r.converged or (x_r.size and np.all(np.isfinite(x_r))):
            x0 = x_r
    return [r for r in out if r is not None]


def sweep_both(solve_at: Callable[[float, np.ndarray | None], R], alphas: Sequence[float],
               x_start: np.ndarray | None = None) -> tuple[list[R], list[R]]:
    """Continuation upwards and downwards from the same start (hysteresis shows as a gap)."""
    up = continuation(solve_at, alphas, x_start)
    down = continuation(solve_at, alphas, x_start, descending=True)
    return up, down
