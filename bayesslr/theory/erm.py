"""Replica-symmetric fixed point of ridge-regularised attention ERM (spec section 5).

Six order parameters ``x = (m_k, q_k, V_k, m_v, q_v, V_v)`` and their conjugates
``(mh_a, qh_a, Vh_a)``, ``a in {k, v}``:

* prior (ridge) part: ``V_a = 1/(lam_a + Vh_a)``, ``m_a = mh_a V_a``,
  ``q_a = (mh_a^2 + qh_a) V_a^2``;
* channel part (:func:`bayesslr.theory.channel.prox_channel`): the global proximal point of
  every teacher channel sample, ``f_k = (chi - w_k)/V_k``, ``f_v = (z - w_v)/V_v``, and

      qh_a = alpha E|f_a|^2,
      mh_a = alpha E[f_a . (h*_a - (m_a/s_a) xi_a)],          s_a = sqrt(q_a - m_a^2),
      Vh_a = -alpha E[f_a . xi_a] / s_a                       ("stein": Stein-free, exact),
      Vh_a = alpha E[Tr_a(V^-1 (V^-1 + H)^-1 H)]              ("hessian").

  The Hessian form misses the jump term where the global minimum switches branch and then
  overestimates ``Vh``; both are computed at every iteration and their gap is recorded
  (``vh_gap_k``, ``vh_gap_v`` = hessian minus Stein-free). The fixed point uses ``vh_form``.
* outputs: test excess error = the population formula of section 3 at ``(m_k, q_k, m_v, q_v)``
  (:func:`bayesslr.population.excess_risk`), training loss ``E[1/2 (y - sigma(chi).z)^2]`` at
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
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from bayesslr.activations import Activation, get_activation
from bayesslr.task import ConfigError, TaskConfig, check_int, check_real
from bayesslr.theory.channel import ChannelSamples, prox_channel, sample_channel
from bayesslr.theory.solver import (
    FixedPointResult,
    SolverOptions,
    continuation,
    solve_fixed_point,
)

ORDER_NAMES: tuple[str, ...] = ("m_k", "q_k", "V_k", "m_v", "q_v", "V_v")
VH_FORMS: tuple[str, ...] = ("stein", "hessian")
STARTS: tuple[str, ...] = ("informed", "uninformed")
ERM_ACTIVATIONS: tuple[str, ...] = ("softmax", "linear", "softplus", "erf")


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


def default_solver(samples: int) -> SolverOptions:
    """Anderson-accelerated solver with :func:`default_tol` (about 11 update calls per point
    on a warm start instead of ~30 for the plain damped iteration; ``bench_theory.py``)."""
    return SolverOptions(tol=default_tol(samples), max_iter=300, accel="anderson")


@dataclass(frozen=True)
class ErmTheoryOptions:
    """Settings of the ERM replica fixed point.

    Attributes
    ----------
    samples : int
        Channel samples (common random numbers).
    seed : int
        Seed of the channel samples (the test-error Monte Carlo uses ``seed + 1``).
    vh_form : {"stein", "hessian"}
        Which ``Vh`` drives the iteration (both are recorded).
    n_explore, n_refine : int
        Levenberg-Marquardt steps per start and for the best start of the proximal problem.
    shift : float
        Offset of the extra starts ``w_k +- shift e_l``.
    test_samples : int
        Monte Carlo size of the population test-error formula.
    theta : tuple of float
        The activation's own scalars, held fixed (erf: ``(c,)``; default the registry's init).
    solver : SolverOptions, optional
        Damping, tolerance, caps and watchdog; default :func:`default_solver` for ``samples``.
    """

    samples: int = 20_000
    seed: int = 0
    vh_form: str = "stein"
    n_explore: int = 6
    n_refine: int = 10
    shift: float = 4.0
    test_samples: int = 200_000
    theta: tuple[float, ...] | None = None
    solver: SolverOptions | None = None

    def __post_init__(self) -> None:
        check_int("samples", self.samples, low=100)
        if self.solver is None:
            object.__setattr__(self, "solver", default_solver(self.samples))
        check_int("seed", self.seed, low=0)
        if self.vh_form not in VH_FORMS:
            raise ConfigError(f"vh_form={self.vh_form!r} is unknown; allowed: one of "
                              f"{', '.join(VH_FORMS)}")
        check_int("n_explore", self.n_explore, low=1)
        check_int("n_refine", self.n_refine, low=1)
        check_real("shift", self.shift, low=0.0, low_open=True)
        check_int("test_samples", self.test_samples, low=100)


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
    vh_gap_k_se, vh_gap_v_se : float
        Monte Carlo standard errors of the gaps.
    test_error, test_stderr : float
        Population excess error at the overlaps and its Monte Carlo standard error.
    train_loss, train_loss_se : float
        Training loss per sample at the fixed point and its Monte Carlo standard error.
    objective : float
        Training objective per sample, ``train_loss + (lam_k q_k + lam_v q_v) / (2 alpha)``.
    off_branch : float
        Fraction of channel samples whose global proximal minimum is not the one reached from
        ``w_k`` (the bias a single start would carry).
    prox_unconverged : float
        Fraction of channel samples whose proximal gradient stayed above tolerance.
    converged : bool
        Fixed point reached.
    iterations : int
        Fixed-point iterations.
    residual : float
        Last relative residual.
    reason : str
        Solver outcome.
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
    vh_gap_k_se: float
    vh_gap_v_se: float
    test_error: float
    test_stderr: float
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

    @property
    def x(self) -> np.ndarray:
        """The order parameters as the solver's state vector."""
        return np.array([getattr(self, n) for n in ORDER_NAMES])

    def to_dict(self, *, with_history: bool = False) -> dict[str, Any]:
        d = dataclasses.asdict(self)
        if not with_history:
            d.pop("history")
        return d


