"""Gradient-descent protocol of spec section 4: overlap trajectories of plain GD or Adam.

From a small random start ``k, v ~ N(0, init_scale^2 I_D)`` (independent of the teacher, the
activation's scalars at their registry defaults) the regularised empirical risk is descended
with full-batch steps and the overlaps of spec section 3 are recorded every ``record_every``
steps, together with the training loss, the objective and the test excess error on a fresh test
set (see :mod:`bayesslr.erm.objective`). The paper's "connection with gradient-based algorithms":
on the population the symmetric manifold (cross overlaps zero) is invariant, and informed
starts reach the ERM minimiser; this protocol shows what plain first-order methods do at finite
size.

Step size convention (size-free): plain GD is ``theta <- theta - lr grad(S / alpha)``, i.e. the
gradient of the per-sample objective ``F = S / N`` times ``D``, with ``S`` the spec's regularised
risk. With this scaling one step moves the overlaps by ``O(lr)`` at any ``D`` and ``alpha``
(and ``lr`` of order ``0.1`` is stable for the activations here). Adam is invariant to the scale
of the objective; its ``lr`` is the usual per-coordinate step.

Seeds draw teacher, data and test data as :func:`bayesslr.task.sample_task` does, and the start
from ``fold_in(key(seed), 2)``. All seeds run in one jitted ``vmap``.
"""

from __future__ import annotations

import json
import time
from functools import partial
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import optax
import xarray as xr

from bayesslr import __version__
from bayesslr.activations import Activation, get_activation
from bayesslr.erm.objective import OVERLAP_NAMES, objective, overlaps, test_errors, train_loss
from bayesslr.jaxconfig import Array, PRNGKey
from bayesslr.task import (
    ConfigError,
    TaskConfig,
    check_int,
    check_real,
    sample_data,
    sample_teacher,
)

OPTIMIZERS: tuple[str, ...] = ("gd", "adam")


def _optimizer(name: str, lr: float) -> optax.GradientTransformation:
    return optax.sgd(lr) if name == "gd" else optax.adam(lr)


def _trajectory_one(key: PRNGKey, lam: Array, *, task: TaskConfig, act: Activation,
                    n_train: int, n_test: int, optimizer: str, lr: float, n_records: int,
                    record_every: int, init_scale: float):
    kt, ktr, kte = jax.random.split(key, 3)
    teacher = sample_teacher(kt, task)
    data = sample_data(ktr, task, teacher, n_train)
    test = sample_data(kte, task, teacher, n_test)
    kk, kv = jax.random.split(jax.random.fold_in(key, 2))
    params = {"k": init_scale * jax.random.normal(kk, (task.D,)),
              "v": init_scale * jax.random.normal(kv, (task.D,)), "theta": act.init_theta()}
    scale = float(task.D)  # grad(S / alpha) = D grad(F)

    def loss(p):
        return scale * objective(act, p, data, lam, lam)

    opt = _optimizer(optimizer, lr)

    def one_step(carry, _):
        p, s = carry
        g = jax.grad(loss)(p)
        upd, s = opt.update(g, s, p)
        return (optax.apply_updates(p, upd), s), None

    def record(p):
        ov = overlaps(p, teacher)
        errs = test_errors(act, task, p, teacher, test)
        return {**ov, "train_loss": train_loss(act, p, data),
                "objective": objective(act, p, data, lam, lam),
                "test_error": errs.test_error, "theta": p["theta"]}

    def chunk(carry, _):
        carry, _ = jax.lax.scan(one_step, carry, None, length=record_every)
        return carry, record(carry[0])

    first = record(params)
    _, rest = jax.lax.scan(chunk, (params, opt.init(params)), None, length=n_records)
    return jax.tree_util.tree_map(lambda a, b: jnp.concatenate([a[None], b]), first, rest)


@partial(jax.jit, static_argnames=("task", "act", "n_train", "n_test", "optimizer", "lr",
                                   "n_records", "record_every", "init_scale"))
