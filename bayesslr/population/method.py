"""Population-level results (docs/model.md §3): Bayes risk and the risk of each activation.

At infinite data and dimension the teacher fields have the law (with ``|k*|^2/D = 1``)

* spiked: ``chi*_l ~ N(0, 1)`` independently, ``chi*_{eps*} ~ N(sqrt(nu), 1)``, ``eps*`` uniform;
* max: ``chi*_l ~ N(0, 1)`` independently, ``eps* ~ Categorical(softmax(nu chi*))``.

A student with overlaps ``(m_k, q_k, m_v, q_v)`` (cross overlaps zero) sees
``chi = m_k chi* + sqrt(q_k - m_k^2) xi`` and has excess risk

    E = 1 - 2 m_v A + q_v B,   A = E[sigma(chi)_{eps*}],   B = E[sum_l sigma(chi)_l^2].

Estimation conventions (recorded in :class:`PopulationResult`):

* Every activation is permutation-equivariant, so for ``spiked`` the hidden token is placed at
  position 0; for ``max`` the law of ``eps*`` given ``chi*`` is integrated exactly (the weights
  ``w = softmax(nu chi*)``, one-hot argmax at ``nu = inf``): ``A = E[sum_l w_l sigma_l]``.
* Variable ``L`` is stratified: each length of the support gets ``samples`` draws, weighted by its
  probability, so ``A`` and ``B`` are averaged over ``L`` first (one ``(k, v)`` for all lengths).
* ``method="mc"``: common random numbers from ``seed``; the standard error is the stratified
  sample standard error. For :func:`best_excess_risk` the optimum is searched on one Monte Carlo
  set and the reported risk is evaluated on an independent one (unbiased at the optimiser found;
  its standard error is then exact).
* ``method="gauss-hermite"``: a tensor grid over the ``2 L`` Gaussian coordinates
  ``(chi*_l, xi_l)``; the error estimate is the change from a grid four nodes coarser.
* The Bayes risk ``1 - E[sum_l P_l^2]`` with ``P = softmax(c_nu chi*)`` (Rao-Blackwellised form of
  ``1 - E[P_{eps*}]``, equal by the Nishimori identity).

Everything runs in float64 (``jax.enable_x64``) so that the optimiser sees a smooth objective.
"""

from __future__ import annotations

import math
import time
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from functools import partial
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import scipy.optimize

from bayesslr.core.activations import (
    ACTIVATIONS,
    Activation,
    get_activation,
    softplus_norm_limit,
)
from bayesslr.core.jaxconfig import Array
from bayesslr.core.options import Opt, Schema
from bayesslr.core.task import (
    ConfigError,
    LengthLaw,
    TaskConfig,
    check_int,
    check_real,
    location_posterior,
)
from bayesslr.population.teacher_channel import ChannelSamples, sample_channel
from bayesslr.registry import Cell, CliFace, PlotStyle, Resources, common, outputs, register

POPULATION_MC_METHODS = ("mc", "gauss-hermite")
DEFAULT_SAMPLES = 200_000
GH_MAX_POINTS = 4_000_000
# box of the optimiser over (m_k, s_k = sqrt(q_k - m_k^2), theta)
M_BOUND = 1000.0
S_BOUND = 40.0
THETA_BOUND = 10.0


@dataclass(frozen=True)
class PopulationResult:
    """Population excess risk of one predictor.

    Attributes
    ----------
    excess_risk : float
        Excess risk (risk minus ``Delta``).
    stderr : float
        Monte Carlo standard error (or quadrature error estimate) of ``excess_risk``.
    risk : float
        ``excess_risk + Delta``.
    m_k, q_k, m_v, q_v : float
        Overlaps of the predictor (NaN for the Bayes risk).
    theta : dict
        The activation's own scalars (e.g. ``{"c": ...}`` for erf).
    activation : str
        Activation name, or ``"bayes"``.
    method : str
        ``"mc"`` or ``"gauss-hermite"``.
    samples : int
        Monte Carlo draws per length stratum, or quadrature nodes per dimension.
    at_bound : bool
        The optimiser stopped on the box boundary (the optimum is at infinity, e.g. softmax on
        max-SLR with ``nu = inf``: the reported risk is an upper bound on the infimum).
    converged : bool
        The best objective (within :data:`SAME_OPTIMUM` relative) was reached by a start that
        reported success or by two starts or more, or the optimum is at the bound; always True
        for fixed overlaps.
    reason : str
        ``"converged"``, or why not (the optimiser's message).
    runtime_s : float
        Wall time.
    excess_over_bayes, excess_over_bayes_stderr : float
        ``excess_risk`` minus the Bayes risk on the same rows, paired row by row
        (:func:`excess_over_bayes`: never below zero); 0 for the Bayes risk itself, NaN for
        fixed overlaps (:func:`excess_risk`).
    search_excess, search_excess_sd : float
        Mean and standard deviation of the excess that the multi-start search adds by
        optimising on a finite set, ``1/2 g' H^-1 g`` with ``g ~ N(0, V)`` the search set's
        mean gradient (:func:`search_penalty`); what ``excess_over_bayes`` is expected to
        show where the activation reaches the Bayes risk. 0 for the Bayes risk and for
        quadrature; NaN where the quadratic model does not apply (``search_reason``).
    search_reason : str
        ``"quadratic"``, or why ``search_excess`` is NaN.
    """

    excess_risk: float
    stderr: float
    risk: float
    m_k: float = math.nan
    q_k: float = math.nan
    m_v: float = math.nan
    q_v: float = math.nan
    theta: dict[str, float] = field(default_factory=dict)
    activation: str = "bayes"
    method: str = "mc"
    samples: int = 0
    at_bound: bool = False
    converged: bool = True
    runtime_s: float = 0.0
    reason: str = "converged"
    excess_over_bayes: float = math.nan
    excess_over_bayes_stderr: float = math.nan
    search_excess: float = math.nan
    search_excess_sd: float = math.nan
    search_reason: str = "fixed overlaps"

    def to_dict(self) -> dict[str, Any]:
        """Flat JSON-friendly dict (``theta`` entries as ``theta_<name>``)."""
        out = {
            "excess_risk": self.excess_risk,
            "stderr": self.stderr,
            "risk": self.risk,
            "m_k": self.m_k,
            "q_k": self.q_k,
            "m_v": self.m_v,
            "q_v": self.q_v,
            "activation": self.activation,
            "method": self.method,
            "samples": self.samples,
            "at_bound": self.at_bound,
            "converged": self.converged,
            "reason": self.reason,
            "runtime_s": self.runtime_s,
            "excess_over_bayes": self.excess_over_bayes,
            "excess_over_bayes_stderr": self.excess_over_bayes_stderr,
            "search_excess": self.search_excess,
            "search_excess_sd": self.search_excess_sd,
            "search_reason": self.search_reason,
        }
        out.update({f"theta_{k}": v for k, v in self.theta.items()})
        return out


