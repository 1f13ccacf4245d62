"""Bayes-optimal state evolution at finite ``alpha`` and its free entropy (docs/theory.md).

Nishimori conditions (``q_a = m_a``, ``V_a = 1 - m_a``) and the Gaussian prior leave two order
parameters ``m_k, m_v``:

    m_a = mh_a / (1 + mh_a),    mh_a = alpha E|g_a|^2,    g = grad_w log Z_out(y, w, 1 - m),

    Z_out = (1/L) sum_eps c_eps(w_k, V_k) N(y; w_v,eps, Delta + V_v),
    c_eps(w, V) = E_{chi ~ N(w, V I)} g_nu(eps, chi),

with ``w_a = m_a h*_a + sqrt(m_a (1 - m_a)) xi_a`` on the teacher channel samples. The
Gaussian expectation ``c_eps`` is

* spiked: closed form, ``log c_eps = sqrt(nu) w_eps + nu V/2 - nu/2``;
* max, ``nu = inf``: ``c_eps = L P(argmax_l chi_l = eps) = L E_t prod_{l != eps}
  Phi(t + (w_eps - w_l)/sqrt(V))``, a one-dimensional Gauss-Hermite integral (shifted towards
  the integrand's mass, in log space);
* max, finite ``nu`` (default, ``max_quadrature="gumbel"``): by the Gumbel-max trick
  ``softmax(nu chi)_eps = P(argmax_l (chi_l + G_l / nu) = eps)`` with ``G_l`` i.i.d. standard
  Gumbel, so ``c_eps = L P(argmax_l (w_l + Z_l) = eps)`` with ``Z = sqrt(V) t + G / nu`` i.i.d.,
  i.e. the exact one-dimensional integral

      c_eps = L int f_Z(u) prod_{l != eps} F_Z(u + w_eps - w_l) du

  (:func:`gumbel_log_c`). ``log F_Z`` and ``f_Z`` are tabulated once per ``V`` on a uniform
  grid in units of ``sd(Z)`` (each value a trapezoid convolution integral, over ``t`` when
  ``nu sqrt(V) < 1`` and over ``G`` otherwise, so that the integrand is smooth on the grid's
  scale); the outer integral is a trapezoid sum on every second grid point, ``log F_Z`` at the
  shifted points a cubic Hermite interpolant (differentiable in ``w``). Trapezoid sums of
  analytic integrands converge exponentially: ``gumbel_per_sd = 8`` points per ``sd(Z)`` agree
  with an adaptive reference to ~1e-7 relative, at ``nu sqrt(V)`` from 1e-3 to 10. The older
  tensor Gauss-Hermite rule on the softmax's ``(L - 1)``-dimensional difference space
  (``max_quadrature="tensor-gh"``, ``gh_nodes`` nodes) stays available as a cross-check; it
  is off by ~1e-2 in ``c_eps`` where ``nu sqrt(V) ~ 5``.

Test excess error ``1 - m_v E[sum_l pi_l^2]`` with ``pi = c(w_k, 1 - m_k) / sum c`` on fresh
samples (``nishimori_gap = E[pi_eps*] - E[sum pi^2]`` checks the identity that makes it equal to
the full ``1 - 2 m_v E[pi_eps*] + m_v E[sum pi^2]``).

Free entropy (replica-symmetric, Bayes-optimal; Gaussian prior ``psi_0(mh) = (mh - log(1 +
mh))/2``):

    Phi = sum_a [ -m_a mh_a / 2 + psi_0(mh_a) ] + alpha E[log Z_out(y, w, 1 - m)].

Where the informed and uninformed starts reach different fixed points, the one with the larger
``Phi`` is the Bayes-optimal branch; if the uninformed start (what message passing reaches from
scratch) lands on the other one, ``alpha`` lies in a computationally hard phase.

At ``Delta = 0`` the variance ``Delta + 1 - m_v`` vanishes as ``m_v -> 1``: ``m_a`` is clipped at
``1 - m_clip`` (recorded, with a flag when the clip is active). The free entropy of a branch at
the clip then carries ``(alpha - 1)/2 log(1/m_clip)``: exact recovery of ``v`` wins every
comparison at ``alpha > 1`` (as it should: its free entropy diverges), while the finite parts
decide at ``alpha <= 1``. Measured (spiked, ``L = 3``, ``Delta = 0``, 2e4 samples): the
uninformed start stays on a branch with ``m_v < 1`` up to ``alpha ~ 1.42`` (``nu = 1``) and
``~ 1.25`` (``nu = 2``) while the informed branch has ``m_v = 1`` from ``alpha ~ 1``: a
computationally hard window just above ``alpha = 1``.
"""

from __future__ import annotations

import dataclasses
import functools
import math
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from functools import partial
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jax.scipy.special import log_ndtr, logsumexp

from bayesslr.core.jaxconfig import Array
from bayesslr.core.options import Validated, option
from bayesslr.core.task import ConfigError, TaskConfig, check_int, check_real
from bayesslr.population.teacher_channel import ChannelSamples, channel64
from bayesslr.theory.solver import SolverOptions, continuation, solve_fixed_point

BAYES_STARTS: tuple[str, ...] = ("informed", "uninformed")
GH_1D_NODES = 20
GH_MAX_PER_DIM = 64  # Gauss-Hermite nodes per dimension at most (weights underflow past ~150)
MAX_QUADRATURES: tuple[str, ...] = ("gumbel", "tensor-gh")
# grid of the Gumbel-max rule in units of sd(Z) around E[Z]: the left tail of Z is Gaussian or
# double-exponential (12 sd is far below any mass), the right one may be exponential (Gumbel):
# 40 sd reach e^-36 relative to the mode when nu sqrt(V) is small
GUMBEL_RANGE_SD = (-12.0, 40.0)
OUTER_STRIDE = 4  # the outer sum uses every 4th table point (2 per sd at 8 per sd)
EULER_GAMMA = 0.5772156649015329