def _trajectories(keys: Array, lam: Array, **kw):
    return jax.vmap(partial(_trajectory_one, **kw), in_axes=(0, None))(keys, lam)


def gd_trajectory(task: TaskConfig, activation: str, n_train: int, lam: float, *,
                  seeds: Any = (0,), optimizer: str = "gd", lr: float = 0.1, steps: int = 1000,
                  record_every: int = 10, init_scale: float = 0.01,
                  n_test: int = 2000) -> xr.Dataset:
    """Run GD or Adam from a small random start and record the overlaps (spec section 4).

    Parameters
    ----------
    task : TaskConfig
        The SLR task.
    activation : str
        A key of :data:`bayesslr.activations.ACTIVATIONS`.
    n_train : int
        Training samples ``N``.
    lam : float
        Ridge penalty ``lam_k = lam_v``.
    seeds : sequence of int
        Seeds (teacher, data, test set, start).
    optimizer : {"gd", "adam"}
        Plain full-batch gradient descent or Adam.
    lr : float
        Step size (see the module docstring for the GD scaling).
    steps : int
        Optimiser steps; a multiple of ``record_every``.
    record_every : int
        Steps between records.
    init_scale : float
        Standard deviation of the start's components.
    n_test : int
        Fresh test samples per seed for the recorded ``test_error``.

    Returns
    -------
    xarray.Dataset
        Dimensions ``(seed, step)``; variables ``m_k, q_k, m_v, q_v, m_kv, m_vk, q_kv``,
        ``train_loss``, ``objective`` (``S / N``), ``test_error`` and one ``theta_<name>`` per
        activation scalar; attrs record the task, the protocol and the package version.
    """
    t0 = time.perf_counter()
    act = get_activation(activation)
    if optimizer not in OPTIMIZERS:
        raise ConfigError(f"optimizer={optimizer!r} is unknown; allowed: one of "
                          f"{', '.join(OPTIMIZERS)}")
    n_train = check_int("n_train", n_train, low=1)
    lam = check_real("lam", lam, low=0.0)
    lr = check_real("lr", lr, low=0.0, low_open=True)
    steps = check_int("steps", steps, low=1)
    record_every = check_int("record_every", record_every, low=1, high=steps)
    if steps % record_every:
        raise ConfigError(f"steps={steps} is not a multiple of record_every={record_every}; "
                          "allowed: steps = record_every * integer")
    init_scale = check_real("init_scale", init_scale, low=0.0, low_open=True)
    n_test = check_int("n_test", n_test, low=2)
    seeds = np.atleast_1d(np.asarray(seeds, dtype=np.int64))
    keys = jax.vmap(jax.random.key)(jnp.asarray(seeds, dtype=jnp.uint32))
    out = _trajectories(keys, jnp.asarray(lam, dtype=jnp.result_type(float)), task=task,
                        act=act, n_train=n_train, n_test=n_test, optimizer=optimizer, lr=lr,
                        n_records=steps // record_every, record_every=record_every,
                        init_scale=init_scale)
    out = jax.tree_util.tree_map(np.asarray, out)
    dims = ("seed", "step")
    data_vars = {name: (dims, out[name]) for name in (*OVERLAP_NAMES, "train_loss", "objective",
                                                      "test_error")}
    for i, name in enumerate(act.param_names):
        data_vars[f"theta_{name}"] = (dims, out["theta"][..., i])
    ds = xr.Dataset(data_vars, coords={"seed": seeds,
                                       "step": np.arange(0, steps + 1, record_every)})
    ds.attrs.update({
        "task": json.dumps(task.to_dict()), "activation": activation, "optimizer": optimizer,
        "lr": lr, "lam": lam, "n_train": n_train, "n_test": n_test, "init_scale": init_scale,
        "step_convention": "gd: theta <- theta - lr grad(S/alpha); adam: optax.adam(lr) on S/alpha",
        "test_error": "mean (z*_eps - f)^2 on fresh data (expectation: risk minus Delta)",
        "bayesslr_version": __version__, "runtime_s": time.perf_counter() - t0,
    })
    return ds