# ----------------------------------------------------------------------------------------------
# validation
# ----------------------------------------------------------------------------------------------
def _check_method(method: str) -> str:
    if method not in POPULATION_MC_METHODS:
        raise ConfigError(f"method={method!r} is unknown; allowed: one of "
                          f"{', '.join(POPULATION_MC_METHODS)}")
    return method


def _check_mc(method: str, samples: Any, seed: Any) -> tuple[str, int, int]:
    """Validate the expectation method, its size and the seed."""
    method = _check_method(method)
    if method == "mc":
        samples = check_int("samples", samples, low=100)
    else:
        samples = check_int("samples", samples, low=6, high=200)
    return method, samples, check_int("seed", seed, low=0)


# ----------------------------------------------------------------------------------------------
# the expectation sets
# ----------------------------------------------------------------------------------------------
def mc_fields(task: TaskConfig, samples: int, seed: int) -> ChannelSamples:
    """Monte Carlo set: ``samples`` rows per length stratum (docs/model.md §3, common numbers)."""
    return sample_channel(task, samples, seed, allocation="equal")


def gh_fields(task: TaskConfig, order: int) -> ChannelSamples:
    """Gauss-Hermite tensor grid over ``(chi*_l, xi_l)``, ``l < L``, for each length."""
    if math.isinf(task.nu):
        raise ConfigError("method='gauss-hermite' needs finite nu (the integrand jumps at "
                          "nu=inf); allowed: method='mc'")
    nodes, wts = np.polynomial.hermite_e.hermegauss(order)
    wts = wts / wts.sum()
    L_max = task.L_max
    parts = []
    for j, (L, p) in enumerate(zip(task.length.values, task.length.probs, strict=True)):
        n_pts = order ** (2 * L)
        if n_pts > GH_MAX_POINTS:
            raise ConfigError(
                f"samples={order} Gauss-Hermite nodes give {n_pts} points at L={L}; allowed: "
                f"order^(2L) <= {GH_MAX_POINTS} (use method='mc' for this L)")
        grids = np.meshgrid(*([nodes] * (2 * L)), indexing="ij")
        wgrid = np.meshgrid(*([wts] * (2 * L)), indexing="ij")
        coords = np.stack([g.ravel() for g in grids], axis=1)
        weight = np.prod(np.stack([g.ravel() for g in wgrid], axis=1), axis=1) * p
        chi = np.zeros((n_pts, L_max))
        xi = np.zeros((n_pts, L_max))
        chi[:, :L] = coords[:, :L]
        xi[:, :L] = coords[:, L:]
        if task.variant == "spiked":
            chi[:, 0] += math.sqrt(task.nu)
        mask = np.broadcast_to(np.arange(L_max) < L, (n_pts, L_max))
        parts.append((chi, xi, mask, weight, np.full((n_pts,), j, dtype=np.int32)))
    chi, xi, mask, weight, stratum = (jnp.asarray(np.concatenate(x, axis=0))
                                      for x in zip(*parts, strict=True))
    zeros = jnp.zeros_like(chi)
    chi, xi = jnp.where(mask, chi, 0.0), jnp.where(mask, xi, 0.0)
    w = (zeros.at[:, 0].set(1.0) if task.variant == "spiked"
         else location_posterior(task, chi, mask))
    eps = jnp.zeros(chi.shape[0], dtype=jnp.int32)
    length = jnp.sum(mask, axis=-1).astype(jnp.int32)
    # only chi*, xi, w, mask and the weights enter a population expectation
    return ChannelSamples(chi, zeros, zeros[:, 0], eps, w, mask, length, xi, zeros, weight,
                  stratum)


