"""Replica-symmetric fixed point of ridge-regularised attention ERM (docs/theory.md).

Six order parameters ``x = (m_k, q_k, V_k, m_v, q_v, V_v)`` and their conjugates
``(mh_a, qh_a, Vh_a)``, ``a in {k, v}``:

* prior (ridge) part: ``V_a = 1/(lam_a + Vh_a)``, ``m_a = mh_a V_a``,
  ``q_a = (mh_a^2 + qh_a) V_a^2``;
* channel part (:func:`bayesslr.theory.erm_proximal.prox_channel`): the global proximal point of
  every teacher channel sample, ``f_k = (chi - w_k)/V_k``, ``f_v = (z - w_v)/V_v``, and

      qh_a = alpha E|f_a|^2,
      mh_a = alpha E[f_a . (h*_a - (m_a/s_a) xi_a)],          s_a = sqrt(q_a - m_a^2),
      Vh_a = -alpha E[f_a . xi_a] / s_a                       ("stein": Stein-free, exact),
      Vh_a = alpha E[Tr_a(V^-1 (V^-1 + H)^-1 H)]              ("hessian").

  The Hessian form misses the jump term where the global minimum switches branch and then
  overestimates ``Vh``; both are computed at every iteration and their gap is recorded
  (``vh_gap_k``, ``vh_gap_v`` = hessian minus Stein-free). The fixed point uses ``vh_form``.
* outputs: test excess error = the population formula of section 3 at ``(m_k, q_k, m_v, q_v)``
  (:func:`bayesslr.population.method.excess_risk`), training loss ``E[1/2 (y - sigma(chi).z)^2]`` at
  the proximal point, and the training objective per sample
  ``train_loss + (lam_k q_k + lam_v q_v) / (2 alpha)``, which ranks two branches at the same
  ``(alpha, lam)``: the lower one is the global ERM minimiser.

Informed start: near the teacher-aligned attention ``(c_nu k*, v*)`` (``c_nu`` capped at 4);
uninformed: small overlaps, as from a random initialisation.
"""

from __future__ import annotations

import dataclasses
import functools
import math
import time
from collections import OrderedDict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from functools import partial
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from bayesslr.core.activations import Activation, get_activation, replica_activations
from bayesslr.core.options import Validated, option
from bayesslr.core.task import ConfigError, TaskConfig, check_real
from bayesslr.population.teacher_channel import ChannelSamples, channel64
from bayesslr.theory.erm_proximal import MOMENT_NAMES, cold_starts, prox_step, tracked_starts
from bayesslr.theory.solver import (
    FixedPointResult,
    SolverOptions,
    continuation,
    solve_fixed_point,
)

ORDER_NAMES: tuple[str, ...] = ("m_k", "q_k", "V_k", "m_v", "q_v", "V_v")
M_INDEX = (0, 3)  # the overlaps m_k, m_v in ORDER_NAMES, each followed by its q
VH_FORMS: tuple[str, ...] = ("stein", "hessian")
STARTS: tuple[str, ...] = ("informed", "uninformed")
REPLICA_ACTIVATIONS: tuple[str, ...] = replica_activations()  # those Activation.replica allows


def default_tol(samples: int) -> float:
    """Default relative tolerance of the ERM fixed point for ``samples`` channel samples.

    With common random numbers the map is deterministic, but every channel sample whose global
    proximal minimum switches branch makes it jump by ``O(1/samples)``: a damped iteration at
    ``samples = 2e4`` was seen to settle into a 2-cycle of relative residual ``1.2e-4``
    (softmax, spiked ``L = 3``, ``nu = 2``, ``alpha = 1``, ``lam = 0.1``). A tolerance below
    that floor is luck; ``10 / samples`` (``5e-4`` at ``2e4``) sits a few times above it and,
    with the map's contraction (spectral radius ~0.6 there), moves the test error by ~1e-3,
    below the channel Monte Carlo error.
    """
    return max(1e-5, 10.0 / samples)


ERM_CONFIRM = 2


def default_solver(samples: int) -> SolverOptions:
    """Anderson-accelerated solver with :func:`default_tol` (about 10 update calls per point
    on a warm start instead of ~30 for the plain damped iteration; ``bench_theory.py``).

    ``confirm = 2``: two consecutive iterations below the tolerance, and the exploring map's
    verification at the returned point a third (:func:`solve_erm`)."""
    return SolverOptions(tol=default_tol(samples), max_iter=300, accel="anderson",
                         confirm=ERM_CONFIRM)


