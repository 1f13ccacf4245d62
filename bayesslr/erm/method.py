"""The ``erm`` family of the method registry: ``erm:<softmax|linear|erf|softplus>``.

One cell is one L-BFGS ERM protocol (:func:`bayesslr.erm.protocol.erm_fit`) over ``seeds``
consecutive seeds starting at the cell's ``seed``; the outputs are means over seeds, with
``stderr`` the standard error of ``test_error`` over seeds (see
:meth:`bayesslr.erm.protocol.ERMResult.summary`). The CLI verb ``bayesslr erm`` and the sweep
runner both go through :func:`erm_cell`.

Cell options: ``seeds`` (number of seeds, default 1) and every field of
:class:`~bayesslr.erm.protocol.ERMOptions` (``init``, ``restarts``, ``init_noise``,
``init_scale``, ``n_test``, ``max_iter``, ``gtol``, ``memory``, ``lam_grid``, ``val_frac``,
``max_batch_bytes``). ``lam`` is a real ``>= 0`` or ``"auto"`` (validation grid search).
"""

from __future__ import annotations

import json
import math
from typing import Any

import numpy as np

from bayesslr.activations import ACTIVATIONS
from bayesslr.erm.protocol import ERMOptions, erm_fit
from bayesslr.methods import Cell, register
from bayesslr.task import ConfigError, check_int, check_real

ERM_ACTIVATIONS: tuple[str, ...] = tuple(ACTIVATIONS)
CELL_OPTIONS: tuple[str, ...] = ("seeds", *ERMOptions.__dataclass_fields__)


def _lam(value: Any) -> float | str:
    if value is None:
        raise ConfigError("lam is not set; allowed: real >= 0 or 'auto'")
    if isinstance(value, str) and value.strip().lower() == "auto":
        return "auto"
    return check_real("lam", value, low=0.0)


@register("erm", activations=ERM_ACTIVATIONS, needs=("alpha", "lam"),
          description="regularised ERM by L-BFGS (spec section 4); options: seeds, init, "
                      "restarts, n_test, lam_grid, val_frac, max_iter, gtol")
def erm_cell(cell: Cell) -> dict[str, Any]:
    """Registered method ``erm:<activation>`` (see the module docstring)."""
    opts = dict(cell.options)
    unknown = sorted(set(opts) - set(CELL_OPTIONS))
    if unknown:
        raise ConfigError(f"options {unknown} are unknown for erm; allowed: "
                          + ", ".join(CELL_OPTIONS))
    n_seeds = check_int("seeds", opts.pop("seeds", 1), low=1)
    seed = check_int("seed", cell.seed, low=0)
    alpha = check_real("alpha", cell.alpha, low=0.0, low_open=True)
    lam = _lam(cell.lam)
    if cell.D is None and cell.sqrtND is not None:
        check_real("sqrtND", cell.sqrtND, low=1.0)
    task = cell.task()
    n_train = max(1, int(round(alpha * task.D)))
    if lam == "auto" and n_train < 2:
        raise ConfigError(f"alpha*D={alpha * task.D:g} gives fewer than 2 training samples; "
                          "lam='auto' needs at least 2")
    res = erm_fit(task, cell.activation, n_train, lam, seeds=np.arange(seed, seed + n_seeds),
                  opts=ERMOptions.from_mapping(opts))
    out = res.summary()
    out.update({"D": task.D, "N": n_train, "lam_mode": "auto" if lam == "auto" else "fixed"})
    for key in ("lam_grid", "val_risk"):
        if key in out:
            out[key] = json.dumps([x if math.isfinite(x) else None for x in out[key]])
    return out
