"""Gradient-descent protocol of docs/estimators.md: overlap trajectories of plain GD or Adam.

From a small random start ``k, v ~ N(0, init_scale^2 I_D)`` (independent of the teacher), or the
ERM protocol's informed start near ``(c_nu k*, v*)`` (the activation's scalars at their registry
defaults), the regularised empirical risk is descended
with full-batch steps and the overlaps of docs/model.md §3 are recorded every ``record_every``
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

Seeds draw teacher, data and test data as :func:`bayesslr.core.task.sample_task` does, and the start
from ``algorithm_key(key, "trajectory")``. All seeds run in one jitted ``vmap``.
"""

from __future__ import annotations

import dataclasses
import json
import time
from dataclasses import dataclass
from functools import partial
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import optax
import xarray as xr

from bayesslr import __version__
from bayesslr.core.activations import Activation, get_activation
from bayesslr.core.jaxconfig import Array, PRNGKey
from bayesslr.core.metrics import oracle_terms, score_given
from bayesslr.core.options import Validated, option
from bayesslr.core.task import (
    OVERLAP_NAMES,
    ConfigError,
    TaskConfig,
    algorithm_key,
    check_int,
    check_real,
    overlaps,
    sample_task,
    seed_key,
)
from bayesslr.erm.objective import objective, predict_params, train_loss
from bayesslr.erm.protocol import INITS, make_start

OPTIMIZERS: tuple[str, ...] = ("gd", "adam")


def check_record_every(steps: int, record_every: int) -> None:
    """A one-line :class:`ConfigError` unless ``steps`` is a whole number of records
    (gradient-descent options, here and in :mod:`bayesslr.multihead.erm`)."""
    if record_every > steps or steps % record_every:
        raise ConfigError(f"steps={steps} is not a multiple of record_every={record_every}; "
                          "allowed: steps = record_every * integer")


@dataclass(frozen=True)
class GDOptions(Validated):
    """Settings of a GD / Adam trajectory (each field checked on construction).

    Attributes
    ----------
    optimizer : {"gd", "adam"}
        Plain full-batch gradient descent or Adam.
    lr : float
        Step size (see the module docstring for the GD scaling).
    steps : int
        Optimiser steps; a multiple of ``record_every``.
    record_every : int
        Steps between records.
    init : {"random", "informed"}
        Start: small random (``k, v ~ N(0, init_scale^2 I_D)``) or informed (the ERM protocol's
        ``(c_nu k* + s xi, v* + s zeta)``, ``s = init_noise``).
    init_scale : float
        Standard deviation of the random start's components.
    init_noise : float
        Perturbation size of the informed start.
    n_test : int
        Fresh test samples per seed for the recorded ``test_error``.
    """

    optimizer: str = option("gd", choices=OPTIMIZERS, doc="plain full-batch GD or Adam")
    lr: float = option(0.1, low=0.0, low_open=True, doc="step size")
    steps: int = option(1000, low=1, high=10**7, doc="optimiser steps")
    record_every: int = option(10, low=1, high=10**7, doc="steps between records")
    init: str = option("random", choices=INITS, doc="start: small random, or informed (near "
                       "the teacher, as the ERM protocol)")
    init_scale: float = option(0.01, low=0.0, low_open=True,
                               doc="standard deviation of the random start's components")
    init_noise: float = option(0.1, low=0.0, doc="perturbation size of the informed start")
    n_test: int = option(2000, low=2, high=10**8, doc="fresh test samples per seed")

    def __post_init__(self) -> None:
        super().__post_init__()
        check_record_every(self.steps, self.record_every)

    @property
    def n_records(self) -> int:
        return self.steps // self.record_every


def _optimizer(name: str, lr: float) -> optax.GradientTransformation:
    return optax.sgd(lr) if name == "gd" else optax.adam(lr)


