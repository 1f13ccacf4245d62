"""Registry entries of the theory families (one cell = one ``alpha``).

* ``theory_erm:<activation>``: the ERM replica fixed point (:mod:`bayesslr.theory.erm`) at
  ``cell.alpha`` and ``cell.lam`` (``lam="auto"`` or ``"opt"``: the theory's own optimal
  ``lam``, :mod:`bayesslr.theory.lam_opt`).
* ``theory_bayes``: the Bayes-optimal state evolution (:mod:`bayesslr.theory.bayes`) from both
  starts with the free-entropy verdict.

``cell.seed`` seeds the channel's common random numbers; ``cell.D`` is ignored (``D -> inf``).
Options (``cell.options``): ``samples``, ``test_samples``, ``vh_form``, ``start``,
``channel_error``, ``damping``, ``tol``, ``accel``, ``max_iter``, ``call_timeout_s``,
``max_seconds``, ``theta`` (erm); ``samples``, ``test_samples``, ``gh_nodes``, ``m_clip``,
``damping``, ``tol``, ``max_iter`` (bayes). ``stderr`` of a theory cell (both families) is the
total standard error (test formula and channel Monte Carlo); both parts are stored too.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Mapping
from typing import Any

from bayesslr.methods import Cell, register
from bayesslr.task import ConfigError, check_real, make_task
from bayesslr.theory.bayes import BayesTheoryOptions, compare_branches, solve_bayes
from bayesslr.theory.erm import ERM_ACTIVATIONS, ErmTheoryOptions, solve_erm
from bayesslr.theory.lam_opt import optimal_lambda
from bayesslr.theory.solver import SolverOptions

_SOLVER_KEYS = ("damping", "tol", "max_iter", "min_iter", "call_timeout_s", "max_seconds",
                "accel", "anderson_m")
ERM_KEYS = ("samples", "test_samples", "vh_form", "n_explore", "n_refine", "shift", "theta",
            "start", "channel_error") + _SOLVER_KEYS
BAYES_KEYS = ("samples", "test_samples", "gh_nodes", "m_clip") + _SOLVER_KEYS


def _check_keys(options: Mapping[str, Any], allowed: tuple[str, ...], family: str) -> None:
    unknown = sorted(set(options) - set(allowed))
    if unknown:
        raise ConfigError(f"options {unknown} are unknown to {family}; allowed: "
                          f"{', '.join(allowed)}")


def _solver(options: Mapping[str, Any], base: SolverOptions) -> SolverOptions:
    kw = {k: options[k] for k in _SOLVER_KEYS if k in options}
    if not kw:
        return base
    fields = {f: getattr(base, f) for f in base.__dataclass_fields__}
    fields.update(kw)
    return SolverOptions(**fields)


def erm_options(options: Mapping[str, Any], seed: int) -> ErmTheoryOptions:
    """:class:`ErmTheoryOptions` from a cell's options dict."""
    _check_keys(options, ERM_KEYS, "theory_erm")
    kw = {k: options[k] for k in ("samples", "test_samples", "vh_form", "n_explore", "n_refine",
                                  "shift", "channel_error") if k in options}
    if "theta" in options:
        th = options["theta"]
        kw["theta"] = tuple(float(t) for t in (th if isinstance(th, list | tuple) else [th]))
    base = ErmTheoryOptions(seed=seed, **kw)  # default solver for this sample size
    return dataclasses.replace(base, solver=_solver(options, base.solver))


def bayes_options(options: Mapping[str, Any], seed: int) -> BayesTheoryOptions:
    """:class:`BayesTheoryOptions` from a cell's options dict."""
    _check_keys(options, BAYES_KEYS, "theory_bayes")
    kw = {k: options[k] for k in ("samples", "test_samples", "gh_nodes", "m_clip")
          if k in options}
    base = BayesTheoryOptions()
    return BayesTheoryOptions(seed=seed, solver=_solver(options, base.solver), **kw)


