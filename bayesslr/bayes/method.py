"""The registered method ``bayes_sampling``: one cell -> the Bayes-optimal estimator by NUTS.

Spec section 6. The CLI verb ``bayesslr sample`` and the sweep runner both go through
:func:`bayes_sampling_cell` (via :func:`bayesslr.registry.run_cell`).
"""

from __future__ import annotations

import math
import time
from collections.abc import Mapping
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from bayesslr.bayes import arviz_adapter
from bayesslr.bayes.model import ModelSpec, model_spec
from bayesslr.bayes.predict import posterior_overlaps, posterior_predict
from bayesslr.bayes.sampler import (
    INITS,
    SAMPLERS,
    TEMPERING_SCHEMA,
    SampleResult,
    SamplerOptions,
    TemperingOptions,
    check_tempered,
    init_params,
    mean_log_lik,
    run_nuts,
    run_tempered,
    sample_anneal,
)
from bayesslr.bayes.sampler import SCHEMA as SAMPLER_SCHEMA
from bayesslr.core.draws import draws_path
from bayesslr.core.metrics import test_errors
from bayesslr.core.options import Opt
from bayesslr.core.task import (
    ConfigError,
    Data,
    TaskConfig,
    Teacher,
    algorithm_key,
    sample_task,
    seed_key,
)
from bayesslr.core.thresholds import (
    CONVERGENCE,
    PT_ROUND_TRIPS_PER_CHAIN_MIN,
    PT_SWAP_RATE_MIN,
    RHAT_MAX,
    chain_failures,
    num,
)
from bayesslr.registry import Cell, CliFace, PlotStyle, ReportRole, Resources

# isort: split
from bayesslr.registry import common, outputs, register

# teacher, training and test data in one compiled call (eager generation compiles op by op)
_sample_task = jax.jit(sample_task, static_argnums=(1, 2, 3))

# convergence verdict of a run: RHAT_MAX, ESS_PER_CHAIN_MIN (bayesslr.core.thresholds: why
# these values); with several starts, the pooled R-hat too

SCHEMA = SAMPLER_SCHEMA + TEMPERING_SCHEMA + (
    Opt("sampler", "nuts", "choice", choices=SAMPLERS,
        doc="The sampler: nuts (NUTS), or pt (parallel tempering over likelihood "
            "temperatures with HMC moves: chains replica systems of replicas temperatures "
            "each; docs/sampling.md)"),
    Opt("init", ("teacher",), "choices", choices=INITS,
        doc="start(s): teacher, random, anneal; a comma list runs each (the first is reported)"),
    Opt("n_test", 10_000, "int", low=2, high=10**8, doc="fresh test inputs"),
    Opt("tempered", False, "bool",
        doc="allow delta=0 / nu=inf by sampling a tempered likelihood (tempered_delta, "
            "tempered_nu)"),
    Opt("tempered_delta", 1e-2, "real", low=0.0, low_open=True,
        doc="likelihood noise variance used when delta=0 (tempered)"),
    Opt("tempered_nu", 10.0, "real", low=0.0, low_open=True,
        doc="likelihood nu used when nu=inf (tempered)"),
    Opt("anneal_fractions", (0.125, 0.25, 0.5), "reals", low=0.0, high=1.0, low_open=True,
        high_open=True, max_len=64,
        doc="increasing fractions of the data of the annealing rungs before the full data"),
    Opt("chunk", 128, "int", low=1, high=10**6, doc="draws per prediction block"),
    Opt("idata", None, "str", nullable=True,
        doc="write the ArviZ InferenceData of the reported start to this netCDF path"),
)


def _check(cell: Cell, opts: Mapping[str, Any]) -> None:
    fr = opts["anneal_fractions"]
    if any(b <= a for a, b in zip(fr, fr[1:], strict=False)):
        raise ConfigError(f"anneal_fractions={','.join(f'{f:g}' for f in fr)} is not "
                          "allowed; allowed: increasing reals in (0, 1)")
    model_spec(cell.task(), tempered=opts["tempered"], tempered_delta=opts["tempered_delta"],
               tempered_nu=opts["tempered_nu"])
    if opts["sampler"] == "pt":
        sampler = SamplerOptions.from_options(opts)
        for init in opts["init"]:
            check_tempered(sampler, init)