@dataclass(frozen=True)
class ErmTheoryOptions(Validated):
    """Settings of the ERM replica fixed point (each option field checked on construction).

    Attributes
    ----------
    samples : int
        Channel samples (common random numbers).
    seed : int
        Seed of the channel samples (the test-error Monte Carlo uses ``seed + 1``).
    vh_form : {"stein", "hessian"}
        Which ``Vh`` drives the iteration (both are recorded).
    n_explore, n_refine : int
        Levenberg-Marquardt steps per start of the proximal problem, and per refined row.
    n_best : int
        Lowest distinct rows refined (besides the row from ``w_k``) before the lowest is kept.
    shift : float
        Offset of the extra starts ``w_k +- shift e_l``.
    test_samples : int
        Monte Carlo size of the population test-error formula.
    theta : tuple of float
        The activation's own scalars, held fixed (erf: ``(c,)``; default the registry's init).
    channel_error : bool
        Propagate the channel Monte Carlo noise to the fixed point (:func:`channel_error`,
        7 tracked update calls per point); off, ``stderr_channel`` is NaN.
    track : bool
        Iterate with the tracked map (each sample's minima followed from the previous call,
        :class:`ChannelMap`); the returned point is verified by the exploring map either way.
    n_track : int
        Levenberg-Marquardt steps per start (and for the lowest) of a tracked call.
    n_keep : int
        Distinct minima tracked per sample.
    max_off_branch, max_prox_unconverged, max_vh_gap, vh_gap_z : float
        Bounds of the diagnostics a trusted fixed point satisfies (:func:`diagnose`).
    solver : SolverOptions, optional
        Damping, tolerance, caps and watchdog; default :func:`default_solver` for ``samples``.
    """

    samples: int = option(20_000, low=100, high=10**8, doc="channel samples (common random "
                          "numbers)")
    seed: int = option(0, low=0, high=2**32 - 1, doc="seed of the channel samples")
    vh_form: str = option("stein", choices=VH_FORMS,
                          doc="Vh driving the iteration (both forms are recorded)")
    n_explore: int = option(6, low=1, high=1000,
                            doc="Levenberg-Marquardt steps per start of the proximal problem")
    n_refine: int = option(10, low=1, high=1000,
                           doc="Levenberg-Marquardt steps per refined row")
    n_best: int = option(2, low=1, high=16,
                         doc="lowest distinct rows refined besides the row from w_k")
    shift: float = option(4.0, low=0.0, low_open=True, doc="offset of the extra starts")
    test_samples: int = option(200_000, low=100, high=10**9,
                               doc="Monte Carlo size of the test-error formula")
    theta: tuple[float, ...] | None = option(None, kind="reals", nullable=True, max_len=16,
                                             doc="the activation's own scalars, held fixed")
    channel_error: bool = option(True, doc="propagate the channel Monte Carlo error to the "
                                 "fixed point (7 tracked update calls)")
    track: bool = option(True, doc="iterate with each sample's minima tracked from the previous "
                         "call (the returned point is verified by an exploring call)")
    n_track: int = option(3, low=1, high=1000,
                          doc="Levenberg-Marquardt steps per start of a tracked call")
    n_keep: int = option(2, low=1, high=16, doc="distinct minima tracked per sample")
    max_off_branch: float = option(0.1, low=0.0, high=1.0,
                                   doc="trusted only if at most this fraction of channel "
                                       "samples has its global minimum off the w_k branch")
    max_prox_unconverged: float = option(1e-3, low=0.0, high=1.0,
                                         doc="trusted only if at most this fraction of "
                                             "proximal solves is unconverged")
    max_vh_gap: float = option(0.25, low=0.0,
                               doc="trusted only if the two Vh estimates differ by at most "
                                   "this fraction of |Vh| (or by less than vh_gap_z se)")
    vh_gap_z: float = option(4.0, low=0.0, doc="gap between the Vh estimates below this many "
                             "standard errors is noise")
    solver: SolverOptions | None = None

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.solver is None:
            object.__setattr__(self, "solver", default_solver(self.samples))


@dataclass(frozen=True)
class ErmTheoryResult:
    """One point of the ERM replica theory (fields NaN where the fixed point did not converge).

    Attributes
    ----------
    alpha, lam_k, lam_v : float
        Sample ratio and ridge penalties.
    activation : str
        Activation name.
    start : str
        ``"informed"``, ``"uninformed"`` or ``"continuation"`` (warm start from a neighbour).
    m_k, q_k, V_k, m_v, q_v, V_v : float
        Order parameters.
    mh_k, qh_k, Vh_k, mh_v, qh_v, Vh_v : float
        Conjugates (``Vh`` of the form used).
    Vh_k_stein, Vh_v_stein, Vh_k_hessian, Vh_v_hessian : float
        Both ``Vh`` forms at the fixed point.
    vh_gap_k, vh_gap_v : float
        Hessian minus Stein-free ``Vh`` (MC noise plus the missed branch-jump term).
    vh_gap_k_stderr, vh_gap_v_stderr : float
        Monte Carlo standard errors of the gaps.
    test_error : float
        Population excess error at the overlaps.
    stderr_test : float
        Monte Carlo standard error of the test-error formula alone (overlaps held fixed).
    stderr_channel : float
        Standard error of ``test_error`` from the channel Monte Carlo noise of the fixed point
        (delta method, :func:`channel_error`; NaN when switched off). It dominates: at ``2e4``
        samples it is ~5x ``stderr_test``.
    stderr : float
        Total standard error, ``hypot(stderr_test, stderr_channel)`` (``stderr_test`` when the
        channel error is off).
    order_stderr : dict
        Channel Monte Carlo standard error of each order parameter.
    train_loss, train_loss_se : float
        Training loss per sample at the fixed point and its Monte Carlo standard error.
    objective : float
        Training objective per sample, ``train_loss + (lam_k q_k + lam_v q_v) / (2 alpha)``.
    off_branch : float
        Fraction of channel samples whose global proximal minimum lies in another basin than
        the one reached from ``w_k`` and lower (the bias a single start would carry).
    prox_unconverged : float
        Fraction of channel samples whose proximal gradient stayed above tolerance.
    converged : bool
        A trusted fixed point: the residual stayed below the tolerance (solver ``confirm``
        rule, verified by the exploring map at the point) and the diagnostics are within their
        bounds (:func:`diagnose`). A fixed point that fails a diagnostic keeps its numbers
        with ``converged=False``; one never reached is NaN.
    iterations : int
        Fixed-point iterations spent finding the point (every solve and sweep that led to it).
    update_calls : int
        Every map call spent on the point: iterations (tracked and exploring), and the
        channel error's.
    exact_calls : int
        How many of ``update_calls`` explored from the cold starts (the dearer kind).
    residual : float
        Relative residual of the exploring map at the point.
    reason : str
        ``"converged"``; ``"flagged: ..."`` naming each failed diagnostic with its numbers; or
        the solver's failure (``"max_iter"``, ...).
    history : tuple of float
        Residual history.
    samples, seed : int
        Channel Monte Carlo size and seed.
    vh_form : str
        ``Vh`` form used.
    runtime_s : float
        Wall time (solve plus test error).
    """

    alpha: float
    lam_k: float
    lam_v: float
    activation: str
    start: str
    m_k: float
    q_k: float
    V_k: float
    m_v: float
    q_v: float
    V_v: float
    mh_k: float
    qh_k: float
    Vh_k: float
    mh_v: float
    qh_v: float
    Vh_v: float
    Vh_k_stein: float
    Vh_v_stein: float
    Vh_k_hessian: float
    Vh_v_hessian: float
    vh_gap_k: float
    vh_gap_v: float
    vh_gap_k_stderr: float
    vh_gap_v_stderr: float
    test_error: float
    stderr_test: float
    stderr_channel: float
    stderr: float
    order_stderr: dict[str, float]
    train_loss: float
    train_loss_se: float
    objective: float
    off_branch: float
    prox_unconverged: float
    converged: bool
    iterations: int
    residual: float
    reason: str
    history: tuple[float, ...]
    samples: int
    seed: int
    vh_form: str
    runtime_s: float
    update_calls: int = 0
    exact_calls: int = 0

    @property
    def x(self) -> np.ndarray:
        """The order parameters as the solver's state vector."""
        return np.array([getattr(self, n) for n in ORDER_NAMES])

    @property
    def reached(self) -> bool:
        """A fixed point was reached (finite order parameters), trusted or flagged."""
        return bool(np.all(np.isfinite(self.x)))

    def to_dict(self, *, with_history: bool = False) -> dict[str, Any]:
        d = dataclasses.asdict(self)
        if not with_history:
            d.pop("history")
        return d


