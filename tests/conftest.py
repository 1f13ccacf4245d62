"""Shared test set-up.

* JAX is set up as the ``bayesslr`` command sets it up (:func:`bayesslr.configure_jax`), with
  the persistent compilation cache in ``.pytest_cache/jax`` unless the caller chose a place
  (``BAYESSLR_JAX_CACHE``), so repeated runs and CI re-use compiled functions.
* Plain ``pytest`` deselects ``@pytest.mark.slow``; ``pytest -m ''`` (the README/CI command)
  runs everything.
* Shared session-scoped fixtures live here; module-specific ones stay in their test modules.
* Tests that interrupt with SIGINT take ``sigint_not_ignored``: in a process started with
  SIGINT ignored (``nohup CMD &``, a background job of a script) they are skipped, with the
  reason, instead of failing on an interrupt that cannot arrive.
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


def one_line(err: str) -> str:
    """The one line a console command wrote to stderr (no traceback, no 'Exception ignored'
    report); fails the test otherwise."""
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert "Traceback" not in err and "Exception ignored" not in err
    return lines[0]


class AllAtOnce:
    """Stand-in for ``distributed.as_completed`` in tests that fake a dask client: every
    future submitted is handed back in one batch."""

    def __init__(self, futs):
        self.futs = list(futs)

    def is_empty(self):
        return not self.futs

    def next_batch(self, block=False):
        batch, self.futs = self.futs, []
        return batch


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

SIGINT_IGNORED = ("SIGINT is ignored in this process (started under nohup or as a background "
                  "job); the signal tests need the default handler")


def _sigint_fixture():
    import pytest

    @pytest.fixture
    def sigint_not_ignored():
        """Skip a test that interrupts with SIGINT (a child process, or this one) when this
        process ignores SIGINT: its children inherit that, and the start-up module rightly keeps
        an ignored SIGINT ignored, so the interrupt would never arrive."""
        import signal

        if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
            pytest.skip(SIGINT_IGNORED)

    return sigint_not_ignored


# tests that send SIGINT say ``@pytest.mark.usefixtures("sigint_not_ignored")``
sigint_not_ignored = _sigint_fixture()


def prior_importance(spec, train, M: int = 400_000):
    """Self-normalised importance sampling from the prior on a ``D = 3`` task: the posterior
    mean of (k, v), its standard error (delta method: sqrt(sum w^2 (x - m)^2) / sum w), the
    draws ``Z``, their log-likelihoods and the weights' effective sample size. The reference
    the samplers' tests (NUTS, HMC, Gibbs, PT) are checked against."""
    import jax
    import jax.numpy as jnp
    import numpy as np

    from bayesslr.bayes.model import log_lik_samples

    K = jax.random.normal(jax.random.key(7), (M, 3))
    V = jax.random.normal(jax.random.key(8), (M, 3))
    d = train
    ll = jax.jit(jax.vmap(lambda k, v: jnp.sum(log_lik_samples(spec, k, v, d.X, d.y,
                                                               d.mask))))(K, V)
    w = np.exp(np.asarray(ll, np.float64) - float(np.max(ll)))
    Z = np.concatenate([np.asarray(K), np.asarray(V)], axis=1).astype(np.float64)
    m = (w[:, None] * Z).sum(0) / w.sum()
    se = np.sqrt((w[:, None] ** 2 * (Z - m) ** 2).sum(0)) / w.sum()
    ess = w.sum() ** 2 / (w ** 2).sum()
    return m, se, Z, np.asarray(ll, np.float64), ess
