"""The timing suite's set-up (``benchmarks/``): sizes, JAX, and the ratios each group reports.

It lives at the repository root, not in ``benchmarks/``: the tests import helpers with
``from conftest import ...`` (``tests/conftest.py``), and of several ``conftest`` modules
without a package the one imported last answers that import; the root one is always imported
first.

* ``--bench-size {smoke,default,paper}``: the problem sizes of every benchmark (each module has
  a ``SIZES`` table). When the option is not given, the size is ``smoke`` if the benchmarks
  are not timed (``--benchmark-disable``) or were collected through ``testpaths`` (the
  README's test command, which CI runs: there the benchmarks are also disabled, so that each
  runs once as a test and a broken benchmark fails CI in seconds); otherwise ``default``.
* JAX is configured as the ``bayesslr`` command configures it (host devices for parallel
  chains, persistent compilation cache in ``.pytest_cache/jax`` unless
  ``$BAYESSLR_JAX_CACHE`` says otherwise), before any benchmark computes anything.
* ``benchutil.record`` and ``benchutil.ratio``: every benchmark of a group stores its
  pytest-benchmark statistics under a short name; a later benchmark of the same group (same
  module, file order) puts the ratio of two of them into its ``extra_info`` (``ratio_*``:
  lower is better, ``speedup_*``: higher is better), so that the saved JSON carries the ratio
  measured in one run. ``benchmarks/compare_ratios.py`` compares those ratios between two
  saved runs.
* One pytest process runs every test and benchmark: after each, JAX's compiled functions are
  dropped once the process holds half the kernel's memory-map limit
  (:func:`bayesslr.core.jaxconfig.release_compiled_near_map_limit`; past the limit XLA
  segfaults).
* Every benchmark's ``extra_info`` holds the 1-minute load average before and after it.
* The heaviest test files run first (:data:`HEAVIEST_FIRST`, measured): CI runs the suite on
  two pytest-xdist workers that take whole files in collection order (``--dist loadfile``), and
  a heavy file taken last leaves one worker busy while the other waits.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

os.environ.setdefault(
    "BAYESSLR_JAX_CACHE", str(Path(__file__).resolve().parent / ".pytest_cache" / "jax")
)

import bayesslr  # noqa: E402
from bayesslr.core.jaxconfig import release_compiled_near_map_limit  # noqa: E402

bayesslr.configure_jax()  # before any benchmark computes anything (host devices, cache)

SIZES = ("smoke", "default", "paper")
collect_ignore = ["benchmarks/studies"]  # scripts that explore settings, not timings


# Test files by their time in CI's last rehearsal, heaviest first (the durations of
# ``PYTEST_ADDOPTS=--durations=60 bash .ci/run``, two workers, summed by file: 307 s, 211 s,
# 202 s, 131 s, 126 s, 101 s, 185 s, 90 s, 90 s, 65 s, 60 s), re-ranked after the CI trim
# (test_theory's max-SLR curves at half the channel samples, test_pt's family cell on the
# shapes of its budget test, test_notebooks loading the results once: about 245 s, 95 s and
# 35 s for those three files, scaled from their before/after CPU); every other file keeps its
# place after them. Within a file the order is pytest's.
HEAVIEST_FIRST = ("tests/test_notebooks.py", "tests/test_inference.py", "tests/test_amp.py",
                  "tests/test_erm_batch.py", "tests/test_theory_erm.py",
                  "tests/test_bayes_sampling.py", "tests/test_theory.py",
                  "tests/test_erm_claims.py", "tests/test_api.py", "tests/test_population.py",
                  "tests/test_pt.py")


def pytest_collection_modifyitems(session, config, items):
    """The files of :data:`HEAVIEST_FIRST` first, in that order (a stable sort: each file's
    tests stay together and in order, and every xdist worker collects the same order)."""
    rank = {name: i for i, name in enumerate(HEAVIEST_FIRST)}
    root = Path(str(config.rootpath)).resolve()

    def key(item):
        try:
            rel = Path(str(item.path)).resolve().relative_to(root).as_posix()
        except ValueError:  # a file outside the repository
            return len(rank)
        return rank.get(rel, len(rank))

    items.sort(key=key)


def pytest_runtest_teardown(item, nextitem):
    release_compiled_near_map_limit()


def pytest_addoption(parser):
    parser.addoption("--bench-size", choices=SIZES, default=None,
                     help="problem sizes of the benchmarks (default: smoke when the benchmarks "
                          "are disabled or collected through testpaths, else default)")


def pytest_configure(config):
    # runs before pytest-benchmark's own pytest_configure (that one is trylast)
    via_testpaths = config.args_source == pytest.Config.ArgsSource.TESTPATHS
    timed = (config.getoption("benchmark_only", False)
             or config.getoption("benchmark_enable", False))
    if via_testpaths and not timed:
        config.option.benchmark_disable = True
    if config.option.bench_size is None:
        disabled = config.getoption("benchmark_disable", False) and not timed
        config.option.bench_size = "smoke" if disabled else "default"


def pytest_report_header(config):
    return (f"bench-size: {config.option.bench_size}; load average "
            f"{' '.join(f'{x:.2f}' for x in os.getloadavg())} on {os.cpu_count()} cores")


@pytest.fixture(scope="session")
def bench_size(pytestconfig) -> str:
    """The ``--bench-size`` of this run."""
    return pytestconfig.option.bench_size


@pytest.fixture(autouse=True)
def _load_info(request):
    """The load average before and after each benchmark, in its ``extra_info``."""
    if "benchmark" not in request.fixturenames:
        yield
        return
    bm = request.getfixturevalue("benchmark")
    bm.extra_info["load_before"] = round(os.getloadavg()[0], 2)
    bm.extra_info["bench_size"] = request.config.option.bench_size
    yield
    bm.extra_info["load_after"] = round(os.getloadavg()[0], 2)
