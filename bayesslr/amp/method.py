"""The registered family ``amp``: one cell -> GAMP on the seed's data (``docs/amp.md``).

The CLI verb ``bayesslr amp`` and the sweep runner both go through :func:`amp_cell` (via
:func:`bayesslr.registry.run_cell`). Teacher, training data (``N = round(alpha D)``) and test
data are the seed's (:func:`bayesslr.amp.data.amp_task_data`: ``sample_task``'s draws); the
start's randomness comes from ``algorithm_key(key, "sampler")``. The test set is drawn after
GAMP has run and the training ``X`` is freed (its own key: the same numbers as drawing it
first), so only one ``X`` is ever in memory. The error is the suite's one
measurement (:func:`bayesslr.core.metrics.test_errors`) of GAMP's posterior-mean predictor
(:func:`bayesslr.amp.gamp.gamp_predict`) on the fresh test set, with the oracle on the same set.
"""

from __future__ import annotations

import math
import time
from collections.abc import Mapping
from typing import Any

import numpy as np

from bayesslr.amp.data import BLOCK_BYTES, EXACT_BELOW_BYTES, amp_test_data, amp_train_data
from bayesslr.amp.gamp import GampOptions, gamp, gamp_predict
from bayesslr.core.metrics import test_errors
from bayesslr.core.options import Opt, schema_of
from bayesslr.core.task import algorithm_key, seed_key
from bayesslr.registry import Cell, CliFace, PlotStyle, ReportRole, Resources

# isort: split
from bayesslr.registry import common, outputs, register

SCHEMA = schema_of(GampOptions, "amp") + (
    Opt("n_test", 10_000, "int", low=2, high=10**8, doc="fresh test inputs"),
)

# per-iteration lists returned by a cell (t = 0 is the start), each along ``iteration``
TRAJECTORY = ("m_k", "q_k", "m_v", "q_v", "m_vk", "q_kv", "damping", "delta")


def _memory(cell: Cell, opts: Mapping[str, Any]) -> Resources:
    """The larger of the training and test ``X`` (float32; the test set is drawn once the
    training ``X`` is freed), plus the draw's block (or ``sample_task``'s ~6x peak of both
    for small draws), GAMP's per-token arrays and the channel's quadrature blocks."""
    D, N, L = cell.sizes()
    n_test = opts["n_test"]
    both = 4.0 * L * D * (N + n_test)
    x = 4.0 * L * D * max(N, n_test)
    draw = 5.0 * both if both <= EXACT_BELOW_BYTES else BLOCK_BYTES * 6.0
    tokens = (N + n_test) * L * 4 * 24  # fields, g, derivatives, masks, predictions
    quad = 0.0
    if cell.variant == "max" and math.isfinite(float(cell.nu)):
        quad = 4096 * L * (2 * L) * 110 * 4 * 12  # one block of the Gumbel-max rule's HVPs
    runtime = 0.5 * 2**30  # XLA, compiled programs
    return Resources(x + draw + tokens + quad + runtime,
                     f"training or test X (N={N}, n_test={n_test}) x L={L} x D={D} float32",
                     "D, alpha or n_test")


def _cost(cell: Cell, opts: Mapping[str, Any]) -> float:
    """Modelled core-seconds: the draw (~10 s per GB of X), iterations (two passes over X at
    ~4 GB/s, plus the channel), about 60 iterations (100 with damping for spiked)."""
    D, N, L = cell.sizes()
    gb = 4.0 * L * D * (N + opts["n_test"]) / 1e9
    iters = min(opts["max_iter"], 100 if cell.variant == "spiked" else 60)
    chan = N * L * (2e-6 if cell.variant == "spiked" else 2e-5)
    if cell.variant == "max" and math.isfinite(float(cell.nu)):
        chan = N * L * 4e-4
    return 5.0 + 10.0 * gb + iters * (2.0 * 4.0 * L * D * N / 4e9 + chan)


