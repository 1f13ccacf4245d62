"""The order in which a cluster starts units: ERM cells that share a replica path wait for one
solve under a lock, so the first unit of each path goes first (registry.spread_units)."""

from __future__ import annotations

import json

import pytest

from bayesslr.registry import Cell, spread_units, units
from bayesslr.theory import replica_lam as replica
from conftest import AllAtOnce


def _erm(nu: float, alpha: float, seed: int, lam: str = "replica") -> Cell:
    return Cell(method="erm:softmax", variant="spiked", L="3", nu=nu, delta=0.01, alpha=alpha,
                lam=lam, sqrtND=200.0, seed=seed)


def _row(cell: Cell) -> tuple:
    return cell.method.split(":")[0], cell.nu, cell.alpha, cell.seed, cell.lam


@pytest.fixture
def empty_cache(tmp_path, monkeypatch):
    monkeypatch.setenv(replica.REPLICA_CACHE_ENV, str(tmp_path / "replica"))
    monkeypatch.setattr(replica, "_REPLICA_MEMO", {})
    return tmp_path / "replica"


def test_each_replica_path_starts_before_a_second_unit_waits_on_one(empty_cache):
    pop = Cell(method="population:softmax", variant="spiked", L="2", nu=2.0, delta=0.01, seed=0)
    cells = [pop] + [_erm(nu, a, s) for nu in (1.0, 2.0) for a in (1.0, 2.0) for s in (0, 1)]
    cells.append(_erm(2.0, 5.0, 0, lam="0.1"))  # waits on nothing
    order = spread_units(units(cells))
    got = [_row(u[0]) for u in order]
    assert got[0][0] == "population"  # before the first path: keeps its place
    assert got[1] == ("erm", 1.0, 1.0, 0, "replica")  # path nu = 1 ...
    assert got[2] == ("erm", 2.0, 1.0, 0, "replica")  # ... and path nu = 2 before any second
    # every unit is there once, the others in their order
    assert sorted(map(str, got)) == sorted(map(str, [_row(u[0]) for u in units(cells)]))
    assert got[3:] == [g for g in map(_row, cells[1:]) if g not in got[:3]]
    # the paths named are whole continuation paths: both alphas of a nu wait on one lock
    keys = {replica._replica_waits_on(_erm(1.0, a, 0)) for a in (1.0, 2.0)}
    assert len(keys) == 1 and None not in keys


def test_a_cached_path_waits_on_nothing(empty_cache):
    cell = _erm(1.0, 2.0, 0)
    tcell = replica.replica_cell(cell, replica.get_method(cell.method).schema.validate({}))
    key = replica._replica_key(tcell)
    empty_cache.mkdir(parents=True)
    (empty_cache / f"{key}.json").write_text(json.dumps({"lam": 0.1}))
    assert replica._replica_waits_on(cell) is None
    cells = [_erm(1.0, 2.0, s) for s in (0, 1)] + [_erm(2.0, 2.0, 0)]
    assert [u[0] for u in spread_units(units(cells))] == cells  # one path left: order kept


def test_the_cluster_submits_in_that_order(empty_cache, monkeypatch):
    """DaskExecutor.run submits the units in spread_units' order (a recording client; each
    unit's 'result' is a failed record, so nothing is computed)."""
    import distributed

    from bayesslr.sweep import executors
    from bayesslr.sweep.storage import CellRecord

    submitted: list[Cell] = []

    class Fut:
        def __init__(self, key, unit):
            self.key, self.unit = key, unit

        def result(self):
            return [CellRecord(c, "failed", {}, "not run") for c in self.unit]

        def done(self):
            return True

        def release(self):
            pass

    class Client:
        def submit(self, fn, unit, plugins, draws_dir=None, *, key, **kw):
            submitted.append(unit[0])
            return Fut(key, unit)

    monkeypatch.setattr(distributed, "as_completed", AllAtOnce)
    ex = executors.DaskExecutor(workers=1)
    ex.open = lambda: setattr(ex, "_client", Client())
    cells = [_erm(nu, a, 0) for nu in (1.0, 2.0) for a in (1.0, 2.0)]
    done: list[CellRecord] = []
    ex.run(cells, done.append)
    assert submitted == [u[0] for u in spread_units(units(cells))]
    assert submitted[:2] == [cells[0], cells[2]] and len(done) == 4
