"""NUTS for the SLR posterior (docs/model.md §6), the ``bayes_sampling`` face of the NUTS layer.

The kernel, its warm-ups, the chain methods and the diagnostics are
:mod:`bayesslr.bayes.nuts`'s (shared with the budgeted :mod:`bayesslr.inference.mcmc`); this
module holds the options, the starts, the fall-back of ``parallel`` chains, annealing and the
result.

* **Starts** (``init``): ``teacher`` (the planted ``(k*, v*)``, an exact posterior draw in this
  setting, so chains are at equilibrium from step 0), ``random`` (independent prior draws, one
  per chain) and ``anneal`` (:func:`sample_anneal`: a ladder of nested data sets of growing
  ``alpha``, each rung started from the previous rung's last draws, the first from ``random``).
  Teacher-started chains cannot reveal trapping through R-hat; run ``random`` or ``anneal`` too
  and compare (:func:`compare_runs`).
* **Chain methods**: ``vectorized`` (default: the fastest measured on 2 CPU cores), ``parallel``
  (one XLA host device per chain; falls back to ``vectorized`` when there are too few devices or
  when the run raises) and ``sequential``. The method actually used is recorded.
* **Warm-up** (``adapt``): ``grad`` (:mod:`bayesslr.bayes.warmup`; what ``auto``, the default,
  takes from a teacher start, and ``stan`` from any other, :func:`resolve_adapt`) adapts the step
  size and a diagonal mass matrix estimated from the variances of the draws *and of their
  gradients*, pooled over batched chains; it is good after a few dozen draws, so a warm-up
  costs about half the gradients of ``stan`` (NumPyro's windowed Welford adaptation, Stan's
  schedule, also offering ``mass="dense"``) for the same ESS of the draws. Measured in
  ``benchmarks/bench_sampler_levers.py`` and against nutpie in
  ``benchmarks/bench_sampler_nutpie.py`` (see ``benchmarks/README.md``).
* **Compilation**: warm-up and sampling of all chains are one jitted function
  (:func:`bayesslr.bayes.nuts.compiled_run`) built from NumPyro's NUTS trajectory builder and
  the model's log density, kept per static configuration; data, weights, ``nu`` and
  ``Delta`` are traced arguments (NumPyro's ``jit_model_args``), so seeds and data of one
  shape never recompile, and JAX's persistent compilation cache keeps the executable across
  processes (:mod:`bayesslr.core.jaxconfig`).
  (``MCMC.run`` retraces its loop on every call: about 5 s per posterior, measured.)
* **Precision**: ``x64`` runs the sampler in float64; the data are generated before (in the
  caller's precision) and only cast, so both precisions see the same data.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, replace
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from bayesslr.bayes.model import MODELS, ModelSpec, log_lik_samples
from bayesslr.bayes.nuts import chain_diagnostics, compiled_run, model_args
from bayesslr.core.jaxconfig import Array, PRNGKey
from bayesslr.core.options import Validated, option, schema_of
from bayesslr.core.task import ConfigError, Data, Teacher

INITS: tuple[str, ...] = ("teacher", "random", "anneal")
# nuts: NUTS (NumPyro's trajectory builder); pt: parallel tempering over likelihood
# temperatures with HMC moves (bayesslr.bayes.pt), for posteriors NUTS does not mix on
SAMPLERS: tuple[str, ...] = ("nuts", "pt")
CHAIN_METHODS: tuple[str, ...] = ("vectorized", "parallel", "sequential")
ADAPTS: tuple[str, ...] = ("auto", "grad", "stan")
MASSES: tuple[str, ...] = ("diag", "dense", "none")


@dataclass(frozen=True)
class SamplerOptions(Validated):
    """NUTS settings (each field checked on construction; :data:`SCHEMA` lists them).

    Attributes
    ----------
    chains : int
        Number of chains (1 to 64).
    warmup : int
        Warm-up (adaptation) iterations per chain (>= 1).
    draws : int
        Kept draws per chain (>= 2).
    chain_method : {"vectorized", "parallel", "sequential"}
        How chains share the host (``parallel`` falls back to ``vectorized``).
    x64 : bool
        Sample in float64.
    target_accept : float
        NUTS target acceptance probability, in (0, 1).
    max_tree_depth : int
        NUTS maximal tree depth (1 to 15).
    model : {"marginal", "enumerated"}
        Location summed analytically, or enumerated by funsor (optional dependency).
    adapt : {"auto", "grad", "stan"}
        Warm-up: gradient-based diagonal mass matrix (:mod:`bayesslr.bayes.warmup`) or
        NumPyro's windowed (Stan) adaptation; ``auto`` (default) takes ``grad`` for a teacher
        start and ``stan`` for every other start (:func:`resolve_adapt`).
    mass : {"diag", "dense", "none"}
        Mass matrix adapted in the warm-up; ``dense`` needs ``adapt="stan"``; ``none`` adapts
        the step size only (identity mass: slow here, the posterior scales of ``k`` and ``v``
        differ about fivefold at ``alpha = 4``).
    pool : bool
        ``adapt="grad"``: one mass matrix and step size for all chains, estimated from all
        of them (not with ``chain_method="sequential"``, whose chains run one after another).
    """

    chains: int = option(2, low=1, high=64, doc="NUTS chains")
    warmup: int = option(500, low=1, high=10**7, doc="warm-up iterations per chain")
    draws: int = option(500, low=2, high=10**7, doc="kept draws per chain")
    chain_method: str = option("vectorized", choices=CHAIN_METHODS,
                               doc="how chains share the host (parallel falls back)")
    x64: bool = option(False, doc="sample in float64 (the data are drawn as without it)")
    target_accept: float = option(0.8, low=0.0, high=1.0, low_open=True, high_open=True,
                                  doc="NUTS target acceptance probability")
    max_tree_depth: int = option(10, low=1, high=15, doc="NUTS maximal tree depth")
    model: str = option("marginal", choices=tuple(MODELS),
                        doc="location summed out (marginal) or enumerated (needs funsor)")
    adapt: str = option("auto", choices=ADAPTS,
                        doc="warm-up: grad (gradient-based diagonal mass, pooled over chains), "
                            "stan (NumPyro's windowed Welford), or auto (grad from a teacher "
                            "start, stan from any other)")
    mass: str = option("diag", choices=MASSES,
                       doc="mass matrix: diag, dense (adapt=stan only) or none (identity)")
    pool: bool = option(True, doc="adapt=grad: pool the adaptation over batched chains")

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.mass == "dense" and self.adapt != "stan":
            raise ConfigError(f"mass=dense is not available with adapt={self.adapt}; allowed: "
                              "mass=dense with adapt=stan, or mass=diag/none")


def resolve_adapt(adapt: str, init: str) -> str:
    """The warm-up a run uses: ``adapt``, with ``auto`` resolved by the start ``init``.

    ``grad`` from a teacher start: the chains are at equilibrium from step 0, so the
    gradient-based estimate is right after a few dozen draws (half the warm-up gradients of
    ``stan`` for the same ESS, ``benchmarks/README.md``). ``stan`` from any other start
    (``random``, ``anneal``, ``custom``): measured at spiked ``L = 3``, ``nu = 2``,
    ``Delta = 0.01``, ``D = 50``, ``alpha = 5``, random starts reached the teacher-started
    posterior in 5 of 8 seeds with ``stan`` against 1 of 8 with ``grad`` (warm-up 200-1000),
    whose short early windows adapt the mass matrix to the region the chains start in.

    >>> resolve_adapt("auto", "teacher"), resolve_adapt("auto", "random")
    ('grad', 'stan')
    """
    if adapt != "auto":
        return adapt
    return "grad" if init == "teacher" else "stan"


SCHEMA = schema_of(SamplerOptions, "bayes_sampling")


@dataclass(frozen=True)
class TemperingOptions(Validated):
    """Parallel-tempering settings of ``sampler = "pt"`` (:func:`run_tempered`); ``chains``,
    ``warmup`` and ``draws`` of :class:`SamplerOptions` keep their meaning (independent replica
    systems, warm-up and sampling iterations of each).

    Attributes
    ----------
    replicas : int
        Temperatures per replica system (the ladder ``1 = b_0 > ... > b_{R-1} = beta_min``).
    beta_min : float
        Hottest inverse temperature of the likelihood, in (0, 1).
    pt_integration_steps : int
        Leapfrog steps of each replica's HMC move per iteration.
    pt_max_draws : int
        Cold draws kept per chain (thinned evenly from ``draws``).
    """

    replicas: int = option(24, low=2, high=256,
                           doc="temperatures per replica system (sampler=pt; chains systems)")
    beta_min: float = option(2e-3, low=0.0, high=1.0, low_open=True, high_open=True,
                             doc="hottest inverse temperature of the likelihood (sampler=pt)")
    pt_integration_steps: int = option(20, low=1, high=1000,
                                       doc="leapfrog steps of each HMC move (sampler=pt)")
    pt_max_draws: int = option(2000, low=4, high=10**6,
                               doc="cold draws kept per chain, thinned evenly (sampler=pt)")


TEMPERING_SCHEMA = schema_of(TemperingOptions, "bayes_sampling")
PT_CHUNK = 10  # PT iterations per compiled call


class SampleResult(NamedTuple):
    """Draws, sample statistics and diagnostics of one NUTS run.

    Attributes
    ----------
    k, v : numpy.ndarray, shape (chains, draws, D)
        Posterior draws.
    log_density : numpy.ndarray, shape (chains, draws)
        Unnormalised log posterior (minus NUTS's potential energy).
    diverging : numpy.ndarray of bool, shape (chains, draws)
        Divergent transitions.
    num_steps : numpy.ndarray of int, shape (chains, draws)
        Leapfrog steps (gradient evaluations) per draw.
    step_size : numpy.ndarray, shape (chains,)
        Adapted step sizes.
    init : str
        Start strategy used.
    chain_method : str
        Chain method actually used (after any fallback).
    grad_evals : int
        Gradient evaluations of the whole run, warm-up included.
    grad_evals_warmup : int
        Gradient evaluations of the warm-up.
    r_hat_max, ess_bulk_min, ess_tail_min : float
        Rank-normalised split R-hat (max) and bulk / tail ESS (min) over all coordinates of
        ``k`` and ``v`` (ArviZ).
    divergences : int
        Post-warm-up divergent transitions.
    runtime_s : float
        Wall time of the run, compilation included.
    options : SamplerOptions
        Settings used.
    """

    k: np.ndarray
    v: np.ndarray
    log_density: np.ndarray
    diverging: np.ndarray
    num_steps: np.ndarray
    step_size: np.ndarray
    init: str
    chain_method: str
    grad_evals: int
    grad_evals_warmup: int
    r_hat_max: float
    ess_bulk_min: float
    ess_tail_min: float
    divergences: int
    runtime_s: float
    options: SamplerOptions
    tempering: dict[str, Any] | None = None

    @property
    def ess_per_grad(self) -> float:
        """``ess_bulk_min / grad_evals`` (whole run, warm-up included)."""
        return self.ess_bulk_min / max(self.grad_evals, 1)

    def flat(self) -> tuple[np.ndarray, np.ndarray]:
        """Draws of all chains pooled, ``(chains * draws, D)`` each."""
        D = self.k.shape[-1]
        return self.k.reshape(-1, D), self.v.reshape(-1, D)

    def last(self) -> dict[str, np.ndarray]:
        """Last draw of every chain, ``{"k": (chains, D), "v": (chains, D)}`` (for restarts)."""
        return {"k": self.k[:, -1], "v": self.v[:, -1]}

    def summary(self) -> dict[str, Any]:
        """Scalar diagnostics, JSON-ready."""
        return {
            "init": self.init, "chain_method": self.chain_method,
            "r_hat_max": self.r_hat_max, "ess_bulk_min": self.ess_bulk_min,
            "ess_tail_min": self.ess_tail_min, "divergences": self.divergences,
            "grad_evals": self.grad_evals, "grad_evals_warmup": self.grad_evals_warmup,
            "ess_per_grad": self.ess_per_grad, "runtime_s": self.runtime_s,
            "step_size_mean": float(np.mean(self.step_size)),
            "log_density_mean": float(np.mean(self.log_density)),
            **(self.tempering or {}),
        }


def resolve_chain_method(requested: str, chains: int) -> str:
    """The chain method that will run: ``parallel`` needs one host device per chain."""
    if chains == 1:
        return "vectorized"
    if requested == "parallel" and jax.local_device_count() < chains:
        return "vectorized"
    return requested


def init_params(key: PRNGKey, init: str, chains: int, D: int,
                teacher: Teacher | None = None) -> dict[str, Array]:
    """Starting points ``{"k": (chains, D), "v": (chains, D)}`` for ``teacher`` or ``random``.

    ``random`` draws each chain's start from the prior ``N(0, I_D)``.
    """
    if init == "teacher":
        if teacher is None:
            raise ConfigError("init='teacher' needs the teacher; allowed without it: random")
        return {"k": jnp.tile(teacher.k[None], (chains, 1)),
                "v": jnp.tile(teacher.v[None], (chains, 1))}
    if init == "random":
        kk, kv = jax.random.split(key)
        return {"k": jax.random.normal(kk, (chains, D)), "v": jax.random.normal(kv, (chains, D))}
    raise ConfigError(f"init={init!r} is not a single-run start; allowed: teacher, random "
                      "(anneal runs through sample_anneal)")


def run_nuts(key: PRNGKey, spec: ModelSpec, data: Data, options: SamplerOptions, *,
             start: dict[str, Array], init: str = "custom",
             weights: Array | None = None) -> SampleResult:
    """Run NUTS on the SLR posterior (docs/model.md §6) from ``start``.

    Parameters
    ----------
    key : PRNGKey
        Sampler randomness.
    spec : ModelSpec
        Likelihood (variant, ``nu``, ``Delta``).
    data : Data
        Training data.
    options : SamplerOptions
        NUTS settings (validated here).
    start : dict
        ``{"k": (chains, D), "v": (chains, D)}`` initial values (see :func:`init_params`).
    init : str
        Label of the start strategy, recorded in the result.
    weights : Array, shape (n,), optional
        Per-sample log-likelihood weights (default all ones).

    Returns
    -------
    SampleResult
    """
    opts = options
    method = resolve_chain_method(opts.chain_method, opts.chains)
    adapt = resolve_adapt(opts.adapt, init)
    t0 = time.perf_counter()
    try:
        out = _run(key, spec, data, opts, method, start, weights, adapt)
    except Exception:  # noqa: BLE001  (parallel chains can fail in XLA; never the only path)
        if method != "parallel":
            raise
        method = "vectorized"
        out = _run(key, spec, data, opts, method, start, weights, adapt)
    runtime = time.perf_counter() - t0
    k, v, logp, div, steps, steps_w, step_size = out
    diag = chain_diagnostics(k, v)
    return SampleResult(
        k=k, v=v, log_density=logp, diverging=div, num_steps=steps, step_size=step_size,
        init=init, chain_method=method,
        grad_evals=int(steps.sum() + steps_w), grad_evals_warmup=int(steps_w),
        r_hat_max=diag["r_hat_max"], ess_bulk_min=diag["ess_bulk_min"],
        ess_tail_min=diag["ess_tail_min"], divergences=int(div.sum()), runtime_s=runtime,
        options=replace(opts, chain_method=method, adapt=adapt),
    )


def check_tempered(options: SamplerOptions, init: str) -> None:
    """Refuse (:class:`ConfigError`, one line) what ``sampler = "pt"`` cannot run."""
    if init not in ("teacher", "random"):
        raise ConfigError(f"init={init} is not available with sampler=pt; allowed: teacher, "
                          "random (tempering is its own annealing)")
    if options.x64:
        raise ConfigError("x64=true is not available with sampler=pt; allowed: x64=false "
                          "(parallel tempering runs in float32)")
    if options.model != "marginal":
        raise ConfigError(f"model={options.model} is not available with sampler=pt; allowed: "
                          "model=marginal")


def run_tempered(key: PRNGKey, spec: ModelSpec, data: Data, options: SamplerOptions,
                 tempering: TemperingOptions, *, init: str,
                 teacher: Teacher | None = None) -> SampleResult:
    """Parallel tempering (:func:`bayesslr.bayes.pt.run_pt`) as a ``bayes_sampling`` run.

    ``options.chains`` independent replica systems of ``tempering.replicas`` temperatures,
    ``options.warmup`` then ``options.draws`` iterations each (rounded up to whole compiled
    chunks of :data:`PT_CHUNK`); the draws are the cold (``b = 1``) slot's, thinned to
    ``tempering.pt_max_draws`` per chain. ``init="teacher"`` starts every replica at the
    teacher (the cold chain is at equilibrium from step 0, as for NUTS); ``"random"`` each at
    its own prior draw. R-hat and ESS are over the chains' cold draws; the result's
    ``tempering`` holds the swap rates, round trips, ladder and iteration counts.
    """
    from bayesslr.bayes.pt import run_pt

    check_tempered(options, init)
    C, R, n = options.chains, tempering.replicas, tempering.pt_integration_steps
    D = data.X.shape[-1]
    per_iter = C * R * n
    warm = -(-options.warmup // PT_CHUNK) * PT_CHUNK
    draws = -(-options.draws // PT_CHUNK) * PT_CHUNK
    start = None
    if init == "teacher":
        if teacher is None:
            raise ConfigError("init='teacher' needs the teacher; allowed without it: random")
        start = {n_: np.broadcast_to(np.asarray(getattr(teacher, n_), np.float32),
                                     (C, R, D)) for n_ in ("k", "v")}
    t0 = time.perf_counter()
    r = run_pt(key, spec, data, budget=per_iter * (1 + warm + draws), start=start, chains=C,
               replicas=R, beta_min=tempering.beta_min, integration_steps=n, chunk=PT_CHUNK,
               max_draws=tempering.pt_max_draws, warmup_budget=per_iter * (1 + warm))
    runtime = time.perf_counter() - t0
    S, thin = r.k.shape[1], r.thin
    return SampleResult(
        k=r.k, v=r.v, log_density=np.full((C, S), np.nan), diverging=np.zeros((C, S), bool),
        num_steps=np.full((C, S), n * thin, np.int64),
        step_size=np.full(C, float(r.step_size[0])), init=init, chain_method="vectorized",
        grad_evals=r.grad_evals, grad_evals_warmup=r.grad_evals_warmup,
        r_hat_max=r.r_hat_max, ess_bulk_min=r.ess_bulk_min, ess_tail_min=r.ess_tail_min,
        divergences=0, runtime_s=runtime,
        options=replace(options, chain_method="vectorized"),
        tempering={"sampler": "pt", **r.tempering_summary(), "iterations": r.iterations,
                   "warmup_done": r.warmup_done, "draws_kept": S, "thin": thin,
                   "compile_s": r.compile_s})


def _run(key: PRNGKey, spec: ModelSpec, data: Data, opts: SamplerOptions, method: str,
         start: dict[str, Array], weights: Array | None, adapt: str):
    with jax.enable_x64(opts.x64):
        dtype = jnp.float64 if opts.x64 else jnp.float32
        args = model_args(spec, data, dtype, weights)
        fn = compiled_run(opts.model, spec.variant, opts.chains, opts.warmup, opts.draws,
                          method, opts.target_accept, opts.max_tree_depth, adapt, opts.mass,
                          opts.pool)
        keys = jax.random.split(key, opts.chains)
        z0 = {n: jnp.asarray(start[n], dtype).reshape(opts.chains, -1) for n in ("k", "v")}
        out = jax.block_until_ready(fn(keys, z0, args))
        k, v, logp, div, steps, steps_w, step_size = (np.asarray(a) for a in out)
        return (k.astype(np.float64), v.astype(np.float64), logp.astype(np.float64),
                div.astype(bool), steps.astype(np.int64), int(steps_w.sum()),
                step_size.astype(np.float64).reshape(opts.chains))


def sample_anneal(key: PRNGKey, spec: ModelSpec, data: Data, options: SamplerOptions,
                  fractions: tuple[float, ...]) -> tuple[SampleResult, list[dict[str, Any]]]:
    """Anneal along ``alpha``: nested subsets of ``data``, each rung started from the last.

    Rung ``j`` keeps the first ``round(fractions[j] n)`` samples (weights 0/1, so one compiled
    sampler serves every rung); the first rung starts from random prior draws, the final rung is
    the full data set.

    Parameters
    ----------
    fractions : tuple of float
        Increasing fractions in (0, 1) of the data used before the final rung.

    Returns
    -------
    (SampleResult, list of dict)
        The final rung's result (labelled ``anneal``) and each earlier rung's summary.
    """
    n = data.y.shape[0]
    D = data.X.shape[-1]
    opts = options
    keys = jax.random.split(key, len(fractions) + 2)
    start = init_params(keys[0], "random", opts.chains, D)
    rungs = []
    for j, f in enumerate(fractions):
        m = max(1, int(round(f * n)))
        w = (jnp.arange(n) < m).astype(jnp.float32)
        res = run_nuts(keys[j + 1], spec, data, opts, start=start, init="anneal", weights=w)
        rungs.append({"n": m, **res.summary()})
        start = res.last()
    res = run_nuts(keys[-1], spec, data, opts, start=start, init="anneal")
    total = res.grad_evals + sum(r["grad_evals"] for r in rungs)
    runtime = res.runtime_s + sum(r["runtime_s"] for r in rungs)
    return res._replace(grad_evals=total, runtime_s=runtime), rungs


def mean_log_lik(spec: ModelSpec, res: SampleResult, data: Data, max_draws: int = 200) -> float:
    """Posterior mean of the per-sample log-likelihood on ``data`` (thinned to ``max_draws``)."""
    kf, vf = res.flat()
    idx = np.linspace(0, kf.shape[0] - 1, min(max_draws, kf.shape[0])).astype(int)
    ll = jax.vmap(lambda k, v: jnp.mean(log_lik_samples(spec, k, v, data.X, data.y, data.mask)))(
        jnp.asarray(kf[idx], jnp.float32), jnp.asarray(vf[idx], jnp.float32))
    return float(jnp.mean(ll))