def make_fields(task: TaskConfig, method: str, samples: int, seed: int) -> ChannelSamples:
    """Expectation set of either method (inside an ``enable_x64`` context)."""
    return mc_fields(task, samples, seed) if method == "mc" else gh_fields(task, samples)


# ----------------------------------------------------------------------------------------------
# per-row terms and weighted means
# ----------------------------------------------------------------------------------------------
def population_activation(name: str) -> Activation:
    """The activation as the population family evaluates it: softplus in its limit form
    (:func:`~bayesslr.core.activations.softplus_norm_limit`), because the search reaches
    ``|m_k| = 1000``, where whole rows of softplus underflow; every other activation as
    registered."""
    act = get_activation(name)
    return replace(act, fn=softplus_norm_limit) if act.name == "softplus" else act


@partial(jax.jit, static_argnums=0)
def ab_terms(act: Activation, fields: ChannelSamples, m_k: Array, s_k: Array, theta: Array):
    """Per-row ``a = sum_l w_l sigma_l`` and ``b = sum_l sigma_l^2``.

    Evaluated at the student scores ``chi = m_k chi* + s_k xi`` (docs/model.md §3).
    """
    chi = m_k * fields.chi_star + s_k * fields.xi
    sig = act(chi, fields.mask, theta)
    return jnp.sum(fields.w * sig, axis=-1), jnp.sum(sig * sig, axis=-1)


def _weighted_mean_se(values: Array, fields: ChannelSamples, n_strata: int, method: str):
    """Stratified weighted mean and its standard error (0 for quadrature)."""
    values = jnp.asarray(values)
    mean = jnp.sum(fields.weight * values)
    if method != "mc":
        return float(mean), 0.0
    var = 0.0
    for j in range(n_strata):
        sel = fields.stratum == j
        n_j = jnp.sum(sel)
        p_j = jnp.sum(jnp.where(sel, fields.weight, 0.0))
        mu = jnp.sum(jnp.where(sel, values, 0.0)) / n_j
        v_j = jnp.sum(jnp.where(sel, (values - mu) ** 2, 0.0)) / (n_j - 1)
        var = var + p_j**2 * v_j / n_j
    return float(mean), float(jnp.sqrt(var))


def _theta_dict(act: Activation, theta: Array) -> dict[str, float]:
    return {n: float(t) for n, t in zip(act.param_names, np.asarray(theta), strict=True)}


def _theta_array(act: Activation, theta: Any) -> Array:
    if theta is None:
        return jnp.asarray(act.param_init, dtype=jnp.float64)
    if isinstance(theta, dict):
        unknown = set(theta) - set(act.param_names)
        if unknown:
            raise ConfigError(f"theta has unknown names {sorted(unknown)}; allowed for "
                              f"{act.name}: {list(act.param_names)}")
        vals = [theta.get(n, d) for n, d in zip(act.param_names, act.param_init, strict=True)]
    else:
        vals = list(np.atleast_1d(np.asarray(theta, dtype=float)))
    if len(vals) != act.n_params:
        raise ConfigError(f"theta={vals} has {len(vals)} values; allowed: {act.n_params} for "
                          f"{act.name} ({', '.join(act.param_names) or 'none'})")
    vals = [check_real(f"theta[{n}]", v) for n, v in zip(act.param_names, vals, strict=True)]
    return jnp.asarray(vals, dtype=jnp.float64)


# ----------------------------------------------------------------------------------------------
# public API
# ----------------------------------------------------------------------------------------------
def linear_spiked_closed_form(task: TaskConfig) -> float:
    """Best population excess risk of linear attention on spiked SLR, in closed form.

    With ``u = m_k sqrt(nu)`` and ``q_k = m_k^2`` (the orthogonal part only adds ``L s_k^2`` to
    ``B``): ``A = 1 + u``, ``B = (1 + u)^2 + (L - 1) + L u^2 / nu``; the ratio ``A^2/B`` is
    maximal at ``u = nu (L - 1) / L``, giving ``L (L - 1) / (L^2 + nu (L - 1))``. ``A`` does not
    depend on ``L`` and ``B`` is affine in it, so a length law enters through ``E[L]`` alone.
    Decays like ``1/nu`` (docs/model.md §3), against ``exp(-nu/4)`` for softmax.
    """
    if task.variant != "spiked":
        raise ConfigError(f"variant={task.variant!r}: the closed form holds for 'spiked' only")
    L = float(np.dot(task.length.values, task.length.probs))
    return L * (L - 1.0) / (L * L + task.nu * (L - 1.0))


def bayes_risk(task: TaskConfig, *, samples: int = DEFAULT_SAMPLES, seed: int = 0,
               method: str = "mc") -> PopulationResult:
    """Bayes excess risk ``1 - E[sum_l P(eps*=l|X)^2]`` (docs/model.md §3).

    Examples
    --------
    >>> import bayesslr as bs
    >>> r = bs.bayes_risk(bs.make_task("spiked", L=2, nu=5.0), samples=20_000)
    >>> round(r.excess_risk, 2), r.stderr < 0.01
    (0.08, True)
    """
    method, samples, seed = _check_mc(method, samples, seed)
    t0 = time.perf_counter()
    with jax.enable_x64(True):
        est = _bayes_estimate(task, method, samples, seed)
        if method == "gauss-hermite":
            coarse = _bayes_estimate(task, method, samples - 4, seed)
            est = (est[0], abs(est[0] - coarse[0]))
    return PopulationResult(est[0], est[1], est[0] + task.delta, method=method, samples=samples,
                            runtime_s=time.perf_counter() - t0, excess_over_bayes=0.0,
                            excess_over_bayes_stderr=0.0, search_excess=0.0,
                            search_excess_sd=0.0, search_reason="no search")


