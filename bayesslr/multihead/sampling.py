"""The Bayes-optimal estimator of multi-head SLR at finite ``alpha`` by sampling
(docs/multihead.md §7; issue 39 item 3).

* **Model** (:func:`multihead_model`): the generative process of docs/multihead.md §1 with the
  teacher ``(K, V)`` unknown, under the task's own teacher law as prior (so the posterior mean
  is Bayes-optimal for that law): ``teacher="gaussian"``: every row of ``K``, ``V`` ``N(0, I_D)``;
  ``teacher="orthonormal"``: a latent ``Z ~ N(0, I)`` of shape ``(D, 2F)`` mapped to
  ``sqrt(D)`` times its Gram-Schmidt frame (:func:`frame_from_latent`, the very map by which
  :func:`bayesslr.multihead.task.sample_teacher` draws that teacher, so the push-forward is
  exactly the uniform law on orthonormal frames). The location and the direction of every sample
  are summed out exactly: ``log p(y_i, X_i | K, V) - log p_0(X_i) = logsumexp_{l,f} [a_{l,f}(K)
  + log N(y_i; z_{l,f}(V), Delta)] - log(L F)`` (:func:`multihead_log_lik`). Discrete latent
  only.
* **Sampler** (:func:`posterior_draws`): NUTS from the suite's NUTS layer
  (:func:`bayesslr.bayes.warmup.nuts_transition`, NumPyro's multinomial trajectory builder;
  chains vectorised by :func:`bayesslr.bayes.nuts.over_chains`) with Stan's windowed
  adaptation, run in compiled chunks driven by traced flags so that every warm-up and draw
  count reuses one executable; random (prior) or teacher starts. Or, with
  ``sampler="pt"`` (:func:`posterior_draws_pt`), parallel tempering of the likelihood
  (:func:`bayesslr.bayes.pt.run_pt_flat` on :class:`MultiheadLogLik`, the flat latent of
  ``2 F D`` entries, its standard normal prior untempered) with HMC moves.
* **Estimator and diagnostics** (:func:`bayes_optimal_by_sampling`): the posterior-mean
  prediction on test data scored against the teacher-known Bayes predictor; R-hat / ESS
  (:func:`bayesslr.bayes.diagnostics.rank_diagnostics`) of quantities invariant under the
  posterior's symmetry, the permutations of the ``F`` directions (:func:`invariant_quantities`);
  convergence by :func:`bayesslr.bayes.method.verdict` (the ``bayes_sampling`` row of
  :mod:`bayesslr.core.thresholds`).
"""

from __future__ import annotations

import functools
import math
import time
from dataclasses import dataclass
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
import numpyro
import numpyro.distributions as dist
from jax import lax
from numpyro.infer.hmc_util import build_adaptation_schedule, dual_averaging, welford_covariance
from numpyro.infer.util import log_density
from scipy.optimize import linear_sum_assignment

from bayesslr.bayes.diagnostics import rank_diagnostics
from bayesslr.bayes.method import verdict
from bayesslr.bayes.nuts import over_chains
from bayesslr.bayes.pt import run_pt_flat
from bayesslr.bayes.warmup import initial_step_size, nuts_transition
from bayesslr.core.jaxconfig import Array, PRNGKey
from bayesslr.core.metrics import score_given
from bayesslr.core.options import Validated, option
from bayesslr.core.task import ConfigError, check_int
from bayesslr.multihead.task import (
    MultiheadData,
    MultiheadTask,
    MultiheadTeacher,
    bayes_predict_kv,
    head_fields,
    sample_data,
    sample_teacher,
)

__all__ = [
    "MultiheadDraws",
    "MultiheadLogLik",
    "MultiheadPTDraws",
    "MultiheadPTResult",
    "MultiheadSamplingOptions",
    "MultiheadSamplingResult",
    "bayes_optimal_by_sampling",
    "frame_from_latent",
    "invariant_quantities",
    "multihead_log_lik",
    "multihead_model",
    "posterior_draws",
    "posterior_draws_pt",
    "sample_train_test",
]

LOG_2PI = math.log(2.0 * math.pi)
INITS: tuple[str, ...] = ("random", "teacher")
SAMPLERS: tuple[str, ...] = ("nuts", "pt")
PT_CHUNK = 10  # PT iterations per compiled call (as the one-head sampler=pt)


# --------------------------------------------------------------------------------------------
# the model
# --------------------------------------------------------------------------------------------
def frame_from_latent(Z: Array, F: int) -> tuple[Array, Array]:
    """``(K, V) = sqrt(D)`` times the Gram-Schmidt frame of ``Z`` ``(D, 2F)`` (QR with a
    positive diagonal), ``K`` its first ``F`` columns transposed, ``V`` the last ``F``.

    The map of :func:`bayesslr.multihead.task.sample_teacher`: for ``Z ~ N(0, I)`` the frame is
    uniform on orthonormal ``2F``-frames (docs/multihead.md §1.1), so a Gaussian latent with this
    map *is* the orthonormal teacher's law. Smooth wherever ``Z`` has full rank.
    """
    Q, R = jnp.linalg.qr(Z)
    Q = Q * jnp.where(jnp.diagonal(R) < 0, -1.0, 1.0)[None, :]
    W = math.sqrt(Z.shape[0]) * Q.T
    return W[:F], W[F:]


def multihead_log_lik(nu: Array, delta: Array, K: Array, V: Array, X: Array,
                      y: Array) -> Array:
    """Per-sample log-likelihood ``(n,)`` with the location and direction summed out
    (docs/multihead.md §7.1), the tokens' Gaussian base measure dropped (free of ``K, V``).

    ``logsumexp_{l,f} [a_{l,f} + log N(y; z_{l,f}, Delta)] - log(L F)``, with
    ``a_{l,f} = sqrt(nu) chi_{l,f} - nu |k_f|^2 / (2D)`` (§3.1), ``chi = X K^T / sqrt(D)``,
    ``z = X V^T / sqrt(D)``. At ``F = 1`` it is :func:`bayesslr.bayes.model.log_lik_samples` of
    the spiked task (tested).

    Examples
    --------
    The likelihood is invariant under a permutation of the directions (keys and values
    together), not under a sign flip of a direction:

    >>> import jax, jax.numpy as jnp
    >>> from bayesslr.multihead import MultiheadTask, sample_multihead
    >>> from bayesslr.multihead.sampling import multihead_log_lik
    >>> task = MultiheadTask(L=2, F=2, nu=9.0, delta=0.1, D=8, teacher="gaussian")
    >>> t, data = sample_multihead(jax.random.key(0), task, 400)
    >>> ll = lambda K, V: float(multihead_log_lik(9.0, 0.1, K, V, data.X, data.y).sum())
    >>> bool(abs(ll(t.K, t.V) - ll(t.K[::-1], t.V[::-1])) < 1e-3)
    True
    >>> flip = jnp.array([[-1.0], [1.0]])
    >>> bool(ll(t.K, t.V) - ll(flip * t.K, flip * t.V) > 10)
    True
    """
    D = X.shape[-1]
    L, F = X.shape[-2], K.shape[0]
    chi, z = head_fields(X, K, "K"), head_fields(X, V, "V")  # (n, L, F)
    a = jnp.sqrt(nu) * chi - 0.5 * nu * jnp.sum(K * K, axis=-1) / D
    log_n = -0.5 * (LOG_2PI + jnp.log(delta)) - 0.5 * (y[:, None, None] - z) ** 2 / delta
    return jax.nn.logsumexp(a + log_n, axis=(-2, -1)) - math.log(L * F)


