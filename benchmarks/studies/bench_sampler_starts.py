"""Random-start NUTS against the teacher start, by warm-up (``adapt``): how often it traps.

The teacher start is an exact posterior draw (docs/model.md §6), so its chains describe the
posterior; a random start that ends elsewhere (test error more than ``--tol`` away, pooled
R-hat far above 1) is trapped. This counts, per ``(D, alpha, adapt)``, the seeds whose random
start reached the teacher-started posterior, with the teacher chains' R-hat and bulk ESS
beside. It is the measurement behind ``adapt = "auto"`` (``grad`` from the teacher, ``stan``
from any other start; ``benchmarks/README.md``, section Sampler). Each run is one
``bayes_sampling`` cell with ``init = "teacher,random"``; one JSON line per run goes to
``--out`` (rerunning skips the runs already there).

Run: ``nice -n 10 .venv/bin/python benchmarks/studies/bench_sampler_starts.py --out starts.jsonl``
(defaults: spiked ``L = 3``, ``nu = 2``, ``Delta = 0.01``, ``D = 50``, ``alpha = 3, 5, 8``,
seeds 0-4, ``adapt = grad, stan``, warm-up and draws 500, 2 chains; ~5 min on two cores).
"""

# isort: skip_file
from __future__ import annotations

import bayesslr  # noqa: F401  (JAX configuration, compilation cache)

import argparse
import collections
import json
import time
from pathlib import Path

from bayesslr.registry import Cell, run_cell


def measure(out: Path, Ds, alphas, seeds, adapts, warmup: int, draws: int) -> None:
    done = set()
    if out.exists():
        done = {tuple(json.loads(x)["key"]) for x in out.read_text().splitlines() if x}
    for D in Ds:
        for alpha in alphas:
            for adapt in adapts:
                for seed in seeds:
                    key = (D, alpha, adapt, seed, warmup, draws)
                    if key in done:
                        continue
                    cell = Cell(method="bayes_sampling", variant="spiked", L="3", nu=2.0,
                                delta=0.01, alpha=alpha, D=D, seed=seed,
                                options={"warmup": warmup, "draws": draws, "chains": 2,
                                         "n_test": 2000, "init": "teacher,random",
                                         "adapt": adapt})
                    t0 = time.perf_counter()
                    o = run_cell(cell)
                    rec = {"key": list(key), "teacher": o["test_error"],
                           "random": o["random_test_error"], "pooled": o["r_hat_max_pooled"],
                           "rhat": o["r_hat_max"], "ess": o["ess_bulk_min"],
                           "adapt_used": o["adapt_used"], "wall_s": time.perf_counter() - t0}
                    with out.open("a") as f:
                        f.write(json.dumps(rec) + "\n")
                    print(json.dumps(rec), flush=True)


def report(out: Path, tol: float) -> None:
    agg = collections.defaultdict(list)
    for line in out.read_text().splitlines():
        if line:
            r = json.loads(line)
            agg[tuple(r["key"][:3])].append(r)
    for (D, alpha, adapt), rs in sorted(agg.items()):
        ok = sum(abs(r["random"] - r["teacher"]) < tol for r in rs)
        print(f"D={D:4d} alpha={alpha:4g} adapt={adapt:5s} random reached the posterior in "
              f"{ok}/{len(rs)} seeds; teacher R-hat {min(r['rhat'] for r in rs):.3f}-"
              f"{max(r['rhat'] for r in rs):.3f}, bulk ESS {min(r['ess'] for r in rs):.0f}-"
              f"{max(r['ess'] for r in rs):.0f}")


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=Path("sampler_starts.jsonl"))
    ap.add_argument("--D", default="50")
    ap.add_argument("--alpha", default="3,5,8")
    ap.add_argument("--seeds", type=int, default=5)
    ap.add_argument("--adapt", default="grad,stan")
    ap.add_argument("--warmup", type=int, default=500)
    ap.add_argument("--draws", type=int, default=500)
    ap.add_argument("--tol", type=float, default=0.02, help="test-error distance that counts "
                    "as reaching the teacher-started posterior")
    ap.add_argument("--report", action="store_true", help="only summarise --out")
    a = ap.parse_args()
    if not a.report:
        measure(a.out, [int(x) for x in a.D.split(",")], [float(x) for x in a.alpha.split(",")],
                range(a.seeds), a.adapt.split(","), a.warmup, a.draws)
    report(a.out, a.tol)