def bayes_rows(P: Array) -> Array:
    """Per row, the Bayes predictor's excess risk ``1 - sum_l P_l^2`` given the location
    posterior ``P`` (Rao-Blackwellised; its mean is the Bayes risk)."""
    return 1.0 - jnp.sum(P * P, axis=-1)


def _bayes_estimate(task, method, samples, seed):
    fields = make_fields(task, method, samples, seed)
    P = location_posterior(task, fields.chi_star, fields.mask)
    return _weighted_mean_se(bayes_rows(P), fields, len(task.length.values), method)


def _check_overlaps(m_k: Any, q_k: Any, m_v: Any, q_v: Any) -> tuple[float, ...]:
    """Overlaps as reals, ``q >= m^2`` (to 1e-9 relative), else a one-line ConfigError."""
    m_k = check_real("m_k", m_k)
    q_k = check_real("q_k", q_k, low=0.0)
    m_v = check_real("m_v", m_v)
    q_v = check_real("q_v", q_v, low=0.0)
    if q_k < m_k**2 - 1e-9 * max(1.0, q_k):
        raise ConfigError(f"q_k={q_k} is below m_k^2={m_k**2}; allowed: q_k >= m_k^2")
    if q_v < m_v**2 - 1e-9 * max(1.0, q_v):
        raise ConfigError(f"q_v={q_v} is below m_v^2={m_v**2}; allowed: q_v >= m_v^2")
    return m_k, q_k, m_v, q_v


def excess_risk(task: TaskConfig, activation: str, m_k: float, q_k: float, m_v: float,
                q_v: float, theta: Any = None, *, samples: int = DEFAULT_SAMPLES, seed: int = 0,
                method: str = "mc", fields: ChannelSamples | None = None) -> PopulationResult:
    """Population excess risk ``1 - 2 m_v A + q_v B`` at given overlaps (docs/model.md §3).

    ``fields``, with ``method="mc"`` only: the expectation set ``make_fields(task, "mc",
    samples, seed)`` drawn once by a caller that evaluates many overlaps (the same numbers,
    without drawing them again).

    Examples
    --------
    >>> import bayesslr as bs
    >>> task = bs.make_task("spiked", L=2, nu=5.0)
    >>> at_bayes = bs.excess_risk(task, "softmax", 5.0 ** 0.5, 5.0, 1.0, 1.0, samples=20_000)
    >>> abs(at_bayes.excess_risk - bs.bayes_risk(task, samples=20_000).excess_risk) < 0.01
    True
    """
    act = population_activation(activation)
    method, samples, seed = _check_mc(method, samples, seed)
    m_k, q_k, m_v, q_v = _check_overlaps(m_k, q_k, m_v, q_v)
    if fields is not None and method != "mc":
        raise ConfigError(f"fields given with method={method!r}; allowed: method='mc'")
    t0 = time.perf_counter()
    with jax.enable_x64(True):
        th = _theta_array(act, theta)
        s_k = math.sqrt(max(q_k - m_k**2, 0.0))

        def estimate(n, given=None):
            f = make_fields(task, method, n, seed) if given is None else given
            a, b = ab_terms(act, f, jnp.float64(m_k), jnp.float64(s_k), th)
            return _weighted_mean_se(1.0 - 2.0 * m_v * a + q_v * b, f,
                                     len(task.length.values), method)

        mean, se = estimate(samples, fields)
        if method == "gauss-hermite":
            se = abs(mean - estimate(samples - 4)[0])
    return PopulationResult(mean, se, mean + task.delta, m_k, q_k, m_v, q_v,
                            _theta_dict(act, th), act.name, method, samples,
                            runtime_s=time.perf_counter() - t0)


@dataclass(frozen=True)
class PairedExcess:
    """An activation's population excess risk over the Bayes risk on common random numbers
    (:func:`excess_over_bayes`).

    Attributes
    ----------
    excess_over_bayes : float
        ``E sum_l (m_v sigma_l - P_l)^2 + (q_v - m_v^2) E sum_l sigma_l^2``: the activation's
        excess risk minus the Bayes risk, estimated row by row on one expectation set, each
        row's term non-negative, so the estimate is never below zero.
    stderr : float
        Its Monte Carlo standard error (or quadrature error estimate), paired.
    excess_risk, excess_risk_stderr : float
        The activation's excess risk on the same rows, unpaired (as :func:`excess_risk`).
    bayes_risk, bayes_risk_stderr : float
        The Bayes risk on the same rows (as :func:`bayes_risk`).
    activation, method : str
    samples, seed : int
    """

    excess_over_bayes: float
    stderr: float
    excess_risk: float
    excess_risk_stderr: float
    bayes_risk: float
    bayes_risk_stderr: float
    activation: str
    method: str
    samples: int
    seed: int


