"""Theory curves over ``alpha`` as xarray Datasets (the Python API of the theory families).

:func:`replica_curve` and :func:`state_evolution` build the cells of the registered families
``theory_erm:<activation>`` and ``theory_bayes`` along an ``alpha`` list (continuation along
it, as the ``bayesslr theory`` verbs and a sweep with ``continuation = true`` do) and run them
through the registry: the same numbers as the CLI and a sweep of the same cells.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import xarray as xr

from bayesslr.core.task import ConfigError, TaskConfig
from bayesslr.registry import Cell, get_method, run_unit, units, validate_cell


def _cells(method: str, task: TaskConfig, alphas: Sequence[float], lam: Any, seed: int,
           options: Mapping[str, Any], continuation: bool) -> list[Cell]:
    alphas = [float(a) for a in alphas]
    if not alphas:
        raise ConfigError("alphas=[] is empty; allowed: at least one alpha > 0")
    opts = dict(options)
    if continuation:
        opts.setdefault("path", alphas)
    return [Cell(method=method, variant=task.variant, L=task.length.label(), nu=task.nu,
                 delta=task.delta, alpha=a, lam=lam, seed=seed, options=opts) for a in alphas]


def _dataset(cells: list[Cell], name: str) -> xr.Dataset:
    for c in cells:
        validate_cell(c)
    outs: dict[int, dict[str, Any]] = {}
    for unit in units(cells):
        for c, o in zip(unit, run_unit(unit), strict=True):
            outs[id(c)] = o
    spec = get_method(cells[0].method)
    rows = [outs[id(c)] for c in cells]
    keys = [k for k in dict.fromkeys(k for r in rows for k in r)]
    data = {}
    for k in keys:
        vals = [r.get(k) for r in rows]
        if all(isinstance(v, bool | int | float | np.integer | np.floating) or v is None
               for v in vals):
            arr = np.array([math.nan if v is None else float(v) for v in vals])
        else:
            arr = np.array(["" if v is None else str(v) for v in vals], dtype=str)
        out = spec.output(k)
        attrs = {"long_name": out.long_name, "units": out.units} if out is not None else {}
        data[k] = ("alpha", arr, attrs)
    ds = xr.Dataset(data, coords={"alpha": np.array([c.alpha for c in cells])})
    ds.attrs.update({"method": cells[0].method, "cell": cells[0].to_json(),
                     "description": spec.description, "code_version": spec.version,
                     "title": name})
    return ds


def replica_curve(task: TaskConfig, activation: str, alphas: Sequence[float],
                  lam: float | str, *, seed: int = 0, continuation: bool = True,
                  **options: Any) -> xr.Dataset:
    """The ERM replica fixed point along ``alphas`` (docs/theory.md).

    Parameters
    ----------
    task : TaskConfig
        The task (its ``D`` is ignored: ``D -> inf``).
    activation : str
        ``softmax``, ``linear``, ``softplus`` or ``erf``.
    alphas : sequence of float
        Sample ratios.
    lam : float or "optimal"
        Ridge penalty, or the theory's optimal ``lam`` at each ``alpha``.
    seed : int
        Seed of the channel's common random numbers.
    continuation : bool
        Solve along ``alphas`` by continuation (both directions); else each point cold.
    **options
        Options of the family ``theory_erm`` (``samples``, ``test_samples``, ``start``, ...;
        ``bayesslr.families()["theory_erm"].schema.table()`` lists them).

    Returns
    -------
    xarray.Dataset
        Dimension ``alpha``: ``test_error``, ``stderr`` (with ``stderr_test`` and
        ``stderr_channel``), the order parameters and conjugates, ``converged``, ``reason``,
        ``iterations`` and diagnostics.

    Examples
    --------
    >>> import bayesslr as bs
    >>> task = bs.make_task("spiked", L=3, nu=2.0, delta=0.0)
    >>> ds = bs.replica_curve(task, "linear", [2.0, 4.0], 1.0, samples=500,
    ...                       test_samples=2000, channel_error=False)
    >>> ds.alpha.values.tolist(), bool(ds.test_error[1] < ds.test_error[0])
    ([2.0, 4.0], True)
    """
    cells = _cells(f"theory_erm:{activation}", task, alphas, lam, seed, options, continuation)
    return _dataset(cells, f"replica ERM curve, {activation}")


def state_evolution(task: TaskConfig, alphas: Sequence[float], *, seed: int = 0,
                    continuation: bool = True, **options: Any) -> xr.Dataset:
    """The Bayes-optimal state evolution along ``alphas``, both starts (docs/theory.md).

    The informed branch is followed downwards and the uninformed one upwards along
    ``alphas`` (continuation); the reported branch is the option ``branch`` (default: the
    larger free entropy); both branches' errors and the hard-phase flag are variables too.

    Examples
    --------
    >>> import bayesslr as bs
    >>> task = bs.make_task("spiked", L=3, nu=2.0, delta=0.01)
    >>> ds = bs.state_evolution(task, [1.0, 5.0], samples=1000, test_samples=2000)
    >>> bool(ds.test_error[1] < ds.test_error[0]), bool(ds.converged.all())
    (True, True)
    """
    cells = _cells("theory_bayes", task, alphas, None, seed, options, continuation)
    return _dataset(cells, "Bayes-optimal state evolution")
