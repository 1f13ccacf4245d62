"""One NUTS run of a target in each library, at that library's recommended settings.

Three runners, one per library, each returning a :class:`Run`: the post-warm-up draws, the
gradient evaluations of every iteration (warm-up included), the divergences and a timeline of
``(gradients, wall seconds, CPU seconds)`` that the budget checkpoints read
(:mod:`bayesslr.crosslibrary.checkpoints`).

* ``numpyro``: NumPyro's NUTS kernel (``numpyro.infer.hmc.hmc(algo="NUTS")``, the function
  ``numpyro.infer.NUTS`` and ``MCMC`` wrap) on the potential ``-target.log_density`` with the
  defaults of ``numpyro.infer.NUTS``, read off the class (``target_accept_prob = 0.8``,
  ``max_tree_depth = 10``, a diagonal mass matrix and the step size adapted by Stan's windowed
  schedule, no heuristic step-size search); the chains ``vmap``-ed (``MCMC``'s
  ``chain_method = "vectorized"``). The functional kernel rather than ``MCMC`` so that the
  warm-up and the sampling chunks compile ahead of time, outside the clock. Gradients:
  ``HMCState.num_steps`` (leapfrog steps of each iteration's tree).
* ``blackjax``: ``blackjax.window_adaptation(blackjax.nuts, logdensity)`` with every default
  (target acceptance 0.8, diagonal mass matrix, initial step size 1), then ``blackjax.nuts``
  with the adapted parameters, one adaptation per chain, chains ``vmap``-ed (as BlackJAX's
  documentation runs several chains). Gradients: ``info.num_integration_steps``.
* ``nutpie``: ``nutpie.sample`` on the PyMC model of :mod:`bayesslr.export.slr_pymc` compiled
  by ``nutpie.compile_pymc_model`` (numba backend) with every default but the chain count and
  the warm-up (nutpie's default ``tune = 300``, ``target_accept = 0.8``, ``maxdepth = 10``, its
  diagonal mass-matrix adaptation), and ``cores = chains``: with fewer threads than chains
  nutpie runs the chains in batches, one batch to its end before the next starts, so a run
  stopped at a budget would hold only the first batch's chains. Gradients: the ``n_steps``
  sample stat. nutpie computes in float64 (its only precision), the JAX libraries in float32.

Every gradient of the full-data log density is counted, all chains together: each
iteration's leapfrog steps, plus one gradient per chain at the start. All three runners start
every chain at the target's teacher (an exact posterior draw, the same point for every library),
run the same number of warm-up iterations (``warmup``, 300 by default: nutpie's default; NumPyro
and BlackJAX require the user to choose, and Stan's window schedule, which both implement,
fits 300 exactly) and then sample until ``budget`` gradients are spent (the overshoot is at most
one chunk of iterations, or one poll of nutpie's background sampler).

Time: compilation is done before the clock starts and measured apart (``compile_s``, wall
seconds): the JAX runners compile their warm-up and their sampling chunk ahead of time
(``jax.jit(...).lower(...).compile()``), nutpie in ``compile_pymc_model``. CPU seconds are
``time.process_time`` (every thread of the process: XLA's and nutpie's).
"""

from __future__ import annotations

import time
import warnings
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from bayesslr.core.task import ConfigError, check_int

LIBRARIES: tuple[str, ...] = ("numpyro", "blackjax", "nutpie")
ALGORITHMS: tuple[str, ...] = ("nuts",)
DEFAULT_CHAINS = 4
DEFAULT_WARMUP = 300
CHUNK = 100  # iterations per compiled sampling chunk of the JAX runners
POLL_S = 1.0  # seconds between two looks at nutpie's background sampler
MAX_ITERATIONS = 200_000  # a cap per chain, far above any budget of this board

