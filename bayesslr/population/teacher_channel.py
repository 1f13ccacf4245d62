"""Population-level teacher channel samples: one sampler for the population risks and the theory.

At ``D -> inf`` (with ``|k*|^2/D = |v*|^2/D = 1`` and zero cross overlap) one SLR sample is
described by its length ``L``, the hidden location ``eps*``, the teacher fields ``chi*, z*`` in
``R^L`` and the label ``y`` (docs/model.md §1, §3):

* spiked: ``chi*_l ~ N(0, 1)`` independently with ``chi*_{eps*} ~ N(sqrt(nu), 1)``;
* max: ``chi*_l ~ N(0, 1)`` independently and ``eps* ~ Categorical(softmax(nu chi*))`` (argmax
  at ``nu = inf``);
* ``z*_l ~ N(0, 1)`` independently, ``y = z*_{eps*} + sqrt(Delta) xi_y``;

together with independent ``xi, zeta ~ N(0, I_L)`` for the student's orthogonal parts. Every
expectation of the population risk (:mod:`bayesslr.population.method`), the replica fixed point and
the state evolution (:mod:`bayesslr.theory`) is a mean over these rows, with fixed common random
numbers.

Conventions:

* Every estimator here is permutation-equivariant in the tokens, so the spiked hidden token is
  placed at position 0 (``eps* = 0``); for max ``eps*`` is drawn, and the exact law of ``eps*``
  given ``chi*`` is returned too (``w``), so that an expectation can integrate it out.
* Lengths are stratified. ``allocation="equal"``: ``samples`` rows per length, each weighted by
  ``P(L) / samples``; ``"proportional"``: ``samples`` rows in all, ``round(samples P(L))`` per
  length (largest remainders), equal weights. A stratum's rows are drawn from
  ``fold_in(key(seed), L)`` at width ``L`` and padded, so they do not depend on the rest of the
  length law; padded positions are zero and masked.
"""

from __future__ import annotations

import dataclasses
import functools
import math
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from bayesslr.core.jaxconfig import Array
from bayesslr.core.task import (
    ConfigError,
    TaskConfig,
    check_int,
    location_logits,
    location_posterior,
    sample_count,
)

ALLOCATIONS: tuple[str, ...] = ("equal", "proportional")


class ChannelSamples(NamedTuple):
    """Teacher channel samples with their Gaussian companions (a JAX pytree).

    Attributes
    ----------
    chi_star : Array, shape (n, L_max)
        Teacher key fields ``chi*``; zero where masked.
    z_star : Array, shape (n, L_max)
        Teacher value fields ``z*``; zero where masked.
    y : Array, shape (n,)
        Labels ``z*_{eps*} + sqrt(Delta) xi_y``.
    eps : Array, shape (n,)
        Hidden location (0-based; 0 for spiked).
    w : Array, shape (n, L_max)
        Exact law of ``eps*`` given ``chi*`` (one-hot at 0 for spiked, ``softmax(nu chi*)``
        for max).
    mask : Array, shape (n, L_max), bool
        True where a token exists.
    length : Array, shape (n,)
        Sequence length of each row.
    xi, zeta : Array, shape (n, L_max)
        ``N(0, 1)`` companions of the key and value fields (zero where masked).
    weight : Array, shape (n,)
        Weight of each row in an expectation (sums to one).
    stratum : Array, shape (n,)
        Index of the row's length in the task's length law.
    """

    chi_star: Array
    z_star: Array
    y: Array
    eps: Array
    w: Array
    mask: Array
    length: Array
    xi: Array
    zeta: Array
    weight: Array
    stratum: Array

    n = property(sample_count, doc="Number of samples (the length of ``y``).")


def stratum_sizes(task: TaskConfig, samples: int, allocation: str) -> np.ndarray:
    """Rows per length of the law: ``samples`` each (``equal``) or ``round(samples P(L))``
    by largest remainders (``proportional``)."""
    if allocation == "equal":
        return np.full(len(task.length.values), samples, dtype=int)
    p = np.asarray(task.length.probs)
    raw = samples * p
    counts = np.floor(raw).astype(int)
    counts[np.argsort(-(raw - counts))[: samples - counts.sum()]] += 1
    return counts