def _trajectory_one(key: PRNGKey, lam: Array, *, task: TaskConfig, act: Activation,
                    n_train: int, opts: GDOptions):
    teacher, data, test = sample_task(key, task, n_train, opts.n_test)
    oracle = oracle_terms(task, teacher, test)
    k, v = make_start(algorithm_key(key, "trajectory"), task, teacher,
                      jnp.asarray(opts.init == "informed"), jnp.asarray(opts.init_noise),
                      jnp.asarray(opts.init_scale))
    params = {"k": k, "v": v, "theta": act.init_theta()}
    scale = float(task.D)  # grad(S / alpha) = D grad(F)

    def loss(p):
        return scale * objective(act, p, data, lam, lam)

    opt = _optimizer(opts.optimizer, opts.lr)

    def one_step(carry, _):
        p, s = carry
        g = jax.grad(loss)(p)
        upd, s = opt.update(g, s, p)
        return (optax.apply_updates(p, upd), s), None

    def record(p):
        ov = overlaps(p["k"], p["v"], teacher)
        f = predict_params(act, p, test.X, test.mask)
        return {**ov, "train_loss": train_loss(act, p, data),
                "objective": objective(act, p, data, lam, lam),
                "test_error": score_given(*oracle, test.y, f).test_error, "theta": p["theta"]}

    def chunk(carry, _):
        carry, _ = jax.lax.scan(one_step, carry, None, length=opts.record_every)
        return carry, record(carry[0])

    first = record(params)
    _, rest = jax.lax.scan(chunk, (params, opt.init(params)), None, length=opts.n_records)
    return jax.tree_util.tree_map(lambda a, b: jnp.concatenate([a[None], b]), first, rest)


@partial(jax.jit, static_argnames=("task", "act", "n_train", "opts"))
def _trajectories(keys: Array, lam: Array, **kw):
    return jax.vmap(partial(_trajectory_one, **kw), in_axes=(0, None))(keys, lam)


def gd_trajectory(task: TaskConfig, activation: str, n_train: int, lam: float, *,
                  seeds: Any = (0,), opts: GDOptions | None = None, **kw: Any) -> xr.Dataset:
    """Run GD or Adam from a random or informed start and record the overlaps (docs/estimators.md).

    Parameters
    ----------
    task : TaskConfig
        The SLR task.
    activation : str
        A key of :data:`bayesslr.core.activations.ACTIVATIONS`.
    n_train : int
        Training samples ``N``.
    lam : float
        Ridge penalty ``lam_k = lam_v``.
    seeds : sequence of int
        Seeds (teacher, data and test set as :func:`bayesslr.core.task.sample_task`; the start
        from ``algorithm_key(key, "trajectory")``).
    opts : GDOptions, optional
        Optimiser, step size, steps, records, start, test size; keyword arguments (``lr=...``)
        are accepted instead, as the fields of :class:`GDOptions`.

    Returns
    -------
    xarray.Dataset
        Dimensions ``(seed, step)``; variables ``m_k, q_k, m_v, q_v, m_kv, m_vk, q_kv``,
        ``train_loss``, ``objective`` (``S / N``), ``test_error`` and one ``theta_<name>`` per
        activation scalar; attrs record the task, the protocol and the package version.

    Examples
    --------
    >>> import bayesslr as bs
    >>> from bayesslr.erm import gd_trajectory
    >>> task = bs.make_task("spiked", L=3, nu=2.0, delta=0.0, D=32)
    >>> ds = gd_trajectory(task, "softmax", 160, 0.1, steps=40, record_every=20, n_test=100)
    >>> dict(ds.sizes)
    {'seed': 1, 'step': 3}
    """
    t0 = time.perf_counter()
    act = get_activation(activation)
    opts = opts if opts is not None else GDOptions(**kw)
    n_train = check_int("n_train", n_train, low=1)
    lam = check_real("lam", lam, low=0.0)
    seeds = np.atleast_1d(np.asarray(seeds, dtype=np.int64))
    keys = jax.vmap(seed_key)(jnp.asarray(seeds, dtype=jnp.uint32))
    out = _trajectories(keys, jnp.asarray(lam, dtype=jnp.result_type(float)), task=task,
                        act=act, n_train=n_train, opts=opts)
    out = jax.tree_util.tree_map(np.asarray, out)
    dims = ("seed", "step")
    data_vars = {name: (dims, out[name]) for name in (*OVERLAP_NAMES, "train_loss", "objective",
                                                      "test_error")}
    for i, name in enumerate(act.param_names):
        data_vars[f"theta_{name}"] = (dims, out["theta"][..., i])
    ds = xr.Dataset(data_vars, coords={
        "seed": seeds, "step": np.arange(0, opts.steps + 1, opts.record_every)})
    ds.attrs.update({
        "task": json.dumps(task.to_dict()), "activation": activation,
        **{k: v for k, v in dataclasses.asdict(opts).items()}, "lam": lam,
        "n_train": n_train,
        "step_convention": "gd: theta <- theta - lr grad(S/alpha); adam: optax.adam(lr) on S/alpha",
        "test_error": "Rao-Blackwellised excess error on fresh data (bayesslr.core.metrics)",
        "bayesslr_version": __version__, "runtime_s": time.perf_counter() - t0,
    })
    return ds