@dataclass(frozen=True)
class BayesTheoryOptions(Validated):
    """Settings of the Bayes-optimal state evolution (option fields checked on construction).

    Attributes
    ----------
    samples : int
        Channel samples (common random numbers) of the iteration.
    seed : int
        Seed of the channel samples; the test error uses ``seed + 1``.
    test_samples : int
        Fresh samples of the test-error expectation.
    gh_nodes : int
        Total nodes of the tensor Gauss-Hermite rule (max variant, finite ``nu``, only with
        ``max_quadrature="tensor-gh"``).
    max_quadrature : {"gumbel", "tensor-gh"}
        Rule for ``c_eps`` of the max variant at finite ``nu`` (module docstring).
    gumbel_per_sd : int
        Table points per ``sd(Z)`` of the Gumbel-max rule (the outer sum uses every 4th).
    m_clip : float
        ``m_a`` is kept in ``[0, 1 - m_clip]``.
    solver : SolverOptions
        Damping, tolerance, caps and watchdog.
    """

    samples: int = option(20_000, low=100, high=10**8,
                          doc="channel samples (common random numbers)")
    seed: int = option(0, low=0, high=2**32 - 1, doc="seed of the channel samples")
    test_samples: int = option(200_000, low=100, high=10**9,
                               doc="samples of the test-error expectation")
    gh_nodes: int = option(512, low=2, high=10**6,
                           doc="nodes of the tensor Gauss-Hermite rule of c_eps (max, finite "
                               "nu, max_quadrature=tensor-gh)")
    max_quadrature: str = option("gumbel", choices=MAX_QUADRATURES,
                                 doc="c_eps rule (max, finite nu): the 1-d Gumbel-max "
                                     "integral or the tensor Gauss-Hermite cross-check")
    gumbel_per_sd: int = option(8, low=2, high=64,
                                doc="table points per sd(Z) of the Gumbel-max rule")
    m_clip: float = option(1e-6, low=0.0, high=0.5, low_open=True,
                           doc="overlaps are kept below 1 - m_clip")
    solver: SolverOptions = field(default_factory=lambda: SolverOptions(tol=1e-6, max_iter=2000))


@dataclass(frozen=True)
class BayesTheoryResult:
    """One point of the Bayes-optimal state evolution (NaN where not converged).

    Attributes
    ----------
    alpha : float
        Sample ratio.
    start : str
        ``"informed"``, ``"uninformed"`` or ``"continuation"``.
    m_k, m_v : float
        Overlaps (``q_a = m_a``, ``V_a = 1 - m_a``).
    mh_k, mh_v : float
        Conjugates ``alpha E|g_a|^2``.
    test_error, stderr_test : float
        Test excess error ``1 - m_v E[sum pi^2]`` and the Monte Carlo standard error of that
        formula alone (overlaps held fixed).
    stderr_channel : float
        Standard error of ``test_error`` from the channel Monte Carlo noise of the fixed point
        (delta method, :func:`_channel_stderr`; 0 in a clipped direction).
    stderr : float
        Total, ``hypot(stderr_test, stderr_channel)``.
    nishimori_gap : float
        ``E[pi_eps*] - E[sum pi^2]`` on the test samples (zero up to Monte Carlo error).
    free_entropy : float
        Replica-symmetric free entropy ``Phi`` at the fixed point.
    clipped : bool
        An overlap sits at the clip ``1 - m_clip``.
    converged : bool
        Fixed point reached.
    iterations : int
        Iterations.
    residual : float
        Last relative residual.
    reason : str
        Solver outcome.
    history : tuple of float
        Residual history.
    samples, test_samples, seed : int
        Monte Carlo sizes and seed.
    quadrature : str
        How ``c_eps`` was computed.
    quadrature_error : float
        ``|test_error|`` difference between the quadrature and a rule with ~1/4 of its nodes
        at the same overlaps (0 for the closed form): a size of the quadrature error. The
        tensor rule converges slowly when ``nu sqrt(1 - m_k)`` is large (``nu >= 5`` at small
        ``alpha``); a large value says to raise ``gh_nodes``.
    runtime_s : float
        Wall time.
    """

    alpha: float
    start: str
    m_k: float
    m_v: float
    mh_k: float
    mh_v: float
    test_error: float
    stderr_test: float
    stderr_channel: float
    stderr: float
    nishimori_gap: float
    quadrature_error: float
    free_entropy: float
    clipped: bool
    converged: bool
    iterations: int
    residual: float
    reason: str
    history: tuple[float, ...]
    samples: int
    test_samples: int
    seed: int
    quadrature: str
    runtime_s: float

    @property
    def x(self) -> np.ndarray:
        return np.array([self.m_k, self.m_v])

    @property
    def q_k(self) -> float:
        return self.m_k

    @property
    def q_v(self) -> float:
        return self.m_v

    def to_dict(self, *, with_history: bool = False) -> dict[str, Any]:
        d = dataclasses.asdict(self)
        d["q_k"], d["q_v"] = self.m_k, self.m_v
        d["V_k"], d["V_v"] = 1.0 - self.m_k, 1.0 - self.m_v
        if not with_history:
            d.pop("history")
        return d


# ----------------------------------------------------------------------------------------------
# the output channel
# ----------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class _Channel:
    """Static description of ``c_eps`` (hashable, a jit static argument)."""

    variant: str
    nu: float
    delta: float
    kind: str  # "spiked", "argmax", "softmax-gumbel", "softmax-gh"


def _make_static(task: TaskConfig, options: BayesTheoryOptions | None = None) -> _Channel:
    if task.variant == "spiked":
        kind = "spiked"
    elif math.isinf(task.nu):
        kind = "argmax"
    elif options is not None and options.max_quadrature == "tensor-gh":
        kind = "softmax-gh"
    else:
        kind = "softmax-gumbel"
    return _Channel(task.variant, float(task.nu), float(task.delta), kind)