@dataclass
class Run:
    """One library's run on one target.

    Attributes
    ----------
    library : str
        One of :data:`LIBRARIES`.
    k, v : numpy.ndarray
        Post-warm-up draws, ``(chains, n, D)``.
    warmup_grads : numpy.ndarray
        Gradient evaluations of each warm-up iteration, ``(chains, warmup)``.
    grads : numpy.ndarray
        Gradient evaluations of each post-warm-up iteration, ``(chains, n)``.
    divergent : numpy.ndarray
        Whether each post-warm-up iteration diverged, ``(chains, n)`` bool.
    init_grads : int
        Gradients spent before the first iteration (one per chain).
    timeline : numpy.ndarray
        ``(m, 3)``: gradients spent so far (all chains), wall and CPU seconds since the start,
        compilation taken out; the first row is ``(init_grads, 0, 0)``.
    compile_s : float
        Seconds of compilation, apart from the timeline.
    settings : dict
        The library's settings as run (version included).
    """

    library: str
    k: np.ndarray
    v: np.ndarray
    warmup_grads: np.ndarray
    grads: np.ndarray
    divergent: np.ndarray
    init_grads: int
    timeline: np.ndarray
    compile_s: float
    settings: dict[str, Any] = field(default_factory=dict)

    @property
    def chains(self) -> int:
        return int(self.k.shape[0])

    @property
    def total_grads(self) -> int:
        return int(self.init_grads + self.warmup_grads.sum() + self.grads.sum())


def check_library(library: str) -> str:
    """``library`` if it is one of :data:`LIBRARIES`, else one clear line.

    Examples
    --------
    >>> check_library("nutpie")
    'nutpie'
    >>> check_library("stan")
    Traceback (most recent call last):
    ...
    bayesslr.core.task.ConfigError: library='stan' is unknown; allowed: numpyro, blackjax, nutpie
    """
    if library not in LIBRARIES:
        raise ConfigError(f"library={library!r} is unknown; allowed: {', '.join(LIBRARIES)}")
    return library


def check_run_args(chains: int, warmup: int, budget: float) -> tuple[int, int, float]:
    """Validated ``(chains, warmup, budget)``, one line naming a bad one and its range."""
    chains = check_int("chains", chains, low=1, high=64)
    warmup = check_int("warmup", warmup, low=10, high=100_000)
    if not isinstance(budget, (int, float)) or not np.isfinite(budget) or not (
            10 <= budget <= 1e9):
        raise ConfigError(f"budget={budget!r} is out of range; allowed: gradient evaluations "
                          "in [10, 1e9]")
    return chains, warmup, float(budget)


class _Clock:
    """Wall and CPU seconds since the start (everything compiled before it starts)."""

    def __init__(self) -> None:
        self.wall0, self.cpu0 = time.perf_counter(), time.process_time()

    def now(self) -> tuple[float, float]:
        return time.perf_counter() - self.wall0, time.process_time() - self.cpu0


def _aot(fn: Any, *args: Any) -> tuple[Any, float]:
    """``jax.jit(fn)`` compiled ahead of time for ``args``, and the seconds it took."""
    import jax

    c0 = time.perf_counter()
    compiled = jax.jit(fn).lower(*args).compile()
    return compiled, time.perf_counter() - c0


def _stack(ks: list, vs: list, gs: list, dv: list, chains: int, D: int) -> dict:
    """The chunks joined along the draws (an empty run: no draws, the budget spent in
    warm-up)."""
    if not gs:
        ks, vs = [np.zeros((chains, 0, D), np.float32)], [np.zeros((chains, 0, D), np.float32)]
        gs, dv = [np.zeros((chains, 0), np.int64)], [np.zeros((chains, 0), bool)]
    return {"k": np.concatenate(ks, 1), "v": np.concatenate(vs, 1),
            "grads": np.concatenate(gs, 1), "divergent": np.concatenate(dv, 1)}


