"""The suite's data draw, chunk by chunk: the same numbers as :func:`bayesslr.core.task.sample_task`
with a fraction of its memory (docs/model.md §1).

``sample_task`` draws the tokens ``X ~ N(0, I)`` of shape ``(n, L, D)`` with one call of
``jax.random.normal``; on CPU, XLA lowers its Threefry generator as a loop over full-size
arrays, so the draw holds four to six copies of ``X`` at once (measured with XLA's memory
analysis: temporaries 4x the output for the spiked variant, 6x for max). At the paper's sizes
(``sqrt(N D) = 10^4``; a test set of ``10^4`` samples at ``D = 14142`` is 1.7 GB) that is
several GB beyond the data itself.

JAX's partitionable Threefry (``jax_threefry_partitionable``, the default) makes the bits of each
element a function of the key and the element's flat index alone, so any block of rows of that
array can be computed on its own: :func:`normal_rows` does so, with JAX's own ``uniform`` ->
``normal`` transformation, and the functions here build the training set into one buffer chunk
by chunk (:func:`draw_train`) or stream the test set through a consumer without ever holding
it (:func:`stream_test`). Every other draw of ``sample_task`` (teacher, lengths, locations,
label noise: ``O(n L)`` numbers) is made exactly as there, whole. The results are bit for bit
those of ``sample_task`` (tested); where the conditions do not hold (another PRNG, or more
than ``2^32`` tokens) :func:`can_stream` says so and the callers use ``sample_task`` itself.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax.extend.random import threefry2x32_p

from bayesslr.core.jaxconfig import Array, PRNGKey
from bayesslr.core.task import (
    Data,
    TaskConfig,
    Teacher,
    fields,
    length_mask,
    location_logits,
    sample_lengths,
    sample_teacher,
)

CHUNK_BYTES = 2**22  # tokens generated per chunk


def can_stream(key: PRNGKey, n: int, task: TaskConfig) -> bool:
    """Whether :func:`normal_rows` reproduces ``jax.random.normal`` for this draw: Threefry
    keys, the partitionable bit layout, fewer than ``2^32`` tokens."""
    impl = str(jax.random.key_impl(key))
    return (jax.config.jax_threefry_partitionable and "threefry" in impl.lower()
            and n * task.L_max * task.D < 2**32)


def normal_rows(key: PRNGKey, shape: tuple[int, ...], start: Array, rows: int) -> Array:
    """Rows ``start .. start + rows`` (leading axis) of ``jax.random.normal(key, shape)``
    (float32), computed without the rest of the array.

    The bits of flat element ``i`` are ``b1 ^ b2`` with ``(b1, b2) = threefry2x32(key, (0, i))``
    (JAX's partitionable layout, valid below ``2^32`` elements); the float is JAX's: 23 random
    mantissa bits give ``u`` in ``[nextafter(-1, 0), 1)``, and ``sqrt(2) erfinv(u)`` is normal.
    """
    row = math.prod(shape[1:])
    k1, k2 = jax.random.key_data(key)
    local = jax.lax.iota(jnp.uint32, rows * row).reshape((rows, *shape[1:]))
    lo = jnp.asarray(start, jnp.uint32) * jnp.uint32(row) + local
    hi = jnp.zeros_like(lo)
    b1, b2 = threefry2x32_p.bind(k1, k2, hi, lo)
    bits = b1 ^ b2
    dtype = np.dtype(np.float32)
    finfo = np.finfo(dtype)
    float_bits = jax.lax.shift_right_logical(bits, jnp.array(finfo.bits - finfo.nmant,
                                                             jnp.uint32))
    float_bits = jax.lax.bitwise_or(float_bits, jnp.asarray(np.array(1.0, dtype).view(
        np.uint32), dtype=jnp.uint32))
    floats = jax.lax.bitcast_convert_type(float_bits, dtype) - jnp.array(1.0, dtype)
    minval = jnp.asarray(np.nextafter(np.array(-1.0, dtype), np.array(0.0, dtype),
                                      dtype=dtype))
    maxval = jnp.asarray(np.array(1.0, dtype))
    u = jax.lax.max(minval, floats * (maxval - minval) + minval)
    return jax.lax.mul(np.array(np.sqrt(2), dtype), jax.lax.erf_inv(u))


def stream_chunk_rows(n: int, task: TaskConfig, chunk_bytes: float = CHUNK_BYTES) -> int:
    """Samples per chunk (about ``chunk_bytes`` of tokens, at least one, at most ``n``)."""
    return int(min(n, max(1, chunk_bytes // (4 * task.L_max * task.D))))


class _Plan:
    """What :func:`bayesslr.core.task.sample_data` draws whole (``O(n L)`` numbers), and how one
    chunk of tokens is completed: the same operations, in the same order."""

    def __init__(self, key: PRNGKey, task: TaskConfig, teacher: Teacher, n: int) -> None:
        kL, self.kx, ke, self.kn = jax.random.split(key, 4)
        self.task, self.teacher, self.n = task, teacher, n
        self.lengths = sample_lengths(kL, task.length, n)
        self.mask = length_mask(self.lengths, task.L_max)
        if task.variant == "spiked":
            u = jax.random.uniform(ke, (n,))
            self.eps = jnp.minimum(jnp.floor(u * self.lengths).astype(jnp.int32),
                                   self.lengths - 1)
            self.gumbel = None
        else:  # jax.random.categorical(ke, logits): argmax(gumbel(ke, logits.shape) + logits)
            self.eps = None
            self.gumbel = jax.random.gumbel(ke, (n, task.L_max), jnp.float32)

    def chunk(self, start: Array, B: int) -> tuple[Array, Array, Array]:
        """Tokens ``X`` (masked), ``z*`` and ``eps*`` of samples ``start .. start + B``."""
        task, teacher = self.task, self.teacher
        L_max, D = task.L_max, task.D
        sl = lambda a: jax.lax.dynamic_slice_in_dim(a, start, B)  # noqa: E731
        X = normal_rows(self.kx, (self.n, L_max, D), start, B)
        mask = sl(self.mask)
        if task.variant == "spiked":
            eps = sl(self.eps)
            spike = jnp.sqrt(task.nu / D) * teacher.k
            X = X + jax.nn.one_hot(eps, L_max)[:, :, None] * spike[None, None, :]
        else:
            chi_star = X @ teacher.k / jnp.sqrt(D)
            logits = location_logits(task, chi_star, mask)
            eps = jnp.argmax(sl(self.gumbel) + logits, axis=-1).astype(jnp.int32)
        X = X * mask[:, :, None]
        z_star = X @ teacher.v / jnp.sqrt(D)
        return X, z_star, eps

    def labels(self, z_star: Array, eps: Array) -> Array:
        y = jnp.take_along_axis(z_star, eps[:, None], axis=1)[:, 0]
        return y + jnp.sqrt(self.task.delta) * jax.random.normal(self.kn, (self.n,))


def _chunks(n: int, B: int, body: Callable[[Array, Array, Any], Any], init: Any) -> Any:
    """``body(start, fresh, carry)`` over chunks of ``B`` rows; the last chunk ends at ``n``
    and overlaps the one before (``fresh`` marks its rows not seen yet)."""

    def step(i, carry):
        start = jnp.minimum(i * B, n - B)
        fresh = (start + jnp.arange(B)) >= i * B
        return body(start, fresh, carry)

    return jax.lax.fori_loop(0, -(-n // B), step, init)


def draw_train(key: PRNGKey, task: TaskConfig, n: int, chunk: int | None = None
               ) -> tuple[Teacher, Data]:
    """``sample_task(key, task, n, 0)[:2]``, built chunk by chunk (inside ``jit``)."""
    kt, ktr, _ = jax.random.split(key, 3)
    teacher = sample_teacher(kt, task)
    plan = _Plan(ktr, task, teacher, n)
    B = stream_chunk_rows(n, task) if chunk is None else int(min(max(chunk, 1), n))
    L_max, D = task.L_max, task.D

    def body(start, fresh, carry):
        X, z, eps = carry
        Xc, zc, ec = plan.chunk(start, B)
        return (jax.lax.dynamic_update_slice_in_dim(X, Xc, start, 0),
                jax.lax.dynamic_update_slice_in_dim(z, zc, start, 0),
                jax.lax.dynamic_update_slice_in_dim(eps, ec, start, 0))

    init = (jnp.zeros((n, L_max, D), jnp.float32), jnp.zeros((n, L_max), jnp.float32),
            plan.eps if plan.eps is not None else jnp.zeros((n,), jnp.int32))
    X, z_star, eps = _chunks(n, B, body, init)
    return teacher, Data(X, plan.labels(z_star, eps), eps, plan.mask)


def stream_test(key: PRNGKey, task: TaskConfig, n: int,
                consume: Callable[[Array, Array], Array], width: int,
                chunk: int | None = None) -> tuple[Teacher, Array, Array, Array, Array]:
    """The test set of ``sample_task(key, task, 0, n)``, streamed chunk by chunk (inside
    ``jit``): returns the teacher, the location posterior ``P`` and ``z*`` (masked) of
    :func:`bayesslr.core.metrics.oracle_terms`, the labels ``y``, and ``consume(X, mask)`` of every
    chunk (``(n, width)``: a predictor's outputs), without holding the test tokens.
    """
    from bayesslr.core.task import location_posterior

    kt, _, kte = jax.random.split(key, 3)
    teacher = sample_teacher(kt, task)
    plan = _Plan(kte, task, teacher, n)
    B = stream_chunk_rows(n, task) if chunk is None else int(min(max(chunk, 1), n))
    L_max = task.L_max

    def body(start, fresh, carry):
        P, zs, zl, eps, out = carry
        Xc, zc, ec = plan.chunk(start, B)
        mc = jax.lax.dynamic_slice_in_dim(plan.mask, start, B)
        chi_s, z_s = fields(Xc, teacher.k, teacher.v)  # oracle_terms on the chunk
        Pc = location_posterior(task, chi_s, mc)
        upd = lambda a, c: jax.lax.dynamic_update_slice_in_dim(a, c, start, 0)  # noqa: E731
        return (upd(P, Pc), upd(zs, jnp.where(mc, z_s, 0.0)), upd(zl, zc), upd(eps, ec),
                upd(out, consume(Xc, mc)))

    init = (jnp.zeros((n, L_max), jnp.float32), jnp.zeros((n, L_max), jnp.float32),
            jnp.zeros((n, L_max), jnp.float32),
            plan.eps if plan.eps is not None else jnp.zeros((n,), jnp.int32),
            jnp.zeros((n, width), jnp.float32))
    P, zs, zl, eps, out = _chunks(n, B, body, init)
    return teacher, P, zs, plan.labels(zl, eps), out
