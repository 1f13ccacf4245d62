"""``bayesslr theory erm|bayes``: the finite-``alpha`` asymptotic theory (spec section 5).

``--alpha`` takes a comma list or ``start:stop:num``. A single ``alpha`` is one cell of the
registered families ``theory_erm:<activation>`` / ``theory_bayes``; a list is solved by
continuation in ``alpha`` with the same library functions (:func:`bayesslr.theory.erm.erm_curve`,
:func:`bayesslr.theory.bayes.bayes_curve`). The JSON holds, per ``alpha`` (list ``points``),
``test_error``, the order parameters, ``converged`` and ``iterations`` (plus conjugates and
diagnostics), and the Monte Carlo sizes and solver settings used.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import typer

from bayesslr.commands.common import (
    DeltaOpt,
    LDistOpt,
    LOpt,
    NuOpt,
    VariantOpt,
    cli_task,
    emit,
    parse_float,
    parse_grid,
)
from bayesslr.task import ConfigError, TaskConfig, check_int
from bayesslr.theory.bayes import BayesTheoryOptions, bayes_curve, hard_phase_range
from bayesslr.theory.erm import ERM_ACTIVATIONS, STARTS, ErmTheoryOptions, erm_curve
from bayesslr.theory.lam_opt import optimal_lambda_curve
from bayesslr.theory.method import bayes_options, erm_options
from bayesslr.theory.solver import ACCELS

theory_app = typer.Typer(
    name="theory",
    help="Asymptotic theory at finite alpha: ERM replica fixed point and Bayes-optimal state "
         "evolution (spec section 5).",
    no_args_is_help=True,
)

_ORDER = ("m_k", "q_k", "V_k", "m_v", "q_v", "V_v")


def _header(task: TaskConfig) -> dict[str, Any]:
    d = task.to_dict()
    d.pop("D", None)
    return d


def _solver_dict(s) -> dict[str, Any]:
    return dataclasses.asdict(s)


@theory_app.command("erm")
def erm(
    variant: VariantOpt = "spiked",
    L: LOpt = "3",
    L_dist: LDistOpt = None,
    nu: NuOpt = "2",
    delta: DeltaOpt = "0",
    alpha: str = typer.Option("5", help="alpha > 0: '5', '1,2,5,20' or start:stop:num."),
    lam: str = typer.Option("0.1", help="Ridge penalty lam >= 0 (k and v), or 'opt' (the "
                                        "theory's optimal lam per alpha)."),
    lam_v: str = typer.Option(None, "--lam-v", help="Penalty on v if different from --lam."),
    activation: str = typer.Option("softmax", help=f"One of: {', '.join(ERM_ACTIVATIONS)}."),
    start: str = typer.Option("informed", help="informed, uninformed or both."),
    sweep: str = typer.Option("both", help="Continuation over an alpha list: both "
                                           "(upwards and downwards, lowest objective kept) "
                                           "or up."),
    samples: str = typer.Option("20000", help="Channel samples (common random numbers)."),
    test_samples: str = typer.Option("200000", "--test-samples",
                                     help="Monte Carlo size of the test-error formula."),
    seed: str = typer.Option("0", help="Seed of the channel samples."),
    vh_form: str = typer.Option("stein", "--vh-form", help="Vh driving the iteration: stein "
                                                            "or hessian (both are reported)."),
    damping: str = typer.Option("0.5", help="Damping of the fixed-point iteration."),
    tol: str = typer.Option("auto", help="Relative tolerance of the fixed point ('auto': "
                                         "10/samples, above the common-random-numbers "
                                         "floor)."),
    accel: str = typer.Option("anderson", help="Fixed-point acceleration: anderson or none "
                                               "(plain damped iteration)."),
    max_iter: str = typer.Option("300", "--max-iter", help="Iteration cap per alpha."),
    as_json: bool = typer.Option(False, "--json", help="Print one JSON object."),
) -> None:
    """Replica-symmetric ERM fixed point: overlaps, conjugates, test excess error, training
    loss, per alpha (continuation in alpha over a list, both sweep directions)."""
    if activation not in ERM_ACTIVATIONS:
        raise ConfigError(f"activation={activation!r} is unknown; allowed: one of "
                          f"{', '.join(ERM_ACTIVATIONS)}")
    starts = STARTS if start == "both" else (start,)
    if start != "both" and start not in STARTS:
        raise ConfigError(f"start={start!r} is unknown; allowed: informed, uninformed or both")
    if sweep not in ("both", "up"):
        raise ConfigError(f"sweep={sweep!r} is unknown; allowed: both or up")
    task = cli_task(variant, L, L_dist, nu, delta)
    alphas = parse_grid("alpha", alpha, low=0.0, low_open=True)
    if accel not in ACCELS:
        raise ConfigError(f"accel={accel!r} is unknown; allowed: one of {', '.join(ACCELS)}")
    settings: dict[str, Any] = {
        "samples": check_int("samples", samples, low=100),
        "test_samples": check_int("test_samples", test_samples, low=100),
        "vh_form": vh_form, "damping": parse_float("damping", damping, low=0.0),
        "accel": accel, "max_iter": check_int("max_iter", max_iter, low=1)}
    if tol.strip().lower() != "auto":
        settings["tol"] = parse_float("tol", tol, low=0.0, low_open=True)
    opt: ErmTheoryOptions = erm_options(settings, check_int("seed", seed, low=0))
    header = {**_header(task), "activation": activation,
              "method": f"theory_erm:{activation}", "samples": opt.samples,
              "test_samples": opt.test_samples, "seed": opt.seed, "vh_form": opt.vh_form,
              "solver": _solver_dict(opt.solver)}
    if lam.strip().lower() in {"opt", "auto"}:
        if lam_v is not None:
            raise ConfigError("--lam-v cannot be combined with --lam opt (one lam for k and v)")
        res = optimal_lambda_curve(task, activation, alphas, opt)
        points = [_erm_point(r.result, extra={"lam_evaluations": [list(e) for e in
                                                                   r.evaluations],
                                              "lam_at_boundary": r.at_boundary})
                  for r in res]
        emit({**header, "lam": "opt", "points": points}, as_json, title="theory erm")
        return
    lam_k_v = parse_float("lam", lam, low=0.0)
    lam_v_v = lam_k_v if lam_v is None else parse_float("lam_v", lam_v, low=0.0)
    best, sweeps = erm_curve(task, activation, alphas, lam_k_v, lam_v_v, opt, starts=starts,
                             both_directions=sweep == "both")
    points = []
    for i, r in enumerate(best):
        branches = {name: {"test_error": s[i].test_error, "objective": s[i].objective,
                           "converged": s[i].converged} for name, s in sweeps.items()}
        points.append(_erm_point(r, extra={"branches": branches} if len(sweeps) > 1 else {}))
    emit({**header, "lam_k": lam_k_v, "lam_v": lam_v_v, "points": points}, as_json,
         title="theory erm")


def _erm_point(r, extra: dict[str, Any]) -> dict[str, Any]:
    d = r.to_dict()
    keep = ("alpha", "lam_k", "lam_v", "test_error", "stderr", "test_stderr", "channel_stderr",
            "order_stderr", *_ORDER, "mh_k", "qh_k",
            "Vh_k", "mh_v", "qh_v", "Vh_v", "Vh_k_stein", "Vh_v_stein", "Vh_k_hessian",
            "Vh_v_hessian", "vh_gap_k", "vh_gap_v", "vh_gap_k_se", "vh_gap_v_se",
            "train_loss", "objective", "off_branch",
            "prox_unconverged", "converged", "iterations", "residual", "reason", "start",
            "runtime_s")
    return {k: d[k] for k in keep} | extra


@theory_app.command("bayes")
def bayes(
    variant: VariantOpt = "spiked",
    L: LOpt = "3",
    L_dist: LDistOpt = None,
    nu: NuOpt = "2",
    delta: str = typer.Option("0", help="Label-noise variance Delta >= 0 (at 0, m_v is "
                                        "clipped below 1)."),
    alpha: str = typer.Option("1,2,5,20", help="alpha > 0: comma list or start:stop:num."),
    samples: str = typer.Option("20000", help="Channel samples (common random numbers)."),
    test_samples: str = typer.Option("200000", "--test-samples",
                                     help="Samples of the test-error expectation."),
    seed: str = typer.Option("0", help="Seed of the channel samples."),
    gh_nodes: str = typer.Option("512", "--gh-nodes",
                                 help="Gauss-Hermite nodes (max variant, finite nu)."),
    continuation: bool = typer.Option(True, "--continuation/--no-continuation",
                                      help="Warm-start each alpha from its neighbour."),
    tol: str = typer.Option("1e-6", help="Relative tolerance of the fixed point."),
    as_json: bool = typer.Option(False, "--json", help="Print one JSON object."),
) -> None:
    """Bayes-optimal state evolution from the informed and the uninformed start; where they
    differ the larger free entropy gives the Bayes-optimal branch, and an uninformed branch
    below it marks a computationally hard phase."""
    task = cli_task(variant, L, L_dist, nu, delta)
    alphas = parse_grid("alpha", alpha, low=0.0, low_open=True)
    opt: BayesTheoryOptions = bayes_options(
        {"samples": check_int("samples", samples, low=100),
         "test_samples": check_int("test_samples", test_samples, low=100),
         "gh_nodes": check_int("gh_nodes", gh_nodes, low=2),
         "tol": parse_float("tol", tol, low=0.0, low_open=True)},
        check_int("seed", seed, low=0))
    pts = bayes_curve(task, alphas, opt, use_continuation=continuation)
    points = []
    for p in pts:
        d = p.best.to_dict()
        point = {k: d[k] for k in ("alpha", "test_error", "stderr", "test_stderr",
                                   "channel_stderr", "m_k", "q_k", "V_k",
                                   "m_v", "q_v", "V_v", "mh_k", "mh_v", "free_entropy",
                                   "nishimori_gap", "quadrature_error", "clipped",
                                   "converged", "iterations",
                                   "residual", "reason")}
        point["branch"] = "informed" if p.best is p.informed else "uninformed"
        point["branches_differ"] = p.branches_differ
        point["hard_phase"] = p.hard_phase
        point["branches"] = {
            name: {"test_error": r.test_error, "m_k": r.m_k, "m_v": r.m_v,
                   "free_entropy": r.free_entropy, "converged": r.converged,
                   "iterations": r.iterations}
            for name, r in (("informed", p.informed), ("uninformed", p.uninformed))}
        points.append(point)
    hard = hard_phase_range(pts)
    result = {**_header(task), "method": "theory_bayes", "samples": opt.samples,
              "test_samples": opt.test_samples, "seed": opt.seed,
              "quadrature": pts[0].best.quadrature, "m_clip": opt.m_clip,
              "solver": _solver_dict(opt.solver), "continuation": continuation,
              "hard_phase_alpha": list(hard) if hard else None, "points": points}
    emit(result, as_json, title="theory bayes")


def register(app: typer.Typer) -> None:
    app.add_typer(theory_app, name="theory")