@functools.lru_cache(maxsize=16)
def _gh_rule(dim: int, total: int) -> tuple[np.ndarray, np.ndarray, int]:
    """Tensor Gauss-Hermite rule (probabilists') with at most ``total`` nodes in ``dim`` dims."""
    if dim == 0:
        return np.zeros((1, 0)), np.zeros(1), 1
    per = min(GH_MAX_PER_DIM, max(2, int(math.floor(total ** (1.0 / dim) + 1e-9))))
    x, w = np.polynomial.hermite_e.hermegauss(per)
    w = w / w.sum()
    grids = np.meshgrid(*([x] * dim), indexing="ij")
    wgrids = np.meshgrid(*([w] * dim), indexing="ij")
    nodes = np.stack([g.ravel() for g in grids], axis=1)
    logw = np.sum(np.log(np.stack([g.ravel() for g in wgrids], axis=1)), axis=1)
    return nodes, logw, per


@functools.lru_cache(maxsize=16)
def _softmax_rule(L_max: int, total: int) -> tuple[np.ndarray, np.ndarray, tuple[int, ...]]:
    """Per-length rules for ``E_t softmax(nu (w + sqrt(V) t))``, ``t ~ N(0, I_L)``.

    The softmax does not change when the same number is added to every valid entry, so only
    the projection of ``t`` on the ``(L - 1)``-dimensional space orthogonal to ``(1, ..., 1)``
    matters: a tensor rule there (``u`` nodes, ``t = B u`` with ``B`` an orthonormal basis)
    is exact for the same integrand with one dimension fewer, i.e. ``total^(1/(L-1))`` nodes
    per dimension instead of ``total^(1/L)`` (``L = 3``, 512 nodes: 22 instead of 8; the
    8-node rule was off by ~1e-2 in ``c_eps`` at ``nu = 5``, ``V = 1``).

    Returns ``t`` of shape ``(L_max + 1, G, L_max)`` and log-weights ``(L_max + 1, G)``
    indexed by the row length (padding nodes have weight zero), and the nodes per dimension.
    """
    rules = [_gh_rule(max(L - 1, 0), total) for L in range(L_max + 1)]
    G = max(r[0].shape[0] for r in rules)
    t = np.zeros((L_max + 1, G, L_max))
    logw = np.full((L_max + 1, G), -np.inf)
    for L in range(1, L_max + 1):
        nodes, lw, _ = rules[L]
        # orthonormal basis of the complement of (1, ..., 1) in R^L
        q, _ = np.linalg.qr(np.concatenate([np.ones((L, 1)), np.eye(L)[:, : L - 1]], axis=1))
        t[L, : nodes.shape[0], :L] = nodes @ q[:, 1:].T
        logw[L, : nodes.shape[0]] = lw
    logw[0, 0] = 0.0  # length 0 never occurs; keep the row finite
    return t, logw, tuple(r[2] if L > 1 else 1 for L, r in enumerate(rules))


def quadrature_label(task: TaskConfig, options: BayesTheoryOptions) -> str:
    st = _make_static(task, options)
    if st.kind == "spiked":
        return "closed form"
    if st.kind == "argmax":
        return f"1-d Gauss-Hermite, {GH_1D_NODES} nodes, shifted"
    if st.kind == "softmax-gumbel":
        lo, hi = GUMBEL_RANGE_SD
        return (f"1-d Gumbel-max integral: trapezoid over Z = sqrt(V) t + G/nu on "
                f"[{lo:g}, {hi:g}] sd(Z), table {options.gumbel_per_sd}/sd, outer "
                f"{options.gumbel_per_sd / OUTER_STRIDE:g}/sd")
    per = _softmax_rule(task.L_max, options.gh_nodes)[2][task.L_max]
    return (f"tensor Gauss-Hermite on the softmax's difference space, {per}^{task.L_max - 1} "
            f"nodes (L = {task.L_max})")


def log_c(st: _Channel, w: Array, V: Array, mask: Array, length: Array, quad) -> Array:
    """``log c_eps(w, V) = log E_{chi ~ N(w, V I)} g_nu(eps, chi)``, rows ``(n, L)``.

    Masked positions are ``-inf``.
    """
    if st.kind == "spiked":
        out = math.sqrt(st.nu) * w + st.nu * V / 2.0 - st.nu / 2.0
        return jnp.where(mask, out, -jnp.inf)
    logL = jnp.log(length.astype(w.dtype))[:, None]
    sd = jnp.sqrt(V)
    if st.kind == "argmax":
        t, logw = quad  # (G,), (G,)
        a = (w[:, :, None] - w[:, None, :]) / sd  # a[n, eps, l] = (w_eps - w_l)/sqrt(V)
        other = mask[:, None, :] & ~jnp.eye(w.shape[1], dtype=bool)[None]
        # shift the node grid towards the integrand's mass: t = u + c, c = max(0, -min a)/2
        amin = jnp.min(jnp.where(other, a, jnp.inf), axis=-1)
        c = jnp.where(jnp.isfinite(amin), jnp.maximum(0.0, -amin) / 2.0, 0.0)  # (n, L)
        u = t[None, None, :] + c[:, :, None]  # (n, L, G)
        lphi = log_ndtr(u[:, :, None, :] + a[:, :, :, None])  # (n, eps, l, G)
        lphi = jnp.sum(jnp.where(other[..., None], lphi, 0.0), axis=2)
        # N(u + c)/N(u) = exp(-c u - c^2/2) with u the node
        lw = logw[None, None, :] - c[:, :, None] * t[None, None, :] - c[:, :, None] ** 2 / 2.0
        out = logL + logsumexp(lw + lphi, axis=-1)
        return jnp.where(mask, out, -jnp.inf)
    if st.kind == "softmax-gumbel":
        return gumbel_log_c(st.nu, w, V, mask, quad)
    t_all, logw_all = quad  # (L_max + 1, G, L), (L_max + 1, G): rule of each row length
    t, logw = t_all[length], logw_all[length]  # (n, G, L), (n, G)
    chi = w[:, None, :] + sd * t  # (n, G, L)
    lsm = jax.nn.log_softmax(jnp.where(mask[:, None, :], st.nu * chi, -jnp.inf), axis=-1)
    lsm = jnp.where(mask[:, None, :], lsm, 0.0)
    out = logL + logsumexp(logw[:, :, None] + lsm, axis=1)
    return jnp.where(mask, out, -jnp.inf)


