"""The suite's teacher, training and test data for GAMP, with one copy of ``X`` in memory.

:func:`bayesslr.core.task.sample_task` is the data contract: a seed's key is split into
``(k_teacher, k_train, k_test)`` and the teacher, the training set and the test set are drawn
from those keys (docs/model.md §1). Compiled as one program, that draw keeps XLA's
intermediates of the random tokens alive at once (the counters, two words of random bits, the
uniforms): measured 5-6 times the size of ``X`` at its peak, i.e. over 30 GB for the 6 GB of
``X`` at ``D = 10^4``, ``alpha = 5``, ``L = 3``.

:func:`amp_task_data` draws the same numbers in blocks of rows written into one buffer.
JAX's (partitionable) threefry generator gives the token at flat index ``f`` the bits
``threefry2x32(key, f)`` whatever the rest of the array, so a block of rows is drawn from its
own range of counters, turned into normals by the same formula as ``jax.random.normal``
(uniform on ``(-1, 1)`` from the top 23 bits, then ``sqrt(2) erfinv``), and the spike, the
mask, the location draw and the labels follow :func:`bayesslr.core.task._sample_data` line by
line. The tests check it against ``sample_task``: the same normals bit for bit, the same
locations, spiked tokens and labels equal to float rounding (1 ulp: XLA fuses the spike's
multiply-add differently). Peak memory: ``X`` itself plus one block. Small draws (both ``X``
under 256 MB) use ``sample_task`` itself, so GAMP and NUTS see identical data there.
"""

from __future__ import annotations

from functools import partial

import jax
import jax.numpy as jnp
import numpy as np
from jax.extend.random import threefry2x32_p

from bayesslr.core.jaxconfig import Array, PRNGKey
from bayesslr.core.task import (
    Data,
    TaskConfig,
    Teacher,
    check_int,
    length_mask,
    location_logits,
    sample_lengths,
    sample_task,
    sample_teacher,
)

BLOCK_BYTES = 64 * 2**20  # tokens drawn per block: ~64 MB of float32
# below this size of the training and test X together the draw is sample_task's own compiled
# program (bit for bit the data every other family sees); above it, the blocked draw
EXACT_BELOW_BYTES = 256 * 2**20


def _normal_block(kx_data: Array, first: Array, size: int, dtype) -> Array:
    """``jax.random.normal(kx, shape).ravel()[first:first + size]`` for the threefry impl."""
    f = first.astype(jnp.uint32) + jax.lax.iota(jnp.uint32, size)  # flat index < 2^32
    hi = jnp.zeros_like(f)
    b1, b2 = threefry2x32_p.bind(kx_data[0], kx_data[1], hi, f)
    bits = b1 ^ b2
    finfo = jnp.finfo(dtype)
    nbits, nmant = finfo.bits, finfo.nmant
    float_bits = jax.lax.shift_right_logical(bits, jnp.array(nbits - nmant, jnp.uint32))
    float_bits = float_bits | jnp.asarray(np.array(1.0, dtype).view(np.uint32))
    floats = jax.lax.bitcast_convert_type(float_bits, dtype) - jnp.array(1.0, dtype)
    lo = np.nextafter(np.array(-1.0, dtype), np.array(0.0, dtype), dtype=dtype)
    hi_v = np.array(1.0, dtype)
    u = jax.lax.max(jnp.asarray(lo), floats * (hi_v - lo) + lo)
    return jax.lax.mul(np.array(np.sqrt(2), dtype), jax.lax.erf_inv(u))