def _memory(cell: Cell, opts: Mapping[str, Any]) -> Resources:
    D, N, L = cell.sizes()
    C, runs = opts["chains"], len(opts["init"])
    data = (N + opts["n_test"]) * L * D * 4 * 2  # drawn in float32, copied once for the sampler
    held = f"train + test data (N={N}, n_test={opts['n_test']}) x L={L} x D={D}"
    if opts["sampler"] == "pt":  # float32 throughout (check_tempered refuses x64)
        R, fb = opts["replicas"], 4
        kept = min(opts["draws"], opts["pt_max_draws"])
        # the cold slot of every sampling iteration in float32, then the kept draws (float64)
        draws = runs * C * (opts["draws"] * 2 * D * 4 + kept * 2 * D * 8 * 2)
        grad = C * R * (N * L * 4 * 8 + 2 * D * 4 * 6)
        held += f", cold draws {C}x{opts['draws']}x2D, {C}x{R} replicas"
        lower = "D, alpha, n_test, draws, chains or replicas"
    else:
        fb, kept = (8 if opts["x64"] else 4), opts["draws"]
        draws = runs * C * opts["draws"] * 2 * D * 8 * 2  # stored, and pooled
        grad = C * N * L * fb * 8  # per-chain fields and their cotangents
        held += f", draws {C}x{opts['draws']}x2D"
        lower = "D, alpha, n_test, draws or chains"
    predict = opts["n_test"] * min(opts["chunk"], C * kept) * L * fb * 6
    return Resources(data + draws + grad + predict, held, lower)


# CPU-s per gradient evaluation of one replica of a PT run, per unit of N D L: all replicas of
# all chains are one vectorised program, so the per-step overhead that dominates a NUTS
# gradient (below) is shared; measured on the paper's alpha = 1 cells (D = 200, N = 200, L = 3,
# 4 chains x 16-24 replicas x 20 leapfrog steps: 2.7e-10 and 2.9e-10; docs/sampling.md)
PT_CPU_S_PER_GRAD_NDL = 2.8e-10

# gradient evaluations a NUTS iteration takes per chain (the trees' size): measured on the
# reference run's cells (D = 100, 4 chains, teacher start): 33 at alpha = 1, where the posterior
# is broad and the trees deep, 15-22 at alpha >= 2 (benchmarks/README.md, "Cost model")
DEEP_TREES_BELOW_ALPHA = 1.5
GRADS_PER_ITERATION_DEEP, GRADS_PER_ITERATION = 33.0, 15.0


def _cost(cell: Cell, opts: Mapping[str, Any]) -> float:
    """Core-seconds of one cell: a fixed part (compilation of the shape, shared by its seeds;
    data, prediction) plus, per gradient evaluation, a fixed overhead and a part in ``N D L``;
    the gradient evaluations are the iterations times :data:`GRADS_PER_ITERATION` (its ``_DEEP``
    twin below :data:`DEEP_TREES_BELOW_ALPHA`). Fitted to the reference run's 36 cells
    (``D = 100``, ``alpha`` 1 to 12, 4 chains; benchmarks/README.md, "Cost model")."""
    D, N, L = cell.sizes()
    if opts["sampler"] == "pt":
        grads = ((opts["warmup"] + opts["draws"]) * opts["chains"] * opts["replicas"]
                 * opts["pt_integration_steps"] * len(opts["init"]))
        return 10.0 + grads * PT_CPU_S_PER_GRAD_NDL * N * D * L
    steps = (opts["warmup"] + opts["draws"]) * opts["chains"] * len(opts["init"])
    per_iteration = (GRADS_PER_ITERATION_DEEP if float(cell.alpha) < DEEP_TREES_BELOW_ALPHA
                     else GRADS_PER_ITERATION)
    return 10.0 + steps * per_iteration * (3.6e-5 + 1.29e-9 * N * D * L)


