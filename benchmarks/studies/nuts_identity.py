"""Fingerprint of the NUTS drivers: every array both faces return on a tiny task, fixed keys.

``save OUT.npz`` stores them; ``compare OUT.npz`` reruns and checks each array bit for bit
(``numpy.array_equal``, NaNs equal). Run it before and after a change to the NUTS layer
(:mod:`bayesslr.bayes.nuts`) or to the model arguments the samplers share: the bayes_sampling
face (``run_nuts``, ``sample_anneal``: both warm-ups, every chain method), the budgeted face
(``run_mcmc``: nuts, hmc, gibbs, dgibbs), SMC and VI, and the ``inference`` family's cell.

    PYTHONPATH=. python benchmarks/studies/nuts_identity.py save /tmp/before.npz
    PYTHONPATH=. python benchmarks/studies/nuts_identity.py compare /tmp/before.npz
"""

from __future__ import annotations

import sys
from typing import Any

import jax
import numpy as np

from bayesslr.bayes.model import model_spec
from bayesslr.bayes.sampler import SamplerOptions, init_params, run_nuts, sample_anneal
from bayesslr.core.task import make_task
from bayesslr.inference.evaluate import task_data
from bayesslr.inference.mcmc import MCMCSettings, run_mcmc
from bayesslr.registry import Cell, run_cell

TASK = dict(variant="spiked", L=2, nu=1.0, delta=0.5, D=4)


def _arrays(prefix: str, obj: Any) -> dict[str, np.ndarray]:
    """Every numeric field of a result NamedTuple (or dict), as arrays, under ``prefix``."""
    items = obj._asdict().items() if hasattr(obj, "_asdict") else obj.items()
    out = {}
    for name, val in items:
        if isinstance(val, (str, SamplerOptions, MCMCSettings)) or val is None:
            continue
        if name in ("runtime_s", "compile_s", "run_s", "predict_s"):
            continue  # wall times
        arr = np.asarray(val)
        if arr.dtype.kind in "biuf":
            out[f"{prefix}.{name}"] = arr
    return out


def fingerprint() -> dict[str, np.ndarray]:
    """Run every face once on the tiny task; the arrays by name."""
    task = make_task(**TASK)
    spec = model_spec(task)
    data = task_data(task, 0, 12, 20)
    train = data.train
    out: dict[str, np.ndarray] = {}
    key = jax.random.key(7)
    for adapt, init in (("grad", "teacher"), ("stan", "random")):
        for method in ("vectorized", "sequential"):
            opts = SamplerOptions(chains=2, warmup=30, draws=20, adapt=adapt,
                                  chain_method=method)
            start = init_params(jax.random.key(1), init, 2, task.D, data.teacher)
            res = run_nuts(key, spec, train, opts, start=start, init=init)
            out.update(_arrays(f"run_nuts.{adapt}.{method}", res))
    opts = SamplerOptions(chains=2, warmup=30, draws=20, adapt="stan", mass="dense")
    res = run_nuts(key, spec, train, opts, start=init_params(jax.random.key(1), "random", 2,
                                                             task.D), init="random")
    out.update(_arrays("run_nuts.dense", res))
    opts = SamplerOptions(chains=2, warmup=20, draws=10, x64=True)
    res = run_nuts(key, spec, train, opts, start=init_params(jax.random.key(1), "random", 2,
                                                             task.D), init="random")
    out.update(_arrays("run_nuts.x64", res))
    res, _ = sample_anneal(key, spec, train, SamplerOptions(chains=2, warmup=20, draws=10),
                           (0.5,))
    out.update(_arrays("anneal", res))
    for alg in ("nuts", "hmc", "gibbs", "dgibbs"):
        s = MCMCSettings(algorithm=alg, chains=2, warmup=20, chunk=5)
        start = init_params(jax.random.key(2), "random", 2, task.D)
        r = run_mcmc(key, spec, train, s, start=start, budget=3000, max_draws=16)
        out.update(_arrays(f"run_mcmc.{alg}", r))
    for method in ("inference:nuts-random-1e3", "inference:smc-prior-1e4",
                   "inference:advi-random-1e3", "inference:map-random-1e3",
                   "inference:gibbs-anneal-3e3"):
        cell = Cell(method=method, **{k: v for k, v in TASK.items() if k != "D"}, D=4,
                    alpha=3.0, options={"n_test": 50})
        res = run_cell(cell)
        out.update(_arrays(f"cell.{method}", {k: v for k, v in res.items()
                                              if not k.endswith("_s")}))
    return out


def main(argv: list[str]) -> int:
    mode, path = argv
    got = fingerprint()
    if mode == "save":
        np.savez(path, **got)
        print(f"saved {len(got)} arrays to {path}")
        return 0
    want = dict(np.load(path))
    bad = sorted(n for n in set(want) | set(got)
                 if n not in want or n not in got
                 or not np.array_equal(want[n], got[n], equal_nan=want[n].dtype.kind == "f"))
    print(f"{len(want)} arrays compared, {len(bad)} differ")
    for n in bad:
        if n in want and n in got:
            print(f"  {n}: largest difference {np.max(np.abs(want[n] - got[n])):.3g}")
        else:
            print(f"  {n}: only in {'the saved run' if n in want else 'this run'}")
    return 1 if bad else 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