def _teacher(z: Array, F: int, prior: str) -> tuple[Array, Array]:
    """``(K, V)`` from the model's one sampled site (``Z`` or ``KV``)."""
    if prior == "orthonormal":
        return frame_from_latent(z, F)
    return z[0], z[1]


def site_name(prior: str) -> str:
    """The model's one sampled site: ``Z`` ``(D, 2F)`` (orthonormal) or ``KV`` ``(2, F, D)``."""
    return "Z" if prior == "orthonormal" else "KV"


def multihead_model(X: Array, y: Array, nu: Array, delta: Array, *, F: int,
                    prior: str) -> None:
    """NumPyro model of multi-head SLR with the teacher unknown (docs/multihead.md §7.1).

    Parameters
    ----------
    X, y : Array
        Training data ``(n, L, D)``, ``(n,)``.
    nu, delta : Array
        Signal strength and label-noise variance (``delta > 0``; traced).
    F : int
        Number of directions (static).
    prior : {"gaussian", "orthonormal"}
        The teacher law (static): one site ``KV`` ``(2, F, D)`` with ``N(0, 1)`` entries
        (``K = KV[0]``, ``V = KV[1]``), or one site ``Z`` ``(D, 2F)`` with ``N(0, 1)`` entries
        mapped by :func:`frame_from_latent`.
    """
    D = X.shape[-1]
    shape = [D, 2 * F] if prior == "orthonormal" else [2, F, D]
    z = numpyro.sample(site_name(prior), dist.Normal(0.0, 1.0).expand(shape).to_event(len(shape)))
    K, V = _teacher(z, F, prior)
    numpyro.factor("log_lik", jnp.sum(multihead_log_lik(nu, delta, K, V, X, y)))


def site_shape(F: int, D: int, prior: str) -> tuple[int, ...]:
    """Shape of the model's one sampled site (:func:`site_name`)."""
    return (D, 2 * F) if prior == "orthonormal" else (2, F, D)


@dataclass(frozen=True)
class MultiheadLogLik:
    """The summed training log-likelihood (:func:`multihead_log_lik`) at the *flat* site ``x``
    (``2 F D`` entries of ``KV`` or ``Z``, mapped by :func:`_teacher`), ``args = (X, y, nu,
    delta)``: the tempered target of parallel tempering
    (:func:`bayesslr.bayes.pt.run_pt_flat`; hashable, so its compiled chunks are cached). The
    site's ``N(0, 1)`` prior is the sampler's own untempered standard normal, under both
    teacher laws (:func:`multihead_model`)."""

    F: int
    prior: str
    shape: tuple[int, ...]

    def __call__(self, x: Array, args: tuple) -> Array:
        X, y, nu, delta = args
        K, V = _teacher(x.reshape(self.shape), self.F, self.prior)
        return jnp.sum(multihead_log_lik(nu, delta, K, V, X, y))


# --------------------------------------------------------------------------------------------
# options, data
# --------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class MultiheadSamplingOptions(Validated):
    """Sampler settings of :func:`posterior_draws` (NUTS) and :func:`posterior_draws_pt`
    (parallel tempering), each field checked on construction (a bad one is a one-line
    :class:`ConfigError` naming it and its allowed range). The defaults are NUTS's, and the
    PT fields are ignored by NUTS.

    Attributes
    ----------
    sampler : {"nuts", "pt"}
        NUTS (default) or parallel tempering of the likelihood
        (:func:`bayesslr.bayes.pt.run_pt_flat`; the names of the PT fields follow the one-head
        ``bayes_sampling`` options).
    chains : int
        Independent chains (2 to 64: R-hat needs two); with ``sampler="pt"``, independent
        replica systems of ``replicas`` temperatures each.
    warmup : int
        Warm-up iterations per chain (NUTS: Stan's windowed adaptation; PT: iterations of the
        step-size, mass and ladder adaptation, rounded up to whole chunks of
        :data:`PT_CHUNK`).
    draws : int
        Kept draws per chain (>= 4: the rank diagnostics need four); with ``sampler="pt"``,
        sampling iterations per chain (rounded up to whole chunks of :data:`PT_CHUNK`), of
        which ``pt_max_draws`` at most are kept, thinned evenly.
    init : {"random", "teacher"}
        Chains start at independent prior draws, or at the planted teacher (an exact posterior
        draw: at equilibrium from step 0, so it cannot reveal trapping).
    target_accept : float
        NUTS target acceptance probability, in (0, 1).
    max_tree_depth : int
        NUTS maximal tree depth (1 to 15).
    test_points : int
        Test inputs whose per-draw prediction enters the diagnostics (1 to 64).
    replicas : int
        PT: temperatures per replica system, the ladder ``1 = b_0 > ... > b_{R-1} = beta_min``
        (2 to 256).
    beta_min : float
        PT: the hottest inverse temperature of the likelihood, in (0, 1).
    pt_integration_steps : int
        PT: leapfrog steps of each replica's HMC move per iteration (1 to 1000).
    pt_step_size : float
        PT: the starting leapfrog step size of every replica (then adapted to an HMC
        acceptance of 0.65 during the warm-up), in (0, 10].
    pt_max_draws : int
        PT: cold (``b = 1``) draws kept per chain, thinned evenly from ``draws`` (4 to 10^6).

    One PT iteration costs ``chains * replicas * pt_integration_steps`` gradient evaluations;
    a run ``(1 + warmup + draws)`` iterations (rounded as above).
    """

    chains: int = option(4, low=2, high=64,
                         doc="NUTS chains (sampler=pt: independent replica systems)")
    warmup: int = option(300, low=1, high=10**7, doc="warm-up iterations per chain")
    draws: int = option(300, low=4, high=10**7, doc="kept draws per chain")
    init: str = option("random", choices=INITS, doc="chain starts: prior draws or teacher")
    target_accept: float = option(0.8, low=0.0, high=1.0, low_open=True, high_open=True,
                                  doc="NUTS target acceptance probability")
    max_tree_depth: int = option(10, low=1, high=15, doc="NUTS maximal tree depth")
    test_points: int = option(4, low=1, high=64,
                              doc="test inputs whose per-draw prediction is diagnosed")
    sampler: str = option("nuts", choices=SAMPLERS,
                          doc="nuts, or pt (parallel tempering over likelihood temperatures "
                              "with HMC moves; docs/multihead.md section 7.6)")
    replicas: int = option(8, low=2, high=256,
                           doc="temperatures per replica system (sampler=pt)")
    beta_min: float = option(2e-3, low=0.0, high=1.0, low_open=True, high_open=True,
                             doc="hottest inverse temperature of the likelihood (sampler=pt)")
    pt_integration_steps: int = option(20, low=1, high=1000,
                                       doc="leapfrog steps of each HMC move (sampler=pt)")
    pt_step_size: float = option(0.05, low=0.0, high=10.0, low_open=True,
                                 doc="starting leapfrog step size, then adapted (sampler=pt)")
    pt_max_draws: int = option(2000, low=4, high=10**6,
                               doc="cold draws kept per chain, thinned evenly (sampler=pt)")


