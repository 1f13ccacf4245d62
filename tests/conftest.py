"""Shared test set-up.

* JAX is set up as the ``bayesslr`` command sets it up (:func:`bayesslr.configure_jax`), with
  the persistent compilation cache in ``.pytest_cache/jax`` unless the caller chose a place
  (``BAYESSLR_JAX_CACHE``), so repeated runs and CI re-use compiled functions.
* Plain ``pytest`` deselects ``@pytest.mark.slow``; ``pytest -m ''`` (the README/CI command)
  runs everything.
* Shared session-scoped fixtures live here; module-specific ones stay in their test modules.
"""

from __future__ import annotations

import os
from pathlib import Path

os.environ.setdefault(
    "BAYESSLR_JAX_CACHE", str(Path(__file__).resolve().parent.parent / ".pytest_cache" / "jax")
)

import bayesslr  # noqa: E402

bayesslr.configure_jax()  # before any test computes anything


def run_cli(argv: list[str], capsys) -> tuple[int, str, str]:
    """Run the ``bayesslr`` entry point in-process: ``(exit code, stdout, stderr)``."""
    import pytest

    from bayesslr.cli import main

    with pytest.raises(SystemExit) as ex:
        main(argv)
    out = capsys.readouterr()
    return ex.value.code, out.out, out.err


# the test-only method family (tests/sweep_plugin.py): modules that use it say
# ``pytestmark = pytest.mark.usefixtures("plugin")`` and take ``plugin`` (its execution log)
PLUGIN = str(Path(__file__).resolve().parent / "sweep_plugin.py")
REPO = Path(__file__).resolve().parent.parent


def _plugin_fixture():
    import pytest

    @pytest.fixture
    def plugin(monkeypatch, tmp_path):
        from bayesslr.sweep.executors import load_plugins

        monkeypatch.setenv("BAYESSLR_PLUGINS", PLUGIN)
        log = tmp_path / "executions.log"
        monkeypatch.setenv("SWEEPTEST_LOG", str(log))
        load_plugins([PLUGIN])
        return log

    return plugin


plugin = _plugin_fixture()