def _theta(act: Activation, theta: Sequence[float] | None) -> np.ndarray:
    vals = list(act.param_init) if theta is None else [float(t) for t in theta]
    if len(vals) != act.n_params:
        raise ConfigError(f"theta={vals} has {len(vals)} values; allowed: {act.n_params} for "
                          f"{act.name} ({', '.join(act.param_names) or 'none'})")
    return np.asarray(vals, dtype=np.float64)


def erm_start_point(task: TaskConfig, start: str) -> np.ndarray:
    """Solver start ``(m_k, q_k, V_k, m_v, q_v, V_v)`` for ``"informed"`` or ``"uninformed"``."""
    if start == "informed":
        c = min(task.c_nu, 4.0) if task.nu > 0 else 0.5
        return np.array([c, c * c + 0.5, 1.0, 1.0, 1.5, 1.0])
    if start == "uninformed":
        return np.array([0.05, 1.0, 1.0, 0.05, 1.0, 1.0])
    raise ConfigError(f"start={start!r} is unknown; allowed: one of {', '.join(STARTS)}")


def _check_point(alpha: Any, lam_k: Any, lam_v: Any) -> tuple[float, float, float]:
    return (check_real("alpha", alpha, low=0.0, low_open=True),
            check_real("lam_k", lam_k, low=0.0),
            check_real("lam_v", lam_v, low=0.0))


def conjugates(mom: Mapping[str, float], x: np.ndarray, alpha: float, lam_k: float,
               lam_v: float, vh_form: str) -> tuple[np.ndarray, dict[str, float]]:
    """Channel moments at ``x`` -> conjugates -> the next order parameters (module docstring).

    Returns the new ``(m_k, q_k, V_k, m_v, q_v, V_v)`` (NaN where the ridge no longer
    confines a direction, ``lam + Vh <= 0``) and the conjugates of both ``Vh`` forms.
    """
    m_k, q_k, _, m_v, q_v, _ = (float(t) for t in x)
    s_k = math.sqrt(max(q_k - m_k**2, 0.0))
    s_v = math.sqrt(max(q_v - m_v**2, 0.0))
    nan = math.nan
    aux: dict[str, float] = {
        "mh_k": alpha * (mom["fh_k"] - m_k / s_k * mom["fx_k"]) if s_k > 0 else nan,
        "mh_v": alpha * (mom["fh_v"] - m_v / s_v * mom["fx_v"]) if s_v > 0 else nan,
        "qh_k": alpha * mom["ff_k"],
        "qh_v": alpha * mom["ff_v"],
        "Vh_k_stein": -alpha * mom["fx_k"] / s_k if s_k > 0 else nan,
        "Vh_v_stein": -alpha * mom["fx_v"] / s_v if s_v > 0 else nan,
        "Vh_k_hessian": alpha * mom["tr_k"],
        "Vh_v_hessian": alpha * mom["tr_v"],
    }
    new = []
    for a, lam in (("k", lam_k), ("v", lam_v)):
        vh = aux[f"Vh_{a}_{vh_form}"]
        aux[f"Vh_{a}"] = vh
        mh, qh = aux[f"mh_{a}"], aux[f"qh_{a}"]
        den = lam + vh
        if not den > 0:  # the ridge no longer confines this direction: no fixed point here
            return np.full(6, np.nan), aux
        V = 1.0 / den
        new += [mh * V, (mh * mh + qh) * V * V, V]
    return np.asarray(new), aux


