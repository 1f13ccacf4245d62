"""JAX set-up as an explicit call, and the array type aliases, in one place.

``import bayesslr`` changes no environment variable and no JAX setting. :func:`configure_jax`
is what the ``bayesslr`` command calls first (and what a notebook or a script may call, like
``numpyro.set_host_device_count``):

* host devices: NUTS chains run with ``chain_method="parallel"`` need one XLA host device per
  chain, which can only be requested before JAX starts its CPU backend (the first computation);
  ``host_devices`` (default ``$BAYESSLR_HOST_DEVICES``, else the number of cores) sets
  ``jax_num_cpu_devices`` then, and is skipped (reported) once the backend is running;
* persistent compilation cache: JAX compiles dominate small runs; the cache directory is
  ``cache_dir``, default ``$BAYESSLR_JAX_CACHE`` or ``~/.cache/bayesslr/jax``
  (``BAYESSLR_JAX_CACHE=off`` or ``cache_dir=None`` disables it).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import TypeAlias

import jax
import numpy as np

# an array argument: a jax.Array, or anything jax.numpy converts (numpy arrays, scalars)
Array: TypeAlias = jax.Array | np.ndarray
# a PRNG key: a typed key (jax.random.key) or a raw uint32[2] key (jax.random.PRNGKey)
PRNGKey: TypeAlias = jax.Array

_OFF = {"", "0", "off", "none", "false"}
_DEFAULT = object()


@dataclass(frozen=True)
class JaxSetup:
    """What :func:`configure_jax` did.

    Attributes
    ----------
    host_devices : int or None
        CPU devices requested (None: not requested, the backend was already running or the
        count was 1).
    cache_dir : Path or None
        Persistent compilation cache directory (None: disabled or not writable).
    note : str
        Why a request was skipped, or ``""``.
    """

    host_devices: int | None
    cache_dir: Path | None
    note: str = ""


def default_host_devices() -> int:
    """``$BAYESSLR_HOST_DEVICES`` (``0`` disables), else the number of cores."""
    env = os.environ.get("BAYESSLR_HOST_DEVICES")
    if env is not None:
        return max(int(env), 0)
    return os.cpu_count() or 1


def cache_dir() -> Path | None:
    """Default directory of JAX's persistent compilation cache, or ``None`` when disabled."""
    env = os.environ.get("BAYESSLR_JAX_CACHE")
    if env is not None and env.strip().lower() in _OFF:
        return None
    if env:
        return Path(env).expanduser()
    return Path.home() / ".cache" / "bayesslr" / "jax"


def _backend_running() -> bool:
    from jax._src import xla_bridge

    return bool(getattr(xla_bridge, "_backends", None))


def configure_jax(host_devices: int | None | object = _DEFAULT,
                  cache: str | Path | None | object = _DEFAULT) -> JaxSetup:
    """Set up JAX for bayesslr: host devices for parallel chains and the compilation cache.

    Parameters
    ----------
    host_devices : int or None, optional
        CPU devices to create (one per parallel NUTS chain); default
        :func:`default_host_devices`; ``None`` or ``<= 1`` leaves JAX's default. Only possible
        before the first JAX computation of the process.
    cache : path or None, optional
        Persistent compilation cache directory; default :func:`cache_dir`; ``None`` disables.

    Returns
    -------
    JaxSetup
        What was set (a request that came too late is reported in ``note``, not raised).

    Examples
    --------
    >>> import bayesslr
    >>> setup = bayesslr.configure_jax(host_devices=None, cache=None)
    >>> setup.cache_dir is None
    True
    """
    n = default_host_devices() if host_devices is _DEFAULT else host_devices
    note = ""
    devices = None
    if n is not None and n > 1:
        if "xla_force_host_platform_device_count" in os.environ.get("XLA_FLAGS", ""):
            note = "host_devices left to the XLA_FLAGS of the environment"
        elif _backend_running():
            note = (f"host_devices={n} not applied: JAX's CPU backend is already running "
                    f"({jax.local_device_count()} device(s))")
        else:
            jax.config.update("jax_num_cpu_devices", int(n))
            devices = int(n)
    path = cache_dir() if cache is _DEFAULT else (None if cache is None else Path(cache))
    if path is not None:
        try:
            path.mkdir(parents=True, exist_ok=True)
            jax.config.update("jax_compilation_cache_dir", str(path))
            jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.2)
            jax.config.update("jax_persistent_cache_min_entry_size_bytes", 0)
        except OSError as exc:  # read-only home: run without the cache rather than fail
            note = (note + "; " if note else "") + f"no compilation cache ({exc.strerror})"
            path = None
    return JaxSetup(devices, path, note)


def memory_map_use() -> tuple[int, int] | None:
    """``(mappings this process holds, the kernel's per-process limit)``, or ``None`` where
    ``/proc`` does not tell (not Linux)."""
    try:
        with open("/proc/sys/vm/max_map_count") as fh:
            limit = int(fh.read())
        with open("/proc/self/maps", "rb") as fh:
            used = sum(1 for _ in fh)
    except (OSError, ValueError):
        return None
    return used, limit


def release_compiled_near_map_limit(fraction: float = 0.5) -> bool:
    """Drop JAX's in-memory compiled functions when this process holds more than ``fraction``
    of the kernel's memory-map limit (``vm.max_map_count``, 65530 by default).

    Every XLA:CPU executable JAX keeps maps its code pages, so a long-lived process that
    compiles many shapes (a sweep worker, a test session) creeps towards the limit; past it
    ``mmap`` fails inside XLA and the process dies with a segmentation fault (seen in
    ``executable.serialize()`` writing the persistent cache). Dropping the executables
    (:func:`jax.clear_caches`) returns their mappings; what is needed again is reloaded from
    the persistent cache or recompiled, with identical results.

    Parameters
    ----------
    fraction : float, optional
        Share of the limit above which the compiled functions are dropped, in (0, 1].

    Returns
    -------
    bool
        Whether they were dropped.
    """
    if not 0.0 < fraction <= 1.0:
        raise ValueError(f"fraction must be in (0, 1], got {fraction!r}")
    use = memory_map_use()
    if use is None or use[0] <= fraction * use[1]:
        return False
    import gc

    jax.clear_caches()
    gc.collect()
    return True


class AotCache:
    """Ahead-of-time compiled callables, keyed by argument shapes, with the compile time
    accumulated (``compile_s``), so that a budgeted run reports its compilation apart.

    Examples
    --------
    >>> import jax, jax.numpy as jnp
    >>> aot = AotCache()
    >>> float(aot("double", jax.jit(lambda x: 2 * x), jnp.ones(3))[0])
    2.0
    >>> len(aot.cache), aot.compile_s >= 0.0
    (1, True)
    """

    def __init__(self) -> None:
        self.cache: dict[object, object] = {}
        self.compile_s = 0.0

    def __call__(self, name: str, fn, *args, static: tuple = ()):
        import time

        import jax.numpy as jnp

        leaves, tree = jax.tree.flatten(args)
        sig = (name, id(fn), static, tree,
               tuple((jnp.shape(a), str(jnp.result_type(a))) for a in leaves))
        exe = self.cache.get(sig)
        if exe is None:
            t0 = time.perf_counter()
            exe = fn.lower(*args, *static).compile()
            self.compile_s += time.perf_counter() - t0
            self.cache[sig] = exe
        return exe(*args)


# one per process: compiled executables are reused across the cells of one shape
AOT_CACHE = AotCache()
