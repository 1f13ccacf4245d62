"""Overheads of the sweep runner per cell: atomic write, read-back (resume), dataset assembly.

Run: ``.venv/bin/python -m pytest benchmarks/bench_sweep.py --benchmark-only``. The method is
the test-only closed-form ``sweeptest`` (tests/sweep_plugin.py), so what is timed is the
runner alone; compare with a method's own time per cell (seconds to minutes) to see that the
runner is negligible.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from bayesslr.sweep.config import parse_config
from bayesslr.sweep.dataset import build_dataset
from bayesslr.sweep.executors import execute_cell, load_plugins
from bayesslr.sweep.storage import ResultStore

load_plugins([str(Path(__file__).resolve().parent.parent / "tests" / "sweep_plugin.py")])
CFG = parse_config({"grid": [{"methods": ["sweeptest:a", "sweeptest:b"],
                              "alpha": list(range(1, 26)), "nu": [1, 2], "seeds": 5}]})


@pytest.fixture(scope="module")
def stored(tmp_path_factory):
    store = ResultStore(tmp_path_factory.mktemp("bench"))
    store.prepare(CFG)
    records = [execute_cell(c) for c in CFG.cells]
    for r in records:
        store.write(r)
    return store, records


def test_write_one_cell(benchmark, stored):
    store, records = stored
    benchmark(store.write, records[0])


def test_read_one_cell(benchmark, stored):
    store, _ = stored
    rec = benchmark(store.read, CFG.cells[0])
    assert rec is not None


def test_assemble_500_cells(benchmark, stored):
    _, records = stored
    tree = benchmark(build_dataset, CFG, records)
    benchmark.extra_info["cells"] = len(records)
    assert tree["sweeptest"].ds.sizes["method"] == 2