_EXACT_CACHE: OrderedDict[tuple, tuple[dict[str, float], np.ndarray, np.ndarray]] = OrderedDict()
EXACT_CACHE_SIZE = 64


class ChannelMap:
    """The fixed-point map ``F(x) -> (x_new, aux)`` of docs/theory.md (ERM), in two forms.

    * ``exact`` (also ``__call__``): the proximal step from the ``2 L + 1`` cold starts of
      every sample (:func:`bayesslr.theory.erm_proximal.cold_starts`), ``n_explore`` + ``n_refine``
      Levenberg-Marquardt steps: a deterministic function of ``x`` (common random numbers).
      This is the map whose fixed point is reported.
    * ``tracked``: each sample starts from ``w_k`` and from the ``n_keep`` lowest distinct
      minima that the previous call found (as offsets from ``w_k``), ``n_track``
      Levenberg-Marquardt steps. Between two calls of an iteration the order parameters move little,
      so the minima move little and a few Newton steps re-converge them; it costs a fraction
      of an exploring call. Its first call (nothing tracked yet) explores.

    The channel part depends on ``x`` alone (``alpha`` and ``lam`` enter through
    :func:`conjugates`), so the exploring map's moments at an ``x`` are kept (a small LRU cache
    shared by every map of the same channel and settings): continuation starts each ``alpha``
    (or ``lam``) at its neighbour's fixed point, where the exploring call was just made, and
    the channel error of a reported point starts where its verification was made; both then
    cost nothing, and track from the minima found there.

    Both kinds keep the minima they found for the next ``tracked`` call. ``aux`` carries the
    conjugates, the diagnostics, and under ``"moments"`` / ``"moments_cov"`` the channel
    moments and their Monte Carlo covariance (:func:`channel_error`). ``calls`` counts the
    proximal steps computed, by kind.
    """

    def __init__(self, task: TaskConfig, act: Activation, alpha: float, lam_k: float,
                 lam_v: float, options: ErmTheoryOptions) -> None:
        self.act, self.alpha, self.lam_k, self.lam_v, self.opt = act, alpha, lam_k, lam_v, options
        self.ch = channel64(task, options.samples, options.seed)
        self.theta = _theta(act, options.theta)
        self.minima: Any = None
        self.calls = {"exact": 0, "tracked": 0}
        o = options
        self._key = (dataclasses.replace(task, D=1), act.name, self.theta.tobytes(), o.samples,
                     o.seed, o.n_explore, o.n_refine, o.n_best, o.n_keep, o.shift)
        with jax.enable_x64(True):
            self._cold = cold_starts(task.L_max, options.shift)

    def _prox(self, x: np.ndarray, starts: Any, n_explore: int, n_refine: int,
              hessian: bool = True) -> tuple[dict[str, float], np.ndarray, Any]:
        m_k, q_k, V_k, m_v, q_v, V_v = (float(t) for t in x)
        with jax.enable_x64(True):
            out = prox_step(self.act, self.ch, m_k, q_k, V_k, m_v, q_v, V_v,
                            jnp.asarray(self.theta), starts, n_explore=n_explore,
                            n_refine=n_refine, n_best=self.opt.n_best,
                            n_keep=self.opt.n_keep, hessian=hessian)
            mom_arr = out.moments
            names = [k for k in mom_arr._fields if k != "cov"]
            vals = np.asarray(jnp.stack([getattr(mom_arr, k) for k in names]))
            cov = np.asarray(mom_arr.cov)
        return dict(zip(names, (float(v) for v in vals), strict=True)), cov, out.minima

    def _image(self, x: np.ndarray, mom: Mapping[str, float],
               cov: np.ndarray) -> tuple[np.ndarray, dict[str, Any]]:
        alpha = self.alpha
        new, aux = conjugates(mom, x, alpha, self.lam_k, self.lam_v, self.opt.vh_form)
        aux.update({
            "train_loss": mom["loss"],
            "train_loss_se": mom["loss_se"],
            "off_branch": mom["off_branch"],
            "prox_unconverged": mom["unconverged"],
            "vh_gap_k_stderr": alpha * mom["gap_k_se"],
            "vh_gap_v_stderr": alpha * mom["gap_v_se"],
            "moments": {k: mom[k] for k in MOMENT_NAMES},
            "moments_cov": cov,
        })
        return new, aux

    def _cached(self, x: np.ndarray) -> tuple | None:
        key = (*self._key, np.asarray(x, dtype=np.float64).tobytes())
        hit = _EXACT_CACHE.get(key)
        if hit is not None:
            _EXACT_CACHE.move_to_end(key)
        return hit

    def exact(self, x: np.ndarray) -> tuple[np.ndarray, dict[str, Any]]:
        """The map from the cold starts (keeps the minima found)."""
        x = np.asarray(x, dtype=np.float64)
        hit = self._cached(x)
        if hit is None:
            self.calls["exact"] += 1
            mom, cov, minima = self._prox(x, self._cold, self.opt.n_explore,
                                          self.opt.n_refine)
            hit = (mom, cov, np.asarray(minima, dtype=np.float32))
            _EXACT_CACHE[(*self._key, x.tobytes())] = hit
            while len(_EXACT_CACHE) > EXACT_CACHE_SIZE:
                _EXACT_CACHE.popitem(last=False)
        mom, cov, self.minima = hit
        return self._image(x, mom, cov)

    __call__ = exact

    def tracked(self, x: np.ndarray, minima: Any = None, *, keep: bool = True,
                n_steps: int | None = None) -> tuple[np.ndarray, dict[str, Any]]:
        """The map from ``w_k`` and the tracked minima (``minima``, default the last call's;
        ``keep=False`` leaves the tracked state as it is; ``n_steps`` Levenberg-Marquardt
        steps, default ``n_track``). Explores when nothing is tracked; where the exploring map
        is known at ``x`` (cache), that is used instead. Its ``aux`` lacks the Hessian-form
        terms (NaN) unless they drive the iteration (``vh_form="hessian"``): only the
        diagnostics use them, and those come from the exploring map."""
        x = np.asarray(x, dtype=np.float64)
        if minima is None and (self.minima is None or self._cached(x) is not None):
            return self.exact(x)
        minima = self.minima if minima is None else minima
        self.calls["tracked"] += 1
        with jax.enable_x64(True):
            starts = tracked_starts(jnp.asarray(minima, dtype=jnp.float64))
        # the starts are minima already: n_track steps re-converge them, no separate refinement
        mom, cov, found = self._prox(x, starts, self.opt.n_track if n_steps is None else n_steps,
                                     0, hessian=self.opt.vh_form == "hessian")
        if keep:
            self.minima = np.asarray(found, dtype=np.float32)
        return self._image(x, mom, cov)