class GumbelRule(NamedTuple):
    """Static nodes of the Gumbel-max rule (:func:`gumbel_log_c`), standardised.

    Attributes
    ----------
    xi : Array
        Table grid in units of ``sd(Z)`` around ``E[Z]``, spacing ``1 / per_sd`` (the outer
        sum uses every ``OUTER_STRIDE``-th point).
    t, log_wt : Array
        Trapezoid nodes and log-weights of ``E_t`` over ``t ~ N(0, 1)`` (used when
        ``nu sqrt(V) < 1``).
    g, log_wg : Array
        Trapezoid nodes and log-weights of ``E_G`` over the standard Gumbel (otherwise).
    """

    xi: Array
    t: Array
    log_wt: Array
    g: Array
    log_wg: Array


@functools.lru_cache(maxsize=8)
def _gumbel_nodes(per_sd: int) -> tuple[np.ndarray, ...]:
    lo, hi = GUMBEL_RANGE_SD
    xi = lo + np.arange(int(round((hi - lo) * per_sd)) + 1) / per_sd
    # inner rules: spacing 1/4 of the smooth factor's scale; both integrands are analytic in a
    # strip of half-width >= pi/2 in these units, so the trapezoid error is ~exp(-pi^2 / h)
    h = 0.25
    t = np.arange(-10.0, 10.0 + h / 2, h)
    log_wt = -t**2 / 2 - 0.5 * math.log(2 * math.pi) + math.log(h)
    g = np.arange(-4.5, 40.0 + h / 2, h)  # f_G(-4.5) = e^-85, f_G(40) = e^-40
    log_wg = -g - np.exp(-g) + math.log(h)
    return xi, t, log_wt, g, log_wg


def gumbel_rule(per_sd: int = 8) -> GumbelRule:
    """The standardised nodes of :func:`gumbel_log_c` with ``per_sd`` table points per sd."""
    return GumbelRule(*(jnp.asarray(a) for a in _gumbel_nodes(int(per_sd))))


def gumbel_tables(nu: float, V: Array, rule: GumbelRule) -> tuple[Array, ...]:
    """``(x, log F_Z, d log F_Z / dx, log f_Z, d log f_Z / dx)`` on the rule's grid,
    ``Z = sqrt(V) t + G / nu``.

    ``F_Z(x) = E_t exp(-exp(-nu (x - sqrt(V) t)))`` (over ``t``) or ``E_G Phi((x - G/nu) /
    sqrt(V))`` (over ``G``), whichever has the smoother integrand (``t`` when ``nu sqrt(V) <
    1``), and likewise ``f_Z``; trapezoid sums in log space (the far tails keep their relative
    accuracy), slopes as averages under the same weights (no cancellation).
    """
    dt = rule.xi.dtype
    V = jnp.asarray(V, dt)
    s = jnp.sqrt(V)
    b = 1.0 / nu
    sd = jnp.sqrt(V + (math.pi * b) ** 2 / 6.0)
    x = EULER_GAMMA * b + sd * rule.xi
    # t-form: Gumbel argument u; F = E exp(-e^-u), f = E e^(-u - e^-u) / b
    u = (x[:, None] - s * rule.t[None, :]) / b
    eu = jnp.exp(-u)
    lF_t = logsumexp(rule.log_wt - eu, axis=1)
    dF_t = jnp.sum(jax.nn.softmax(rule.log_wt - eu, axis=1) * eu, axis=1) / b
    lw = rule.log_wt - u - eu
    lf_t = logsumexp(lw, axis=1) - math.log(b)
    df_t = jnp.sum(jax.nn.softmax(lw, axis=1) * (eu - 1.0), axis=1) / b
    # G-form: Gaussian argument a; F = E Phi(a), f = E phi(a) / s
    s_safe = jnp.maximum(s, jnp.finfo(dt).tiny ** 0.25)
    a = (x[:, None] - b * rule.g[None, :]) / s_safe
    lphi = log_ndtr(a)
    lF_g = logsumexp(rule.log_wg + lphi, axis=1)
    lw = rule.log_wg - a**2 / 2
    lf_g = logsumexp(lw, axis=1) - 0.5 * math.log(2 * math.pi) - jnp.log(s_safe)
    dF_g = jnp.exp(lf_g - lF_g)
    df_g = -jnp.sum(jax.nn.softmax(lw, axis=1) * a, axis=1) / s_safe
    use_t = nu * s < 1.0
    pick = partial(jnp.where, use_t)
    return x, pick(lF_t, lF_g), pick(dF_t, dF_g), pick(lf_t, lf_g), pick(df_t, df_g)


def _hermite(pos: Array, val: Array, slope: Array) -> Array:
    """Cubic Hermite interpolant at fractional grid positions ``pos`` of a table with values
    ``val`` and slopes per grid step ``slope``: C^1, error O(h^4); linear extrapolation
    outside the grid."""
    M = val.shape[0]
    i = jnp.clip(jnp.floor(pos), 0, M - 2).astype(jnp.int32)
    tau = pos - i  # in [0, 1) inside the grid (no clip: its gradient halves at the nodes)
    y0, y1 = val[i], val[i + 1]
    m0, m1 = slope[i], slope[i + 1]
    t2, t3 = tau * tau, tau * tau * tau
    out = ((2 * t3 - 3 * t2 + 1) * y0 + (t3 - 2 * t2 + tau) * m0 + (3 * t2 - 2 * t3) * y1
           + (t3 - t2) * m1)
    out = jnp.where(tau < 0.0, y0 + m0 * tau, out)
    return jnp.where(tau > 1.0, y1 + m1 * (tau - 1.0), out)


