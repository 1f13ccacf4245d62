"""The runner's measured CPU time of a cell (``cpu_s``, bayesslr.core.cputime).

Before, a cell recorded only its wall time (``runtime_s``), and ``--dry-run`` rescaled the cost
model by it: cells run beside other jobs (load 20-35 on two cores) made the finite-size preset
look 21 core-hours instead of about 3. ``cpu_s`` is process CPU time, all threads: what the
cost model models, and what the load does not stretch.
"""

from __future__ import annotations

import json
import math
import time

import pytest

from bayesslr.core.cputime import CpuTimer, add_restored
from bayesslr.registry import Cell
from bayesslr.sweep.storage import CellRecord, decode_cell, encode_cell

pytestmark = pytest.mark.usefixtures("plugin")


def _spin(seconds: float) -> None:
    t0 = time.process_time()
    while time.process_time() - t0 < seconds:
        sum(i * i for i in range(1000))


def test_cpu_timer_counts_work_and_restored_work():
    t = CpuTimer()
    time.sleep(0.3)  # wall time, no CPU
    assert t.seconds() < 0.2
    _spin(0.3)
    busy = t.seconds()
    assert 0.3 <= busy < 5
    add_restored(7.0)  # an earlier run's work this unit restored
    assert busy + 7.0 <= t.seconds() < busy + 7.0 + 1
    assert CpuTimer().seconds() < 1  # a new unit starts from nothing restored


def test_a_cell_records_cpu_time_not_wall_time():
    """A cell that sleeps 0.6 s takes 0.6 s of wall time and next to no CPU."""
    from bayesslr.sweep.executors import execute_unit

    execute_unit([Cell("sweeptest:a", alpha=1.0)])  # imports and first calls out of the way
    rec = execute_unit([Cell("sweeptest:a", alpha=1.0, options={"sleep": 0.6})])[0]
    assert rec.status == "ok"
    assert rec.runtime_s >= 0.6
    assert 0 <= rec.cpu_s < rec.runtime_s - 0.4


def test_cpu_s_round_trips_outside_the_checksum():
    """A cell file keeps cpu_s; a file without it (written before it was recorded) reads as
    NaN and passes its checksum, which is the same with or without cpu_s."""
    import io

    import h5py

    cell = Cell("sweeptest:a", alpha=1.0)
    with_cpu = CellRecord(cell, "ok", {"test_error": 0.5}, "", 2.0, "1", 1.25)
    without = CellRecord(cell, "ok", {"test_error": 0.5}, "", 2.0, "1")
    back = decode_cell(encode_cell(with_cpu))
    assert back == with_cpu and back.cpu_s == 1.25
    old = decode_cell(encode_cell(without))
    assert math.isnan(old.cpu_s) and old == without

    def attrs(rec):
        with h5py.File(io.BytesIO(encode_cell(rec)), "r") as f:
            return dict(f.attrs)
    assert "cpu_s" not in attrs(without)
    assert attrs(with_cpu)["checksum"] == attrs(without)["checksum"]


def test_dry_run_rescales_by_cpu_time(monkeypatch):
    """The measured cells rescale the model by cpu_s where recorded (the wall time of a loaded
    machine would inflate it fivefold here), by runtime_s where not."""
    from bayesslr.sweep import cost

    monkeypatch.setattr(cost, "model_seconds", lambda c: 10.0)
    todo = [Cell("sweeptest:a", alpha=float(a)) for a in (1, 2, 3)]
    done = [CellRecord(Cell("sweeptest:a", alpha=9.0, seed=s), "ok", {}, "", 100.0, "1", 20.0)
            for s in range(3)]
    assert cost.estimate(todo, done)["sweeptest"] == pytest.approx(3 * 10.0 * 2.0)
    old = [CellRecord(c.cell, "ok", {}, "", 100.0, "1") for c in done]
    assert cost.estimate(todo, old)["sweeptest"] == pytest.approx(3 * 10.0 * 10.0)


def test_finished_cells_against_the_model(monkeypatch):
    """against_model sums measured and modelled seconds by family, unrescaled, and says how
    many cells were measured by their wall time; failed cells are left out."""
    from bayesslr.sweep import cost

    monkeypatch.setattr(cost, "model_seconds", lambda c: 10.0)
    cpu = [CellRecord(Cell("sweeptest:a", alpha=1.0, seed=s), "ok", {}, "", 100.0, "1", 20.0)
           for s in range(3)]
    wall = CellRecord(Cell("sweeptest:a", alpha=2.0), "ok", {}, "", 50.0, "1")
    failed = CellRecord(Cell("sweeptest:a", alpha=3.0), "failed", {}, "E: x", 70.0, "1", 70.0)
    got = cost.against_model([*cpu, wall, failed])["sweeptest"]
    assert got == {"cells": 4, "measured_s": 110.0, "model_s": 40.0, "by_wall": 1,
                   "ratio": pytest.approx(110 / 40)}
    assert cost.against_model([failed]) == {}


def test_a_resumed_replica_path_counts_its_restored_cpu_time(tmp_path):
    """Each point file keeps the CPU seconds it took; a resumed path reports their sum (a
    checked file without the field has none: 0; since checkpoints carry a checksum, the file
    without it is re-signed, as a whole file of that form would be)."""
    from bayesslr.theory.checkpoint import PathCheckpoint, _checksum

    ck = PathCheckpoint(tmp_path / "k", "k")
    ck.save(0.5, {"x": 1.0}, {"w": 2.0}, seconds=3.0, cpu_seconds=5.5)
    ck.save(1.0, {"x": 1.5}, {"w": 2.5}, seconds=4.0, cpu_seconds=6.0)
    f = ck._file(1.0)
    doc = json.loads(f.read_text())
    assert doc["cpu_seconds"] == 6.0
    assert len(ck.restore([0.5, 1.0, 2.0])) == 2
    assert (ck.restored_s, ck.restored_cpu_s) == (7.0, 11.5)
    del doc["cpu_seconds"]
    doc["checksum"] = _checksum(doc)
    f.write_text(json.dumps(doc))
    ck.restore([0.5, 1.0])
    assert (ck.restored_s, ck.restored_cpu_s) == (7.0, 5.5)