def make_update(task: TaskConfig, act: Activation, alpha: float, lam_k: float, lam_v: float,
                options: ErmTheoryOptions) -> ChannelMap:
    """The fixed-point map of docs/theory.md (ERM) at one ``(alpha, lam_k, lam_v)``
    (:class:`ChannelMap`; calling it is the exact map)."""
    return ChannelMap(task, act, alpha, lam_k, lam_v, options)


def channel_error(F: ChannelMap, x: np.ndarray, aux0: Mapping[str, Any], *,
                  rel_step: float = 1e-2) -> np.ndarray:
    """Covariance of the fixed point's order parameters from the channel Monte Carlo noise.

    Delta method: the estimated fixed point solves ``x = G(M(x) + eps, x)``, ``M`` the channel
    moments, ``eps`` their Monte Carlo error (covariance ``moments_cov`` of the exact map at
    ``x``), ``G`` the map :func:`conjugates`. Linearising, ``(I - J) dx = dG/dM eps`` with
    ``J`` the Jacobian of the full map ``F`` at ``x`` and ``dG/dM`` by central differences;
    ``Cov(dx) = A Cov(eps) A^T``, ``A = (I - J)^-1 dG/dM``.

    ``aux0`` holds the exact map's auxiliaries at ``x`` (the solver's verification call), and
    ``J`` comes by forward differences on the common random numbers (step ``rel_step``
    relative: coarse enough to step over the ``O(1/n)`` branch jumps) of the tracked map
    started, at ``x`` and at each displaced point, from the minima that call found
    (``F.minima``): 7 tracked calls, each a fraction of an exact one. A sample whose global
    minimum switches between its tracked minima within a step is counted, as in the exact
    map. Near a spinodal ``I - J`` turns singular and the error grows, as it should.

    A forward step in an overlap ``m`` that would leave the domain ``m^2 < q`` (the overlap
    matrix positive definite; the map is NaN outside) is taken backwards instead. This
    happens where the fixed point sits close to that edge: at max-SLR softmax with a small
    ``lam``, ``q_v - m_v^2`` is 2e-3-5e-2 at ``alpha >= 5`` against a step of 1e-2 in
    ``m_v``, and the forward column was NaN, so the point had no channel error.
    """
    x = np.asarray(x, dtype=np.float64)
    minima = F.minima
    alpha, lam_k, lam_v, vh_form = F.alpha, F.lam_k, F.lam_v, F.opt.vh_form
    f0 = F.tracked(x, minima, keep=False)[0]
    J = np.empty((6, 6))
    for j in range(6):
        h = rel_step * max(abs(x[j]), 1e-2)
        if j in M_INDEX and (x[j] + h) ** 2 >= x[j + 1]:
            h = -h  # forward leaves m^2 < q: step back, inside
        xp = x.copy()
        xp[j] += h
        J[:, j] = (F.tracked(xp, minima, keep=False)[0] - f0) / h
    dG = moment_jacobian(dict(aux0["moments"]), x, alpha, lam_k, lam_v, vh_form)
    A = np.linalg.solve(np.eye(6) - J, dG)
    return A @ np.asarray(aux0["moments_cov"]) @ A.T


def moment_jacobian(mom: Mapping[str, float], x: np.ndarray, alpha: float, lam_k: float,
                    lam_v: float, vh_form: str) -> np.ndarray:
    """``dG/dM``: the next order parameters' derivative in the channel moments at ``x`` (the
    map :func:`conjugates`), by central differences; one column per :data:`MOMENT_NAMES`."""
    dG = np.empty((6, len(MOMENT_NAMES)))
    for i, name in enumerate(MOMENT_NAMES):
        h = 1e-6 * max(abs(mom[name]), 1e-3)
        up, dn = dict(mom), dict(mom)
        up[name] += h
        dn[name] -= h
        dG[:, i] = (conjugates(up, x, alpha, lam_k, lam_v, vh_form)[0]
                    - conjugates(dn, x, alpha, lam_k, lam_v, vh_form)[0]) / (2 * h)
    return dG