def gumbel_log_c(nu: float, w: Array, V: Array, mask: Array, rule: GumbelRule) -> Array:
    """``log c_eps(w, V)`` of the max variant at finite ``nu`` by the Gumbel-max integral.

    ``c_eps / L = P(argmax_l (w_l + Z_l) = eps) = int f_Z(a - w_eps) prod_{l != eps}
    F_Z(a - w_l) da`` (module docstring), rows ``(n, L_max)``, masked entries ``-inf``. One
    grid per row, ``a_j = max_l w_l + x_j`` (``x_j`` every ``OUTER_STRIDE``-th table point),
    serves every ``eps``: each token needs ``log F_Z`` and ``log f_Z`` at ``a_j - w_l`` once
    (cubic Hermite interpolants of the tables), and
    ``c_eps / L = h sum_j f_eps(a_j) / F_eps(a_j) prod_l F_l(a_j)``, normalised by the same
    sum of ``f_Z`` on the grid (exact at ``L = 1``). Differentiable in ``w`` (twice); the grid
    shift is held constant (the trapezoid sum is shift-invariant to its own accuracy).
    """
    dt = w.dtype
    rule = GumbelRule(*(jnp.asarray(a, dt) for a in rule))
    _, lF, dF, lf, df = gumbel_tables(nu, V, rule)
    # grid step (in x units) from sd(Z), not by differencing the grid (cancellation)
    h = jnp.sqrt(V + (math.pi / nu) ** 2 / 6.0) * (rule.xi[1] - rule.xi[0])
    j = jnp.arange(0, lF.shape[0], OUTER_STRIDE, dtype=dt)  # outer points, in grid steps
    wm = jnp.where(mask, w, -jnp.inf)
    top = jax.lax.stop_gradient(jnp.max(wm, axis=-1, keepdims=True))
    pos = j + ((top - jnp.where(mask, w, top)) / h)[..., None]  # (n, L, J)
    hF = _hermite(pos, lF, h * dF)
    hf = _hermite(pos, lf, h * df)
    S = jnp.sum(jnp.where(mask[..., None], hF, 0.0), axis=1, keepdims=True)  # (n, 1, J)
    out = logsumexp(hf - hF + S, axis=-1) - logsumexp(lf[::OUTER_STRIDE])
    logL = jnp.log(jnp.sum(mask, axis=-1).astype(dt))[:, None]
    return jnp.where(mask, logL + out, -jnp.inf)


def _log_zout(st: _Channel, w_k, w_v, V_k, V_v, y, mask, length, quad) -> Array:
    """Rows of ``log Z_out(y, w, V)`` (docs/theory.md)."""
    var = st.delta + V_v
    lc = log_c(st, w_k, V_k, mask, length, quad)
    lg = -0.5 * (y[:, None] - w_v) ** 2 / var - 0.5 * jnp.log(2.0 * jnp.pi * var)
    terms = jnp.where(mask, lc + lg, -jnp.inf)
    return logsumexp(terms, axis=-1) - jnp.log(length.astype(w_k.dtype))


def output_channel(task: TaskConfig, options: BayesTheoryOptions | None = None
                   ) -> tuple[_Channel, Any]:
    """The state evolution's output channel for ``task``: ``(static, quad)`` for
    :func:`log_c` and :func:`log_zout` (shared with GAMP, :mod:`bayesslr.amp`).

    The quadrature's arrays take the current default float precision (build it inside
    ``jax.enable_x64`` for float64).
    """
    opt = options or BayesTheoryOptions()
    return _make_static(task, opt), _quad(task, opt)


def log_zout(st: _Channel, w_k: Array, w_v: Array, V_k: Array, V_v: Array, y: Array,
             mask: Array, length: Array, quad) -> Array:
    """Rows ``(n,)`` of ``log Z_out(y, w, V)`` (docs/theory.md; module docstring), with
    ``w_k, w_v`` of shape ``(n, L_max)`` and scalar variances ``V_k, V_v``."""
    return _log_zout(st, w_k, w_v, V_k, V_v, y, mask, length, quad)


def _fields(ch: ChannelSamples, m_k, m_v):
    w_k = m_k * ch.chi_star + jnp.sqrt(m_k * (1.0 - m_k)) * ch.xi
    w_v = m_v * ch.z_star + jnp.sqrt(m_v * (1.0 - m_v)) * ch.zeta
    return jnp.where(ch.mask, w_k, 0.0), jnp.where(ch.mask, w_v, 0.0)


@partial(jax.jit, static_argnums=0)
def se_moments(st: _Channel, ch: ChannelSamples, m_k, m_v, quad) -> dict[str, Array]:
    """``E|g_k|^2``, ``E|g_v|^2`` and ``E log Z_out`` at ``(m_k, m_v)`` (docs/theory.md)."""
    w_k, w_v = _fields(ch, m_k, m_v)
    V_k, V_v = 1.0 - m_k, 1.0 - m_v

    def total(wk, wv):
        return jnp.sum(_log_zout(st, wk, wv, V_k, V_v, ch.y, ch.mask, ch.length, quad))

    g_k, g_v = jax.grad(total, argnums=(0, 1))(w_k, w_v)
    g_k = jnp.where(ch.mask, g_k, 0.0)
    g_v = jnp.where(ch.mask, g_v, 0.0)
    lz = _log_zout(st, w_k, w_v, V_k, V_v, ch.y, ch.mask, ch.length, quad)
    per = jnp.stack([jnp.sum(g_k**2, -1), jnp.sum(g_v**2, -1)], axis=-1)  # (n, 2)
    dev = per - jnp.mean(per, axis=0)
    n = per.shape[0]
    return {"gg_k": jnp.mean(per[:, 0]), "gg_v": jnp.mean(per[:, 1]), "log_zout": jnp.mean(lz),
            "gg_cov": dev.T @ dev / ((n - 1) * n)}