def verdict(summary: Mapping[str, Any], chains: int) -> tuple[bool, str]:
    """Yes/no convergence of one run against the thresholds of :data:`RHAT_MAX` and
    :data:`ESS_PER_CHAIN_MIN` (and no divergence), with the reason; a tempered run (its
    summary holds ``swap_rate_min``) must also swap at least ``PT_SWAP_RATE_MIN`` on every
    pair and make ``PT_ROUND_TRIPS_PER_CHAIN_MIN`` round trips per chain
    (:mod:`bayesslr.core.thresholds`)."""
    fails = chain_failures(summary, CONVERGENCE["bayes_sampling"], chains,
                           ess=("ess_bulk_min", "ess_tail_min"))
    if summary.get("divergences", 0) > 0:
        fails.append(f"{int(summary['divergences'])} divergent transitions")
    if "swap_rate_min" in summary:
        sw = summary["swap_rate_min"]
        if not sw >= PT_SWAP_RATE_MIN:
            fails.append(f"swap_rate_min {num(sw, PT_SWAP_RATE_MIN)} < {PT_SWAP_RATE_MIN}")
        trips, need = summary.get("round_trips", 0), PT_ROUND_TRIPS_PER_CHAIN_MIN * chains
        if not trips >= need:
            fails.append(f"round_trips {trips} < {need}")
    pooled = summary.get("r_hat_max_pooled")
    if pooled is not None and not pooled <= RHAT_MAX:
        fails.append(f"starts disagree: pooled r_hat {num(pooled, RHAT_MAX)} > {RHAT_MAX}")
    return (not fails), ("converged" if not fails else "; ".join(fails))


def run_start(key: jax.Array, init: str, spec: ModelSpec, teacher: Teacher, data: Data,
              sampler: SamplerOptions, anneal_fractions: tuple[float, ...],
              tempering: TemperingOptions | None = None) -> SampleResult:
    """One run from the start strategy ``init`` (``teacher``, ``random`` or ``anneal``): NUTS,
    or parallel tempering when ``tempering`` is given."""
    kinit, krun = jax.random.split(key)
    if tempering is not None:
        return run_tempered(krun, spec, data, sampler, tempering, init=init, teacher=teacher)
    if init == "anneal":
        res, _ = sample_anneal(krun, spec, data, sampler, anneal_fractions)
        return res
    start = init_params(kinit, init, sampler.chains, data.X.shape[-1], teacher)
    return run_nuts(krun, spec, data, sampler, start=start, init=init)


@register("bayes_sampling", schema=SCHEMA, needs=("alpha", "D"),
          description="Bayes-optimal estimator by NUTS or parallel tempering on the data "
                      "(docs/model.md §6, docs/sampling.md)",
          outputs=common("test_error", "stderr", "risk", "oracle_error", "oracle_error_stderr",
                         "excess_over_oracle", "excess_over_oracle_stderr", "m_k", "q_k",
                         "m_v", "q_v", "m_kv", "m_vk", "q_kv", "nishimori_gap", "r_hat_max",
                         "ess_bulk_min", "ess_tail_min", "divergences", "grad_evals",
                         "converged", "reason", "runtime_s") + outputs(
              ("test_error_plain", "test error of the plain average of per-draw predictions"),
              ("ess_per_grad", "ess_bulk_min per gradient evaluation (warm-up included)"),
              ("disagreement", "max mean squared difference of predictions between starts"),
              ("log_lik_gap", "mean log-likelihood per sample, first start minus the others",
               "nat"),
              ("r_hat_max_pooled", "split R-hat over all chains of all starts"),
              ("swap_rate_min", "sampler=pt: lowest swap acceptance of a neighbouring pair of "
               "temperatures (sampling phase)"),
              ("swap_rate_mean", "sampler=pt: mean swap acceptance over the pairs"),
              ("round_trips", "sampler=pt: round trips b = 1 -> beta_min -> b = 1 of the "
               "replicas' states, all chains, sampling phase")),
          cost=_cost, memory=_memory, check=_check,
          plot=PlotStyle(kind="marker", label="Bayes (NUTS or PT)", marker="s", color="k"),
          version="4",  # 4: adapt="auto" (grad from the teacher, stan from other starts)
          report=ReportRole(finite_sample=4),
          cli=CliFace(
              verb=("sample",), task={"delta": "0.01"},
              fields={"D": "100", "alpha": "4", "seed": "0"},
              help={"nu": "Signal strength nu >= 0 (inf needs --tempered).",
                    "delta": "Label-noise variance Delta > 0 (0 needs --tempered).",
                    "D": "Token dimension D >= 1.",
                    "seed": "Seed of teacher, data and sampler."},
              flags={"idata": "--save-idata"},
              header=("variant", "L", "nu", "delta", "D", "alpha", "seed"),
              doc="Posterior-mean (Bayes-optimal) test error by NUTS (or parallel tempering: "
                  "--sampler pt), with sampler diagnostics and a convergence verdict"))