@partial(jax.jit, static_argnums=0)
def _paired_terms(act: Activation, fields: ChannelSamples, m_k: Array, s_k: Array,
                  theta: Array, m_v: Array, q_v: Array, P: Array):
    """Per row: the paired excess, the activation's excess risk and the Bayes risk."""
    sig = act(m_k * fields.chi_star + s_k * fields.xi, fields.mask, theta)
    b = jnp.sum(sig * sig, axis=-1)
    paired = jnp.sum((m_v * sig - P) ** 2, axis=-1) + (q_v - m_v**2) * b
    own = 1.0 - 2.0 * m_v * jnp.sum(fields.w * sig, axis=-1) + q_v * b
    return paired, own, bayes_rows(P)


def excess_over_bayes(task: TaskConfig, activation: str, m_k: float, q_k: float, m_v: float,
                      q_v: float, theta: Any = None, *, samples: int = DEFAULT_SAMPLES,
                      seed: int = 0, method: str = "mc") -> PairedExcess:
    """An activation's population excess risk over the Bayes risk at given overlaps, on
    common random numbers (docs/model.md §3).

    Given the teacher's fields of a row, the location posterior ``P`` is the Bayes
    predictor's weights and ``y``'s conditional mean is ``sum_l P_l z*_l``; the student
    ``m_v sum_l sigma_l z*_l`` (plus independent value noise of variance ``q_v - m_v^2``) is
    therefore above it by ``sum_l (m_v sigma_l - P_l)^2 + (q_v - m_v^2) sum_l sigma_l^2`` in
    expectation (Pythagoras), a non-negative term per row. Its mean over one expectation set
    estimates ``excess_risk - bayes_risk`` with a paired error: an activation can never
    appear below the Bayes risk by Monte Carlo noise, which two independent sets allow.

    Examples
    --------
    >>> import bayesslr as bs
    >>> task = bs.make_task("spiked", L=2, nu=5.0)
    >>> # softmax at the Bayes overlaps is the Bayes predictor: no excess, on every row
    >>> bs.excess_over_bayes(task, "softmax", 5.0 ** 0.5, 5.0, 1.0, 1.0,
    ...                      samples=20_000).excess_over_bayes < 1e-12
    True
    >>> lin = bs.excess_over_bayes(task, "linear", 0.0, 0.0, 0.5, 0.25, samples=20_000)
    >>> lin.excess_over_bayes > 10 * lin.stderr
    True
    """
    act = population_activation(activation)
    method, samples, seed = _check_mc(method, samples, seed)
    m_k, q_k, m_v, q_v = _check_overlaps(m_k, q_k, m_v, q_v)
    n_strata = len(task.length.values)
    with jax.enable_x64(True):
        th = _theta_array(act, theta)
        s_k = jnp.float64(math.sqrt(max(q_k - m_k**2, 0.0)))

        def estimate(n):
            f = make_fields(task, method, n, seed)
            P = location_posterior(task, f.chi_star, f.mask)
            rows = _paired_terms(act, f, jnp.float64(m_k), s_k, th, jnp.float64(m_v),
                                 jnp.float64(q_v), P)
            return [_weighted_mean_se(r, f, n_strata, method) for r in rows]

        est = estimate(samples)
        if method == "gauss-hermite":
            coarse = estimate(samples - 4)
            est = [(m, abs(m - c)) for (m, _), (c, _) in zip(est, coarse, strict=True)]
    (d, d_se), (own, own_se), (bayes, bayes_se) = est
    return PairedExcess(d, d_se, own, own_se, bayes, bayes_se, act.name, method, samples, seed)


def _starts(task: TaskConfig, act: Activation) -> list[np.ndarray]:
    c = task.c_nu if math.isfinite(task.c_nu) else 8.0
    ms = sorted({0.0, 0.25, 1.0, min(max(c, 0.5), 20.0), 3.0})
    base = list(act.param_init)
    starts = [np.array([m, 0.0, *base]) for m in ms]
    starts += [np.array(s) for s in act.population_starts]
    return starts


@partial(jax.jit, static_argnums=0)
def _neg_ratio_and_grad(act: Activation, fields: ChannelSamples, p: Array):
    """``-A^2/B`` at ``p = (m_k, s_k, theta...)`` and its gradient (compiled once per shape)."""

    def f(p):
        a, b = ab_terms(act, fields, p[0], p[1], p[2:])
        A = jnp.sum(fields.weight * a)
        B = jnp.sum(fields.weight * b)
        return -(A * A) / B

    return jax.value_and_grad(f)(p)


def _ratio_objective(act: Activation, fields: ChannelSamples):
    """Scipy-facing wrapper of :func:`_neg_ratio_and_grad` (float64 in, floats out)."""

    def fun(p):
        v, g = _neg_ratio_and_grad(act, fields, jnp.asarray(p, dtype=jnp.float64))
        return float(v), np.asarray(g, dtype=float)

    return fun


