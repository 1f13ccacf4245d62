"""Warm sampling, ours against nutpie, pooled over the sweep's 5 posteriors (a study, not a
timing of the suite: benchmarks/README.md, "The fair comparison").

One posterior's minimum bulk ESS moves by 10-20 % from seed to seed, so the single-posterior
ratio of group ``nutpie_warm`` is noisy. Here each of the 5 posteriors of
``bench_sampler_nutpie`` (spiked, ``L = 3``, ``nu = 2``, ``D = 100``, ``alpha = 4``) is sampled
by ours (vectorized chains) and by nutpie (the constant-data PyMC model, 2 chains on 2
threads), both from the teacher, at warm-up 500 and 150 with 500 draws. Each run is repeated 3
times; the first round (compilation, thread start) is dropped and the fastest of the other
two kept. Printed: the pooled ESS per wall and per CPU second, the ratio per posterior and its
geometric mean::

    .venv/bin/python benchmarks/studies/nutpie_warm_pooled.py [OUT.json]

The run of 2026-12-02 (load 1.4-1.7) is in ``nutpie_warm_pooled.json`` beside this file.

Needs the ``bench`` extra (PyMC, nutpie).
"""

from __future__ import annotations

import functools
import json
import os
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
import bench_sampler_nutpie as B  # noqa: E402

SEEDS = range(1, 6)
WARMUPS = (500, 150)
ROUNDS = 3


def fastest(run, seed: int, warm: int, who: str) -> dict:
    best = None
    for r in range(ROUNDS):
        c, w = time.process_time(), time.perf_counter()
        d = run()
        wall, cpu = time.perf_counter() - w, time.process_time() - c
        if r == 0:
            continue
        if best is None or wall < best["wall"]:
            best = {"seed": seed, "warm": warm, "who": who, "wall": wall, "cpu": cpu,
                    "ess": float(d["ess_bulk_min"]), "rhat": float(d["r_hat_max"]),
                    "grads": int(d["grads"]), "load": os.getloadavg()[0]}
    return best


def summary(rows: list[dict], warm: int) -> str:
    o = [r for r in rows if r["warm"] == warm and r["who"] == "ours"]
    t = [r for r in rows if r["warm"] == warm and r["who"] == "nutpie"]

    def pooled(key):
        return (sum(a["ess"] for a in o) / sum(a[key] for a in o)) / (
            sum(b["ess"] for b in t) / sum(b[key] for b in t))

    per = np.array([a["ess"] / a["wall"] / (b["ess"] / b["wall"])
                    for a, b in zip(o, t, strict=True)])
    return (f"warm-up {warm}: pooled ESS per wall s {pooled('wall'):.2f}x, per CPU s "
            f"{pooled('cpu'):.2f}x, per gradient {pooled('grads'):.2f}x; per posterior "
            f"{np.round(per, 2).tolist()}; geometric mean {np.exp(np.log(per).mean()):.2f} "
            f"(sd of log {np.log(per).std(ddof=1):.2f})")


def main() -> None:
    nut = {"size": B.SIZES["default"], "spec": B.SPEC}
    rows = []
    for seed in SEEDS:
        teacher, data = B.posterior(seed)
        nut["posts"] = {seed: (teacher, data)}
        compiled = B.nutpie_compile(data, teacher)
        for warm in WARMUPS:
            ours = functools.partial(B._ours, nut, seed=seed, warmup=warm)
            theirs = functools.partial(B._theirs, nut, compiled, seed=seed, warmup=warm)
            rows.append(fastest(ours, seed, warm, "ours"))
            rows.append(fastest(theirs, seed, warm, "nutpie"))
            print(json.dumps(rows[-2]), json.dumps(rows[-1]), sep="\n", flush=True)
    for warm in WARMUPS:
        print(summary(rows, warm))
    if len(sys.argv) > 1:
        Path(sys.argv[1]).write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