def solve_erm(task: TaskConfig, activation: str, alpha: Any, lam_k: Any, lam_v: Any = None,
              options: ErmTheoryOptions | None = None, *, start: str = "informed",
              x0: np.ndarray | None = None) -> ErmTheoryResult:
    """Solve the ERM replica fixed point at one ``(alpha, lam_k, lam_v)`` (docs/theory.md).

    Parameters
    ----------
    task : TaskConfig
        Task (``D`` ignored).
    activation : str
        One of :data:`REPLICA_ACTIVATIONS`.
    alpha : float
        Sample ratio ``N/D > 0``.
    lam_k, lam_v : float
        Ridge penalties (``lam_v`` defaults to ``lam_k``).
    options : ErmTheoryOptions, optional
    start : {"informed", "uninformed"}
        Named start, used when ``x0`` is not given.
    x0 : numpy.ndarray, optional
        Explicit start (continuation); ``start`` is then reported as ``"continuation"``.

    Returns
    -------
    ErmTheoryResult
        NaN fields and ``converged=False`` when the fixed point is not reached (never raises
        on a numerical failure).
    """
    opt = options or ErmTheoryOptions()
    if activation not in REPLICA_ACTIVATIONS:
        raise ConfigError(f"activation={activation!r} is not supported by the ERM theory; "
                          f"allowed: one of {', '.join(REPLICA_ACTIVATIONS)}")
    act = get_activation(activation)
    alpha, lam_k, lam_v = _check_point(alpha, lam_k, lam_k if lam_v is None else lam_v)
    t0 = time.perf_counter()
    if x0 is None:
        x_start, start_name = erm_start_point(task, start), start
    else:
        x_start, start_name = np.asarray(x0, dtype=np.float64), "continuation"
    F = make_update(task, act, alpha, lam_k, lam_v, opt)
    fp = solve_fixed_point(F.tracked if opt.track else F.exact, x_start, opt.solver,
                           exact=F.exact)
    return _finish(task, act, alpha, lam_k, lam_v, opt, fp, start_name, t0, F)


def _test_fields(task: TaskConfig, samples: int, seed: int) -> ChannelSamples:
    """The population test formula's Monte Carlo set (float64; ``D`` does not enter), drawn
    once per (task, size, seed) and shared by every point of a curve: the test error and the
    gradient of the channel error evaluate it at each point's overlaps."""
    return _drawn_test_fields(dataclasses.replace(task, D=1), samples, seed)


@functools.lru_cache(maxsize=2)
def _drawn_test_fields(task: TaskConfig, samples: int, seed: int) -> ChannelSamples:
    from bayesslr.population.method import make_fields

    with jax.enable_x64(True):
        return make_fields(task, "mc", samples, seed)


def _risk_gradient(task: TaskConfig, act: Activation, theta: np.ndarray, p4: Sequence[float],
                   samples: int, seed: int) -> np.ndarray:
    """Gradient of the population excess risk ``1 - 2 m_v A + q_v B`` in
    ``(m_k, q_k, m_v, q_v)`` (autodiff through the Monte Carlo fields, common numbers)."""
    fields = _test_fields(task, samples, seed)
    with jax.enable_x64(True):
        return np.asarray(_risk_grad(act, fields, jnp.asarray(theta),
                                     jnp.asarray(p4, dtype=jnp.float64)))


@partial(jax.jit, static_argnums=0)
def _risk_grad(act: Activation, fields: ChannelSamples, th: jax.Array, p: jax.Array) -> jax.Array:
    from bayesslr.population.method import ab_terms

    def risk(p):
        m_k, q_k, m_v, q_v = p[0], p[1], p[2], p[3]
        a, b = ab_terms(act, fields, m_k, jnp.sqrt(q_k - m_k**2), th)
        return 1.0 - 2.0 * m_v * jnp.sum(fields.weight * a) + q_v * jnp.sum(fields.weight * b)

    return jax.grad(risk)(p)


def diagnose(aux: Mapping[str, Any], options: ErmTheoryOptions) -> list[str]:
    """The diagnostics of a fixed point against their bounds: one line per failure.

    A fixed point of the replica map is trusted only where the proximal problem behind it is
    solved reliably and the two ``Vh`` estimates agree:

    * ``off_branch <= max_off_branch``: the fraction of channel samples whose global
      proximal minimum lies in another basin than the one reached from ``w_k``. Where many
      samples sit near a switch between branches the map jumps by ``O(1/samples)`` at each
      switch, the iteration reaches a noise floor rather than a fixed point, and the
      replica-symmetric description itself is in doubt;
    * ``prox_unconverged <= max_prox_unconverged``: proximal solves left unconverged bias the
      moments;
    * for ``a = k, v``: ``|Vh_a_hessian - Vh_a_stein| <= max(vh_gap_z * se,
      max_vh_gap * |Vh_a_stein|)``, ``se`` the gap's Monte Carlo standard error. The
      Stein-free form is exact, the Hessian form misses the jump term where minima switch
      branch: a gap that is both significant and a sizeable fraction of ``Vh`` (two estimates
      of opposite signs always are) says the jumps dominate the response.

    The default bounds and the measurements behind them (finite-``D`` ERM against the theory
    on both sides of the ``max_vh_gap`` bound) are in ``docs/theory.md``, "What converged
    means".
    """
    out = []
    ob = aux.get("off_branch", math.nan)
    if not ob <= options.max_off_branch:
        out.append(f"off_branch {ob:.3g} > {options.max_off_branch:g}")
    pu = aux.get("prox_unconverged", math.nan)
    if not pu <= options.max_prox_unconverged:
        out.append(f"prox_unconverged {pu:.3g} > {options.max_prox_unconverged:g}")
    for a in ("k", "v"):
        st, he = aux.get(f"Vh_{a}_stein", math.nan), aux.get(f"Vh_{a}_hessian", math.nan)
        se = aux.get(f"vh_gap_{a}_stderr", math.nan)
        gap = he - st
        bound = max(options.vh_gap_z * se, options.max_vh_gap * abs(st))
        if not abs(gap) <= bound:
            out.append(f"Vh_{a} hessian {he:.3g} vs stein {st:.3g}: gap {gap:.3g} = "
                       f"{abs(gap) / se:.1f} se = {abs(gap) / abs(st):.2f} |Vh_{a}| "
                       f"(bounds {options.vh_gap_z:g} se, {options.max_vh_gap:g} |Vh|)")
    return out


