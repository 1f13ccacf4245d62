"""The stored ground truth of the inference benchmark, read: the Bayes-optimal test error of
each task (docs/inference.md, "The reference"; docs/theory.md).

The data are ``bayesslr/data/inference_reference.nc`` (package data), built by
:mod:`bayesslr.ground_truth` (the builder lives apart from the data, as Inference Gym keeps
its ``targets/ground_truth`` numbers apart from the tools that make them): one row per task
(dimension ``task``: the long teacher-start NUTS reference of that very data set, its checks
and its predictions on the task's 4000 test inputs, dimension ``test``) and the state
evolution per setting and ``alpha`` (dimension ``theory``). Two sources, read here:

* **finite D (D <= REFERENCE_MAX_D)**: the stored long-NUTS row of the task (same setting,
  ``D``, ``alpha`` and seed), paired with an algorithm's predictions when ``n_test`` matches;
* **any D**: the state evolution (``theory_bayes``) at the setting and ``alpha``, the
  Bayes-optimal error as ``D -> inf``, stored or solved on demand
  (:func:`state_evolution_point`).

Every cell of the ``inference`` family, the named targets (:mod:`bayesslr.posteriors`) and
the report's leaderboard (through the family's registry ``ReportRole``) read it here.
"""

from __future__ import annotations

import functools
import importlib.resources
import math
from typing import Any

import numpy as np

from bayesslr.core.task import TaskConfig, make_task

REFERENCE_FILE = "inference_reference.nc"
REFERENCE_MAX_D = 200


@functools.lru_cache(maxsize=1)
def load_inference_reference(path: str | None = None):
    """The reference dataset (the packaged one unless ``path``), loaded in memory, or None.

    Examples
    --------
    >>> from bayesslr.inference.reference import load_inference_reference
    >>> ds = load_inference_reference()
    >>> ds.sizes["task"], ds.sizes["test"]
    (16, 4000)
    """
    import xarray as xr

    if path is None:
        res = importlib.resources.files("bayesslr") / "data" / REFERENCE_FILE
        if not res.is_file():
            return None
        with importlib.resources.as_file(res) as p, xr.open_dataset(p, engine="h5netcdf") as ds:
            return ds.load()
    with xr.open_dataset(path, engine="h5netcdf") as ds:
        return ds.load()


def _match(ds, prefix: str, dim: str, **want) -> int | None:
    if ds is None or dim not in ds.dims:
        return None
    ok = np.ones(ds.sizes[dim], bool)
    for k, v in want.items():
        col = ds[f"{prefix}{k}"].values
        if isinstance(v, str):
            ok &= np.asarray([str(c) == v for c in col])
        else:
            ok &= np.isclose(col.astype(float), float(v), rtol=1e-9, atol=0.0)
    idx = np.flatnonzero(ok)
    return int(idx[0]) if idx.size else None


def state_evolution_point(point: tuple[str, str, float, float, float]) -> dict[str, Any]:
    """The state evolution at one setting ``(variant, L, nu, delta, alpha)``, both starts
    (docs/theory.md): the row the reference stores per point (dimension ``theory``).

    Examples
    --------
    >>> from bayesslr.inference.reference import state_evolution_point
    >>> p = state_evolution_point(("spiked", "3", 2.0, 0.01, 5.0))
    >>> 0.0 < p["test_error"] < 1.0, p["converged"]
    (True, True)
    """
    from bayesslr.theory.bayes import BayesTheoryOptions, compare_branches, solve_bayes

    variant, L, nu, delta, alpha = point
    task = make_task(variant, L=L, nu=nu, delta=delta, D=1)
    opt = BayesTheoryOptions(seed=0)
    inf = solve_bayes(task, alpha, opt, start="informed")
    unf = solve_bayes(task, alpha, opt, start="uninformed")
    p = compare_branches(alpha, inf, unf)
    return {"variant": variant, "L": L, "nu": nu, "delta": delta, "alpha": alpha,
            "test_error": p.best.test_error, "stderr": p.best.stderr,
            "test_error_uninformed": unf.test_error, "test_error_informed": inf.test_error,
            "branches_differ": p.branches_differ, "hard_phase": p.hard_phase,
            "converged": bool(p.best.converged), "samples": opt.samples}


