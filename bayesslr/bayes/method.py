"""The registered method ``bayes_sampling``: one cell -> the Bayes-optimal estimator by NUTS.

Spec section 6. The CLI verb ``bayesslr sample`` and the sweep runner both go through
:func:`bayes_sampling_cell` (via :func:`bayesslr.methods.run_cell`).
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
from bayesslr.bayes.predict import excess_errors, overlaps, posterior_predict
from bayesslr.bayes.sampler import (
    INITS,
    SampleResult,
    SamplerOptions,
    init_params,
    mean_log_lik,
    sample_anneal,
    sample_posterior,
)
from bayesslr.methods import Cell, register
from bayesslr.task import ConfigError, Data, TaskConfig, Teacher, check_int, check_real, sample_task

# teacher, training and test data in one compiled call (eager generation compiles op by op)
_sample_task = jax.jit(sample_task, static_argnums=(1, 2, 3))

DEFAULTS: dict[str, Any] = {
    "chains": 2,
    "warmup": 500,
    "draws": 500,
    "init": "teacher",
    "chain_method": "vectorized",
    "x64": False,
    "n_test": 10_000,
    "tempered": False,
    "tempered_delta": 1e-2,
    "tempered_nu": 10.0,
    "target_accept": 0.8,
    "max_tree_depth": 10,
    "model": "marginal",
    "anneal_fractions": "0.125,0.25,0.5",
    "chunk": 128,
    "idata": "",
}


def _bool(name: str, value: Any) -> bool:
    if isinstance(value, bool | np.bool_):
        return bool(value)
    if isinstance(value, int | np.integer) and value in (0, 1):
        return bool(value)
    if isinstance(value, str) and value.strip().lower() in {"true", "1", "yes", "false", "0", "no"}:
        return value.strip().lower() in {"true", "1", "yes"}
    raise ConfigError(f"{name}={value!r} is not a boolean; allowed: true or false")


def _inits(value: Any) -> tuple[str, ...]:
    items = value.split(",") if isinstance(value, str) else list(value)
    inits = tuple(str(i).strip() for i in items if str(i).strip())
    bad = [i for i in inits if i not in INITS]
    if not inits or bad or len(set(inits)) != len(inits):
        raise ConfigError(f"init={value!r} is not allowed; allowed: one or more distinct of "
                          f"{', '.join(INITS)} (comma-separated; the first is reported)")
    return inits


def _fractions(value: Any) -> tuple[float, ...]:
    items = value.split(",") if isinstance(value, str) else list(value)
    fr = tuple(check_real("anneal_fractions", f, low=0.0, high=1.0, low_open=True)
               for f in items if str(f).strip())
    if any(b <= a for a, b in zip(fr, fr[1:], strict=False)) or any(f >= 1.0 for f in fr):
        raise ConfigError(f"anneal_fractions={value!r} is not allowed; allowed: increasing "
                          "reals in (0, 1)")
    return fr


def parse_options(options: Mapping[str, Any]) -> dict[str, Any]:
    """Validate the cell options of ``bayes_sampling`` (see :func:`bayes_sampling_cell`)."""
    unknown = set(options) - set(DEFAULTS)
    if unknown:
        raise ConfigError(f"options {sorted(unknown)} are unknown for bayes_sampling; allowed: "
                          + ", ".join(DEFAULTS))
    o = {**DEFAULTS, **dict(options)}
    sampler = SamplerOptions(
        chains=o["chains"], warmup=o["warmup"], draws=o["draws"],
        chain_method=str(o["chain_method"]), x64=_bool("x64", o["x64"]),
        target_accept=o["target_accept"], max_tree_depth=o["max_tree_depth"],
        model=str(o["model"]),
    ).validated()
    return {
        "sampler": sampler,
        "inits": _inits(o["init"]),
        "n_test": check_int("n_test", o["n_test"], low=2),
        "tempered": _bool("tempered", o["tempered"]),
        "tempered_delta": check_real("tempered_delta", o["tempered_delta"], low=0.0,
                                     low_open=True),
        "tempered_nu": check_real("tempered_nu", o["tempered_nu"], low=0.0, low_open=True),
        "anneal_fractions": _fractions(o["anneal_fractions"]),
        "chunk": check_int("chunk", o["chunk"], low=1),
        "idata": str(o["idata"] or ""),
    }


def run_start(key: jax.Array, init: str, spec: ModelSpec, teacher: Teacher, data: Data,
              sampler: SamplerOptions, anneal_fractions: tuple[float, ...]) -> SampleResult:
    """One NUTS run from the start strategy ``init`` (``teacher``, ``random`` or ``anneal``)."""
    kinit, krun = jax.random.split(key)
    if init == "anneal":
        res, _ = sample_anneal(krun, spec, data, sampler, anneal_fractions)
        return res
    start = init_params(kinit, init, sampler.chains, data.X.shape[-1], teacher)
    return sample_posterior(krun, spec, data, sampler, start=start, init=init)


@register("bayes_sampling", needs=("alpha",),
          description="Bayes-optimal estimator by NUTS (spec section 6); options: chains, "
                      "warmup, draws, init, chain_method, x64, n_test, tempered")
def bayes_sampling_cell(cell: Cell) -> dict[str, Any]:
    """Registered method ``bayes_sampling``: posterior-mean (Bayes-optimal) test error by NUTS.

    Teacher, training data (``N = round(alpha D)``) and test data come from
    ``sample_task(jax.random.key(seed), task, N, n_test)`` (the same draws as every other method
    with that seed); the sampler's randomness from ``fold_in(key(seed), 1)``.

    Cell options
    ------------
    chains : int, default 2
        NUTS chains.
    warmup, draws : int, default 500, 500
        Warm-up iterations and kept draws per chain.
    init : str, default "teacher"
        Start: ``teacher``, ``random`` or ``anneal`` (nested data sets at ``anneal_fractions``
        of ``N``, each started from the previous one's last draws). A comma list runs each
        start; the first is reported, the others give ``<init>_*`` diagnostics, the predictive
        ``disagreement`` (max over the others of ``mean (y_hat - y_hat_other)^2`` on the test
        set), ``log_lik_gap`` (max of mean log-likelihood per sample, first minus other, nats)
        and ``r_hat_max_pooled`` (R-hat over all chains of all starts).
    chain_method : str, default "vectorized"
        ``vectorized``, ``parallel`` (falls back to ``vectorized``) or ``sequential``.
    x64 : bool, default False
        Sample in float64 (data drawn as without it).
    n_test : int, default 10000
        Test inputs.
    tempered : bool, default False
        Allow ``delta = 0`` / ``nu = inf`` by sampling the tempered likelihood with
        ``tempered_delta`` (default 0.01) / ``tempered_nu`` (default 10) instead; without it
        such cells are refused (:class:`ConfigError` naming ``delta`` or ``nu``).
    target_accept, max_tree_depth, model, chunk, idata :
        NUTS target acceptance (0.8), tree depth (10), ``marginal`` or ``enumerated`` model,
        draws per prediction block (128), and a netCDF path for the ``InferenceData`` ("": none).

    Notes
    -----
    Teacher-started chains are at equilibrium from step 0 (the teacher is an exact posterior
    draw), so their R-hat cannot reveal trapping; ``random`` starts at ``alpha >= 4`` stay in
    modes far below the truth (``log_lik_gap`` of about 2 nats per sample at ``D = 100``,
    ``alpha = 4``, measured), hence ``init="teacher,random"`` to report both. Low ``alpha``
    (about 1) mixes slowly even from the teacher: budget more draws there (spec section 6).

    Returns
    -------
    dict
        ``test_error`` (exact Bayes predictor: one softmax over draws and locations),
        ``stderr``, ``risk``, ``oracle_error``, ``excess_over_oracle`` (+ stderrs),
        ``test_error_plain`` (average of per-draw conditional means), overlaps ``m_k .. q_kv``
        of the posterior means, ``nishimori_gap``, ``r_hat_max``, ``ess_bulk_min``,
        ``ess_tail_min``, ``ess_per_grad``, ``divergences``, ``grad_evals``, ``runtime_s`` and
        provenance (``init``, ``chain_method_used``, ``nu_model``, ``delta_model``, ...).
    """
    t0 = time.perf_counter()
    opts = parse_options(cell.options)
    task = cell.task()
    N = cell.n_train()
    spec = model_spec(task, tempered=opts["tempered"], tempered_delta=opts["tempered_delta"],
                      tempered_nu=opts["tempered_nu"])
    sampler: SamplerOptions = opts["sampler"]
    key = jax.random.key(check_int("seed", cell.seed, low=0))
    teacher, train, test = _sample_task(key, task, N, opts["n_test"])
    kalg = jax.random.fold_in(key, 1)
    runs: dict[str, SampleResult] = {}
    for j, init in enumerate(opts["inits"]):
        runs[init] = run_start(jax.random.fold_in(kalg, j), init, spec, teacher, train, sampler,
                               opts["anneal_fractions"])
    main_init = opts["inits"][0]
    res = runs[main_init]
    out, preds = _evaluate(task, spec, teacher, train, test, res, opts["chunk"], sampler.x64)
    for init in opts["inits"][1:]:
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
    if opts["idata"]:
        attrs = {"task": str(task.to_dict()), "cell": cell.to_json(), **spec.to_dict()}
        idata = arviz_adapter.to_inference_data(res, attrs=attrs)
        out["idata_path"] = str(arviz_adapter.write_netcdf(idata, opts["idata"]))
    out.update({
        "init": main_init, "inits": ",".join(opts["inits"]),
        "chain_method_used": res.chain_method, "chains": sampler.chains,
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
        err = excess_errors(task, teacher, test, pred.exact)
        err_plain = excess_errors(task, teacher, test, pred.plain)
    out: dict[str, Any] = {
        "test_error": err.test_error, "stderr": err.stderr,
        "risk": err.test_error + task.delta,
        "oracle_error": err.oracle_error, "oracle_stderr": err.oracle_stderr,
        "excess_over_oracle": err.excess_over_oracle,
        "excess_over_oracle_stderr": err.excess_over_oracle_stderr,
        "test_error_plain": err_plain.test_error,
    }
    out.update(overlaps(teacher, kf.mean(axis=0), vf.mean(axis=0)))
    s = res.summary()
    for name in ("r_hat_max", "ess_bulk_min", "ess_tail_min", "divergences", "grad_evals",
                 "grad_evals_warmup", "ess_per_grad", "step_size_mean"):
        out[name] = s[name]
    out["sampling_s"] = s["runtime_s"]
    out["mean_log_lik"] = mean_log_lik(spec, res, train)
    return out, pred.exact