def best_excess_risk(task: TaskConfig, activation: str, *, samples: int = DEFAULT_SAMPLES,
                     seed: int = 0, method: str = "mc") -> PopulationResult:
    """Best population excess risk of an activation, ``1 - sup A^2/B`` (docs/model.md §3).

    The ``v`` side is solved in closed form (``m_v = A/B``, ``q_v = m_v^2``); the supremum runs
    over ``m_k``, ``q_k >= m_k^2`` and the activation's own scalars, by multi-start L-BFGS-B in
    the box ``|m_k| <= 1000``, ``0 <= sqrt(q_k - m_k^2) <= 40``, ``|theta| <= 10``. With ``"mc"``
    the optimiser's objective uses the draws of ``seed`` and the reported risk an independent set
    (``seed + 1``), with its exact standard error. ``activation="bayes"`` returns the Bayes risk.

    Examples
    --------
    >>> import bayesslr as bs
    >>> task = bs.make_task("spiked", L=2, nu=5.0)
    >>> lin = bs.best_excess_risk(task, "linear", samples=20_000)
    >>> round(lin.excess_risk, 2)  # closed form L(L-1)/(L^2 + nu(L-1)) = 2/9
    0.22
    """
    if activation == "bayes":
        return bayes_risk(task, samples=samples, seed=seed, method=method)
    act = population_activation(activation)
    method, samples, seed = _check_mc(method, samples, seed)
    t0 = time.perf_counter()
    with jax.enable_x64(True):
        fields = make_fields(task, method, samples, seed)
        fun = _ratio_objective(act, fields)
        bounds = [(-M_BOUND, M_BOUND), (0.0, S_BOUND)]
        bounds += [(-THETA_BOUND, THETA_BOUND)] * act.n_params
        runs = [scipy.optimize.minimize(fun, p0, jac=True, method="L-BFGS-B", bounds=bounds,
                                        options={"maxiter": 500, "ftol": 1e-13, "gtol": 1e-9})
                for p0 in _starts(task, act)]
        best, reason = _best_start(runs)
        p = jnp.asarray(best.x, dtype=jnp.float64)
        m_k, s_k, th = float(p[0]), float(p[1]), p[2:]
        a, b = ab_terms(act, fields, p[0], p[1], th)
        A = float(jnp.sum(fields.weight * a))
        B = float(jnp.sum(fields.weight * b))
        m_v = A / B
        n_strata = len(task.length.values)
        eval_fields = make_fields(task, "mc", samples, seed + 1) if method == "mc" else fields

        def evaluate(f):  # the risk and the paired excess over Bayes on one set of rows
            P = location_posterior(task, f.chi_star, f.mask)
            paired, own, _ = _paired_terms(act, f, p[0], p[1], th, jnp.float64(m_v),
                                           jnp.float64(m_v**2), P)
            return (_weighted_mean_se(own, f, n_strata, method),
                    _weighted_mean_se(paired, f, n_strata, method))

        (mean, se), (d, d_se) = evaluate(eval_fields)
        if method == "gauss-hermite":
            (coarse, _), (d_coarse, _) = evaluate(make_fields(task, method, samples - 4, seed))
            se, d_se = abs(mean - coarse), abs(d - d_coarse)
    x = np.asarray(best.x)
    edges = np.array([M_BOUND, S_BOUND] + [THETA_BOUND] * act.n_params)
    # |m_k| or |theta| on its edge, or s_k at its upper edge (s_k = 0 is a genuine optimum)
    at_bound = bool(np.any(np.isclose(np.abs(x), edges, rtol=1e-6)))
    converged = reason == "converged" or at_bound
    if method != "mc":
        pen = (0.0, 0.0, "quadrature: the search set has no sampling noise")
    elif at_bound:
        pen = (math.nan, math.nan, "the optimum is at the box's edge (|k| -> inf): no "
                                   "quadratic model of the search there")
    else:
        with jax.enable_x64(True):
            pen = search_penalty(act, eval_fields, np.append(x, m_v), n_strata)
    return PopulationResult(
        mean, se, mean + task.delta, m_k, m_k**2 + s_k**2, m_v, m_v**2,
        _theta_dict(act, th), act.name, method, samples, at_bound=at_bound,
        converged=converged, runtime_s=time.perf_counter() - t0,
        reason="converged" if converged else reason, excess_over_bayes=d,
        excess_over_bayes_stderr=d_se, search_excess=pen[0], search_excess_sd=pen[1],
        search_reason=pen[2])


# H's smallest eigenvalue relative to its largest below which the search's optimum is not
# isolated (a flat direction, e.g. softplus's saturated scale): no quadratic model there
FLAT_CURVATURE = 1e-9
# draws of the search set's mean gradient behind search_excess (a deterministic seed: the
# penalty of one optimum is a number, not a random one); 2e4 draws put its mean to < 1 %
PENALTY_DRAWS = 20_000
PENALTY_SEED = 20260921
# a found s_k within this many of the search's standard deviations of zero is on its bound
BOUND_Z = 2.0


@partial(jax.jit, static_argnums=(0, 3))
def _risk_curvature(act: Activation, fields: ChannelSamples, x: Array, n_strata: int):
    """At ``x = (m_k, s_k, theta..., m_v)``: the Hessian ``H`` of the mean risk ``sum_i w_i
    r_i(x)``, ``r_i = 1 - 2 m_v a_i + m_v^2 b_i``, and the stratified covariance ``V`` of
    the mean of its per-row gradients (of a set of these rows' size)."""

    def rows(x):
        a, b = ab_terms(act, fields, x[0], x[1], x[2:-1])
        return 1.0 - 2.0 * x[-1] * a + x[-1] ** 2 * b

    H = jax.hessian(lambda x: jnp.sum(fields.weight * rows(x)))(x)
    J = jax.jacfwd(rows)(x)
    V = jnp.zeros_like(H)
    for j in range(n_strata):
        sel = fields.stratum == j
        n_j = jnp.sum(sel)
        p_j = jnp.sum(jnp.where(sel, fields.weight, 0.0))
        mu = jnp.sum(jnp.where(sel[:, None], J, 0.0), axis=0) / n_j
        C = jnp.where(sel[:, None], J - mu, 0.0)
        V = V + p_j**2 * (C.T @ C) / ((n_j - 1) * n_j)
    return H, V


