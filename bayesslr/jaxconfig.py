"""JAX set-up and type aliases, in one place.

* Host devices: NUTS chains run with ``chain_method="parallel"`` need one XLA host device per
  chain, which can only be requested *before* JAX starts. :func:`configure` adds
  ``--xla_force_host_platform_device_count`` to ``XLA_FLAGS`` when JAX is not yet imported and
  the user did not set it (``BAYESSLR_HOST_DEVICES`` overrides the count, ``0`` disables).
* Persistent compilation cache: JAX compiles dominate small runs. The cache directory is
  ``$BAYESSLR_JAX_CACHE`` or ``~/.cache/bayesslr/jax`` (set ``BAYESSLR_JAX_CACHE=off`` to disable).
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any, TypeAlias

Array: TypeAlias = Any  # a jax.Array; kept loose so numpy arrays are accepted too
PRNGKey: TypeAlias = Any  # a jax.random key (typed or raw uint32[2])

_CONFIGURED = False


def _host_device_count() -> int:
    env = os.environ.get("BAYESSLR_HOST_DEVICES")
    if env is not None:
        return max(int(env), 0)
    return os.cpu_count() or 1


def cache_dir() -> Path | None:
    """Directory of JAX's persistent compilation cache, or ``None`` when disabled."""
    env = os.environ.get("BAYESSLR_JAX_CACHE")
    if env is not None and env.strip().lower() in {"", "0", "off", "none", "false"}:
        return None
    if env:
        return Path(env).expanduser()
    return Path.home() / ".cache" / "bayesslr" / "jax"


def configure() -> None:
    """Idempotent JAX configuration; called on ``import bayesslr``."""
    global _CONFIGURED
    if _CONFIGURED:
        return
    _CONFIGURED = True
    if "jax" not in sys.modules:
        flags = os.environ.get("XLA_FLAGS", "")
        n = _host_device_count()
        if n > 1 and "xla_force_host_platform_device_count" not in flags:
            os.environ["XLA_FLAGS"] = (
                f"{flags} --xla_force_host_platform_device_count={n}".strip()
            )
    import jax

    path = cache_dir()
    if path is not None:
        try:
            path.mkdir(parents=True, exist_ok=True)
            jax.config.update("jax_compilation_cache_dir", str(path))
            jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.2)
            jax.config.update("jax_persistent_cache_min_entry_size_bytes", 0)
        except OSError:  # read-only home: run without the cache rather than fail
            pass
