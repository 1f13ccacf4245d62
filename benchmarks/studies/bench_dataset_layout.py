"""What a sweep's results file weighs: one group per family (the layout) against one hypercube.

Usage::

    python benchmarks/studies/bench_dataset_layout.py [--preset paper]

The output keys of each family are taken from one real, tiny cell per family (so they are what
the methods return today); every cell of the preset then gets a record with those keys and
random values, and the results file is built and written as ``bayesslr run`` builds it. The
hypercube (every method in one dataset over the union of all swept coordinates, every output a
variable over all of them: the layout before the groups) is sized exactly from the same
records: ``n_cells_of_the_cube x (8 bytes per number + 4 bytes per character of text)``.
Prints the sizes in memory and on disk, and a one-line selection that gives a figure's numbers.
"""

from __future__ import annotations

import argparse
import math
import tempfile
import time
from pathlib import Path

import numpy as np
import xarray as xr

import bayesslr
from bayesslr.registry import Cell, run_cell
from bayesslr.sweep.config import PARAM_DIMS, load_preset
from bayesslr.sweep.dataset import build_dataset
from bayesslr.sweep.storage import CellRecord, normalize_outputs

TINY = {  # one cheap cell per family: the keys its outputs carry
    "population": Cell("population:softmax", options={"samples": 200}),
    "erm": Cell("erm:softmax", alpha=2.0, lam=0.1, D=8, options={"n_test": 100}),
    "bayes_sampling": Cell("bayes_sampling", alpha=2.0, D=4, delta=0.01,
                           options={"warmup": 10, "draws": 10, "n_test": 100}),
    "theory_erm": Cell("theory_erm:softmax", alpha=2.0, lam=0.1,
                       options={"samples": 200, "test_samples": 200, "max_iter": 3}),
    "theory_bayes": Cell("theory_bayes", alpha=2.0, options={"samples": 200,
                                                             "test_samples": 200}),
}


def template_outputs() -> dict[str, dict]:
    out = {}
    for fam, cell in TINY.items():
        t0 = time.perf_counter()
        out[fam] = normalize_outputs(run_cell(cell))
        print(f"  template {fam}: {len(out[fam])} outputs ({time.perf_counter() - t0:.0f} s)")
    return out


def records(cfg, templates, rng) -> list[CellRecord]:
    recs = []
    for c in cfg.cells:
        tmpl = templates.get(c.family, {})
        outs = {k: (float(rng.standard_normal()) if isinstance(v, float) else v)
                for k, v in tmpl.items()}
        recs.append(CellRecord(c, "ok", outs, "", 1.0))
    return recs


def hypercube_bytes(recs: list[CellRecord]) -> tuple[float, int, int]:
    """Bytes of the one-dataset layout, its number of variables and of grid points."""
    sizes = {"method": len({r.cell.method for r in recs}),
             "seed": len({r.cell.seed for r in recs})}
    for d in PARAM_DIMS:
        vals = {getattr(r.cell, d) for r in recs if getattr(r.cell, d) is not None}
        if vals:
            sizes[d] = len(vals)
    points = math.prod(sizes.values())
    num, text = {}, {}
    for r in recs:
        for k, v in r.outputs.items():
            if isinstance(v, str):
                text[k] = max(text.get(k, 0), len(v))
            else:
                num[k] = 8
    per_point = 8 * (len(num) + 1) + 4 * (sum(text.values()) + 6 + 200)  # + status, error
    return points * per_point, len(num) + len(text) + 3, points


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--preset", default="paper")
    args = ap.parse_args()
    bayesslr.configure_jax()
    cfg = load_preset(args.preset)
    print(f"preset {args.preset}: {len(cfg.cells)} cells")
    recs = records(cfg, template_outputs(), np.random.default_rng(0))
    cube, n_vars, points = hypercube_bytes(recs)
    tree = build_dataset(cfg, recs)
    mem = sum(node.to_dataset().nbytes for node in tree.subtree)
    with tempfile.TemporaryDirectory() as d:
        path = Path(d) / "dataset.nc"
        tree.to_netcdf(path, engine="h5netcdf")
        disk = path.stat().st_size
        fam = next(n for n in tree.children if n != "cells")
        t0 = time.perf_counter()
        xr.open_dataset(path, group=fam, engine="h5netcdf")["test_error"].load()
        t_open = time.perf_counter() - t0
    groups = {n: (dict(node.to_dataset().sizes), len(node.to_dataset().data_vars))
              for n, node in tree.children.items() if n != "cells"}
    print(f"hypercube (one dataset): {n_vars} variables over {points:,} grid points: "
          f"{cube / 2**20:,.1f} MiB in memory")
    print(f"groups (one per family): {mem / 2**20:,.2f} MiB in memory, "
          f"{disk / 2**20:,.2f} MiB on disk; ratio hypercube/groups in memory "
          f"{cube / mem:,.0f}x")
    for n, (sizes, nv) in groups.items():
        print(f"  {n}: {nv} variables, dims {sizes}")
    print(f"one group's test_error opens in {t_open * 1000:.0f} ms")


if __name__ == "__main__":
    main()