def check_sampling_task(task: MultiheadTask) -> MultiheadTask:
    """Refuse what the sampler does not handle, one :class:`ConfigError` line each."""
    if not isinstance(task, MultiheadTask):
        raise ConfigError(f"task={task!r} is not a MultiheadTask; allowed: a "
                          "bayesslr.multihead.MultiheadTask")
    if task.theta != "discrete":
        raise ConfigError(f"theta={task.theta!r} is not sampled yet; allowed: discrete "
                          "(the Gaussian latent needs its Gaussian integral in the likelihood, "
                          "docs/multihead.md §7.5)")
    if not task.delta > 0.0:
        raise ConfigError(f"delta={task.delta:g} makes the likelihood singular (noise-free "
                          "labels); allowed for sampling: delta > 0")
    return task


def _check_data(task: MultiheadTask, data: MultiheadData, name: str) -> None:
    X, y = np.shape(data.X), np.shape(data.y)
    if len(X) != 3 or X[1:] != (task.L, task.D) or y != (X[0],):
        raise ConfigError(f"{name} has X {X}, y {y}; allowed: X (n, {task.L}, {task.D}) and "
                          "y (n,) of the task")


def sample_train_test(key: PRNGKey, task: MultiheadTask, n_train: Any,
                      n_test: Any) -> tuple[MultiheadTeacher, MultiheadData, MultiheadData]:
    """Teacher, training and test data from one key, split as
    :func:`bayesslr.multihead.sample_multihead` splits it: ``(teacher, train, test)``, so the
    teacher and training data are that function's for the same key and ``n_train``.
    """
    n_train, n_test = check_int("n_train", n_train, low=1), check_int("n_test", n_test, low=2)
    kt, kd, ks = jax.random.split(key, 3)
    teacher = sample_teacher(kt, task)
    return teacher, sample_data(kd, task, teacher, n_train), sample_data(ks, task, teacher,
                                                                        n_test)


# --------------------------------------------------------------------------------------------
# NUTS
# --------------------------------------------------------------------------------------------
class MultiheadDraws(NamedTuple):
    """Posterior draws of one NUTS run.

    Attributes
    ----------
    K, V : numpy.ndarray, shape (chains, draws, F, D)
        The teacher directions of every draw (for the orthonormal prior, the frame of ``Z``).
    log_density : numpy.ndarray, shape (chains, draws)
        Unnormalised log posterior of the sampled sites.
    diverging : numpy.ndarray of bool, shape (chains, draws)
    num_steps : numpy.ndarray of int, shape (chains, draws)
        Leapfrog steps per draw.
    step_size : numpy.ndarray, shape (chains,)
    grad_evals : int
        Gradient evaluations of the run, warm-up included.
    runtime_s : float
        Wall time, compilation included.
    options : MultiheadSamplingOptions
    """

    K: np.ndarray
    V: np.ndarray
    log_density: np.ndarray
    diverging: np.ndarray
    num_steps: np.ndarray
    step_size: np.ndarray
    grad_evals: int
    runtime_s: float
    options: MultiheadSamplingOptions


CHUNK = 25  # iterations per compiled call: any warm-up and draw count reuses one executable


def _gen(F: int, prior: str):
    model = functools.partial(multihead_model, F=F, prior=prior)

    def gen(*args):
        return lambda params: -log_density(model, args, {}, params)[0]

    return gen


def adaptation_flags(warmup: int, draws: int) -> np.ndarray:
    """Per-iteration flags ``(warmup + draws, 3)``: adapt the step size, accumulate the draw in
    the mass-matrix window, end of a slow window (set the mass matrix, restart the step size
    adaptation). Stan's windows (``numpyro.infer.hmc_util.build_adaptation_schedule``: a fast
    window, slow windows doubling in length, a final fast window), as NumPyro's NUTS uses them;
    the draws have all flags off.

    >>> f = adaptation_flags(20, 5)
    >>> f.shape, int(f[:, 0].sum()), [int(i) for i in f[:, 2].nonzero()[0]]
    ((25, 3), 20, [17])
    """
    T = warmup + draws
    flags = np.zeros((T, 3), bool)
    flags[:warmup, 0] = True
    windows = build_adaptation_schedule(warmup)
    for w in windows[1:-1]:
        flags[w.start:w.end + 1, 1] = True
        flags[w.end, 2] = True
    return flags


