"""Helpers of the timing suite: group ratios measured in one run, cold JAX compilation.

Imported by the ``bench_*.py`` modules (pytest puts ``benchmarks/`` on the path; the studies
add it themselves). See the root ``conftest.py`` for how sizes and ratios are reported.
"""

from __future__ import annotations

import contextlib
import os

_STATS: dict[tuple[str, str], dict] = {}  # (group, name) -> statistics and extra_info


def load() -> float:
    """The 1-minute load average."""
    return round(os.getloadavg()[0], 2)


def record(benchmark, name: str) -> None:
    """Keep this benchmark's statistics (after its measurement) for the group's ratios."""
    if benchmark.stats is None:  # disabled: nothing was timed
        return
    s = benchmark.stats.stats
    _STATS[(benchmark.group, name)] = {"min": s.min, "median": s.median, "mean": s.mean,
                                       "rounds": s.rounds, "extra": dict(benchmark.extra_info)}


def stat(benchmark, name: str, which: str = "min", group: str | None = None) -> float | None:
    """A recorded statistic of benchmark ``name`` of this group, or of ``group`` (None when
    not measured); ``name="self"``: this benchmark's own."""
    if name == "self":
        if benchmark.stats is None:
            return None
        return getattr(benchmark.stats.stats, which)
    got = _STATS.get((group or benchmark.group, name))
    return None if got is None else got[which]


def ratio(benchmark, key: str, num: float | None, den: float | None) -> float | None:
    """Store ``num / den`` as ``extra_info[key]`` (``ratio_*`` or ``speedup_*``).

    When either side was not measured (benchmarks disabled, or the other benchmark of the
    group deselected), the reason goes into ``extra_info[key + "_missing"]`` instead.
    """
    if not key.startswith(("ratio_", "speedup_")):
        raise ValueError(f"ratio key {key!r} must start with ratio_ or speedup_")
    if num is None or den is None or not den > 0:
        benchmark.extra_info[key + "_missing"] = (
            "benchmarks disabled" if benchmark.disabled else "a side of the ratio was not run")
        return None
    value = float(num) / float(den)
    benchmark.extra_info[key] = value
    return value


@contextlib.contextmanager
def cold_jax(*lru_caches):
    """No compiled function to reuse inside the block: JAX's in-memory caches cleared, the
    persistent compilation cache switched off, and ``lru_caches`` (functools caches of
    compiled functions, e.g. ``bayesslr.bayes.nuts.compiled_run``) emptied; the persistent
    cache is switched back on afterwards."""
    import jax
    from jax._src import compilation_cache

    was = jax.config.jax_enable_compilation_cache
    jax.config.update("jax_enable_compilation_cache", False)
    compilation_cache.reset_cache()
    jax.clear_caches()
    for c in lru_caches:
        c.cache_clear()
    try:
        yield
    finally:
        jax.config.update("jax_enable_compilation_cache", was)
        compilation_cache.reset_cache()