def _until_budget(start: Callable[[], tuple[Any, Any]],
                  step: Callable[[int, Any], tuple[Any, tuple[Any, Any, Any]]], chains: int,
                  budget: float, D: int) -> dict:
    """The sampling loop of the JAX runners, timed from the warm-up on.

    ``state, warmup_steps = start()`` runs the warm-up; then ``state, (draws, n_steps,
    divergent) = step(i, state)`` for ``i = 0, 1, ...`` (``CHUNK`` iterations per chain each,
    ``draws`` a ``{"k", "v"}`` dict) until ``budget`` gradients (the starts', the warm-up's and
    the chunks') are spent or ``MAX_ITERATIONS`` are drawn. Returns the :class:`Run` fields of
    the draws (:func:`_stack`), ``warmup_grads``, ``init_grads`` and ``timeline``.
    """
    ks, vs, gs, dv = [], [], [], []
    clock = _Clock()
    timeline = [(chains, 0.0, 0.0)]
    state, w = start()
    w_grads = np.asarray(w, np.int64).reshape(chains, -1)
    spent = chains + int(w_grads.sum())
    timeline.append((spent, *clock.now()))
    i = 0
    while spent < budget and len(gs) * CHUNK < MAX_ITERATIONS:
        state, (z, n, d) = step(i, state)
        ks.append(np.asarray(z["k"]))
        vs.append(np.asarray(z["v"]))
        gs.append(np.asarray(n, np.int64))
        dv.append(np.asarray(d, bool))
        spent += int(gs[-1].sum())
        timeline.append((spent, *clock.now()))
        i += 1
    return {**_stack(ks, vs, gs, dv, chains, D), "warmup_grads": w_grads,
            "init_grads": chains, "timeline": np.asarray(timeline)}


def _teacher_starts(target: Any, chains: int, dtype: Any = np.float32) -> dict[str, np.ndarray]:
    return {c: np.tile(np.asarray(target.teacher[c], dtype), (chains, 1)) for c in "kv"}


def run_numpyro(target: Any, *, chains: int = DEFAULT_CHAINS, warmup: int = DEFAULT_WARMUP,
                budget: float = 1e5, seed: int = 0) -> Run:
    """NumPyro NUTS (``MCMC``, defaults) from the teacher until ``budget`` gradients.

    Tested (gradient counts, budget) by ``tests/test_leaderboard.py``; see
    :func:`run_library`.
    """
    import jax
    import jax.numpy as jnp
    import numpyro
    from numpyro.infer import NUTS

    chains, warmup, budget = check_run_args(chains, warmup, budget)

    def potential(z):
        return -target.log_density(z)

    # NUTS's defaults, read off the class so that they are the library's, not ours
    kern = NUTS(potential_fn=potential)
    kw = {"num_warmup": warmup, "target_accept_prob": kern._target_accept_prob,
          "max_tree_depth": kern._max_tree_depth, "dense_mass": kern._dense_mass,
          "adapt_step_size": kern._adapt_step_size, "adapt_mass_matrix": kern._adapt_mass_matrix,
          "find_heuristic_step_size": kern._find_heuristic_step_size}
    init_kernel, sample_kernel = numpyro.infer.hmc.hmc(potential_fn=potential, algo="NUTS")

    def warm_one(key, z0):
        state = init_kernel(z0, rng_key=key, **kw)

        def step(st, _):
            st = sample_kernel(st)
            return st, st.num_steps

        return jax.lax.scan(step, state, None, length=warmup)

    def chunk_one(state):
        def step(st, _):
            st = sample_kernel(st)
            return st, (st.z, st.num_steps, st.diverging)

        return jax.lax.scan(step, state, None, length=CHUNK)

    keys = jax.random.split(jax.random.key(seed), chains)
    init = {c: jnp.asarray(x) for c, x in _teacher_starts(target, chains).items()}
    warm, c1 = _aot(jax.vmap(warm_one), keys, init)
    state_shape = jax.eval_shape(jax.vmap(warm_one), keys, init)[0]
    chunk, c2 = _aot(jax.vmap(chunk_one), state_shape)
    drawn = _until_budget(lambda: warm(keys, init), lambda _, state: chunk(state), chains,
                          budget, target.D)
    settings = {"numpyro": numpyro.__version__,
                "kernel": "numpyro.infer.hmc.hmc(algo='NUTS'), the kernel of "
                          "numpyro.infer.NUTS, with NUTS's defaults",
                **{k: (v if isinstance(v, (bool, int, float)) else str(v))
                   for k, v in kw.items() if k != "num_warmup"},
                "chain_method": "vmap (MCMC's 'vectorized')", "chains": chains,
                "warmup": warmup, "dtype": "float32", "start": "teacher"}
    return Run("numpyro", **drawn, compile_s=c1 + c2, settings=settings)