def _finish(task, act, alpha, lam_k, lam_v, opt, fp: FixedPointResult, start_name, t0,
            F: ChannelMap) -> ErmTheoryResult:
    nan = math.nan
    a = fp.aux if fp.converged else {}
    x = fp.x
    vals = dict(zip(ORDER_NAMES, (float(t) for t in x), strict=True))
    test, test_se = nan, nan
    reason, trusted = fp.reason, fp.converged
    if fp.converged:
        from bayesslr.population.method import excess_risk

        theta = _theta(act, opt.theta)
        p4 = (vals["m_k"], max(vals["q_k"], vals["m_k"] ** 2), vals["m_v"],
              max(vals["q_v"], vals["m_v"] ** 2))
        pr = excess_risk(task, act.name, *p4, list(theta) if act.n_params else None,
                         samples=opt.test_samples, seed=opt.seed + 1,
                         fields=_test_fields(task, opt.test_samples, opt.seed + 1))
        test, test_se = pr.excess_risk, pr.stderr
        failed = diagnose(a, opt)
        if failed:
            trusted, reason = False, "flagged: " + "; ".join(failed)
    g = a.get
    train = g("train_loss", nan)
    objective = train + (lam_k * vals["q_k"] + lam_v * vals["q_v"]) / (2.0 * alpha)
    r = ErmTheoryResult(
        alpha=alpha, lam_k=lam_k, lam_v=lam_v, activation=act.name, start=start_name, **vals,
        mh_k=g("mh_k", nan), qh_k=g("qh_k", nan), Vh_k=g("Vh_k", nan),
        mh_v=g("mh_v", nan), qh_v=g("qh_v", nan), Vh_v=g("Vh_v", nan),
        Vh_k_stein=g("Vh_k_stein", nan), Vh_v_stein=g("Vh_v_stein", nan),
        Vh_k_hessian=g("Vh_k_hessian", nan), Vh_v_hessian=g("Vh_v_hessian", nan),
        vh_gap_k=g("Vh_k_hessian", nan) - g("Vh_k_stein", nan),
        vh_gap_v=g("Vh_v_hessian", nan) - g("Vh_v_stein", nan),
        vh_gap_k_stderr=g("vh_gap_k_stderr", nan), vh_gap_v_stderr=g("vh_gap_v_stderr", nan),
        test_error=test, stderr_test=test_se, stderr_channel=nan, stderr=test_se,
        order_stderr=dict.fromkeys(ORDER_NAMES, nan), train_loss=train,
        train_loss_se=g("train_loss_se", nan), objective=objective,
        off_branch=g("off_branch", nan), prox_unconverged=g("prox_unconverged", nan),
        converged=trusted, iterations=fp.iterations, residual=fp.residual,
        reason=reason, history=fp.history, samples=opt.samples, seed=opt.seed,
        vh_form=opt.vh_form, runtime_s=0.0, update_calls=sum(F.calls.values()),
        exact_calls=F.calls["exact"],
    )
    if fp.converged and opt.channel_error:
        r = _attach_channel_error(task, act, r, opt, F, a)
    return dataclasses.replace(r, runtime_s=time.perf_counter() - t0)


def _attach_channel_error(task: TaskConfig, act: Activation, r: ErmTheoryResult,
                          opt: ErmTheoryOptions, F: ChannelMap,
                          aux: Mapping[str, Any]) -> ErmTheoryResult:
    """``r`` with its channel error (:func:`channel_error` at ``r.x``, ``aux`` the exploring
    map's auxiliaries there and ``F`` holding the minima it found) and the calls counted."""
    before = dict(F.calls)
    chan_se, order_se = math.nan, dict.fromkeys(ORDER_NAMES, math.nan)
    try:
        cov = channel_error(F, r.x, aux)
        theta = _theta(act, opt.theta)
        p4 = (r.m_k, max(r.q_k, r.m_k**2), r.m_v, max(r.q_v, r.m_v**2))
        grad = _risk_gradient(task, act, theta, p4, min(opt.test_samples, 50_000),
                              opt.seed + 1)
        sub = cov[np.ix_([0, 1, 3, 4], [0, 1, 3, 4])]
        chan_se = float(math.sqrt(max(float(grad @ sub @ grad), 0.0)))
        order_se = {n: float(math.sqrt(max(v, 0.0)))
                    for n, v in zip(ORDER_NAMES, np.diag(cov), strict=True)}
    except (np.linalg.LinAlgError, ValueError, ArithmeticError):
        pass  # stays NaN: the error estimate failed, the point itself stands
    spent = {k: F.calls[k] - before[k] for k in F.calls}
    r = dataclasses.replace(
        r, stderr_channel=chan_se, order_stderr=order_se,
        stderr=r.stderr_test if math.isnan(chan_se) else math.hypot(r.stderr_test, chan_se),
        update_calls=r.update_calls + sum(spent.values()),
        exact_calls=r.exact_calls + spent["exact"])
    return unknown_channel_error(r)