@partial(jax.jit, static_argnums=0)
def test_terms(st: _Channel, ch: ChannelSamples, m_k, m_v, quad) -> dict[str, Array]:
    """Test excess error ``1 - m_v E[sum pi^2]`` (+ its standard error) and the Nishimori gap."""
    w_k = jnp.where(ch.mask, m_k * ch.chi_star + jnp.sqrt(m_k * (1.0 - m_k)) * ch.xi, 0.0)
    # in row blocks: the quadrature holds (rows, nodes, L) at once (2 GB for 2e5 test rows)
    lc = jax.lax.map(lambda r: log_c(st, r[0][None], 1.0 - m_k, r[1][None], r[2][None],
                                     quad)[0],
                     (w_k, ch.mask, ch.length), batch_size=4096)
    pi = jnp.where(ch.mask, jax.nn.softmax(lc, axis=-1), 0.0)
    b = jnp.sum(pi * pi, -1)
    a = jnp.take_along_axis(pi, ch.eps[:, None], axis=1)[:, 0]
    e = 1.0 - m_v * b
    n = e.shape[0]
    return {"test_error": jnp.mean(e), "stderr_test": jnp.std(e) / jnp.sqrt(n),
            "nishimori_gap": jnp.mean(a - b)}


def _quad(task: TaskConfig, options: BayesTheoryOptions, *, coarse: bool = False):
    """The quadrature of ``c_eps``; ``coarse``: a rule with ~1/4 of the nodes (1/2 in 1-d),
    whose test error against the full rule's is the recorded ``quadrature_error``."""
    st = _make_static(task, options)
    if st.kind == "spiked":
        return (jnp.zeros((1,)), jnp.zeros((1,)))
    if st.kind == "argmax":
        x, w = np.polynomial.hermite_e.hermegauss(GH_1D_NODES // 2 if coarse else GH_1D_NODES)
        return (jnp.asarray(x), jnp.asarray(np.log(w / w.sum())))
    if st.kind == "softmax-gumbel":
        return gumbel_rule(max(2, options.gumbel_per_sd // 2) if coarse
                           else options.gumbel_per_sd)
    t, logw, _ = _softmax_rule(task.L_max, max(4, options.gh_nodes // 4) if coarse
                               else options.gh_nodes)
    return (jnp.asarray(t), jnp.asarray(logw))


def bayes_start_point(start: str) -> np.ndarray:
    """``(m_k, m_v)`` of the ``"informed"`` (near the teacher) or ``"uninformed"`` start."""
    if start == "informed":
        return np.array([0.999, 0.999])
    if start == "uninformed":
        return np.array([1e-6, 1e-6])
    raise ConfigError(f"start={start!r} is unknown; allowed: one of {', '.join(BAYES_STARTS)}")


def _psi0(mh: float) -> float:
    return 0.5 * (mh - math.log1p(mh))


def _channel_stderr(update, x: np.ndarray, mom: dict[str, Any], alpha: float, hi: float,
                    test_error_at, test_error: float, *, step: float = 1e-4) -> float:
    """Channel Monte Carlo error of the test error at the fixed point ``x = (m_k, m_v)``.

    The same delta method as the ERM theory (:func:`bayesslr.theory.erm.channel_error`):
    ``x = G(M(x) + eps)`` with ``G(M) = alpha M / (1 + alpha M)`` (0 derivative where ``x``
    sits at the clip), ``Cov(dx) = A Cov(eps) A^T``, ``A = (I - J)^-1 dG/dM``, ``J`` by
    forward differences of the map (2 calls; the Bayes map has no branch jumps, so a small
    step is fine), ``Cov(eps)`` from the per-sample ``|g_a|^2``, the test error's gradient by
    the same differences on the (common) test samples.
    NaN when the linear algebra fails (a spinodal, where ``I - J`` is singular).
    """
    clipped = x >= hi * (1 - 1e-12)
    M = np.array([mom["gg_k"], mom["gg_v"]])
    dG = np.diag(np.where(clipped, 0.0, alpha / (1.0 + alpha * M) ** 2))
    f0 = np.clip(alpha * M / (1.0 + alpha * M), 0.0, hi)  # update(x), from the moments at x
    J = np.empty((2, 2))
    grad = np.empty(2)
    hs = np.where(x + step > hi, -step, step)
    for j in range(2):
        xp = x.copy()
        xp[j] += hs[j]
        J[:, j] = (update(xp)[0] - f0) / hs[j]
        grad[j] = (test_error_at(*xp) - test_error) / hs[j]
    try:
        A = np.linalg.solve(np.eye(2) - J, dG)
    except np.linalg.LinAlgError:
        return math.nan
    cov = A @ np.asarray(mom["gg_cov"]) @ A.T
    return float(math.sqrt(max(float(grad @ cov @ grad), 0.0)))


def solve_bayes(task: TaskConfig, alpha: Any, options: BayesTheoryOptions | None = None, *,
                start: str = "uninformed", x0: np.ndarray | None = None) -> BayesTheoryResult:
    """Solve the Bayes-optimal state evolution at one ``alpha`` (docs/theory.md).

    Parameters
    ----------
    task : TaskConfig
        Task (``D`` ignored).
    alpha : float
        Sample ratio ``> 0``.
    options : BayesTheoryOptions, optional
    start : {"informed", "uninformed"}
        Named start, used when ``x0`` is not given.
    x0 : numpy.ndarray, optional
        Explicit ``(m_k, m_v)`` start (continuation).

    Returns
    -------
    BayesTheoryResult
        NaN fields and ``converged=False`` when not converged (never raises on a numerical
        failure).
    """
    opt = options or BayesTheoryOptions()
    alpha = check_real("alpha", alpha, low=0.0, low_open=True)
    x_start = bayes_start_point(start) if x0 is None else np.asarray(x0, dtype=np.float64)
    start_name = start if x0 is None else "continuation"
    st = _make_static(task, opt)
    ch = channel64(task, opt.samples, opt.seed)
    hi = 1.0 - opt.m_clip
    t0 = time.perf_counter()
    with jax.enable_x64(True):
        quad = _quad(task, opt)

    def moments(x: np.ndarray) -> dict[str, Any]:
        with jax.enable_x64(True):
            mom = se_moments(st, ch, float(x[0]), float(x[1]), quad)
            return {k: np.asarray(v) if k == "gg_cov" else float(v) for k, v in mom.items()}

    def update(x: np.ndarray) -> tuple[np.ndarray, dict[str, float]]:
        mom = moments(np.clip(x, 0.0, hi))
        mh = alpha * np.array([mom["gg_k"], mom["gg_v"]])
        return np.clip(mh / (1.0 + mh), 0.0, hi), {"mh_k": mh[0], "mh_v": mh[1]}

    fp = solve_fixed_point(update, np.clip(x_start, 0.0, hi), opt.solver)
    nan = math.nan
    test = {"test_error": nan, "stderr_test": nan, "nishimori_gap": nan}
    phi, mh_k, mh_v, quad_err, chan_se = nan, nan, nan, nan, nan
    if fp.converged:
        x = np.clip(fp.x, 0.0, hi)
        mom = moments(x)
        mh_k, mh_v = alpha * mom["gg_k"], alpha * mom["gg_v"]
        phi = (-x[0] * mh_k / 2 + _psi0(mh_k) - x[1] * mh_v / 2 + _psi0(mh_v)
               + alpha * mom["log_zout"])
        tch = channel64(task, opt.test_samples, opt.seed + 1)
        with jax.enable_x64(True):
            test = {k: float(v) for k, v in
                    test_terms(st, tch, float(x[0]), float(x[1]), quad).items()}
            quad_err = 0.0
            if st.kind != "spiked":
                coarse = test_terms(st, tch, float(x[0]), float(x[1]),
                                    _quad(task, opt, coarse=True))
                quad_err = abs(test["test_error"] - float(coarse["test_error"]))

            def test_error_at(mk: float, mv: float) -> float:
                return float(test_terms(st, tch, float(mk), float(mv), quad)["test_error"])

            chan_se = _channel_stderr(update, x, mom, alpha, hi, test_error_at,
                                      test["test_error"])
    return BayesTheoryResult(
        alpha=alpha, start=start_name, m_k=float(fp.x[0]), m_v=float(fp.x[1]), mh_k=mh_k,
        mh_v=mh_v, test_error=test["test_error"], stderr_test=test["stderr_test"],
        stderr_channel=chan_se,
        stderr=(test["stderr_test"] if math.isnan(chan_se)
                else math.hypot(test["stderr_test"], chan_se)),
        nishimori_gap=test["nishimori_gap"], quadrature_error=quad_err, free_entropy=phi,
        clipped=bool(fp.converged and np.any(fp.x >= hi * (1 - 1e-12))),
        converged=fp.converged, iterations=fp.iterations, residual=fp.residual,
        reason=fp.reason, history=fp.history, samples=opt.samples,
        test_samples=opt.test_samples, seed=opt.seed, quadrature=quadrature_label(task, opt),
        runtime_s=time.perf_counter() - t0,
    )


@dataclass(frozen=True)
class BayesTrajectory:
    """Iterates of the state evolution from one start (what GAMP's overlaps are compared with).

    Attributes
    ----------
    alpha : float
        Sample ratio.
    start : str
        ``"informed"``, ``"uninformed"`` or ``"explicit"`` (``x0`` given).
    m_k, m_v : tuple of float
        ``m_a^t`` for ``t = 0 .. iterations`` (``t = 0`` is the start; ``q_a = m_a``).
    mh_k, mh_v : tuple of float
        ``mh_a^t = alpha E|g_a|^2`` at ``m^t`` (``t = 0 .. iterations - 1``), so that
        ``m_a^{t+1} = mh_a^t / (1 + mh_a^t)`` (clipped at ``1 - m_clip``).
    test_error : tuple of float
        Test excess error ``1 - m_v E[sum pi^2]`` at each ``m^t`` (empty unless asked).
    clipped : bool
        Some iterate sat at the clip ``1 - m_clip``.
    samples, seed : int
        Channel Monte Carlo size and seed.
    quadrature : str
        How ``c_eps`` was computed.
    runtime_s : float
        Wall time.
    """

    alpha: float
    start: str
    m_k: tuple[float, ...]
    m_v: tuple[float, ...]
    mh_k: tuple[float, ...]
    mh_v: tuple[float, ...]
    test_error: tuple[float, ...]
    clipped: bool
    samples: int
    seed: int
    quadrature: str
    runtime_s: float


def state_evolution_trajectory(task: TaskConfig, alpha: Any, start: str = "uninformed",
                               iterations: Any = 50,
                               options: BayesTheoryOptions | None = None, *,
                               x0: Sequence[float] | None = None,
                               test_error: bool = False) -> BayesTrajectory:
    """The undamped state-evolution iterates ``m^{t+1} = mh(m^t) / (1 + mh(m^t))`` (docs/theory.md).

    This is the iteration that GAMP's overlaps follow, one GAMP iteration per step
    (:mod:`bayesslr.amp`), from the same start: ``start`` names the point of
    :func:`bayes_start_point` (the same ``(m_k, m_v)`` that GAMP's named starts use), or ``x0``
    gives ``(m_k, m_v)`` explicitly. Unlike :func:`solve_bayes` there is no damping, no
    acceleration and no stopping rule: exactly ``iterations`` steps.

    Parameters
    ----------
    task : TaskConfig
        Task (``D`` ignored).
    alpha : float
        Sample ratio ``> 0``.
    start : {"informed", "uninformed"}
        Named start, used when ``x0`` is not given.
    iterations : int
        Steps (``>= 1``).
    options : BayesTheoryOptions, optional
        Channel samples, seed, quadrature and ``m_clip`` (the solver settings are unused).
    x0 : sequence of two floats, optional
        Explicit start ``(m_k, m_v)`` in ``[0, 1 - m_clip]``.
    test_error : bool
        Also evaluate the test error formula at every iterate (``test_samples`` rows each).

    Returns
    -------
    BayesTrajectory
    """
    opt = options or BayesTheoryOptions()
    alpha = check_real("alpha", alpha, low=0.0, low_open=True)
    iterations = check_int("iterations", iterations, low=1, high=100_000)
    hi = 1.0 - opt.m_clip
    if x0 is None:
        x = bayes_start_point(start)
        start_name = start
    else:
        x = np.asarray([check_real("x0", v, low=0.0, high=hi) for v in x0], dtype=np.float64)
        if x.shape != (2,):
            raise ConfigError(f"x0 has {x.size} entries; allowed: two, (m_k, m_v)")
        start_name = "explicit"
    x = np.clip(x, 0.0, hi)
    st = _make_static(task, opt)
    ch = channel64(task, opt.samples, opt.seed)
    t0 = time.perf_counter()
    with jax.enable_x64(True):
        quad = _quad(task, opt)
        tch = channel64(task, opt.test_samples, opt.seed + 1) if test_error else None
        ms, mhs, errs = [x.copy()], [], []
        for _ in range(iterations):
            if tch is not None:
                errs.append(float(test_terms(st, tch, float(x[0]), float(x[1]),
                                             quad)["test_error"]))
            mom = se_moments(st, ch, float(x[0]), float(x[1]), quad)
            mh = alpha * np.array([float(mom["gg_k"]), float(mom["gg_v"])])
            mhs.append(mh)
            x = np.clip(mh / (1.0 + mh), 0.0, hi)
            ms.append(x.copy())
        if tch is not None:
            errs.append(float(test_terms(st, tch, float(x[0]), float(x[1]),
                                         quad)["test_error"]))
    m = np.array(ms)
    mh_arr = np.array(mhs)
    return BayesTrajectory(
        alpha=alpha, start=start_name, m_k=tuple(m[:, 0].tolist()),
        m_v=tuple(m[:, 1].tolist()), mh_k=tuple(mh_arr[:, 0].tolist()),
        mh_v=tuple(mh_arr[:, 1].tolist()), test_error=tuple(errs),
        clipped=bool(np.any(m >= hi * (1 - 1e-12))), samples=opt.samples, seed=opt.seed,
        quadrature=quadrature_label(task, opt), runtime_s=time.perf_counter() - t0)


@dataclass(frozen=True)
class BayesCurvePoint:
    """Both branches at one ``alpha`` and the verdict of the free-entropy comparison.

    Attributes
    ----------
    alpha : float
    best : BayesTheoryResult
        The Bayes-optimal branch (larger free entropy among the converged ones).
    informed, uninformed : BayesTheoryResult
        The branch reached from each start (by continuation along ``alpha``).
    branches_differ : bool
        The two starts reach different fixed points (test errors differ by more than
        ``4`` combined standard errors or overlaps by more than ``1e-3``).
    hard_phase : bool
        ``branches_differ`` and the uninformed branch has the lower free entropy: message
        passing from scratch does not reach the Bayes-optimal error here.
    """

    alpha: float
    best: BayesTheoryResult
    informed: BayesTheoryResult
    uninformed: BayesTheoryResult
    branches_differ: bool
    hard_phase: bool


def compare_branches(alpha: float, inf: BayesTheoryResult,
                     unf: BayesTheoryResult) -> BayesCurvePoint:
    """Both branches at one ``alpha``: the larger free entropy is the Bayes-optimal one."""
    both = inf.converged and unf.converged
    differ = bool(both and (np.max(np.abs(inf.x - unf.x)) > 1e-3 or abs(
        inf.test_error - unf.test_error) > 4 * math.hypot(inf.stderr_test, unf.stderr_test)))
    if not inf.converged:
        best = unf
    elif not unf.converged:
        best = inf
    else:
        best = inf if inf.free_entropy > unf.free_entropy else unf
    hard = bool(differ and inf.free_entropy > unf.free_entropy)
    return BayesCurvePoint(alpha, best, inf, unf, differ, hard)


def bayes_curve(task: TaskConfig, alphas: Sequence[float],
                options: BayesTheoryOptions | None = None, *, use_continuation: bool = True
                ) -> list[BayesCurvePoint]:
    """State evolution along ``alphas`` from both starts, with the free-entropy verdict.

    The uninformed branch is followed upwards in ``alpha`` and the informed one downwards
    (continuation; ``use_continuation=False`` cold-starts every point instead), so that a
    coexistence region shows up as two branches.

    Returns
    -------
    list of BayesCurvePoint
        In the order of the input ``alphas``.
    """
    opt = options or BayesTheoryOptions()
    if not alphas:
        raise ConfigError("alpha=[] is empty; allowed: at least one alpha > 0")
    alphas = [check_real("alpha", a, low=0.0, low_open=True) for a in alphas]

    def run(start: str, descending: bool) -> list[BayesTheoryResult]:
        def solve_at(alpha: float, x0: np.ndarray | None) -> BayesTheoryResult:
            return solve_bayes(task, alpha, opt, start=start,
                               x0=x0 if use_continuation else None)

        return continuation(solve_at, alphas, None, descending=descending)

    unf = run("uninformed", False)
    inf = run("informed", True)
    return [compare_branches(a, i, u) for a, i, u in zip(alphas, inf, unf, strict=True)]


def hard_phase_range(points: Sequence[BayesCurvePoint]) -> tuple[float, float] | None:
    """``(min, max)`` of the ``alpha`` values flagged as computationally hard (None if none)."""
    hard = [p.alpha for p in points if p.hard_phase]
    return (min(hard), max(hard)) if hard else None