def run_blackjax(target: Any, *, chains: int = DEFAULT_CHAINS, warmup: int = DEFAULT_WARMUP,
                 budget: float = 1e5, seed: int = 0) -> Run:
    """BlackJAX NUTS after ``window_adaptation`` (defaults) from the teacher until ``budget``.

    Tested (gradient counts, budget) by ``tests/test_leaderboard.py``; see
    :func:`run_library`.
    """
    import blackjax
    import jax
    import jax.numpy as jnp

    chains, warmup, budget = check_run_args(chains, warmup, budget)
    logdensity = target.log_density

    def warm_one(key, x0):
        adapt = blackjax.window_adaptation(blackjax.nuts, logdensity)
        (state, params), info = adapt.run(key, x0, num_steps=warmup)
        return state, params, info.info.num_integration_steps

    def chunk_one(key, state, params):
        step = blackjax.nuts(logdensity, **params).step

        def one(st, k):
            st, inf = step(k, st)
            return st, (st.position, inf.num_integration_steps, inf.is_divergent)

        return jax.lax.scan(one, state, jax.random.split(key, CHUNK))

    key_warm, key_run = jax.random.split(jax.random.key(seed))
    wkeys = jax.random.split(key_warm, chains)
    init = {c: jnp.asarray(x) for c, x in _teacher_starts(target, chains).items()}
    warm, c1 = _aot(jax.vmap(warm_one), wkeys, init)
    state_shape, params_shape, _ = jax.eval_shape(jax.vmap(warm_one), wkeys, init)
    chunk, c2 = _aot(jax.vmap(chunk_one), wkeys, state_shape, params_shape)
    def start():
        state, params, w = warm(wkeys, init)
        return (state, params), w

    def step(i, state_params):
        state, params = state_params
        keys = jax.random.split(jax.random.fold_in(key_run, i), chains)
        state, out = chunk(keys, state, params)
        return (state, params), out

    drawn = _until_budget(start, step, chains, budget, target.D)
    settings = {"blackjax": blackjax.__version__,
                "kernel": "blackjax.window_adaptation(blackjax.nuts) + blackjax.nuts",
                "target_acceptance_rate": 0.8, "is_mass_matrix_diagonal": True,
                "initial_step_size": 1.0, "max_num_doublings": 10,
                "chain_method": "vmap, one adaptation per chain", "chains": chains,
                "warmup": warmup, "dtype": "float32", "start": "teacher"}
    return Run("blackjax", **drawn, compile_s=c1 + c2, settings=settings)


def _nutpie_counts(trace: Any, chains: int) -> tuple[np.ndarray, np.ndarray, np.ndarray,
                                                     int, int]:
    """Warm-up and sampling ``n_steps``, the sampling divergences (``(chains, n)`` each) and
    the warm-up and sampling iterations every chain has finished (nutpie pads a chain behind
    the others with NaN draws and zero stats)."""
    def group(name: str) -> Any:
        return getattr(trace, name) if hasattr(trace, name) else {}

    def stat(g: str, name: str) -> np.ndarray:
        ds = group(g)
        if name not in ds:
            return np.zeros((chains, 0))
        return np.asarray(ds[name].values, float).reshape(chains, -1)

    def finished(g: str) -> int:
        ds = group(g)
        if "k" not in ds:
            return 0
        done = np.isfinite(np.asarray(ds["k"].values)).all(axis=-1).all(axis=0)
        return int(done.size if done.all() else np.argmin(done))

    return (stat("warmup_sample_stats", "n_steps"), stat("sample_stats", "n_steps"),
            stat("sample_stats", "diverging"), finished("warmup_posterior"),
            finished("posterior"))


