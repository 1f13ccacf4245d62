"""A tiny deterministic test-only method family, ``sweeptest:<a|b>``, for the sweep tests.

Loaded by the sweep through ``BAYESSLR_PLUGINS=/path/to/tests/sweep_plugin.py`` (so that
subprocesses and dask workers see it too). Its outputs are a closed-form function of the cell
and its seed; options make it slow (``sleep`` seconds), fail (``fail_seed``) or write a big file
(``pad``: an extra text output of that many characters). When
``$SWEEPTEST_LOG`` names a file, every execution appends one line ``method seed alpha``, which
lets the tests count recomputations.

Everything the suite knows about the family is declared here, on its registry entry: its verb
(``bayesslr sweeptest --activation a --alpha 2 --json``, generated from the schema) and its part
of the report (a figure of its ``trace`` and one verdict), so a plugin needs no edit elsewhere.
"""

from __future__ import annotations

import math
import os
import time

import numpy as np

from bayesslr.core.options import Opt, Schema
from bayesslr.registry import Cell, Output, ReportRole, common, register

SCHEMA = Schema("sweeptest", (
    Opt("sleep", 0.0, "real", low=0.0, high=600.0, doc="seconds to sleep before returning"),
    Opt("fail_seed", -1, "int", low=-1, doc="raise at this seed"),
    Opt("pad", 0, "int", low=0, high=10**7, doc="length of an extra text output 'pad' (a big "
        "cell file)"),
))


def trace_figure(results):
    """The mean ``trace`` of each method against ``step`` (the family's own figure)."""
    import matplotlib.pyplot as plt

    from bayesslr.report.figures import NothingToPlot

    if "sweeptest" not in results.children or "trace" not in results["sweeptest"].ds:
        raise NothingToPlot("no sweeptest trace in the results")
    ds = results["sweeptest"].ds
    fig, ax = plt.subplots(figsize=(4, 3))
    for m in ds["method"].values:
        tr = ds["trace"].sel(method=m)
        other = [d for d in tr.dims if d != "step"]
        ax.plot(ds["step"].values, tr.mean(other).values, marker="o", label=str(m))
    ax.set(xlabel="step", ylabel="trace", title="sweeptest traces")
    ax.legend()
    return fig


def claims(results):
    """One verdict: every stored test error is below 2 (the closed form's bound plus noise)."""
    from bayesslr.report.claims import FAILS, HOLDS, Verdict

    err = results["sweeptest"].ds["test_error"].values
    err = err[np.isfinite(err)]
    ok = bool((err < 2.0).all())
    return [Verdict("sweeptest errors stay below 2", HOLDS if ok else FAILS,
                    f"max {err.max():.4g} over {err.size} cells")]


@register("sweeptest", schema=SCHEMA, activations=("a", "b"), needs=("alpha",),
          report=ReportRole(figures={"sweeptest_trace": trace_figure}, claims=claims),
          description="test-only: closed-form outputs of the cell and seed",
          outputs=common("test_error", "stderr", "converged") + (
              Output("trace", "a list output: 1/(1+t) for t <= alpha", "1", None, "step"),))
def sweeptest_cell(cell: Cell, opts: dict) -> dict[str, float | int | bool | str]:
    """Deterministic outputs; ``options``: ``sleep`` (s), ``fail_seed`` (int), ``pad`` (int)."""
    # the log is named before sleeping: a cell abandoned at an interrupt finishes in the
    # background and must append to its own test's log, not to the next test's (the variable
    # is set per test in the same process)
    log = os.environ.get("SWEEPTEST_LOG")
    time.sleep(opts["sleep"])
    if cell.seed == opts["fail_seed"]:
        raise RuntimeError(f"planned failure at seed {cell.seed}")
    rng = np.random.default_rng([cell.seed, int(1000 * cell.alpha), len(cell.L)])
    scale = 1.0 if cell.activation == "a" else 2.0
    nu = cell.nu if math.isfinite(cell.nu) else 10.0
    err = scale / (1.0 + cell.alpha) * math.exp(-0.1 * nu) + 0.01 * rng.standard_normal()
    if log:
        with open(log, "a", encoding="utf-8") as f:
            f.write(f"{cell.method} {cell.seed} {cell.alpha}\n")
    out = {"test_error": err, "stderr": 0.01, "train_loss": err / 2, "m_k": 1 - err,
           "converged": True, "iterations": 7, "init": "informed",
           "trace": [1.0 / (1 + t) for t in range(1 + int(cell.alpha))]}
    if opts["pad"]:
        out["pad"] = "x" * opts["pad"]
    return out