def unknown_channel_error(r: Any) -> Any:
    """A theory result (ERM or Bayes) with a test error whose channel error could not be
    computed (NaN or inf): ``stderr`` NaN (the test-formula error alone would be several times
    too small), not ``converged``, and the reason said. Any other result is returned as it is
    (the same object: nothing changes for a point whose channel error is finite)."""
    if math.isfinite(r.stderr_channel) or not math.isfinite(r.test_error):
        return r
    why = "channel error could not be computed (stderr_channel is NaN)"
    reason = ("flagged: " + why if r.reason == "converged" else
              r.reason if why in r.reason else f"{r.reason}; {why}")
    return dataclasses.replace(r, converged=False, stderr=math.nan, reason=reason)


def with_channel_error(task: TaskConfig, r: ErmTheoryResult,
                       options: ErmTheoryOptions | None = None) -> ErmTheoryResult:
    """A reached fixed point ``r`` with its channel error, without solving again.

    The exploring map is deterministic on the common random numbers, so one call of it at
    ``r.x`` reproduces the solver's verification call (moments, their covariance and the
    minima to track), then :func:`channel_error`: 7 tracked update calls, and the exploring
    one unless it is still cached (on a curve or a ``lam`` search it usually is).
    ``r`` is returned unchanged when it was not reached or carries its channel error already.
    """
    opt = options or ErmTheoryOptions()
    if not r.reached or math.isfinite(r.stderr_channel):
        return r
    t0 = time.perf_counter()
    act = get_activation(r.activation)
    F = make_update(task, act, r.alpha, r.lam_k, r.lam_v, opt)
    _, aux = F.exact(r.x)  # counted only when computed (not a cache hit)
    r = dataclasses.replace(r, update_calls=r.update_calls + F.calls["exact"],
                            exact_calls=r.exact_calls + F.calls["exact"])
    r = _attach_channel_error(task, act, r, opt, F, aux)
    return dataclasses.replace(r, runtime_s=r.runtime_s + time.perf_counter() - t0)


def _better(a: ErmTheoryResult, b: ErmTheoryResult) -> ErmTheoryResult:
    """The branch with the lower training objective (the global minimiser) among the reached
    fixed points, trusted or flagged (a flagged winner is reported with its flag)."""
    if not b.reached:
        return a
    if not a.reached:
        return b
    return a if a.objective <= b.objective else b


def erm_curve(task: TaskConfig, activation: str, alphas: Sequence[float], lam_k: Any,
              lam_v: Any = None, options: ErmTheoryOptions | None = None, *,
              starts: Sequence[str] = ("informed",), both_directions: bool = True,
              use_continuation: bool = True, report: Sequence[float] | None = None
              ) -> tuple[list[ErmTheoryResult], dict[str, list[ErmTheoryResult]]]:
    """ERM theory along ``alphas``, from each start, by continuation in both directions.

    Every ``(start, direction)`` sweep is kept; per ``alpha`` the reported point is the
    reached branch with the lowest training objective (the global ERM minimiser), with its
    channel error attached (:func:`with_channel_error`, no new solve). Its ``iterations`` and
    ``update_calls`` count the work of every sweep at that ``alpha`` (and the channel error's
    calls): what it cost to find the point.

    Parameters
    ----------
    alphas : sequence of float
        The continuation path (any order; solved ascending and descending).
    starts : sequence of {"informed", "uninformed"}
        Named starts of the sweeps (each sweep's first point starts cold from it).
    both_directions : bool
        Sweep downwards too (hysteresis shows as two branches); else upwards only.
    use_continuation : bool
        Warm-start each ``alpha`` from its converged neighbour; ``False`` solves every point
        cold from each start (sweeps named ``"<start>-cold"``).
    report : sequence of float, optional
        The ``alpha`` values whose winner gets its channel error (default: all).

    Returns
    -------
    best : list of ErmTheoryResult
        One per ``alpha`` (input order).
    sweeps : dict
        ``"<start>-up"`` / ``"<start>-down"`` (or ``"<start>-cold"``) -> list of results.
    """
    opt = options or ErmTheoryOptions()
    for a in alphas:
        check_real("alpha", a, low=0.0, low_open=True)
    if not alphas:
        raise ConfigError("alpha=[] is empty; allowed: at least one alpha > 0")
    lam_v = lam_k if lam_v is None else lam_v
    sweeps: dict[str, list[ErmTheoryResult]] = {}
    # branches are ranked without their channel error; the winners get it below
    search = dataclasses.replace(opt, channel_error=False)
    for start in starts:
        erm_start_point(task, start)  # validate the name before any work

        def solve_at(alpha: float, x0: np.ndarray | None, start=start) -> ErmTheoryResult:
            return solve_erm(task, activation, alpha, lam_k, lam_v, search, start=start, x0=x0)

        if not use_continuation:
            sweeps[f"{start}-cold"] = [solve_at(float(a), None) for a in alphas]
            continue
        for desc in ((False, True) if both_directions and len(alphas) > 1 else (False,)):
            sweeps[f"{start}-{'down' if desc else 'up'}"] = continuation(
                solve_at, list(alphas), None, descending=desc)
    wanted = None if report is None else {float(a) for a in report}
    best = []
    for i in range(len(alphas)):
        cands = [s[i] for s in sweeps.values()]
        b = cands[0]
        for c in cands[1:]:
            b = _better(b, c)
        b = dataclasses.replace(b, iterations=sum(c.iterations for c in cands),
                                update_calls=sum(c.update_calls for c in cands),
                                exact_calls=sum(c.exact_calls for c in cands))
        if opt.channel_error and (wanted is None or b.alpha in wanted):
            b = with_channel_error(task, b, opt)
        best.append(b)
    return best, sweeps