def search_penalty(act: Activation, fields: ChannelSamples, x: Any, n_strata: int
                   ) -> tuple[float, float, str]:
    """The excess risk a search adds by optimising on a finite expectation set instead of the
    population: mean and standard deviation, and ``"quadratic"`` (or why NaN).

    The search minimises the risk over ``x = (m_k, s_k, theta..., m_v)`` (``q_v = m_v^2``)
    on one set of rows; to second order its optimum sits at ``delta = -H^-1 g`` from the
    population optimum, with ``g ~ N(0, V)`` the set's mean gradient there, and the
    population risk is higher by ``1/2 g' H^-1 g``: a weighted sum of chi-squares with
    weights the eigenvalues ``lambda`` of ``H^-1 V / 2``, mean ``tr(H^-1 V) / 2`` and
    variance ``tr((H^-1 V)^2) / 2`` (the statistics behind Takeuchi's information
    criterion). ``H`` and ``V`` are estimated at the optimum found, on the rows given (an
    independent set of the search's size). The risk is even in ``s_k`` (``xi`` is
    symmetric), so its population optimum is often ``s_k = 0``, on the box's bound; where
    the ``s_k`` found is within :data:`BOUND_Z` times the search's spread of zero, the
    optimum is taken there, and a draw of ``g`` that would move ``s_k`` below zero leaves
    it at zero and the other coordinates free (a found ``s_k > 0`` is otherwise mostly
    noise, and the unconstrained model then overstates the penalty: by 25 % on average
    over 120 seeds of spiked ``L = 3``, ``nu = 2``, softmax). The mean and standard
    deviation are over :data:`PENALTY_DRAWS` draws of ``g`` (seed :data:`PENALTY_SEED`).
    """
    H, V = _risk_curvature(act, fields, jnp.asarray(x, dtype=jnp.float64), n_strata)
    H, V = np.asarray(H, dtype=float), np.asarray(V, dtype=float)
    if not (np.all(np.isfinite(H)) and np.all(np.isfinite(V))):
        return math.nan, math.nan, "the risk's curvature is not finite at the optimum"
    H = 0.5 * (H + H.T)
    eig = np.linalg.eigvalsh(H)
    if eig[0] <= FLAT_CURVATURE * max(eig[-1], 1e-300):
        return math.nan, math.nan, (f"the risk is flat at the optimum (curvature {eig[0]:.3g} "
                                    f"against {eig[-1]:.3g}): no isolated optimum")
    g = np.random.default_rng(PENALTY_SEED).multivariate_normal(
        np.zeros(len(H)), V, size=PENALTY_DRAWS, method="eigh")
    step = np.linalg.solve(H, g.T).T  # the unconstrained optimum sits at -step
    pen = 0.5 * np.einsum("ij,ij->i", g, step)
    cov = np.linalg.solve(H, np.linalg.solve(H, V).T)  # the search's spread, H^-1 V H^-1
    if float(np.asarray(x)[1]) <= BOUND_Z * math.sqrt(max(cov[1, 1], 0.0)):
        # s_k at zero within the search's spread: the optimum is taken on the bound, where
        # the risk is even in s_k; a draw that would move s_k below zero leaves it there
        free = np.delete(np.arange(len(H)), 1)
        gf = g[:, free]
        on_bound = 0.5 * np.einsum("ij,ij->i", gf, np.linalg.solve(H[np.ix_(free, free)],
                                                                     gf.T).T)
        pen = np.where(step[:, 1] <= 0.0, pen, on_bound)
    return float(np.mean(pen)), float(np.std(pen, ddof=1)), "quadratic"


# two starts at the same optimum: objectives equal to this relative tolerance (the objective is
# a mean over >= 1e4 draws; its Monte Carlo error is >= 1e-4 relative, its float error 1e-15)
SAME_OPTIMUM = 1e-9


def _best_start(runs: list[Any]) -> tuple[Any, str]:
    """The multi-start search's answer: the start with the lowest *finite* objective (one
    ending on a NaN objective, where the activation overflowed, is never chosen), and
    ``"converged"`` when that objective, within :data:`SAME_OPTIMUM`, was reached by a start
    that reported success or by two starts or more; else why not. A line search that gave up
    at the optimum (1 ulp below the others) is no reason to doubt it, nor is a flat direction:
    softplus saturates into a normalised ReLU at large ``m_k``, whose scale does not matter,
    and every start ends on the same objective (to 16 digits) at a different ``m_k``, its line
    search stopped on the flat."""
    finite = [r for r in runs if np.isfinite(r.fun)]
    if not finite:
        return runs[0], (f"the objective is not finite at the end of any of {len(runs)} "
                         f"starts ({runs[0].message})")
    best = min(finite, key=lambda r: r.fun)
    tol = SAME_OPTIMUM * max(abs(best.fun), 1e-12)
    reached = [r for r in finite if r.fun <= best.fun + tol]
    if len(reached) >= 2 or any(r.success for r in reached):
        return best, "converged"
    return best, (f"one start of {len(runs)} reached the best objective {best.fun:.12g} "
                  f"without reporting success ({best.message}), and no other start came "
                  f"within {SAME_OPTIMUM:g} relative of it; {len(runs) - len(finite)} starts "
                  f"ended on a non-finite objective")