@functools.lru_cache(maxsize=16)
def _chunk_fn(F: int, prior: str, max_tree_depth: int, shape: tuple[int, ...],
              target_accept: float):
    """:data:`CHUNK` iterations of NUTS (:func:`bayesslr.bayes.warmup.nuts_transition`,
    NumPyro's multinomial trajectory builder) with Stan's windowed adaptation of the step size
    (dual averaging) and of a diagonal inverse mass matrix (regularised Welford variance),
    driven by the traced flags of :func:`adaptation_flags`: one executable for every warm-up
    and draw count (compiling the NUTS tree dominates a small run: ~12 CPU-s each)."""
    gen = _gen(F, prior)
    name = site_name(prior)
    da_init, da_update = dual_averaging()
    wf_init, wf_update, wf_final = welford_covariance(diagonal=True)

    def one_chain(key, carry, flags, last, args):
        pot = gen(*args)

        def potential(zf):
            return pot({name: zf.reshape(shape)})

        def step(c, x):
            z, pe, g, eps, da, inv, wf = c
            k, (adapt, accum, end_window), is_last = x
            tr = nuts_transition(potential, z, pe, g, eps, inv, k, max_tree_depth)
            da_new = da_update(target_accept - tr.accept, da)
            da = jax.tree.map(lambda a, b: jnp.where(adapt, a, b), da_new, da)
            eps = jnp.where(adapt, jnp.exp(da[0]), eps)
            wf = jax.tree.map(lambda a, b: jnp.where(accum, a, b), wf_update(tr.z, wf), wf)
            inv = jnp.where(end_window, wf_final(wf, regularize=True)[0], inv)
            wf = jax.tree.map(lambda a, b: jnp.where(end_window, a, b), wf_init(z.shape[0]), wf)
            da = jax.tree.map(lambda a, b: jnp.where(end_window, a, b),
                              da_init(jnp.log(10.0 * eps)), da)
            eps = jnp.where(is_last, jnp.exp(da[1]), eps)  # end of warm-up: averaged iterate
            K, V = _teacher(tr.z.reshape(shape), F, prior)
            return (tr.z, tr.pe, tr.grad, eps, da, inv, wf), (K, V, -tr.pe, tr.diverging,
                                                              tr.steps)

        keys = jax.random.split(key, CHUNK)
        return lax.scan(step, carry, (keys, tuple(flags.T), last))

    return over_chains(one_chain, (0, 0, None, None, None), "vectorized")


@functools.lru_cache(maxsize=16)
def _init_fn(F: int, prior: str, shape: tuple[int, ...]):
    """Each chain's first state: potential, gradient, a step size of acceptance near 0.8 at
    unit mass (:func:`bayesslr.bayes.warmup.initial_step_size`), fresh adaptation states."""
    gen = _gen(F, prior)
    name = site_name(prior)
    da_init, _ = dual_averaging()
    wf_init, _, _ = welford_covariance(diagonal=True)

    def one_chain(key, z0, args):
        pot = gen(*args)

        def potential(zf):
            return pot({name: zf.reshape(shape)})

        z = jnp.ravel(z0)
        pe, g = jax.value_and_grad(potential)(z)
        inv = jnp.ones_like(z)
        eps, n = initial_step_size(potential, z, pe, g, inv, key)
        return (z, pe, g, eps, da_init(jnp.log(10.0 * eps)), inv, wf_init(z.shape[0])), n + 1

    return over_chains(one_chain, (0, 0, None), "vectorized")


def _starts(key: PRNGKey, task: MultiheadTask, opts: MultiheadSamplingOptions,
            teacher: MultiheadTeacher | None) -> Array:
    """Starts of the model's site, ``(chains, *site shape)``."""
    C, F, D = opts.chains, task.F, task.D
    if opts.init == "teacher":
        K, V = jnp.asarray(teacher.K, jnp.float32), jnp.asarray(teacher.V, jnp.float32)
        if task.teacher == "orthonormal":   # Z = [K*; V*]^T: its frame is the teacher itself
            return jnp.broadcast_to(jnp.concatenate([K, V]).T, (C, D, 2 * F))
        return jnp.broadcast_to(jnp.stack([K, V]), (C, 2, F, D))
    shape = (D, 2 * F) if task.teacher == "orthonormal" else (2, F, D)
    return jax.random.normal(key, (C, *shape))