def sample_channel(task: TaskConfig, samples: int, seed: int = 0, *,
                   allocation: str = "proportional") -> ChannelSamples:
    """Draw population-level channel samples (see the module docstring).

    Parameters
    ----------
    task : TaskConfig
        The task (its ``D`` is ignored: these are ``D -> inf`` fields).
    samples : int
        Rows per length (``equal``) or in all (``proportional``); at least 100.
    seed : int
        Seed of the common random numbers.
    allocation : {"equal", "proportional"}
        Stratification of the lengths.

    Returns
    -------
    ChannelSamples
        Arrays in the current default float precision (call inside ``jax.enable_x64`` for
        float64).
    """
    samples = check_int("samples", samples, low=100)
    seed = check_int("seed", seed, low=0)
    if allocation not in ALLOCATIONS:
        raise ConfigError(f"allocation={allocation!r} is unknown; allowed: one of "
                          f"{', '.join(ALLOCATIONS)}")
    fdt = jnp.result_type(float)
    L_max = task.L_max
    key = jax.random.key(seed)
    sizes = stratum_sizes(task, samples, allocation)
    parts = []
    for j, (L, p, n) in enumerate(zip(task.length.values, task.length.probs, sizes,
                                      strict=True)):
        if n == 0:
            continue
        kL = jax.random.fold_in(key, L)
        kc, kx = jax.random.split(kL)
        kz, ke, ky, kzeta = jax.random.split(jax.random.fold_in(kL, 1), 4)
        pad = ((0, 0), (0, L_max - L))
        chi = jax.random.normal(kc, (n, L), dtype=fdt)
        if task.variant == "spiked":
            chi = chi.at[:, 0].add(math.sqrt(task.nu))
        xi = jax.random.normal(kx, (n, L), dtype=fdt)
        z = jax.random.normal(kz, (n, L), dtype=fdt)
        zeta = jax.random.normal(kzeta, (n, L), dtype=fdt)
        parts.append((jnp.pad(chi, pad), jnp.pad(z, pad), jnp.pad(xi, pad), jnp.pad(zeta, pad),
                      jnp.broadcast_to(jnp.arange(L_max) < L, (n, L_max)),
                      jnp.full((n,), L, dtype=jnp.int32),
                      jnp.full((n,), p / n, dtype=fdt), jnp.full((n,), j, dtype=jnp.int32),
                      ke, ky))
    chi, z, xi, zeta, mask, length, weight, stratum = (
        jnp.concatenate([q[i] for q in parts], axis=0) for i in range(8))
    if task.variant == "spiked":
        eps = jnp.zeros(chi.shape[0], dtype=jnp.int32)
    else:
        logits = location_logits(task, chi, mask)
        eps = jnp.concatenate([
            jax.random.categorical(q[8], logits[o:o + q[0].shape[0]], axis=-1)
            for q, o in zip(parts, np.cumsum([0] + [q[0].shape[0] for q in parts[:-1]]),
                            strict=True)]).astype(jnp.int32)
    noise = jnp.concatenate([jax.random.normal(q[9], (q[0].shape[0],), dtype=fdt)
                             for q in parts])
    y = jnp.take_along_axis(z, eps[:, None], axis=1)[:, 0] + math.sqrt(task.delta) * noise
    if task.variant == "spiked":
        w = jnp.zeros_like(chi).at[:, 0].set(1.0)
    else:
        w = location_posterior(task, chi, mask)
    return ChannelSamples(chi, z, y, eps, w, mask, length, xi, zeta, weight, stratum)


@functools.lru_cache(maxsize=8)
def channel64(task: TaskConfig, samples: int, seed: int) -> ChannelSamples:
    """Float64 channel samples with proportional allocation (the theory's common random
    numbers), cached per (task without ``D``, size, seed)."""
    with jax.enable_x64(True):
        return sample_channel(dataclasses.replace(task, D=1), samples, seed)