@functools.lru_cache(maxsize=8)
def channel_samples(task: TaskConfig, samples: int, seed: int) -> ChannelSamples:
    """Float64 channel samples, cached per (task without ``D``, size, seed)."""
    with jax.enable_x64(True):
        return sample_channel(dataclasses.replace(task, D=1), samples, seed)


def _theta(act: Activation, theta: Sequence[float] | None) -> np.ndarray:
    vals = list(act.param_init) if theta is None else [float(t) for t in theta]
    if len(vals) != act.n_params:
        raise ConfigError(f"theta={vals} has {len(vals)} values; allowed: {act.n_params} for "
                          f"{act.name} ({', '.join(act.param_names) or 'none'})")
    return np.asarray(vals, dtype=np.float64)


def start_point(task: TaskConfig, start: str) -> np.ndarray:
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


def make_update(task: TaskConfig, act: Activation, alpha: float, lam_k: float, lam_v: float,
                options: ErmTheoryOptions):
    """The fixed-point map ``F(x) -> (x_new, aux)`` of spec section 5 (ERM)."""
    ch = channel_samples(task, options.samples, options.seed)
    theta = _theta(act, options.theta)

    def update(x: np.ndarray) -> tuple[np.ndarray, dict[str, float]]:
        m_k, q_k, V_k, m_v, q_v, V_v = (float(t) for t in x)
        with jax.enable_x64(True):
            mom = prox_channel(act, ch, m_k, q_k, V_k, m_v, q_v, V_v, jnp.asarray(theta),
                               n_explore=options.n_explore, n_refine=options.n_refine,
                               shift=options.shift)
            mom = {k: float(v) for k, v in mom._asdict().items()}
        s_k = math.sqrt(max(q_k - m_k**2, 0.0))
        s_v = math.sqrt(max(q_v - m_v**2, 0.0))
        aux: dict[str, float] = {
            "mh_k": alpha * (mom["fh_k"] - m_k / s_k * mom["fx_k"]) if s_k > 0 else math.nan,
            "mh_v": alpha * (mom["fh_v"] - m_v / s_v * mom["fx_v"]) if s_v > 0 else math.nan,
            "qh_k": alpha * mom["ff_k"],
            "qh_v": alpha * mom["ff_v"],
            "Vh_k_stein": -alpha * mom["fx_k"] / s_k if s_k > 0 else math.nan,
            "Vh_v_stein": -alpha * mom["fx_v"] / s_v if s_v > 0 else math.nan,
            "Vh_k_hessian": alpha * mom["tr_k"],
            "Vh_v_hessian": alpha * mom["tr_v"],
            "train_loss": mom["loss"],
            "train_loss_se": mom["loss_se"],
            "off_branch": mom["off_branch"],
            "prox_unconverged": mom["unconverged"],
            "vh_gap_k_se": alpha * mom["gap_k_se"],
            "vh_gap_v_se": alpha * mom["gap_v_se"],
        }
        new = []
        for a, lam in (("k", lam_k), ("v", lam_v)):
            vh = aux[f"Vh_{a}_{options.vh_form}"]
            aux[f"Vh_{a}"] = vh
            mh, qh = aux[f"mh_{a}"], aux[f"qh_{a}"]
            den = lam + vh
            if not den > 0:  # the ridge no longer confines this direction: no fixed point here
                return np.full(6, np.nan), aux
            V = 1.0 / den
            new += [mh * V, (mh * mh + qh) * V * V, V]
        return np.asarray(new), aux

    return update