_ERM_OUT = ("m_k", "q_k", "V_k", "m_v", "q_v", "V_v", "mh_k", "qh_k", "Vh_k", "mh_v", "qh_v",
            "Vh_v", "Vh_k_stein", "Vh_v_stein", "Vh_k_hessian", "Vh_v_hessian", "vh_gap_k",
            "vh_gap_v", "vh_gap_k_se", "vh_gap_v_se", "train_loss", "objective", "off_branch",
            "prox_unconverged",
            "iterations", "residual", "samples", "vh_form", "start", "reason")


@register("theory_erm", activations=ERM_ACTIVATIONS, needs=("alpha",),
          description="replica-symmetric ERM fixed point at finite alpha (spec section 5)")
def theory_erm_cell(cell: Cell) -> dict[str, Any]:
    """One ``alpha`` of the ERM replica theory; ``lam`` a float or ``"auto"``/``"opt"``."""
    t0 = time.perf_counter()
    task = make_task(cell.variant, L=cell.L, nu=cell.nu, delta=cell.delta, D=1)
    opt = erm_options(cell.options, cell.seed)
    start = str(cell.options.get("start", "informed"))
    lam = cell.lam
    if lam is None:
        raise ConfigError("lam=None is not set; allowed: real >= 0, 'auto' or 'opt'")
    if isinstance(lam, str) and lam.strip().lower() in {"auto", "opt"}:
        r = optimal_lambda(task, cell.activation, cell.alpha, opt, start=start).result
    else:
        lam = check_real("lam", lam, low=0.0)
        r = solve_erm(task, cell.activation, cell.alpha, lam, lam, opt, start=start)
    out: dict[str, Any] = {"test_error": r.test_error, "stderr": r.stderr,
                           "test_stderr": r.test_stderr, "channel_stderr": r.channel_stderr,
                           "risk": r.test_error + task.delta, "lam": r.lam_k,
                           "converged": r.converged}
    out.update({k: getattr(r, k) for k in _ERM_OUT})
    out["runtime_s"] = time.perf_counter() - t0
    return out


@register("theory_bayes", needs=("alpha",),
          description="Bayes-optimal state evolution at finite alpha, both starts (spec 5)")
def theory_bayes_cell(cell: Cell) -> dict[str, Any]:
    """One ``alpha`` of the state evolution from both starts; the larger free entropy wins."""
    t0 = time.perf_counter()
    task = make_task(cell.variant, L=cell.L, nu=cell.nu, delta=cell.delta, D=1)
    opt = bayes_options(cell.options, cell.seed)
    inf = solve_bayes(task, cell.alpha, opt, start="informed")
    unf = solve_bayes(task, cell.alpha, opt, start="uninformed")
    p = compare_branches(float(cell.alpha), inf, unf)
    b = p.best
    out: dict[str, Any] = {
        "test_error": b.test_error, "stderr": b.stderr, "test_stderr": b.test_stderr,
        "channel_stderr": b.channel_stderr, "risk": b.test_error + task.delta,
        "m_k": b.m_k, "q_k": b.m_k, "V_k": 1.0 - b.m_k, "m_v": b.m_v, "q_v": b.m_v,
        "V_v": 1.0 - b.m_v, "mh_k": b.mh_k, "mh_v": b.mh_v, "free_entropy": b.free_entropy,
        "nishimori_gap": b.nishimori_gap, "clipped": b.clipped,
        "converged": b.converged, "iterations": inf.iterations + unf.iterations,
        "residual": b.residual, "branch": b.start,
        "test_error_uninformed": unf.test_error, "test_error_informed": inf.test_error,
        "free_entropy_uninformed": unf.free_entropy, "free_entropy_informed": inf.free_entropy,
        "branches_differ": p.branches_differ, "hard_phase": p.hard_phase,
        "samples": b.samples, "quadrature": b.quadrature,
        "quadrature_error": b.quadrature_error,
    }
    out["runtime_s"] = time.perf_counter() - t0
    return out