def bayes_sampling_cell(cell: Cell, opts: Mapping[str, Any]) -> dict[str, Any]:
    """Registered method ``bayes_sampling``: posterior-mean (Bayes-optimal) test error by NUTS.

    Teacher, training data (``N = round(alpha D)``) and test data come from
    ``sample_task(seed_key(seed), task, N, n_test)`` (the same draws as every other method
    with that seed); the sampler's randomness from ``algorithm_key(key, "sampler")``.

    Options (:data:`SCHEMA`; each with its range and default in ``bayesslr methods``)
    ---------------------------------------------------------------------------------
    init : str, default "teacher"
        Start: ``teacher``, ``random`` or ``anneal`` (nested data sets at ``anneal_fractions``
        of ``N``, each started from the previous one's last draws). A comma list runs each
        start; the first is reported, the others give ``<init>_*`` diagnostics, the predictive
        ``disagreement`` (max over the others of ``mean (y_hat - y_hat_other)^2`` on the test
        set), ``log_lik_gap`` (max of mean log-likelihood per sample, first minus other, nats)
        and ``r_hat_max_pooled`` (R-hat over all chains of all starts).
    tempered : bool, default False
        Allow ``delta = 0`` / ``nu = inf`` by sampling the tempered likelihood with
        ``tempered_delta`` / ``tempered_nu`` instead; without it such cells are refused
        (:class:`ConfigError` naming ``delta`` or ``nu``).
    chains, warmup, draws, chain_method, x64, target_accept, max_tree_depth, model, n_test,
    chunk, idata :
        NUTS settings, test-set size, draws per prediction block, and a netCDF path for the
        ``InferenceData``.

    Notes
    -----
    Teacher-started chains are at equilibrium from step 0 (the teacher is an exact posterior
    draw), so their R-hat cannot reveal trapping; ``random`` starts at ``alpha >= 4`` stay in
    modes far below the truth (``log_lik_gap`` of about 2 nats per sample at ``D = 100``,
    ``alpha = 4``, measured), hence ``init="teacher,random"`` to report both. Low ``alpha``
    (about 1) mixes slowly even from the teacher: budget more draws there (docs/model.md §6).
    ``converged`` is the verdict of :func:`verdict` (R-hat, ESS per chain, divergences and,
    with several starts, their agreement), ``reason`` says which threshold failed.

    Returns
    -------
    dict
        ``test_error`` (exact Bayes predictor: one softmax over draws and locations),
        ``stderr``, ``risk``, ``oracle_error``, ``excess_over_oracle`` (+ stderrs),
        ``test_error_plain`` (average of per-draw conditional means), overlaps ``m_k .. q_kv``
        of the posterior means, ``nishimori_gap``, ``r_hat_max``, ``ess_bulk_min``,
        ``ess_tail_min``, ``ess_per_grad``, ``divergences``, ``grad_evals``, ``converged``,
        ``reason``, ``runtime_s`` and provenance (``init``, ``chain_method_used``,
        ``adapt_used``: the warm-up of each start, ``adapt = "auto"`` resolved,
        ``nu_model``, ``delta_model``, ...).
    """
    t0 = time.perf_counter()
    task = cell.task()
    N = cell.n_train()
    spec = model_spec(task, tempered=opts["tempered"], tempered_delta=opts["tempered_delta"],
                      tempered_nu=opts["tempered_nu"])
    sampler = SamplerOptions.from_options(opts)
    tempering = (TemperingOptions.from_options(opts) if opts["sampler"] == "pt" else None)
    key = seed_key(cell.seed)
    teacher, train, test = _sample_task(key, task, N, opts["n_test"])
    kalg = algorithm_key(key, "sampler")
    runs: dict[str, SampleResult] = {}
    for j, init in enumerate(opts["init"]):
        runs[init] = run_start(jax.random.fold_in(kalg, j), init, spec, teacher, train, sampler,
                               opts["anneal_fractions"], tempering)
    main_init = opts["init"][0]
    res = runs[main_init]
    out, preds = _evaluate(task, spec, teacher, train, test, res, opts["chunk"], sampler.x64)
    for init in opts["init"][1:]:
        other, p_other = _evaluate(task, spec, teacher, train, test, runs[init], opts["chunk"],
                                   sampler.x64)
        for name in ("test_error", "r_hat_max", "ess_bulk_min", "ess_tail_min", "divergences",
                     "nishimori_gap", "mean_log_lik", "grad_evals"):
            out[f"{init}_{name}"] = other[name]
        dis = float(np.mean((np.asarray(preds) - np.asarray(p_other)) ** 2))
        out["disagreement"] = max(out.get("disagreement", 0.0), dis)
        out["log_lik_gap"] = max(out.get("log_lik_gap", -math.inf),
                                 out["mean_log_lik"] - other["mean_log_lik"])
    if len(runs) > 1:
        pooled = {n: np.concatenate([getattr(r, n) for r in runs.values()]) for n in ("k", "v")}
        out["r_hat_max_pooled"] = arviz_adapter.diagnostics(pooled)["r_hat_max"]
    out["converged"], out["reason"] = verdict(out, sampler.chains)
    kept = draws_path(cell.key())  # bayesslr run --keep-draws: OUT/draws/<key>.nc
    if opts["idata"] or kept is not None:
        attrs = {"task": str(task.to_dict()), "cell": cell.to_json(), **spec.to_dict(),
                 "converged": str(out["converged"]), "reason": out["reason"],
                 "sampler": opts["sampler"], "init": main_init}
        idata = arviz_adapter.to_inference_data(res, attrs=attrs)
        if opts["idata"]:
            out["idata_path"] = str(arviz_adapter.write_netcdf(idata, opts["idata"]))
        if kept is not None:
            arviz_adapter.write_netcdf(idata, kept)
            out["draws_file"] = kept.name
    out.update({
        "sampler": opts["sampler"],
        "init": main_init, "inits": ",".join(opts["init"]),
        "chain_method_used": res.chain_method, "chains": sampler.chains,
        "adapt_used": ",".join(r.options.adapt for r in runs.values()),
        "warmup": sampler.warmup, "draws": sampler.draws, "x64": sampler.x64,
        "N": N, "n_test": opts["n_test"], "model": sampler.model,
        "predictor": "exact joint softmax over draws and locations",
        **spec.to_dict(),
        "runtime_s": time.perf_counter() - t0,
    })
    return out