# ----------------------------------------------------------------------------------------------
# registry entry: population:<bayes|activation>
# ----------------------------------------------------------------------------------------------
POPULATION_ACTIVATIONS: tuple[str, ...] = ("bayes", *ACTIVATIONS)  # every activation, and Bayes

SCHEMA = Schema("population", (
    Opt("samples", DEFAULT_SAMPLES, "int", low=6, high=10**9,
        doc="Monte Carlo draws per length (mc, >= 100) or Gauss-Hermite nodes per axis "
            "(gauss-hermite, 6..200)"),
    Opt("mc_method", "mc", "choice", choices=POPULATION_MC_METHODS,
        doc="expectation method: Monte Carlo with common random numbers, or a tensor "
            "Gauss-Hermite grid (small L)"),
))


def _check_cell(cell: Cell, opts: Mapping[str, Any]) -> None:
    _check_mc(opts["mc_method"], opts["samples"], cell.seed)


def _rows(cell: Cell, opts: Mapping[str, Any]) -> tuple[float, int]:
    """Rows of the expectation set and the padded length."""
    law = LengthLaw.parse(cell.L)
    if opts["mc_method"] == "gauss-hermite":
        return float(sum(opts["samples"] ** (2.0 * L) for L in law.values)), law.L_max
    return float(opts["samples"]) * len(law.values), law.L_max


def _memory(cell: Cell, opts: Mapping[str, Any]) -> Resources:
    rows, L = _rows(cell, opts)
    # two expectation sets (search and evaluation) of 11 float64 arrays (n, L), plus the
    # activation's intermediates under autodiff (~10 more)
    return Resources(2 * rows * L * 8 * 21, f"{rows:.3g} channel rows x L_max={L} in float64",
                     "samples, or L")


# cost model: process CPU seconds per (objective call x channel row x L), by activation, and
# the fixed part (imports of the cell's code, compilation shared by a shape's cells); measured
# at the paper's sizes (2e5 samples, L = 2 and 8; benchmarks/README.md, "Cost model")
POPULATION_COST = {"overhead_s": 2.0, "evals": 60.0, "s_per_row": {
    "bayes": 1.5e-8, "linear": 2.5e-9, "default": 1.5e-7}}


def _cost(cell: Cell, opts: Mapping[str, Any]) -> float:
    """Core-seconds of one cell: the fixed part plus objective calls (one for the Bayes risk,
    ``evals`` for an activation's multi-start search) x channel rows x ``L`` x the activation's
    cost per row (linear's risk is closed-form in the overlaps: cheap)."""
    rows, L = _rows(cell, opts)
    c = POPULATION_COST
    evals = 1.0 if cell.activation == "bayes" else c["evals"]
    per = c["s_per_row"].get(str(cell.activation), c["s_per_row"]["default"])
    return c["overhead_s"] + evals * rows * L * per


@register("population", schema=SCHEMA, activations=POPULATION_ACTIVATIONS,
          description="population excess risk: Bayes, or an activation at its best overlaps "
                      "(docs/model.md §3)",
          outputs=common("test_error", "stderr", "risk", "m_k", "q_k", "m_v", "q_v",
                         "converged", "reason", "runtime_s") + outputs(
              ("at_bound", "the optimum is at |m_k| -> inf: test_error is an upper bound", ""),
              ("excess_over_bayes", "test_error minus the Bayes risk, paired on the same "
               "rows (never below 0)", "1", "excess_over_bayes_stderr"),
              ("excess_over_bayes_stderr", "standard error of excess_over_bayes"),
              ("search_excess", "expected part of excess_over_bayes from searching on a "
               "finite set (0 for bayes)"),
              ("search_excess_sd", "standard deviation of that part"),
              ("search_reason", "'quadratic', or why search_excess is NaN", ""),
              ("samples", "Monte Carlo draws per length or Gauss-Hermite nodes per axis"),
              ("mc_method", "expectation method", "")),
          cost=_cost, memory=_memory, check=_check_cell,
          plot=PlotStyle(kind="marker", label="{activation}", marker="o"),
          version="4", dims=("variant", "L", "nu", "delta"),
          cli=CliFace(fields={"activation": "softmax", "seed": "0"},
                      help={"seed": "Seed of the common random numbers."},
                      flags={"mc_method": "--method"}, rename={"test_error": "excess_risk"},
                      doc="Best population excess risk (docs/model.md): Bayes, or an "
                          "activation optimised over (m_k, q_k, its own scalars) with the v side "
                          "in closed form"))
def population_cell(cell: Cell, opts: Mapping[str, Any]) -> dict[str, Any]:
    """Registered method ``population:<activation>`` (options: :data:`SCHEMA`).

    The Monte Carlo seed is the cell's ``seed``. ``test_error`` is the population excess risk
    (``Delta`` does not enter it; ``risk`` adds it).
    """
    task = cell.task(D=1)
    res = best_excess_risk(task, cell.activation, samples=opts["samples"], seed=cell.seed,
                           method=opts["mc_method"])
    out = res.to_dict()
    out["test_error"] = out.pop("excess_risk")
    out["mc_method"] = out.pop("method")  # "method" is a sweep dimension
    return out