@register("amp", schema=SCHEMA, needs=("alpha", "D"),
          description="GAMP on the data, the algorithm the Bayes state evolution describes "
                      "(docs/amp.md)",
          outputs=common("test_error", "stderr", "risk", "oracle_error", "oracle_error_stderr",
                         "excess_over_oracle", "excess_over_oracle_stderr", "m_k", "q_k",
                         "m_v", "q_v", "m_kv", "m_vk", "q_kv", "nishimori_gap", "converged",
                         "reason", "iterations", "runtime_s") + outputs(
              ("c_k", "GAMP's per-coordinate posterior variance of k"),
              ("c_v", "GAMP's per-coordinate posterior variance of v"),
              ("damping", "damping at the end (0: plain GAMP throughout)"),
              ("damped_from", "first damped iteration (0: none)"),
              ("variance", "Onsager form used: derivative or nishimori", ""),
              ("precision_floor_hits", "iterations whose lam + A was floored at 1"),
              ("variance_clipped", "a posterior variance sits at m_clip", ""),
              ("seconds_per_iteration", "median wall time of an iteration", "s"),
              ("data_s", "wall time of drawing the data", "s"),
              ("N", "training samples"),
              ("quadrature", "how c_eps was computed", ""),
              *[(f"trajectory_{k}", f"{k} per iteration (t = 0: the start)", "1", None,
                 "iteration") for k in TRAJECTORY]),
          cost=_cost, memory=_memory,
          plot=PlotStyle(kind="marker", label="GAMP", marker="D", color="k"),
          version="1", dims=("variant", "L", "nu", "delta", "alpha", "D"),
          report=ReportRole(finite_sample=5, leaderboard=3),
          cli=CliFace(task={"delta": "0.01"}, fields={"D": "2000", "alpha": "2", "seed": "0"},
                      help={"D": "Token dimension D >= 1.",
                            "seed": "Seed of teacher, data and start."},
                      header=("variant", "L", "nu", "delta", "D", "alpha", "seed"),
                      doc="GAMP from the uninformed or informed start: posterior-mean test "
                          "error against the oracle, final and per-iteration overlaps, "
                          "convergence with its reason"))
def amp_cell(cell: Cell, opts: Mapping[str, Any]) -> dict[str, Any]:
    """Registered family ``amp``: GAMP's posterior-mean test error and overlaps on one task.

    Cell options
    ------------
    See :data:`SCHEMA` (:class:`bayesslr.amp.gamp.GampOptions` and ``n_test``).

    Returns
    -------
    dict
        ``test_error``, ``stderr``, ``oracle_error``, ``excess_over_oracle`` (+ stderrs),
        ``risk``, the final overlaps ``m_k .. q_kv``, ``nishimori_gap``, ``converged``,
        ``reason``, ``iterations``, ``c_k``, ``c_v``, ``damping``, ``damped_from``, timing,
        and the per-iteration lists ``trajectory_<name>`` for ``name`` in :data:`TRAJECTORY`.
    """
    t0 = time.perf_counter()
    task = cell.task()
    N = cell.n_train()
    key = seed_key(cell.seed)
    teacher, train = amp_train_data(key, task, N, opts["n_test"])
    train.X.block_until_ready()
    data_s = time.perf_counter() - t0
    gopt = GampOptions.from_options(opts)
    res = gamp(algorithm_key(key, "sampler"), task, train, gopt, teacher=teacher)
    del train  # one X at a time: the test set (its own key) is drawn after
    t1 = time.perf_counter()
    test = amp_test_data(key, task, teacher, N, opts["n_test"])
    data_s += time.perf_counter() - t1
    y_hat = gamp_predict(task, res, test.X, test.mask, gopt)
    err = test_errors(task, teacher, test, y_hat)
    out: dict[str, Any] = {
        "test_error": err.test_error, "stderr": err.stderr, "risk": err.risk,
        "oracle_error": err.oracle_error, "oracle_error_stderr": err.oracle_error_stderr,
        "excess_over_oracle": err.excess_over_oracle,
        "excess_over_oracle_stderr": err.excess_over_oracle_stderr,
        "m_k": res.m_k, "q_k": res.q_k, "m_v": res.m_v, "q_v": res.q_v, "m_kv": res.m_kv,
        "m_vk": res.m_vk, "q_kv": res.q_kv,
        "nishimori_gap": max(abs(res.m_k - res.q_k), abs(res.m_v - res.q_v)),
        "converged": res.converged, "reason": res.reason, "iterations": res.iterations,
        "c_k": res.c_k, "c_v": res.c_v, "damping": res.damping, "damped_from": res.damped_from,
        "variance": res.variance,
        "precision_floor_hits": res.precision_floor_hits,
        "variance_clipped": res.variance_clipped,
        "seconds_per_iteration": res.seconds_per_iteration, "data_s": data_s, "N": N,
        "quadrature": res.quadrature, "init": gopt.init,
    }
    traj = res.trajectory
    for k in TRAJECTORY:
        v = list(traj[k])
        if len(v) == res.iterations:  # per-step records: t = 0 has none
            v = [0.0 if k == "damping" else math.nan] + v
        out[f"trajectory_{k}"] = [float(x) for x in np.asarray(v, np.float64)]
    out["runtime_s"] = time.perf_counter() - t0
    return out