@functools.lru_cache(maxsize=64)
def theory_reference(variant: str, L: str, nu: float, delta: float, alpha: float,
                     solve: bool = True) -> dict[str, Any] | None:
    """State-evolution reference at one setting and ``alpha``: stored, or solved now (unless
    ``solve`` is false: then None).

    Examples
    --------
    >>> from bayesslr.inference.reference import theory_reference
    >>> r = theory_reference("spiked", "3", 2.0, 0.01, 2.0)
    >>> r["source"], r["hard_phase"]
    ('state_evolution', False)
    """
    ds = load_inference_reference()
    i = _match(ds, "theory_", "theory", variant=variant, L=L, nu=nu, delta=delta, alpha=alpha)
    if i is not None:
        row = {k[7:]: ds[k].values[i].item() for k in ds.data_vars if k.startswith("theory_")}
    elif not solve:
        return None
    else:
        row = state_evolution_point((variant, L, float(nu), float(delta), float(alpha)))
    return {"test_error": row["test_error"], "stderr": row["stderr"],
            "source": "state_evolution", "hard_phase": bool(row["hard_phase"]),
            "branches_differ": bool(row["branches_differ"])}


def lookup(task: TaskConfig, alpha: float, seed: int, n_test: int, *,
           theory: bool = True, solve: bool = True) -> dict[str, Any] | None:
    """The reference of a cell: the stored long-NUTS one of this very task when there is one
    (with its test-set predictions when ``n_test`` matches), else the state evolution
    (``theory``; solved now when not stored, unless ``solve`` is false), else None.

    Examples
    --------
    >>> from bayesslr.core.task import make_task
    >>> from bayesslr.inference.reference import lookup
    >>> task = make_task("spiked", L=3, nu=2.0, delta=0.01, D=50)
    >>> r = lookup(task, 5.0, 0, 4000)
    >>> r["source"], r["y_hat"].shape
    ('nuts_long', (4000,))
    """
    ds = load_inference_reference()
    L = task.length.label()
    if task.D <= REFERENCE_MAX_D:
        i = _match(ds, "", "task", variant=task.variant, L=L, nu=task.nu, delta=task.delta,
                   D=task.D, alpha=alpha, seed=seed)
        if i is not None:
            row = ds.isel(task=i)
            same = int(row["n_test"]) == int(n_test)
            return {"test_error": float(row["test_error"]), "stderr": float(row["stderr"]),
                    "source": "nuts_long", "checks_passed": bool(row["checks_passed"]),
                    "y_hat": (row["y_hat"].values[:n_test] if same else None)}
    if not theory or math.isinf(task.nu):
        return None
    return theory_reference(task.variant, L, float(task.nu), float(task.delta), float(alpha),
                            solve)


def stored_reference(variant: str, L: str, nu: float, delta: float, D: int, alpha: float,
                     seed: int) -> dict[str, Any] | None:
    """The stored reference of a task given by its fields, never solved (the report's
    leaderboard fills the excess of families without draws from it, unpaired): ``lookup``
    with nothing computed; None when the setting has no task (``nu = inf``) or no reference.

    Examples
    --------
    >>> from bayesslr.inference.reference import stored_reference
    >>> stored_reference("spiked", "3", 2.0, 0.01, 50, 5.0, 0)["source"]
    'nuts_long'
    >>> stored_reference("spiked", "3", float("inf"), 0.01, 50, 5.0, 0) is None
    True
    """
    if math.isinf(float(nu)):
        return None
    task = make_task(variant, L=L, nu=nu, delta=delta, D=int(D))
    return lookup(task, float(alpha), int(seed), -1, solve=False)
