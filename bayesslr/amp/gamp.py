"""GAMP for single-location regression (docs/amp.md; the derivation is in ``docs/amp.md``).

Weights ``W = (k, v)`` (two columns); token ``l`` of sample ``mu`` has the pre-activation
``(chi_l, z_l) = x_l . (k, v) / sqrt(D)``. One iteration, with estimates ``W_hat`` and their
per-coordinate posterior variances ``c = (c_k, c_v)``:

    omega   = X W_hat / sqrt(D) - c * g_prev                       (pass 1 over X; Onsager)
    g, dg   = d log Z_out / d omega, d g / d omega  (per token)    (the state evolution's Z_out)
    A_a     = -(1/D) sum_{mu,l} dg_{a,mu,l}
    B_a     = X^T g_a / sqrt(D) + A_a W_hat_a                      (pass 2 over X)
    W_hat_a = B_a / (lam_a + A_a),   c_a = 1 / (lam_a + A_a)       (Gaussian prior N(0, 1/lam_a))

with ``lam = (1 + nu N / D, 1)`` for the spiked variant (the tokens' factor
``exp(-nu |k|^2 / (2 D))`` per sample is a Gaussian factor on ``k``) and ``(1, 1)`` for max.
Its state evolution is the Bayes-optimal iteration of :mod:`bayesslr.theory.bayes`
(``m^{t+1} = mh^t / (1 + mh^t)``, ``mh = alpha E|g|^2``), one step per iteration; the tests
check this per iteration (:func:`bayesslr.theory.bayes.state_evolution_trajectory`).

Each iteration is one jitted call whose cost is the two passes over ``X`` (``(N L, D)``
float32, never copied); the channel part is ``O(N L)``. Safeguards, each recorded:
``lam_a + A_a`` is floored at 1 (a posterior never wider than the prior N(0, 1); only the
value side can reach it, at finite ``D`` far from the fixed point), and ``c_a`` at ``m_clip``
(at ``Delta = 0`` the channel variance ``Delta + c_v`` vanishes as ``m_v -> 1``; the state
evolution clips ``m_v <= 1 - m_clip`` the same way).
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field
from functools import partial
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from bayesslr.amp.denoisers import attention_weights, output_functions_blocked, prior_precision
from bayesslr.core.jaxconfig import Array, PRNGKey
from bayesslr.core.options import Validated, option
from bayesslr.core.task import ConfigError, Data, TaskConfig, Teacher
from bayesslr.theory.bayes import (
    MAX_QUADRATURES,
    BayesTheoryOptions,
    bayes_start_point,
    output_channel,
    quadrature_label,
)

GAMP_STARTS: tuple[str, ...] = ("uninformed", "informed")
VARIANCES: tuple[str, ...] = ("auto", "derivative", "nishimori")


@dataclass(frozen=True)
class GampOptions(Validated):
    """Settings of one GAMP run (option fields, checked on construction).

    Attributes
    ----------
    init : {"uninformed", "informed"}
        Start. ``uninformed``: a random direction of squared norm ``m0 D``, ``m0 = 1e-6`` (the
        state evolution's uninformed ``m``; overlap with the teacher ``~ sqrt(m0 / D)``, pure
        chance); ``informed``: ``m0 w* + sqrt(m0 (1 - m0)) xi`` with ``m0 = 0.999`` (teacher
        plus noise on the Nishimori line ``q = m``, as the state evolution's informed start).
        Both start with ``c = 1 - m0``.
    max_iter : int
        Iteration cap.
    min_iter : int
        Iterations always done.
    tol : float
        Converged when the relative size ``|W_new - W| / |W_new|`` of the undamped step is
        below ``tol`` for both columns.
    damping : float
        Initial damping: ``W, c <- damping * old + (1 - damping) * new`` and the same for
        ``g``; 0 = plain GAMP (whose state evolution is the undamped iteration).
    adaptive_damping : bool
        Raise the damping from 0 to 0.5 when the fixed-point residual first grows, and further
        (halfway to ``max_damping``) when it then stagnates (no 10% decrease of its 10-iteration
        minimum, checked from 20 iterations after a raise): plain GAMP on the spiked variant
        has an oscillating mode (``v_hat`` along the spike direction ``k*``, ``docs/amp.md``)
        that the state evolution on the symmetric manifold does not see, and 0.5 can leave a
        2-cycle of it.
    max_damping : float
        Cap of the adaptive damping.
    variance : {"auto", "derivative", "nishimori"}
        Onsager coefficient ``A``: ``-(1/D) sum dg/domega`` (GAMP proper) or its
        Nishimori-line value ``(1/D) sum |g|^2`` (minus the spiked prior's ``nu N / D``); the
        same state evolution. ``nishimori`` needs no second derivatives: for the max variant
        at finite ``nu`` (the Gumbel-max channel) an iteration is 6 times cheaper (measured
        at ``D = 1000``, ``nu = 3``: 0.37 against 2.38 s, overlaps within 0.03 of each other
        over 12 iterations; ``docs/amp.md``). Elsewhere the channel is cheap and there is no
        gain. ``auto``: ``nishimori`` for the max variant at finite ``nu``, ``derivative``
        otherwise.
    m_clip : float
        Floor of the variances ``c_a`` (and ``1 - m0`` of the informed start).
    max_seconds : float
        Wall-clock budget of the iterations (``converged=False``, reason ``time``, past it).
    max_quadrature, gumbel_per_sd, gh_nodes :
        Quadrature of ``c_eps`` (max variant, finite ``nu``), as in the state evolution.

    Examples
    --------
    See :func:`gamp`.
    """

    init: str = option("uninformed", choices=GAMP_STARTS,
                       doc="start: uninformed (random, overlap ~ D^-1/2) or informed (teacher "
                           "plus noise, m = 0.999)")
    max_iter: int = option(500, low=1, high=100_000, doc="iteration cap")
    min_iter: int = option(3, low=1, high=100_000, doc="iterations always done")
    tol: float = option(1e-5, low=0.0, high=1.0, low_open=True,
                        doc="converged when the undamped step's relative size is below tol")
    damping: float = option(0.0, low=0.0, high=0.99,
                            doc="initial damping of W, c and g (0: plain GAMP)")
    adaptive_damping: bool = option(True, doc="damp (0.5, then more) once the fixed-point "
                                              "residual grows")
    max_damping: float = option(0.9, low=0.0, high=0.99, doc="cap of the adaptive damping")
    variance: str = option("auto", choices=VARIANCES,
                           doc="Onsager coefficient: -mean dg/domega (derivative), mean |g|^2 "
                               "(nishimori), or auto (nishimori for max at finite nu only)")
    m_clip: float = option(1e-6, low=0.0, high=0.5, low_open=True,
                           doc="floor of the posterior variances c_k, c_v")
    max_seconds: float = option(3600.0, low=0.0, low_open=True,
                                doc="wall-clock budget of the iterations")
    max_quadrature: str = option("gumbel", choices=MAX_QUADRATURES,
                                 doc="c_eps rule (max, finite nu), as the state evolution's")
    gumbel_per_sd: int = option(8, low=2, high=64,
                                doc="table points per sd(Z) of the Gumbel-max rule")
    gh_nodes: int = option(512, low=2, high=10**6,
                           doc="nodes of the tensor Gauss-Hermite rule (max_quadrature="
                               "tensor-gh)")

    def theory_options(self) -> BayesTheoryOptions:
        """The state-evolution options that fix the same channel and quadrature."""
        return BayesTheoryOptions(gh_nodes=self.gh_nodes, max_quadrature=self.max_quadrature,
                                  gumbel_per_sd=self.gumbel_per_sd, m_clip=self.m_clip)


class GampState(NamedTuple):
    """The iterate (a JAX pytree).

    Attributes
    ----------
    W : Array, shape (D, 2)
        Posterior means ``(k_hat, v_hat)``.
    c : Array, shape (2,)
        Per-coordinate posterior variances ``(c_k, c_v)``.
    g : Array, shape (n, L_max, 2)
        Last output function (the next Onsager term), zero where masked.
    """

    W: Array
    c: Array
    g: Array


@dataclass(frozen=True)
class GampResult:
    """One GAMP run (docs/amp.md).

    Attributes
    ----------
    state : GampState
        Final iterate (the last finite one if the run blew up).
    converged : bool
        ``tol`` reached within ``max_iter`` and ``max_seconds``.
    reason : str
        ``converged``, ``converged at the variance clip ...`` (``Delta = 0``: the step stalls
        at float32 resolution once a variance sits at ``m_clip``), ``max_iter``, ``time`` or
        ``non-finite at iteration t``.
    iterations : int
        Iterations done.
    m_k, q_k, m_v, q_v : float
        Final overlaps with the teacher (``m = w_hat . w* / D``, ``q = |w_hat|^2 / D``); NaN
        without a teacher.
    m_kv, m_vk, q_kv : float
        Cross overlaps ``k_hat . v* / D``, ``v_hat . k* / D``, ``k_hat . v_hat / D``.
    c_k, c_v : float
        Final posterior variances.
    trajectory : dict of tuple
        Per iteration ``t = 0 .. iterations`` (``t = 0`` the start): ``m_k, q_k, m_v, q_v``;
        ``m_kv, m_vk, q_kv``; per step (``t = 1 ..``): ``A_k, A_v`` (Onsager coefficients),
        ``G2_k, G2_v`` (``(1/D) sum |g_a|^2``), ``c_k, c_v``, ``delta`` (relative size of the
        undamped step, max of the two columns), ``damping``.
    prior_precision : tuple of float
        ``(lam_k, lam_v)``.
    damping : float
        Damping at the end (``trajectory["damping"]`` has it per iteration).
    damped_from : int
        First iteration run with damping (0: none; the iterations before it are plain GAMP,
        whose overlaps the state evolution describes one step at a time).
    variance : str
        Onsager form used (``derivative`` or ``nishimori``).
    precision_floor_hits : int
        Iterations where ``lam_a + A_a`` was floored at 1.
    variance_clipped : bool
        ``c_a`` sat at ``m_clip`` at the end.
    quadrature : str
        How ``c_eps`` was computed.
    seconds_per_iteration : float
        Median wall time of an iteration after the first (which compiles).
    compile_s : float
        Wall time of the first iteration minus the median.
    runtime_s : float
        Wall time of the iterations.
    """

    state: GampState
    converged: bool
    reason: str
    iterations: int
    m_k: float
    q_k: float
    m_v: float
    q_v: float
    m_kv: float
    m_vk: float
    q_kv: float
    c_k: float
    c_v: float
    trajectory: dict[str, tuple[float, ...]] = field(repr=False)
    prior_precision: tuple[float, float]
    damping: float
    damped_from: int
    variance: str
    precision_floor_hits: int
    variance_clipped: bool
    quadrature: str
    seconds_per_iteration: float
    compile_s: float
    runtime_s: float


# ----------------------------------------------------------------------------------------------
# one iteration
# ----------------------------------------------------------------------------------------------
@partial(jax.jit, static_argnums=(0, 9))
def _step(st, quad, X: Array, y: Array, mask: Array, length: Array, lam: Array,
          damping: Array, c_floor: Array, nishimori: bool, state: GampState, T: Array):
    """One GAMP iteration (module docstring) and the overlaps of the new iterate with ``T``
    (``(D, 2)`` teacher columns ``(k*, v*)``, zeros when unknown)."""
    W, c, g_prev = state
    n, L_max, D = X.shape
    sD = jnp.sqrt(jnp.asarray(D, X.dtype))
    X2 = X.reshape(n * L_max, D)  # a view: rows are tokens
    P = (X2 @ W).reshape(n, L_max, 2) / sD  # pass 1
    omega = jnp.where(mask[..., None], P - c * g_prev, 0.0)
    g_k, g_v, dg_k, dg_v = output_functions_blocked(st, quad, y, omega[..., 0], omega[..., 1],
                                                    c[0], c[1], mask, length,
                                                    derivatives=not nishimori)
    g = jnp.stack([g_k, g_v], axis=-1)
    G2 = jnp.stack([jnp.sum(g_k**2), jnp.sum(g_v**2)]) / D
    if nishimori:  # alpha E|g|^2, minus the spiked prior's alpha nu (which -dg_k lacks)
        A = G2 - (lam - 1.0)
    else:
        A = -jnp.stack([jnp.sum(dg_k), jnp.sum(dg_v)]) / D
    g = damping * g_prev + (1.0 - damping) * g
    Bx = g.reshape(n * L_max, 2).T @ X2 / sD  # pass 2 (as g^T X: XLA's fast layout)
    B = Bx.T + A * W
    prec = lam + A
    floored = prec < 1.0
    prec = jnp.maximum(prec, 1.0)
    W_full = B / prec
    W_new = damping * W + (1.0 - damping) * W_full
    c_new = jnp.maximum(damping * c + (1.0 - damping) / prec, c_floor)
    # the undamped step's relative size (damping would shrink the change itself)
    dW = jnp.sqrt(jnp.sum((W_full - W) ** 2, axis=0)
                  / jnp.maximum(jnp.sum(W_full**2, axis=0), jnp.finfo(X.dtype).tiny))
    M = W_new.T @ T / D  # M[a, b] = w_hat_a . w*_b / D
    Q = W_new.T @ W_new / D
    diag = {"m_k": M[0, 0], "q_k": Q[0, 0], "m_v": M[1, 1], "q_v": Q[1, 1], "m_kv": M[0, 1],
            "m_vk": M[1, 0], "q_kv": Q[0, 1], "A_k": A[0], "A_v": A[1], "G2_k": G2[0],
            "G2_v": G2[1], "c_k": c_new[0], "c_v": c_new[1], "delta": jnp.max(dW),
            "floored": jnp.any(floored),
            "finite": jnp.all(jnp.isfinite(W_new)) & jnp.all(jnp.isfinite(g))}
    return GampState(W_new, c_new, g), diag


def resolve_variance(task: TaskConfig, variance: str) -> str:
    """The Onsager form :class:`GampOptions` ``variance`` stands for on ``task``."""
    if variance != "auto":
        return variance
    finite_max = task.variant == "max" and math.isfinite(task.nu)
    return "nishimori" if finite_max else "derivative"


def initial_state(key: PRNGKey, init: str, D: int, n: int, L_max: int, teacher: Teacher | None,
                  m_clip: float = 1e-6, dtype=jnp.float32) -> GampState:
    """The start of :class:`GampOptions` ``init`` (randomness from ``key``)."""
    m0 = float(bayes_start_point(init)[0])
    m0 = min(m0, 1.0 - m_clip)
    xi = jax.random.normal(key, (D, 2), dtype)
    if init == "informed":
        if teacher is None:
            raise ConfigError("init='informed' needs the teacher; allowed: uninformed without "
                              "one")
        T = jnp.stack([teacher.k, teacher.v], axis=1).astype(dtype)
        W = m0 * T + math.sqrt(m0 * (1.0 - m0)) * xi
    else:
        W = math.sqrt(m0) * xi
    c = jnp.full((2,), 1.0 - m0, dtype)
    return GampState(W, c, jnp.zeros((n, L_max, 2), dtype))


def gamp(key: PRNGKey, task: TaskConfig, data: Data, options: GampOptions | None = None, *,
         teacher: Teacher | None = None, callback=None) -> GampResult:
    """Run GAMP on training data (docs/amp.md).

    Parameters
    ----------
    key : PRNGKey
        Randomness of the start (the registry passes ``fold_in(key(seed), 1)``).
    task : TaskConfig
        The task (variant, ``nu``, ``Delta``, ``D``).
    data : Data
        Training data (``X`` float32 ``(N, L_max, D)``, padded and masked).
    options : GampOptions, optional
    teacher : Teacher, optional
        Needed by the informed start; when given, the overlaps are recorded per iteration.
    callback : callable, optional
        Called as ``callback(t, diag)`` after each iteration (progress, logging).

    Returns
    -------
    GampResult

    Examples
    --------
    >>> import jax, bayesslr as bs
    >>> task = bs.make_task("spiked", L=3, nu=2.0, delta=0.01, D=200)
    >>> teacher, train, test = bs.sample_task(bs.seed_key(0), task, 400, 1000)
    >>> res = bs.gamp(jax.random.key(1), task, train, teacher=teacher)
    >>> res.converged, res.m_v > 0.9, len(res.trajectory["m_k"]) == res.iterations + 1
    (True, True, True)
    >>> y_hat = bs.gamp_predict(task, res, test.X, test.mask)
    >>> err = bs.test_errors(task, teacher, test, y_hat)
    >>> bool(err.excess_over_oracle < 0.2)
    True
    """
    opt = options or GampOptions()
    X, y, mask = data.X, data.y, data.mask
    n, L_max, D = X.shape
    if D != task.D:
        raise ConfigError(f"data has D={D} but the task has D={task.D}")
    dtype = X.dtype
    length = jnp.sum(mask, axis=-1).astype(jnp.int32)
    lam_k, lam_v = prior_precision(task, n)
    with jax.enable_x64(dtype == jnp.float64):
        st, quad = output_channel(task, opt.theory_options())
    quad = jax.tree.map(lambda a: jnp.asarray(a, dtype), quad)
    if teacher is not None:
        T = jnp.stack([teacher.k, teacher.v], axis=1).astype(dtype)
    else:
        T = jnp.zeros((D, 2), dtype)
    state = initial_state(key, opt.init, D, n, L_max, teacher, opt.m_clip, dtype)
    lam = jnp.asarray([lam_k, lam_v], dtype)
    c_floor = jnp.asarray(opt.m_clip, dtype)
    variance = resolve_variance(task, opt.variance)
    nishimori = variance == "nishimori"

    W0 = np.asarray(state.W, np.float64)
    T0 = np.asarray(T, np.float64)
    M0, Q0 = W0.T @ T0 / D, W0.T @ W0 / D
    traj: dict[str, list[float]] = {
        "m_k": [M0[0, 0]], "q_k": [Q0[0, 0]], "m_v": [M0[1, 1]], "q_v": [Q0[1, 1]],
        "m_kv": [M0[0, 1]], "m_vk": [M0[1, 0]], "q_kv": [Q0[0, 1]],
        "A_k": [], "A_v": [], "G2_k": [], "G2_v": [], "c_k": [], "c_v": [], "delta": [],
        "damping": []}
    reason, converged, floor_hits, times = "max_iter", False, 0, []
    beta, last_raise, damped_from = float(opt.damping), 0, (1 if opt.damping > 0 else 0)
    clip_run = 0
    t_start = time.perf_counter()
    it = 0
    for it in range(1, opt.max_iter + 1):
        t0 = time.perf_counter()
        new, diag = _step(st, quad, X, y, mask, length, lam, jnp.asarray(beta, dtype),
                          c_floor, nishimori, state, T)
        diag = {k: (bool(v) if k in ("floored", "finite") else float(v))
                for k, v in jax.device_get(diag).items()}
        times.append(time.perf_counter() - t0)
        if not diag["finite"]:
            reason = f"non-finite at iteration {it}"
            it -= 1
            break
        state = new
        floor_hits += int(diag["floored"])
        diag["damping"] = beta
        for k in traj:
            traj[k].append(diag[k])
        if callback is not None:
            callback(it, diag)
        if it >= opt.min_iter and diag["delta"] < opt.tol:
            reason, converged = "converged", True
            break
        # at the variance clip (Delta = 0, exact recovery of v) the step carries the float32
        # rounding of the fields times 1/c: once it stops shrinking for 2 x 20 iterations
        # there, the iterate is as converged as float32 allows
        clip_run = clip_run + 1 if min(diag["c_k"], diag["c_v"]) <= opt.m_clip * 1.001 else 0
        d = traj["delta"]
        if clip_run >= 40 and min(d[-20:]) >= 0.5 * min(d[-40:-20]):
            reason, converged = (f"converged at the variance clip (step stalled at "
                                 f"{min(d[-20:]):.0e}, float32 resolution)"), True
            break
        if time.perf_counter() - t_start > opt.max_seconds:
            reason = "time"
            break
        # adaptive damping: plain GAMP until its fixed-point residual first grows (an
        # oscillating mode), then 0.5; more only if the residual stagnates (its smallest value
        # over the last 10 iterations above 0.9 times that of the 10 before, 20 iterations or
        # more after the last raise): the mode is not tamed and the iteration cycles
        d = traj["delta"]
        if opt.adaptive_damping and it >= 2 and beta < opt.max_damping:
            if beta == 0.0:
                grow = d[-1] > d[-2]
            else:
                grow = it - last_raise >= 20 and min(d[-10:]) > 0.9 * min(d[-20:-10])
            if grow:
                beta = min(opt.max_damping, 0.5 if beta == 0.0 else beta + (1.0 - beta) / 2)
                last_raise = it
                damped_from = damped_from or it + 1
    runtime = time.perf_counter() - t_start
    med = float(np.median(times[1:])) if len(times) > 1 else (times[0] if times else math.nan)
    nan = math.nan
    have_teacher = teacher is not None
    final = {k: (traj[k][-1] if have_teacher else nan) for k in ("m_k", "q_k", "m_v", "q_v")}
    if not have_teacher:  # q does not need the teacher
        final["q_k"], final["q_v"] = traj["q_k"][-1], traj["q_v"][-1]
    return GampResult(
        state=state, converged=converged, reason=reason, iterations=it,
        **final,
        m_kv=traj["m_kv"][-1] if have_teacher else nan,
        m_vk=traj["m_vk"][-1] if have_teacher else nan, q_kv=traj["q_kv"][-1],
        c_k=float(state.c[0]), c_v=float(state.c[1]),
        trajectory={k: tuple(float(x) for x in v) for k, v in traj.items()},
        prior_precision=(lam_k, lam_v), damping=beta, damped_from=damped_from,
        variance=variance,
        precision_floor_hits=floor_hits,
        variance_clipped=bool(np.any(np.asarray(state.c) <= opt.m_clip * (1 + 1e-6))),
        quadrature=quadrature_label(task, opt.theory_options()),
        seconds_per_iteration=med,
        compile_s=(times[0] - med) if len(times) > 1 else math.nan,
        runtime_s=runtime)


# ----------------------------------------------------------------------------------------------
# prediction
# ----------------------------------------------------------------------------------------------
@partial(jax.jit, static_argnums=0)
def _predict(st, quad, W: Array, c_k: Array, X: Array, mask: Array) -> Array:
    D = X.shape[-1]
    F = jnp.einsum("nld,da->nla", X, W) / jnp.sqrt(jnp.asarray(D, X.dtype))
    length = jnp.sum(mask, axis=-1).astype(jnp.int32)
    pi = attention_weights(st, quad, F[..., 0], c_k, mask, length)
    return jnp.sum(pi * jnp.where(mask, F[..., 1], 0.0), axis=-1)


def gamp_predict(task: TaskConfig, result: GampResult, X: Array, mask: Array,
                 options: GampOptions | None = None) -> Array:
    """Posterior-mean prediction from GAMP's Gaussian marginals (``docs/amp.md``).

    With ``k ~ N(k_hat, c_k I)`` and ``v ~ N(v_hat, c_v I)`` independent, a test input's
    fields are Gaussian, ``chi ~ N(X k_hat / sqrt(D), c_k I)``, ``E z = X v_hat / sqrt(D)``,
    and the Bayes prediction is ``sum_l pi_l z_hat_l`` with ``pi_l`` proportional to
    ``c_l(chi_hat, c_k) = E_chi g_nu(l, chi)`` (it conditions on the test tokens: for the
    spiked variant their evidence on ``k`` is the factor ``exp(sqrt(nu) chi_l)``;
    ``exp(-nu |k|^2 / (2 D))`` is the same for every ``l`` and cancels).

    Examples
    --------
    See :func:`gamp`.
    """
    opt = options or GampOptions()
    dtype = result.state.W.dtype
    with jax.enable_x64(dtype == jnp.float64):
        st, quad = output_channel(task, opt.theory_options())
    quad = jax.tree.map(lambda a: jnp.asarray(a, dtype), quad)
    return _predict(st, quad, result.state.W, result.state.c[0], jnp.asarray(X, dtype),
                    jnp.asarray(mask, bool))


def overlaps_of(W: Array, teacher: Teacher) -> dict[str, float]:
    """Overlaps of ``W = (k_hat, v_hat)`` with the teacher (docs/model.md §3), float64."""
    Wn = np.asarray(W, np.float64)
    T = np.stack([np.asarray(teacher.k, np.float64), np.asarray(teacher.v, np.float64)], 1)
    D = Wn.shape[0]
    M, Q = Wn.T @ T / D, Wn.T @ Wn / D
    return {"m_k": M[0, 0], "q_k": Q[0, 0], "m_v": M[1, 1], "q_v": Q[1, 1], "m_kv": M[0, 1],
            "m_vk": M[1, 0], "q_kv": Q[0, 1]}