def _evaluate(task: TaskConfig, spec: ModelSpec, teacher: Teacher, train: Data, test: Data,
              res: SampleResult, chunk: int, x64: bool) -> tuple[dict[str, Any], Any]:
    kf, vf = res.flat()
    with jax.enable_x64(x64):
        dtype = jnp.float64 if x64 else jnp.float32
        pred = posterior_predict(spec, jnp.asarray(kf, dtype), jnp.asarray(vf, dtype),
                                 test.X, test.mask, chunk=chunk)
        err = test_errors(task, teacher, test, pred.exact)
        err_plain = test_errors(task, teacher, test, pred.plain)
    out: dict[str, Any] = {
        "test_error": err.test_error, "stderr": err.stderr,
        "risk": err.risk,
        "oracle_error": err.oracle_error, "oracle_error_stderr": err.oracle_error_stderr,
        "excess_over_oracle": err.excess_over_oracle,
        "excess_over_oracle_stderr": err.excess_over_oracle_stderr,
        "test_error_plain": err_plain.test_error,
    }
    out.update(posterior_overlaps(teacher, kf.mean(axis=0), vf.mean(axis=0)))
    s = res.summary()
    for name in ("r_hat_max", "ess_bulk_min", "ess_tail_min", "divergences", "grad_evals",
                 "grad_evals_warmup", "ess_per_grad", "step_size_mean"):
        out[name] = s[name]
    out.update({k: v for k, v in (res.tempering or {}).items() if k != "sampler"})
    out["sampling_s"] = s["runtime_s"]
    out["mean_log_lik"] = mean_log_lik(spec, res, train)
    return out, pred.exact
