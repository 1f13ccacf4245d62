"""JAX set-up: the explicit configuration call and the guard against the memory-map limit."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from bayesslr.core import jaxconfig


def test_configure_jax_without_cache_reports_none():
    setup = jaxconfig.configure_jax(host_devices=None, cache=None)
    assert setup.cache_dir is None and setup.host_devices is None


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")
def test_memory_map_use_counts_this_process():
    used, limit = jaxconfig.memory_map_use()
    assert 0 < used < limit
    with open("/proc/self/maps", "rb") as fh:
        assert abs(sum(1 for _ in fh) - used) < 50


@pytest.mark.parametrize("bad", [0.0, -0.5, 1.5, float("nan")])
def test_release_rejects_a_fraction_outside_0_1(bad):
    with pytest.raises(ValueError, match=r"fraction must be in \(0, 1\]"):
        jaxconfig.release_compiled_near_map_limit(bad)


# in a fresh process: dropping every compiled function of the test session would make the
# tests after this one recompile
RELEASE_SCRIPT = """
import jax, jax.numpy as jnp
from bayesslr.core import jaxconfig
f = jax.jit(lambda x: jnp.sin(x) + 1.0)
x = jnp.arange(3.0)
before = f(x)
assert f._cache_size() == 1
assert not jaxconfig.release_compiled_near_map_limit(1.0)  # far below the limit
assert f._cache_size() == 1
used, limit = jaxconfig.memory_map_use()
jaxconfig.memory_map_use = lambda: (limit // 2 + 1, limit)
assert jaxconfig.release_compiled_near_map_limit(0.5)
assert f._cache_size() == 0
assert bool(jnp.array_equal(f(x), before))  # recompiled, same numbers
print("ok")
"""


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")
def test_release_drops_compiled_functions_only_past_the_threshold():
    env = {**os.environ, "BAYESSLR_JAX_CACHE": "off"}
    proc = subprocess.run([sys.executable, "-c", RELEASE_SCRIPT], capture_output=True,
                          text=True, timeout=120, env=env)
    assert proc.returncode == 0 and proc.stdout.strip() == "ok", proc.stderr[-2000:]


def test_sweep_units_release_after_each_unit(monkeypatch):
    from bayesslr.sweep import executors

    calls = []
    monkeypatch.setattr(executors, "release_compiled_near_map_limit", lambda: calls.append(1))
    monkeypatch.setattr(executors, "run_unit", lambda cells: [{"x": 1.0} for _ in cells])
    monkeypatch.setattr(executors, "method_version", lambda m: "1")
    monkeypatch.setattr(executors, "normalize_outputs", lambda o: o)
    recs = executors.execute_unit([object()])
    assert recs[0].status == "ok" and calls == [1]
    monkeypatch.setattr(executors, "run_unit", lambda cells: 1 / 0)
    recs = executors.execute_unit([object()])
    assert recs[0].status == "failed" and calls == [1, 1]