def solve_erm(task: TaskConfig, activation: str, alpha: Any, lam_k: Any, lam_v: Any = None,
              options: ErmTheoryOptions | None = None, *, start: str = "informed",
              x0: np.ndarray | None = None) -> ErmTheoryResult:
    """Solve the ERM replica fixed point at one ``(alpha, lam_k, lam_v)`` (spec section 5).

    Parameters
    ----------
    task : TaskConfig
        Task (``D`` ignored).
    activation : str
        One of :data:`ERM_ACTIVATIONS`.
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
    if activation not in ERM_ACTIVATIONS:
        raise ConfigError(f"activation={activation!r} is not supported by the ERM theory; "
                          f"allowed: one of {', '.join(ERM_ACTIVATIONS)}")
    act = get_activation(activation)
    alpha, lam_k, lam_v = _check_point(alpha, lam_k, lam_k if lam_v is None else lam_v)
    t0 = time.perf_counter()
    if x0 is None:
        x_start, start_name = start_point(task, start), start
    else:
        x_start, start_name = np.asarray(x0, dtype=np.float64), "continuation"
    fp = solve_fixed_point(make_update(task, act, alpha, lam_k, lam_v, opt), x_start, opt.solver)
    return _finish(task, act, alpha, lam_k, lam_v, opt, fp, start_name, t0)


def _finish(task, act, alpha, lam_k, lam_v, opt, fp: FixedPointResult, start_name, t0):
    nan = math.nan
    a = fp.aux if fp.converged else {}
    x = fp.x
    vals = dict(zip(ORDER_NAMES, (float(t) for t in x), strict=True))
    test, test_se = nan, nan
    if fp.converged:
        from bayesslr.population import excess_risk

        theta = _theta(act, opt.theta)
        pr = excess_risk(task, act.name, vals["m_k"], max(vals["q_k"], vals["m_k"] ** 2),
                         vals["m_v"], max(vals["q_v"], vals["m_v"] ** 2),
                         list(theta) if act.n_params else None,
                         samples=opt.test_samples, seed=opt.seed + 1)
        test, test_se = pr.excess_risk, pr.stderr
    g = a.get
    train = g("train_loss", nan)
    objective = train + (lam_k * vals["q_k"] + lam_v * vals["q_v"]) / (2.0 * alpha)
    return ErmTheoryResult(
        alpha=alpha, lam_k=lam_k, lam_v=lam_v, activation=act.name, start=start_name, **vals,
        mh_k=g("mh_k", nan), qh_k=g("qh_k", nan), Vh_k=g("Vh_k", nan),
        mh_v=g("mh_v", nan), qh_v=g("qh_v", nan), Vh_v=g("Vh_v", nan),
        Vh_k_stein=g("Vh_k_stein", nan), Vh_v_stein=g("Vh_v_stein", nan),
        Vh_k_hessian=g("Vh_k_hessian", nan), Vh_v_hessian=g("Vh_v_hessian", nan),
        vh_gap_k=g("Vh_k_hessian", nan) - g("Vh_k_stein", nan),
        vh_gap_v=g("Vh_v_hessian", nan) - g("Vh_v_stein", nan),
        vh_gap_k_se=g("vh_gap_k_se", nan), vh_gap_v_se=g("vh_gap_v_se", nan),
        test_error=test, test_stderr=test_se, train_loss=train,
        train_loss_se=g("train_loss_se", nan), objective=objective,
        off_branch=g("off_branch", nan), prox_unconverged=g("prox_unconverged", nan),
        converged=fp.converged, iterations=fp.iterations, residual=fp.residual,
        reason=fp.reason, history=fp.history, samples=opt.samples, seed=opt.seed,
        vh_form=opt.vh_form, runtime_s=time.perf_counter() - t0,
    )


def _better(a: ErmTheoryResult, b: ErmTheoryResult) -> ErmTheoryResult:
    """The branch with the lower training objective (the global minimiser); converged first."""
    if not b.converged:
        return a
    if not a.converged:
        return b
    return a if a.objective <= b.objective else b


def erm_curve(task: TaskConfig, activation: str, alphas: Sequence[float], lam_k: Any,
              lam_v: Any = None, options: ErmTheoryOptions | None = None, *,
              starts: Sequence[str] = ("informed",), both_directions: bool = True
              ) -> tuple[list[ErmTheoryResult], dict[str, list[ErmTheoryResult]]]:
    """ERM theory along ``alphas`` by continuation, from each start and in both directions.

    Every ``(start, direction)`` sweep is kept; per ``alpha`` the reported point is the
    converged branch with the lowest training objective (the global ERM minimiser).

    Returns
    -------
    best : list of ErmTheoryResult
        One per ``alpha`` (input order).
    sweeps : dict
        ``"<start>-up"`` / ``"<start>-down"`` -> list of results (input order).
    """
    opt = options or ErmTheoryOptions()
    for a in alphas:
        check_real("alpha", a, low=0.0, low_open=True)
    if not alphas:
        raise ConfigError("alpha=[] is empty; allowed: at least one alpha > 0")
    lam_v = lam_k if lam_v is None else lam_v
    sweeps: dict[str, list[ErmTheoryResult]] = {}
    for start in starts:
        start_point(task, start)  # validate the name before any work

        def solve_at(alpha: float, x0: np.ndarray | None, start=start) -> ErmTheoryResult:
            return solve_erm(task, activation, alpha, lam_k, lam_v, opt, start=start, x0=x0)

        for desc in ((False, True) if both_directions and len(alphas) > 1 else (False,)):
            sweeps[f"{start}-{'down' if desc else 'up'}"] = continuation(
                solve_at, list(alphas), None, descending=desc)
    best = []
    for i in range(len(alphas)):
        cands = [s[i] for s in sweeps.values()]
        b = cands[0]
        for c in cands[1:]:
            b = _better(b, c)
        best.append(b)
    return best, sweeps