def posterior_draws(key: PRNGKey, task: MultiheadTask, train: MultiheadData,
                    options: MultiheadSamplingOptions | None = None,
                    teacher: MultiheadTeacher | None = None) -> MultiheadDraws:
    """NUTS draws of the posterior of ``(K, V)`` given ``train`` (docs/multihead.md §7.2).

    Parameters
    ----------
    key : PRNGKey
    task : MultiheadTask
        Discrete latent, ``delta > 0``; its ``teacher`` law is the prior.
    train : MultiheadData
        Training data (``X`` ``(n, L, D)``, ``y`` ``(n,)``).
    options : MultiheadSamplingOptions, optional
    teacher : MultiheadTeacher, optional
        Needed for ``init="teacher"``.

    Returns
    -------
    MultiheadDraws
    """
    task = check_sampling_task(task)
    opts = MultiheadSamplingOptions() if options is None else options
    if not isinstance(opts, MultiheadSamplingOptions):
        raise ConfigError(f"options={opts!r} is not MultiheadSamplingOptions; allowed: a "
                          "bayesslr.multihead.sampling.MultiheadSamplingOptions")
    if opts.sampler != "nuts":
        raise ConfigError(f"sampler={opts.sampler!r} is not run by posterior_draws (NUTS); "
                          "allowed: sampler='nuts', or posterior_draws_pt for 'pt'")
    _check_data(task, train, "train")
    if opts.init == "teacher" and teacher is None:
        raise ConfigError("init='teacher' needs the teacher; allowed: pass teacher=, or "
                          "init='random'")
    t0 = time.perf_counter()
    k_start, k_warm = jax.random.split(key)
    z0 = _starts(k_start, task, opts, teacher)
    args = (jnp.asarray(train.X, jnp.float32), jnp.asarray(train.y, jnp.float32),
            jnp.float32(task.nu), jnp.float32(task.delta))
    C, shape = opts.chains, tuple(z0.shape[1:])
    k_init, k_run = jax.random.split(k_warm)
    carry, steps0 = _init_fn(task.F, task.teacher, shape)(jax.random.split(k_init, C), z0, args)
    chunk = _chunk_fn(task.F, task.teacher, opts.max_tree_depth, shape, opts.target_accept)
    T = opts.warmup + opts.draws
    n_chunks = -(-T // CHUNK)
    flags = np.zeros((n_chunks * CHUNK, 3), bool)
    flags[:T] = adaptation_flags(opts.warmup, opts.draws)
    last = np.arange(n_chunks * CHUNK) == opts.warmup - 1
    parts = []
    for i, k in enumerate(jax.random.split(k_run, n_chunks)):
        sl = slice(i * CHUNK, (i + 1) * CHUNK)
        carry, out = chunk(jax.random.split(k, C), carry, jnp.asarray(flags[sl]),
                           jnp.asarray(last[sl]), args)
        parts.append(out)
    K, V, logp, div, steps = (np.concatenate([np.asarray(p[i]) for p in parts], axis=1)
                              for i in range(5))
    w = opts.warmup
    steps_w = int(steps[:, :w].sum() + np.asarray(steps0).sum())
    K, V, logp, div, steps = (a[:, w:T] for a in (K, V, logp, div, steps))
    eps = np.asarray(carry[3])
    grads = int(steps.sum() + np.asarray(steps_w).sum())
    return MultiheadDraws(K, V, logp, div, steps, np.asarray(eps), grads,
                          time.perf_counter() - t0, opts)


# --------------------------------------------------------------------------------------------
# parallel tempering
# --------------------------------------------------------------------------------------------
class MultiheadPTDraws(NamedTuple):
    """Posterior draws of one parallel-tempering run (the ``b = 1`` replica).

    Attributes
    ----------
    K, V : numpy.ndarray, shape (chains, draws, F, D)
        The teacher directions of every kept draw (for the orthonormal prior, the frame of
        ``Z``).
    log_density : numpy.ndarray, shape (chains, draws)
        Unnormalised log posterior of the sampled site (as :class:`MultiheadDraws`).
    cold_rejects : int
        Sampling-phase HMC transitions of the ``b = 1`` replica with acceptance probability 0
        (energy error non-finite or above ~87, where ``exp(-dH)`` underflows in float32), all
        chains, every iteration: the PT analogue of NUTS's divergences
        (:class:`bayesslr.bayes.pt.PTFlat`).
    betas : numpy.ndarray, shape (replicas,)
        The final ladder (``betas[0] = 1``).
    swap_rates : numpy.ndarray, shape (replicas - 1,)
        Swap acceptance of each neighbouring pair in the sampling phase.
    round_trips : int
        Round trips ``b = 1 -> beta_min -> b = 1``, all chains, sampling phase.
    hmc_accept, step_size : numpy.ndarray, shape (replicas,)
        Mean HMC acceptance (sampling phase) and adapted step size per replica.
    iterations, warmup_done, thin : int
        Iterations run (warm-up included), of which warm-up; sampling iterations per kept draw.
    grad_evals : int
        Gradient evaluations of the run, warm-up included (every replica's).
    runtime_s, compile_s : float
        Wall time (compilation included) and the compilation's share.
    options : MultiheadSamplingOptions
    """

    K: np.ndarray
    V: np.ndarray
    log_density: np.ndarray
    cold_rejects: int
    betas: np.ndarray
    swap_rates: np.ndarray
    round_trips: int
    hmc_accept: np.ndarray
    step_size: np.ndarray
    iterations: int
    warmup_done: int
    thin: int
    grad_evals: int
    runtime_s: float
    compile_s: float
    options: MultiheadSamplingOptions


@functools.lru_cache(maxsize=8)
def _frames_fn(F: int, prior: str, shape: tuple[int, ...]):
    """Flat draws ``(S, dim)`` -> ``K, V`` ``(S, F, D)`` and the log density ``(S,)``."""
    target = MultiheadLogLik(F, prior, shape)

    def one(x, args):
        K, V = _teacher(x.reshape(shape), F, prior)
        logp = -0.5 * jnp.sum(x * x) - 0.5 * x.size * LOG_2PI + target(x, args)
        return K, V, logp

    return jax.jit(lambda xs, args: lax.map(lambda x: one(x, args), xs))


def posterior_draws_pt(key: PRNGKey, task: MultiheadTask, train: MultiheadData,
                       options: MultiheadSamplingOptions,
                       teacher: MultiheadTeacher | None = None) -> MultiheadPTDraws:
    """Parallel-tempering draws of the posterior of ``(K, V)`` given ``train``
    (docs/multihead.md §7.6).

    ``options.chains`` independent systems of ``options.replicas`` replicas sample
    ``N(0, I)(x) * lik(x)^b`` on the flat site ``x`` (``2 F D`` entries of ``KV`` or ``Z``,
    :class:`MultiheadLogLik`): only the likelihood is tempered, the prior is the site's own
    standard normal under both teacher laws. HMC moves, DEO swaps, the adaptation of step
    sizes, masses and ladder during the warm-up, and the budget are those of
    :func:`bayesslr.bayes.pt.run_pt_flat`; ``warmup`` and ``draws`` are iterations (rounded up
    to whole chunks of :data:`PT_CHUNK`), ``pt_max_draws`` the kept ``b = 1`` draws per chain.
    ``init="random"``: every replica at its own prior draw; ``"teacher"``: every replica at the
    teacher.

    Returns
    -------
    MultiheadPTDraws
    """
    task = check_sampling_task(task)
    if not isinstance(options, MultiheadSamplingOptions) or options.sampler != "pt":
        raise ConfigError(f"options={options!r} is not MultiheadSamplingOptions with "
                          "sampler='pt'; allowed: MultiheadSamplingOptions(sampler='pt', ...)")
    opts = options
    _check_data(task, train, "train")
    if opts.init == "teacher" and teacher is None:
        raise ConfigError("init='teacher' needs the teacher; allowed: pass teacher=, or "
                          "init='random'")
    t0 = time.perf_counter()
    C, R, n = opts.chains, opts.replicas, opts.pt_integration_steps
    F, D = task.F, task.D
    shape = site_shape(F, D, task.teacher)
    dim = 2 * F * D
    k_start, k_run = jax.random.split(key)
    if opts.init == "teacher":
        z = _starts(k_start, task, opts, teacher)[0].reshape(dim)
        x0 = jnp.broadcast_to(z, (C, R, dim)).astype(jnp.float32)
    else:
        x0 = jax.random.normal(k_start, (C, R, dim), jnp.float32)
    args = (jnp.asarray(train.X, jnp.float32), jnp.asarray(train.y, jnp.float32),
            jnp.float32(task.nu), jnp.float32(task.delta))
    per_iter = C * R * n
    warm = -(-opts.warmup // PT_CHUNK) * PT_CHUNK
    draws = -(-opts.draws // PT_CHUNK) * PT_CHUNK
    r = run_pt_flat(k_run, MultiheadLogLik(F, task.teacher, shape), args, x0,
                    budget=per_iter * (1 + warm + draws), beta_min=opts.beta_min,
                    integration_steps=n, step_size=opts.pt_step_size, chunk=PT_CHUNK,
                    max_draws=opts.pt_max_draws, warmup_budget=per_iter * (1 + warm))
    S = r.x.shape[1]
    K, V, logp = (np.asarray(a) for a in _frames_fn(F, task.teacher, shape)(
        jnp.asarray(r.x.reshape(C * S, dim)), args))
    K, V = K.reshape(C, S, F, D), V.reshape(C, S, F, D)
    return MultiheadPTDraws(K, V, logp.reshape(C, S), r.cold_rejects, r.betas, r.swap_rates,
                            r.round_trips, r.accept, r.step_size, r.iterations, r.warmup_done,
                            r.thin, r.grad_evals, time.perf_counter() - t0, r.compile_s, opts)


# --------------------------------------------------------------------------------------------
# the posterior-mean predictor
# --------------------------------------------------------------------------------------------
@functools.partial(jax.jit, static_argnames=("chunk",))
def _chain_predict(nu: Array, K: Array, V: Array, valid: Array, X: Array,
                   chunk: int) -> tuple[Array, Array, Array]:
    """One chain's draws ``K, V`` ``(S, F, D)`` (``S`` a multiple of ``chunk``) on test ``X``:
    ``(exact, log evidence, plain)``, each ``(n,)``, streamed with a running log-sum-exp."""
    D = X.shape[-1]
    sqrt_d = math.sqrt(D)

    def body(carry, inp):
        m, num, den, plain = carry
        k, v, ok = inp                                              # (c, F, D), (c,)
        chi = jnp.einsum("nld,sfd->nslf", X, k) / sqrt_d
        z = jnp.einsum("nld,sfd->nslf", X, v) / sqrt_d
        a = jnp.sqrt(nu) * chi - 0.5 * nu * (jnp.sum(k * k, -1) / D)[None, :, None, :]
        a = jnp.where(ok[None, :, None, None], a, -jnp.inf)
        new_m = jnp.maximum(m, jnp.max(a, axis=(1, 2, 3)))
        scale = jnp.exp(m - new_m)
        e = jnp.exp(a - new_m[:, None, None, None])
        num = num * scale + jnp.sum(e * z, axis=(1, 2, 3))
        den = den * scale + jnp.sum(e, axis=(1, 2, 3))
        p = jax.nn.softmax(a.reshape(*a.shape[:2], -1), axis=-1).reshape(a.shape)
        p = jnp.where(ok[None, :, None, None], p, 0.0)
        return (new_m, num, den, plain + jnp.sum(p * z, axis=(1, 2, 3))), None

    n = X.shape[0]
    zeros = jnp.zeros((n,), X.dtype)
    Kc, Vc = K.reshape(-1, chunk, *K.shape[1:]), V.reshape(-1, chunk, *V.shape[1:])
    init = (jnp.full((n,), -jnp.inf, X.dtype), zeros, zeros, zeros)
    (m, num, den, plain), _ = lax.scan(body, init, (Kc, Vc, valid.reshape(-1, chunk)))
    return num / den, m + jnp.log(den), plain / jnp.sum(valid)


def _predict_chains(task: MultiheadTask, K: np.ndarray, V: np.ndarray, X: Array,
                    chunk: int = 64) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Per-chain and pooled predictions: ``exact_c``, ``plain_c`` ``(chains, n)`` and pooled
    ``exact``, ``plain`` ``(n,)`` (docs/multihead.md §7.2)."""
    C, S = K.shape[:2]
    chunk = max(1, min(chunk, S))
    pad = (-S) % chunk
    valid = jnp.arange(S + pad) < S
    Kp = jnp.pad(jnp.asarray(K), ((0, 0), (0, pad), (0, 0), (0, 0)))
    Vp = jnp.pad(jnp.asarray(V), ((0, 0), (0, pad), (0, 0), (0, 0)))
    X = jnp.asarray(X, Kp.dtype)
    nu = jnp.asarray(task.nu, Kp.dtype)
    ex, logw, pl = (np.asarray(a, np.float64) for a in
                    jax.vmap(_chain_predict, (None, 0, 0, None, None, None))(
                        nu, Kp, Vp, valid, X, chunk))
    w = np.exp(logw - logw.max(axis=0))                              # chains' test evidence
    return ex, pl, (w * ex).sum(0) / w.sum(0), pl.mean(0)


# --------------------------------------------------------------------------------------------
# invariant quantities
# --------------------------------------------------------------------------------------------
def _match(K: np.ndarray, V: np.ndarray, teacher: MultiheadTeacher) -> tuple[np.ndarray,
                                                                             np.ndarray]:
    """Overlaps ``k_{pi(f)} . k*_f / D`` and ``v_{pi(f)} . v*_f / D`` ``(..., F)`` with ``pi``
    the Hungarian matching of each draw's directions to the teacher's maximising the summed
    overlap ``(K K*^T + V V*^T) / D`` (a key and its value move together)."""
    D = K.shape[-1]
    Ks, Vs = np.asarray(teacher.K, np.float64), np.asarray(teacher.V, np.float64)
    mk = np.einsum("...fd,gd->...fg", K, Ks) / D
    mv = np.einsum("...fd,gd->...fg", V, Vs) / D
    F = mk.shape[-1]
    flat_k, flat_v = mk.reshape(-1, F, F), mv.reshape(-1, F, F)
    ok, ov = np.empty(flat_k.shape[:2]), np.empty(flat_k.shape[:2])
    for i in range(flat_k.shape[0]):
        row, col = linear_sum_assignment(-(flat_k[i] + flat_v[i]))
        ok[i, col], ov[i, col] = flat_k[i, row, col], flat_v[i, row, col]
    return ok.reshape(mk.shape[:-1]), ov.reshape(mk.shape[:-1])


def invariant_quantities(task: MultiheadTask, K: np.ndarray, V: np.ndarray,
                         train: MultiheadData, X_probe: Array,
                         teacher: MultiheadTeacher | None = None) -> dict[str, np.ndarray]:
    """Per-draw quantities invariant under permutations of the ``F`` directions
    (docs/multihead.md §7.3), each ``(chains, draws, ...)``.

    * ``eig_K``, ``eig_V``: sorted eigenvalues of ``K K^T / D`` and ``V V^T / D``;
    * ``log_lik``: the training log-likelihood (:func:`multihead_log_lik` summed);
    * ``predict``: ``E[y | X, K, V]`` at the probe inputs ``X_probe`` (``(m, L, D)``);
    * with the teacher, ``overlap_K``, ``overlap_V``: overlaps with the teacher's directions
      after a Hungarian match (:func:`_match`), indexed by the teacher's direction.
    """
    C, S, F, D = K.shape
    Kf, Vf = K.reshape(C * S, F, D), V.reshape(C * S, F, D)
    eig = jax.vmap(lambda A: jnp.linalg.eigvalsh(A @ A.T / D))
    X, y = jnp.asarray(train.X, K.dtype), jnp.asarray(train.y, K.dtype)
    nu, delta = jnp.asarray(task.nu, K.dtype), jnp.asarray(task.delta, K.dtype)
    ll = jax.lax.map(lambda kv: jnp.sum(multihead_log_lik(nu, delta, kv[0], kv[1], X, y)),
                     (jnp.asarray(Kf), jnp.asarray(Vf)))
    pred = jax.vmap(lambda k, v: bayes_predict_kv(task, k, v, jnp.asarray(X_probe, K.dtype)))(
        jnp.asarray(Kf), jnp.asarray(Vf))
    out = {"eig_K": np.asarray(eig(jnp.asarray(Kf))), "eig_V": np.asarray(eig(jnp.asarray(Vf))),
           "log_lik": np.asarray(ll), "predict": np.asarray(pred)}
    out = {n: a.reshape(C, S, *a.shape[1:]) for n, a in out.items()}
    if teacher is not None:
        out["overlap_K"], out["overlap_V"] = _match(np.asarray(K, np.float64),
                                                    np.asarray(V, np.float64), teacher)
    return out


# --------------------------------------------------------------------------------------------
# the estimator
# --------------------------------------------------------------------------------------------
class MultiheadSamplingResult(NamedTuple):
    """The sampled Bayes-optimal estimator on one test set (docs/multihead.md §7).

    Attributes
    ----------
    test_error, stderr : float
        Excess test error of the posterior-mean predictor (the *exact* one, conditioning on the
        test tokens), Rao-Blackwellised over ``(eps*, f*)`` with the teacher's posterior, and
        its standard error over the test inputs (given the draws).
    mcmc_stderr : float
        Monte Carlo standard error of ``test_error`` from the finite chains: the chains as
        batches, ``std_c(test_error of chain c's predictor) / sqrt(chains)``.
    oracle_error, oracle_error_stderr : float
        The teacher-known Bayes predictor's excess error on the same test set
        (:func:`bayesslr.multihead.bayes_predict`).
    excess_over_oracle, excess_over_oracle_stderr : float
        ``mean (y_hat - y_oracle)^2`` (``= test_error - oracle_error``), paired.
    test_error_plain, stderr_plain : float
        The same for the *plain* predictor, the average over draws of ``E[y | X, K, V]``.
    risk : float
        ``mean (y - y_hat)^2`` with the noisy test labels.
    overlap_K, overlap_V : tuple of float
        Posterior means of the matched overlaps with each teacher direction.
    r_hat_max, ess_bulk_min, ess_tail_min : float
        Over every invariant quantity (:func:`invariant_quantities`).
    per_quantity : dict
        ``name -> {"r_hat_max", "ess_bulk_min", "ess_tail_min"}`` of each invariant quantity.
    r_hat_raw_max : float
        R-hat over the raw coordinates of ``K, V`` (not invariant: large when chains sit in
        different permutation modes; reported, not used by the verdict).
    divergences : int
        Post-warm-up divergent transitions.
    converged : bool
    reason : str
        ``"converged"`` or why not (:func:`bayesslr.bayes.method.verdict`).
    n_train, n_test, grad_evals : int
    runtime_s : float
        Sampling wall time, compilation included.
    draws : MultiheadDraws
    """

    test_error: float
    stderr: float
    mcmc_stderr: float
    oracle_error: float
    oracle_error_stderr: float
    excess_over_oracle: float
    excess_over_oracle_stderr: float
    test_error_plain: float
    stderr_plain: float
    risk: float
    overlap_K: tuple[float, ...]
    overlap_V: tuple[float, ...]
    r_hat_max: float
    ess_bulk_min: float
    ess_tail_min: float
    per_quantity: dict[str, dict[str, float]]
    r_hat_raw_max: float
    divergences: int
    converged: bool
    reason: str
    n_train: int
    n_test: int
    grad_evals: int
    runtime_s: float
    draws: MultiheadDraws


_PT_FIELDS: tuple[tuple[str, type], ...] = (
    ("swap_rate_min", float), ("swap_rate_mean", float), ("round_trips", int),
    ("replicas", int), ("ladder", str), ("swap_rates", str), ("hmc_accept_min", float))

MultiheadPTResult = NamedTuple("MultiheadPTResult", [
    *((n, MultiheadSamplingResult.__annotations__[n]) for n in MultiheadSamplingResult._fields),
    *_PT_FIELDS])
MultiheadPTResult.__doc__ = """The sampled Bayes-optimal estimator by parallel tempering
(``sampler="pt"``): every field of :class:`MultiheadSamplingResult` (``draws`` a
:class:`MultiheadPTDraws`, ``divergences`` its ``cold_rejects``, the verdict also requiring
the swap rates and round trips of :func:`bayesslr.bayes.method.verdict`), then the tempering
diagnostics of :meth:`bayesslr.bayes.pt.PTRun.tempering_summary`: ``swap_rate_min``,
``swap_rate_mean``, ``round_trips`` (all chains), ``replicas``, ``ladder`` and ``swap_rates``
(comma lists, hot end last), ``hmc_accept_min``."""


def _oracle_terms(task: MultiheadTask, teacher: MultiheadTeacher,
                  X: Array) -> tuple[Array, Array]:
    """Teacher's joint posterior ``P(eps* = l, f* = f | X)`` and ``z*`` flattened to
    ``(n, L F)``: :func:`bayesslr.core.metrics.score_given` then scores as for one head."""
    K, V = jnp.asarray(teacher.K, jnp.float32), jnp.asarray(teacher.V, jnp.float32)
    X = jnp.asarray(X, jnp.float32)
    a = math.sqrt(task.nu) * head_fields(X, K, "K") - 0.5 * task.nu * jnp.sum(K * K, -1) / task.D
    n = X.shape[0]
    return (jax.nn.softmax(a.reshape(n, -1), axis=-1),
            head_fields(X, V, "V").reshape(n, -1))


def _summary(d: dict[str, np.ndarray]) -> dict[str, float]:
    def red(a, fn):
        a = np.asarray(a)[np.isfinite(a)]
        return float(fn(a)) if a.size else math.nan

    return {"r_hat_max": red(d["r_hat"], np.max), "ess_bulk_min": red(d["ess_bulk"], np.min),
            "ess_tail_min": red(d["ess_tail"], np.min)}


def bayes_optimal_by_sampling(key: PRNGKey, task: MultiheadTask, teacher: MultiheadTeacher,
                              train: MultiheadData, test: MultiheadData,
                              options: MultiheadSamplingOptions | None = None
                              ) -> MultiheadSamplingResult | MultiheadPTResult:
    """Posterior-mean (Bayes-optimal) prediction by NUTS or parallel tempering, its test error
    against the teacher, invariant diagnostics and the convergence verdict (docs/multihead.md
    §7).

    Parameters
    ----------
    key : PRNGKey
        Key of the sampler (starts and transitions).
    task : MultiheadTask
        Discrete latent, ``delta > 0``.
    teacher : MultiheadTeacher
        Used only to score, to match overlaps and (``init="teacher"``) to start.
    train, test : MultiheadData
        Training and test data (:func:`sample_train_test`).
    options : MultiheadSamplingOptions, optional
        ``sampler="nuts"`` (default: :func:`posterior_draws`) or ``"pt"``
        (:func:`posterior_draws_pt`: the ``b = 1`` replica's draws, then the same prediction,
        scoring and invariant diagnostics).

    Returns
    -------
    MultiheadSamplingResult, or MultiheadPTResult for ``sampler="pt"``

    A measured example (sizes, numbers, wall time) is docs/multihead.md §7.4 (NUTS) and §7.6
    (PT).
    """
    task = check_sampling_task(task)
    _check_data(task, test, "test")
    opts = MultiheadSamplingOptions() if options is None else options
    if isinstance(opts, MultiheadSamplingOptions) and opts.test_points > np.shape(test.y)[0]:
        raise ConfigError(f"test_points={opts.test_points} is out of range; allowed: "
                          f"integer <= n_test = {np.shape(test.y)[0]}")
    if isinstance(opts, MultiheadSamplingOptions) and opts.sampler == "pt":
        pt = posterior_draws_pt(key, task, train, opts, teacher)
        tempering = {
            "swap_rate_min": float(np.nanmin(pt.swap_rates)) if pt.swap_rates.size else math.nan,
            "swap_rate_mean": (float(np.nanmean(pt.swap_rates)) if pt.swap_rates.size
                               else math.nan),
            "round_trips": int(pt.round_trips), "replicas": int(pt.betas.size),
            "ladder": ",".join(f"{b:.4g}" for b in pt.betas),
            "swap_rates": ",".join(f"{a:.3f}" for a in pt.swap_rates),
            "hmc_accept_min": (float(np.nanmin(pt.hmc_accept)) if pt.hmc_accept.size
                               else math.nan)}
        fields = _estimate(task, teacher, train, test, opts, pt, pt.cold_rejects,
                           {k: tempering[k] for k in ("swap_rate_min", "round_trips")})
        return MultiheadPTResult(**fields, **tempering)
    draws = posterior_draws(key, task, train, opts, teacher)
    return MultiheadSamplingResult(**_estimate(task, teacher, train, test, opts, draws,
                                               int(draws.diverging.sum()), {}))


def _estimate(task: MultiheadTask, teacher: MultiheadTeacher, train: MultiheadData,
              test: MultiheadData, opts: MultiheadSamplingOptions,
              draws: MultiheadDraws | MultiheadPTDraws, divergences: int,
              extra: dict[str, Any]) -> dict[str, Any]:
    """The fields of :class:`MultiheadSamplingResult` from the draws of either sampler:
    prediction, scores, invariant diagnostics and the verdict (``extra`` joins the verdict's
    summary: the tempering diagnostics)."""
    C = opts.chains
    # predictions and their scores
    P, z_s = _oracle_terms(task, teacher, test.X)
    y = jnp.asarray(test.y, jnp.float32)
    ex_c, pl_c, ex, pl = _predict_chains(task, draws.K, draws.V, test.X)
    s_ex = score_given(P, z_s, y, jnp.asarray(ex, jnp.float32))
    s_pl = score_given(P, z_s, y, jnp.asarray(pl, jnp.float32))
    per_chain = [float(score_given(P, z_s, y, jnp.asarray(e, jnp.float32)).test_error)
                 for e in ex_c]
    # invariant diagnostics
    q = invariant_quantities(task, draws.K, draws.V, train, test.X[:opts.test_points], teacher)
    per = {n: _summary(rank_diagnostics(a)) for n, a in q.items()}
    summary = _summary({k: np.concatenate([np.ravel(rank_diagnostics(a)[k]) for a in
                                           q.values()])
                        for k in ("r_hat", "ess_bulk", "ess_tail")})
    summary["divergences"] = divergences
    summary.update(extra)
    converged, reason = verdict(summary, C)
    C_, S_, F, D = draws.K.shape
    raw = rank_diagnostics(np.concatenate([draws.K.reshape(C_, S_, -1),
                                           draws.V.reshape(C_, S_, -1)], axis=-1))
    f = float
    return dict(
        test_error=f(s_ex.test_error), stderr=f(s_ex.stderr),
        mcmc_stderr=f(np.std(per_chain, ddof=1) / math.sqrt(C)),
        oracle_error=f(s_ex.oracle_error), oracle_error_stderr=f(s_ex.oracle_error_stderr),
        excess_over_oracle=f(s_ex.excess_over_oracle),
        excess_over_oracle_stderr=f(s_ex.excess_over_oracle_stderr),
        test_error_plain=f(s_pl.test_error), stderr_plain=f(s_pl.stderr), risk=f(s_ex.risk),
        overlap_K=tuple(f(x) for x in q["overlap_K"].mean(axis=(0, 1))),
        overlap_V=tuple(f(x) for x in q["overlap_V"].mean(axis=(0, 1))),
        r_hat_max=summary["r_hat_max"], ess_bulk_min=summary["ess_bulk_min"],
        ess_tail_min=summary["ess_tail_min"], per_quantity=per,
        r_hat_raw_max=_summary(raw)["r_hat_max"], divergences=divergences,
        converged=bool(converged), reason=reason, n_train=int(np.shape(train.y)[0]),
        n_test=int(np.shape(test.y)[0]), grad_evals=draws.grad_evals,
        runtime_s=draws.runtime_s, draws=draws)
