"""The NUTS layer: one kernel on the SLR posterior (docs/model.md §6) under two faces.

Both drivers of the suite run the same NumPyro kernel (``numpyro.infer.hmc.hmc``, the function
NumPyro's own ``NUTS`` and ``MCMC`` are built on) through this module:

* :mod:`bayesslr.bayes.sampler` (``bayes_sampling``): a fixed number of warm-up iterations and
  draws per chain, all in one compiled call (:func:`compiled_run`);
* :mod:`bayesslr.inference.mcmc` (the ``inference`` benchmark): the same kernel stepped in
  compiled chunks until a gradient budget is spent.

What the layer owns: the model's arguments (:func:`model_args`), its potential energy
(:func:`potential_fn_gen`), the kernel with its settings (:func:`kernel`), how chains share the
host (:func:`over_chains`), the two warm-ups of a fixed-length run (NumPyro's windowed
adaptation, or the gradient-based one of :mod:`bayesslr.bayes.warmup`) and the diagnostics of
the draws (:func:`chain_diagnostics`). The faces own their options, starts, schedules and
result types.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax
from numpyro.infer.hmc import hmc
from numpyro.infer.util import log_density

from bayesslr.bayes import arviz_adapter
from bayesslr.bayes import warmup as _warmup
from bayesslr.bayes.model import MODELS, ModelSpec
from bayesslr.core.jaxconfig import Array
from bayesslr.core.task import Data


def model_args(spec: ModelSpec, data: Data, dtype: Any = jnp.float32,
               weights: Array | None = None) -> tuple[Array, ...]:
    """``(X, y, mask, weights, nu, delta)``: the arguments of every model of
    :data:`bayesslr.bayes.model.MODELS`, cast to ``dtype`` (the mask stays boolean).

    Parameters
    ----------
    spec : ModelSpec
        Likelihood (``nu``, ``Delta``).
    data : Data
        Training data.
    dtype : dtype
        Floating type of the arrays.
    weights : Array, shape (n,), optional
        Per-sample log-likelihood weights (default all ones).
    """
    X = jnp.asarray(data.X, dtype)
    y = jnp.asarray(data.y, dtype)
    mask = jnp.asarray(data.mask, bool)
    w = jnp.ones(y.shape, dtype) if weights is None else jnp.asarray(weights, dtype)
    return X, y, mask, w, jnp.asarray(spec.nu, dtype), jnp.asarray(spec.delta, dtype)


def potential_fn_gen(model: str, variant: str) -> Callable[..., Callable[[dict], Array]]:
    """``(X, y, mask, weights, nu, delta) -> (params -> potential energy)`` of a NumPyro model.

    The potential is minus the model's joint log density (``numpyro.infer.util.log_density``,
    or funsor's enumerating version for the ``enumerated`` model); ``k`` and ``v`` are
    unconstrained, so no Jacobian enters.
    """
    fn = functools.partial(MODELS[model], variant=variant)
    if model == "enumerated":
        from numpyro.contrib.funsor import enum
        from numpyro.contrib.funsor import log_density as enum_log_density

        enumerated = enum(fn, first_available_dim=-2)

        def gen(*args):
            return lambda params: -enum_log_density(enumerated, args, {}, params)[0]
    else:
        def gen(*args):
            return lambda params: -log_density(fn, args, {}, params)[0]
    return gen


class Kernel(NamedTuple):
    """NumPyro's HMC/NUTS kernel of one chain, its settings bound.

    Attributes
    ----------
    init : callable
        ``init(key, z0, args) -> HMCState``: the state at ``z0`` with the warm-up schedule of
        ``num_warmup`` iterations (step size and mass matrix adapt while the iteration counter
        is below it).
    step : callable
        ``step(state, args) -> HMCState``: one transition.
    """

    init: Callable[..., Any]
    step: Callable[..., Any]


def kernel(gen: Callable[..., Callable[[dict], Array]], num_warmup: int, *,
           algo: str = "NUTS", target_accept: float = 0.8, max_tree_depth: int = 10,
           trajectory_length: float | None = None, mass: str = "diag") -> Kernel:
    """The kernel on the potential ``gen(*args)`` (``numpyro.infer.hmc.hmc``).

    Parameters
    ----------
    gen : callable
        ``gen(*args) -> (params -> potential energy)`` (:func:`potential_fn_gen`).
    num_warmup : int
        Iterations of NumPyro's windowed adaptation (Stan's schedule).
    algo : {"NUTS", "HMC"}
        NUTS, or static HMC with a fixed ``trajectory_length``.
    target_accept : float
        Target acceptance probability of the step-size adaptation.
    max_tree_depth : int
        NUTS's maximal tree depth.
    trajectory_length : float
        HMC's integration time.
    mass : {"diag", "dense", "none"}
        Mass matrix adapted in the warm-up (``none``: identity, step size only).
    """
    init_kernel, sample_kernel = hmc(potential_fn_gen=gen, algo=algo)
    kw: dict[str, Any] = {"target_accept_prob": target_accept,
                          "adapt_mass_matrix": mass != "none", "dense_mass": mass == "dense"}
    if algo == "HMC":
        kw["trajectory_length"] = trajectory_length
    else:
        kw["max_tree_depth"] = max_tree_depth

    def init(key, z0, args):
        return init_kernel(z0, num_warmup, model_args=args, rng_key=key, **kw)

    def step(state, args):
        return sample_kernel(state, model_args=args)

    return Kernel(init, step)


def over_chains(fn: Callable[..., Any], in_axes: tuple[int | None, ...],
                method: str = "vectorized", axis_name: str | None = None) -> Callable[..., Any]:
    """``fn`` of one chain run on all chains: the arguments with ``in_axes`` 0 are per chain.

    ``vectorized``: one jitted ``vmap``; ``parallel``: ``pmap`` (one host device per chain);
    ``sequential``: one jitted ``lax.map``, chains one after another. ``axis_name`` names the
    chain axis for collectives (pooled adaptation; not with ``sequential``).
    """
    if method == "parallel":
        return jax.pmap(fn, in_axes=in_axes, axis_name=axis_name)
    if method == "sequential":
        chained = [i for i, ax in enumerate(in_axes) if ax == 0]

        def one_by_one(*args):
            def one(xs):
                full = list(args)
                for i, x in zip(chained, xs, strict=True):
                    full[i] = x
                return fn(*full)

            return lax.map(one, tuple(args[i] for i in chained))

        return jax.jit(one_by_one)
    return jax.jit(jax.vmap(fn, in_axes=in_axes, axis_name=axis_name))


@functools.lru_cache(maxsize=32)
def compiled_run(model: str, variant: str, chains: int, warmup: int, draws: int, method: str,
                 target_accept: float, max_tree_depth: int, adapt: str = "grad",
                 mass: str = "diag", pool: bool = True) -> Callable[..., Any]:
    """One compiled NUTS run (warm-up and draws, all chains) per static configuration.

    ``fn(keys, z0, args) -> (k, v, log_density, diverging, num_steps, warm-up steps,
    step_size)``, each with a leading chain axis. The data, weights, ``nu``, ``Delta``, keys
    and starts are arguments, so a new seed, new data of the same shape or a new ``nu`` reuses
    the compiled function (``jit_model_args`` in NumPyro's terms); JAX's persistent cache keeps
    it across processes.

    ``adapt="grad"`` warms up with :func:`bayesslr.bayes.warmup.run_warmup` (pooled over the
    chain axis when ``pool``); ``adapt="stan"`` with the kernel's own windowed adaptation,
    warm-up and draws in one scan (NUTS is traced once: tracing dominates compilation).
    """
    gen = potential_fn_gen(model, variant)
    axis = "chains" if (pool and method != "sequential" and chains > 1) else None

    def one_chain_grad(key, z0, args):
        pe_tree = gen(*args)
        D = z0["k"].shape[-1]

        def potential(zf):
            return pe_tree({"k": zf[:D], "v": zf[D:]})

        r = _warmup.run_warmup(potential, jnp.concatenate([z0["k"], z0["v"]]), key, warmup,
                               draws, target_accept=target_accept,
                               max_tree_depth=max_tree_depth, adapt_mass=(mass == "diag"),
                               axis_name=axis)
        return r.z[:, :D], r.z[:, D:], r.log_density, r.diverging, r.steps, r.steps_warmup, \
            r.step_size

    nuts = kernel(gen, warmup, target_accept=target_accept, max_tree_depth=max_tree_depth,
                  mass=mass)

    def one_chain_stan(key, z0, args):
        state = nuts.init(key, z0, args)

        def step(st, _):
            st = nuts.step(st, args)
            return st, (st.z, -st.potential_energy, st.diverging, st.num_steps)

        state, (z, logp, div, steps) = lax.scan(step, state, None, length=warmup + draws)
        steps_w = jnp.sum(steps[:warmup])
        z = {n: a[warmup:] for n, a in z.items()}
        logp, div, steps = logp[warmup:], div[warmup:], steps[warmup:]
        return z["k"], z["v"], logp, div, steps, steps_w, state.adapt_state.step_size

    one_chain = one_chain_grad if adapt == "grad" else one_chain_stan
    return over_chains(one_chain, (0, 0, None), method, axis)


def chain_diagnostics(k: np.ndarray, v: np.ndarray, min_draws: float = 2) -> dict[str, float]:
    """Rank-normalised split R-hat (max) and bulk / tail ESS (min) over every coordinate of
    draws ``(chains, draws, D)``; NaN with fewer than ``min_draws`` draws per chain (``inf``:
    never computed).

    ArviZ's formulas as array operations over all ``2 D`` coordinates at once
    (:mod:`bayesslr.bayes.diagnostics`, issue 35: ArviZ's loop over coordinates was ~30 % of a
    short NUTS run); the values equal ArviZ's to rounding (``tests/test_fast_diagnostics.py``),
    so the family version is unchanged. Through :func:`arviz_adapter.diagnostics`, which is that
    computation (no ArviZ call)."""
    if k.shape[1] < min_draws:
        return {"r_hat_max": math.nan, "ess_bulk_min": math.nan, "ess_tail_min": math.nan}
    return arviz_adapter.diagnostics({"k": k, "v": v})