def run_nutpie(target: Any, *, chains: int = DEFAULT_CHAINS, warmup: int = DEFAULT_WARMUP,
               budget: float = 1e5, seed: int = 0) -> Run:
    """PyMC + nutpie (defaults but chains and tune) from the teacher until ``budget``.

    The sampler runs in the background (``blocking=False``) and is looked at every
    :data:`POLL_S` seconds; it is aborted once the chains together have spent ``budget``
    gradients in the iterations every chain has finished (the chains run on their own threads,
    some ahead of others; what the leaders did beyond is dropped, its cost is in the
    timeline's seconds; the looks cost a little CPU, counted there too).

    Tested (gradient counts, budget) by ``tests/test_leaderboard.py``; see
    :func:`run_library`.
    """
    chains, warmup, budget = check_run_args(chains, warmup, budget)
    try:
        import nutpie
        import pymc
    except ImportError as exc:
        raise ImportError(f"the nutpie runner needs nutpie and PyMC ({exc}); install the "
                          "bench extra: pip install -e '.[bench]'") from None
    from bayesslr.export.slr_pymc import model

    data = {**target.data, "variant": target.task.variant, "nu": target.task.nu,
            "delta": target.task.delta}
    start = {c: np.asarray(target.teacher[c], np.float64) for c in "kv"}
    c0 = time.perf_counter()
    compiled = nutpie.compile_pymc_model(model(data), initial_points=start, jitter_rvs=set())
    compile_s = time.perf_counter() - c0
    wall0, cpu0 = time.perf_counter(), time.process_time()
    timeline = [(chains, 0.0, 0.0)]
    sampler = nutpie.sample(compiled, draws=min(MAX_ITERATIONS, int(budget)), tune=warmup,
                            chains=chains, cores=chains, seed=seed, progress_bar=False,
                            blocking=False)
    trace = None
    try:
        while True:
            time.sleep(POLL_S)
            with warnings.catch_warnings():  # ArviZ: "more chains than draws" in warm-up
                warnings.filterwarnings("ignore", "More chains", UserWarning)
                w, s, _, nw, n = _nutpie_counts(sampler.inspect(), chains)
            # the iterations every chain has finished (the chains run ahead of one another)
            spent = chains + int(w[:, :nw].sum() + (s[:, :n].sum() if nw == warmup else 0))
            timeline.append((spent, time.perf_counter() - wall0, time.process_time() - cpu0))
            if spent >= budget or n >= MAX_ITERATIONS:
                with warnings.catch_warnings():
                    warnings.filterwarnings("ignore", "More chains", UserWarning)
                    trace = sampler.abort()
                break
    finally:
        if trace is None:  # interrupted: stop the sampler's threads before the interpreter
            sampler.cancel()
    w, s, d, nw, n = _nutpie_counts(trace, chains)
    n = n if nw == warmup else 0
    k = np.asarray(trace.posterior["k"].values, np.float64)[:, :n] if n else np.zeros(
        (chains, 0, target.D))
    v = np.asarray(trace.posterior["v"].values, np.float64)[:, :n] if n else np.zeros(
        (chains, 0, target.D))
    w_grads = np.nan_to_num(w[:, :nw]).astype(np.int64)
    grads = s[:, :n].astype(np.int64)
    total = chains + int(w_grads.sum() + grads.sum())
    timeline.append((total, time.perf_counter() - wall0, time.process_time() - cpu0))
    tl = np.asarray(timeline, float)
    tl[:, 0] = np.maximum.accumulate(tl[:, 0])
    settings = {"nutpie": nutpie.__version__, "pymc": pymc.__version__,
                "kernel": "nutpie.sample(nutpie.compile_pymc_model(slr_pymc.model), "
                          "backend='numba')",
                "target_accept": 0.8, "maxdepth": 10, "tune": warmup, "chains": chains,
                "cores": chains, "low_rank_modified_mass_matrix": False,
                "warmup": warmup, "dtype": "float64", "start": "teacher"}
    return Run("nutpie", k=k, v=v, warmup_grads=w_grads, grads=grads,
               divergent=d[:, :n].astype(bool), init_grads=chains, timeline=tl,
               compile_s=compile_s, settings=settings)


RUNNERS = {"numpyro": run_numpyro, "blackjax": run_blackjax, "nutpie": run_nutpie}


def run_library(library: str, target: Any, **kwargs: Any) -> Run:
    """The runner of ``library`` (:data:`RUNNERS`) on ``target``; ``kwargs`` as the runners'.

    Examples
    --------
    >>> run_library("pystan", None)
    Traceback (most recent call last):
    ...
    bayesslr.core.task.ConfigError: library='pystan' is unknown; allowed: numpyro, blackjax, nutpie
    """
    return RUNNERS[check_library(library)](target, **kwargs)
