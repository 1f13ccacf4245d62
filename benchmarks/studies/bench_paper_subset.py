"""Measure a subset of the paper preset cell by cell and check the cost models against it.

The cost models (``cost(cell, opts)`` of each family's registry entry, summed by
:func:`bayesslr.sweep.cost.estimate` for ``bayesslr run --dry-run``) give *core-seconds*: the
process CPU time of a cell (all threads), compilation and the first cell's imports included.
This script runs the units of a sweep file (default ``benchmarks/studies/paper_subset.toml``: a few
representative cells of every block of the paper preset) one after another, in this process,
and appends one JSON line per unit: wall time, process CPU time, the load average before and
after, the outputs that drive the models (iterations, evaluations, the phases' times) and the
model's prediction. Rerunning skips the units already recorded (resumable); ``--only erm``
restricts to some families.

``--report`` prints, per unit and per family, the measured CPU time against the model (ratio
and the family's median absolute log10 error), from the records of any number of files. A
unit's model includes the shared work it paid for (an ERM cell with ``lam = "replica"`` whose
replica point was not cached yet also solves that point).

Run: ``nice -n 10 .venv/bin/python benchmarks/studies/bench_paper_subset.py --out subset.jsonl``,
then
``.venv/bin/python benchmarks/studies/bench_paper_subset.py --report subset.jsonl``. Results are in
``benchmarks/README.md`` (section "Cost model").
"""

# isort: skip_file
from __future__ import annotations

import bayesslr  # noqa: F401  (JAX configuration, compilation cache)

import argparse
import json
import math
import os
import statistics
import time
from pathlib import Path

from bayesslr.registry import Cell, run_unit, units
from bayesslr.sweep.config import cell_key, load_config
from bayesslr.sweep.cost import model_seconds, prerequisites

HERE = Path(__file__).resolve().parent
KEEP = ("iterations", "evaluations", "grad_evals", "converged", "test_error", "stderr", "lam",
        "reason", "time_data_s", "time_fit_s", "time_score_s", "runtime_s",
        "replica_test_error", "N", "D")


def measure(config: Path, out: Path, only: set[str] | None = None) -> None:
    cfg = load_config(config)
    done = set()
    if out.exists():
        done = {json.loads(line)["key"] for line in out.read_text().splitlines() if line}
    for unit in units(cfg.cells):
        if only and unit[0].family not in only:
            continue
        key = cell_key(unit[0])
        if key in done:
            continue
        load0 = os.getloadavg()[0]
        pending = prerequisites(unit)  # shared work this unit pays for (an uncached replica lam)
        w0, c0 = time.perf_counter(), time.process_time()
        try:
            outs, err = run_unit(unit), ""
        except Exception as exc:  # recorded, the next unit runs
            outs, err = [{} for _ in unit], f"{type(exc).__name__}: {exc}"
        rec = {"key": key, "cells": [c.to_json() for c in unit],
               "wall_s": time.perf_counter() - w0, "cpu_s": time.process_time() - c0,
               "load_start": load0, "load_end": os.getloadavg()[0], "error": err,
               "model_s": [model_seconds(c) for c in unit],
               "prerequisites_s": sum(pending.values()),
               "outs": [{k: o[k] for k in KEEP if k in o} for o in outs]}
        with out.open("a") as f:
            f.write(json.dumps(rec) + "\n")
        print(f"{unit[0].method:>22s} x{len(unit):<3d} wall {rec['wall_s']:8.1f} s  cpu "
              f"{rec['cpu_s']:8.1f} s  model {sum(rec['model_s']):8.1f} s  load {load0:5.1f} "
              f"{err[:100]}", flush=True)


def report(files: list[Path]) -> dict[str, dict[str, float]]:
    """Measured CPU seconds against the (current) model, per unit and per family."""
    by_family: dict[str, list[tuple[float, float]]] = {}
    for path in files:
        for line in path.read_text().splitlines():
            rec = json.loads(line)
            if rec["error"]:
                continue
            cells = [Cell(**{**json.loads(c), "nu": _nu(json.loads(c)["nu"])})
                     for c in rec["cells"]]
            model = sum(model_seconds(c) for c in cells) + _prerequisite_model(rec, cells)
            c = cells[0]
            label = f"{c.method} {c.variant} L={c.L} nu={c.nu:g}" + (
                f" alpha={c.alpha:g}" if len(cells) == 1 and c.alpha else
                f" ({len(cells)} alphas)" if len(cells) > 1 else "") + (
                f" lam={c.lam}" if c.lam is not None else "")
            print(f"{label:>60s}  cpu {rec['cpu_s']:8.1f}  model {model:8.1f}  ratio "
                  f"{rec['cpu_s'] / model:6.2f}  wall {rec['wall_s']:8.1f}  load "
                  f"{rec['load_start']:4.1f}")
            by_family.setdefault(c.family, []).append((rec["cpu_s"], model))
    summary = {}
    for fam, pairs in sorted(by_family.items()):
        meas, mod = sum(p[0] for p in pairs), sum(p[1] for p in pairs)
        logerr = [abs(math.log10(m / p)) for m, p in pairs]
        summary[fam] = {"units": len(pairs), "measured_s": meas, "model_s": mod,
                        "total_ratio": meas / mod,
                        "median_abs_log10_error": statistics.median(logerr),
                        "max_abs_log10_error": max(logerr)}
        s = summary[fam]
        print(f"{fam:>16s}: {s['units']} units, measured {meas:8.0f} s, model {mod:8.0f} s, "
              f"total ratio {s['total_ratio']:.2f}, per unit median x"
              f"{10 ** s['median_abs_log10_error']:.2f}, worst x"
              f"{10 ** s['max_abs_log10_error']:.2f}")
    return summary


def _prerequisite_model(rec: dict, cells: list[Cell]) -> float:
    """The modelled shared work the unit paid for: recorded at measurement time, or, for older
    records, the replica lam of ``lam = 'replica'`` ERM cells (measured with an empty cache)."""
    if "prerequisites_s" in rec:
        return float(rec["prerequisites_s"])
    from bayesslr.theory.replica_lam import replica_cell
    from bayesslr.registry import get_method

    out = 0.0
    for c in cells:
        if c.family == "erm" and c.lam == "replica":
            out += model_seconds(replica_cell(c, get_method(c.method).schema.validate(c.options)))
    return out


def _nu(v):
    return math.inf if v == "inf" else v


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--config", type=Path, default=HERE / "paper_subset.toml")
    ap.add_argument("--out", type=Path, default=Path("paper_subset.jsonl"))
    ap.add_argument("--only", default="", help="comma list of families to run")
    ap.add_argument("--report", nargs="*", type=Path, help="report these files instead")
    args = ap.parse_args()
    if args.report is not None:
        report(args.report or [args.out])
    else:
        measure(args.config, args.out, set(filter(None, args.only.split(","))) or None)