@partial(jax.jit, static_argnums=(1, 3, 4))
def _blocked_data(key: PRNGKey, task: TaskConfig, teacher: Teacher, n: int, rows: int) -> Data:
    """:func:`bayesslr.core.task._sample_data` drawn ``rows`` samples at a time (module
    docstring)."""
    kL, kx, ke, kn = jax.random.split(key, 4)
    L_max, D = task.L_max, task.D
    dtype = jnp.result_type(float)
    lengths = sample_lengths(kL, task.length, n)
    mask = length_mask(lengths, L_max)
    kx_data = jax.random.key_data(kx)
    if task.variant == "spiked":
        u = jax.random.uniform(ke, (n,))
        eps = jnp.minimum(jnp.floor(u * lengths).astype(jnp.int32), lengths - 1)
    else:
        eps = jnp.zeros((n,), jnp.int32)  # drawn after the loop, from chi*
    spike = jnp.sqrt(task.nu / D) * teacher.k if task.variant == "spiked" else None
    nblocks = -(-n // rows)
    inner = L_max * D

    def body(b, carry):
        X, chi, z = carry
        r0 = jnp.minimum(b * rows, n - rows)  # the last block overlaps the previous one
        Xb = _normal_block(kx_data, r0 * inner, rows * inner, dtype).reshape(rows, L_max, D)
        if spike is not None:
            eb = jax.lax.dynamic_slice_in_dim(eps, r0, rows)
            Xb = Xb + jax.nn.one_hot(eb, L_max)[:, :, None] * spike[None, None, :]
        else:  # chi* of the raw tokens, as _sample_data computes it before the mask
            chi = jax.lax.dynamic_update_slice_in_dim(chi, Xb @ teacher.k / jnp.sqrt(D), r0, 0)
        mb = jax.lax.dynamic_slice_in_dim(mask, r0, rows)
        Xb = Xb * mb[:, :, None]
        z = jax.lax.dynamic_update_slice_in_dim(z, Xb @ teacher.v / jnp.sqrt(D), r0, 0)
        return jax.lax.dynamic_update_slice_in_dim(X, Xb, r0, 0), chi, z

    X0 = jnp.zeros((n, L_max, D), dtype)
    chi0 = jnp.zeros((n, L_max), dtype)
    X, chi, z_star = jax.lax.fori_loop(0, nblocks, body, (X0, chi0, chi0))
    if task.variant != "spiked":
        logits = location_logits(task, chi, mask)
        eps = jax.random.categorical(ke, logits, axis=-1).astype(jnp.int32)
    y = jnp.take_along_axis(z_star, eps[:, None], axis=1)[:, 0]
    y = y + jnp.sqrt(task.delta) * jax.random.normal(kn, (n,))
    return Data(X, y, eps, mask)


def sample_data_blocked(key: PRNGKey, task: TaskConfig, teacher: Teacher, n: int, *,
                        block_bytes: int = BLOCK_BYTES) -> Data:
    """``bayesslr.core.task.sample_data(key, task, teacher, n)`` with one ``X`` in memory."""
    n = check_int("n", n, low=1)
    if n * task.L_max * task.D >= 2**32:
        raise ValueError("more than 2^32 tokens entries: beyond the blocked generator")
    rows = max(1, min(n, block_bytes // (4 * task.L_max * task.D)))
    return _blocked_data(key, task, teacher, n, rows)


_teacher = jax.jit(sample_teacher, static_argnums=1)
_sample_task = jax.jit(sample_task, static_argnums=(1, 2, 3))


def amp_task_data(key: PRNGKey, task: TaskConfig, n_train: int, n_test: int, *,
                  block_bytes: int = BLOCK_BYTES,
                  exact_below_bytes: float = EXACT_BELOW_BYTES) -> tuple[Teacher, Data, Data]:
    """Teacher, training and test data of ``key``: the draws of
    ``sample_task(key, task, n_train, n_test)`` (docs/model.md §1), with one ``X`` at a time.

    Parameters
    ----------
    key : PRNGKey
        ``jax.random.key(seed)`` (threefry, the default implementation).
    task : TaskConfig
        The task (its ``D``).
    n_train, n_test : int
        Training samples ``N = round(alpha D)`` and test samples (both ``>= 1``).
    block_bytes : int
        Size of a block of drawn tokens (bounds the memory beyond ``X``).
    exact_below_bytes : float
        Up to this size of both ``X`` together, ``sample_task``'s own compiled draw is used
        (bit-identical data; its peak is ~6 times ``X``); above it the blocked draw (identical
        up to float rounding of the spike and the labels).

    Returns
    -------
    (Teacher, Data, Data)
        Teacher, training data, test data (float32 unless x64 is on).
    """
    n_train = check_int("n_train", n_train, low=1)
    n_test = check_int("n_test", n_test, low=1)
    impl = str(jax.random.key_impl(key))
    if "threefry" not in impl:
        raise ValueError(f"key of impl {impl}: the blocked draw reproduces threefry2x32 only")
    if data_bytes(task, n_train + n_test) <= exact_below_bytes:
        return _sample_task(key, task, n_train, n_test)
    kt, ktr, kte = jax.random.split(key, 3)
    teacher = _teacher(kt, task)
    train = sample_data_blocked(ktr, task, teacher, n_train, block_bytes=block_bytes)
    test = sample_data_blocked(kte, task, teacher, n_test, block_bytes=block_bytes)
    return teacher, train, test


def amp_test_data(key: PRNGKey, task: TaskConfig, teacher: Teacher, n_train: int,
                  n_test: int, *, block_bytes: int = BLOCK_BYTES,
                  exact_below_bytes: float = EXACT_BELOW_BYTES) -> Data:
    """The test set of :func:`amp_task_data` alone (its own key, so it can be drawn after the
    training ``X`` is freed: peak memory ``max`` of the two instead of their sum)."""
    n_test = check_int("n_test", n_test, low=1)
    if data_bytes(task, n_train + n_test) <= exact_below_bytes:
        return _sample_task(key, task, n_train, n_test)[2]
    return sample_data_blocked(jax.random.split(key, 3)[2], task, teacher, n_test,
                               block_bytes=block_bytes)


def amp_train_data(key: PRNGKey, task: TaskConfig, n_train: int, n_test: int, *,
                   block_bytes: int = BLOCK_BYTES,
                   exact_below_bytes: float = EXACT_BELOW_BYTES) -> tuple[Teacher, Data]:
    """Teacher and training set of :func:`amp_task_data` alone (``n_test`` only decides, as
    there, whether ``sample_task``'s own program draws them)."""
    n_train = check_int("n_train", n_train, low=1)
    if data_bytes(task, n_train + n_test) <= exact_below_bytes:
        teacher, train, _ = _sample_task(key, task, n_train, max(1, n_test))
        return teacher, train
    kt, ktr, _ = jax.random.split(key, 3)
    teacher = _teacher(kt, task)
    return teacher, sample_data_blocked(ktr, task, teacher, n_train, block_bytes=block_bytes)


def data_bytes(task: TaskConfig, n: int) -> float:
    """Bytes of one float32 ``X`` of ``n`` samples."""
    return float(n) * task.L_max * task.D * 4


__all__ = ["amp_task_data", "amp_test_data", "amp_train_data", "data_bytes",
           "sample_data_blocked"]
