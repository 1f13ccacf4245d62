# ---
# jupyter:
#   jupytext:
#     formats: py:percent
#     text_representation:
#       extension: .py
#       format_name: percent
#   kernelspec:
#     display_name: Python 3
#     language: python
#     name: python3
# ---

# %% [markdown]
# # The paper's figures from a sweep
#
# Reads the dataset of a results directory written by `bayesslr run` (the `quick` preset by
# default; the `paper` preset regenerates every setting of the paper, spec section 7) and draws
# the standard figures with the same functions as `bayesslr report`. Set `BAYESSLR_RESULTS` to
# another directory to use it here. Figures whose methods are absent are skipped with the reason.

# %%
import os

import numpy as np
from IPython.display import display

from bayesslr.report import FIGURES, NothingToPlot, load_results
from bayesslr.report.figures import curve, methods_of

results = os.environ.get("BAYESSLR_RESULTS", "results/quick")
ds = load_results(results)
print(ds.attrs.get("title", ""), "|", ds.attrs.get("git_revision", ""))
print({d: ds.sizes[d] for d in ds.dims})

# %% [markdown]
# ## Seed-averaged test error by method
# One row per method and alpha (lam tuned per alpha), at every setting of
# `(variant, L, nu, delta)`: the numbers behind the finite-sample figure.

# %%
rows = []
settings = [d for d in ("variant", "L", "nu", "delta") if d in ds.dims]
for m in ds["method"].values.tolist():
    mean, sem = curve(ds, m)
    for d in ("D", "sqrtND"):
        if d in mean.dims:
            mean, sem = mean.isel({d: -1}), sem.isel({d: -1})
    table = mean.to_dataframe(name="test_error").join(sem.to_dataframe(name="se")[["se"]])
    table = table.dropna(subset=["test_error"])
    table["method"] = m
    rows.append(table.reset_index())
if rows:
    import pandas as pd

    summary = pd.concat(rows).set_index(["method", *settings])
    print(summary[["alpha", "test_error", "se"]].to_string() if "alpha" in summary
          else summary[["test_error", "se"]].to_string())

# %% [markdown]
# ## Ordering check: Bayes < softmax < linear
# At each alpha where all three are present: Bayes sampling (or the Bayes-optimal theory), then
# ERM softmax, then ERM linear.

# %%
present = {m for f in ("bayes_sampling", "theory_bayes", "erm", "theory_erm")
           for m in methods_of(ds, f)}


def first_present(*names):
    return next((n for n in names if n in present), None)


trio = [first_present("bayes_sampling", "theory_bayes"),
        first_present("erm:softmax", "theory_erm:softmax"),
        first_present("erm:linear", "theory_erm:linear")]
if all(trio) and "alpha" in ds.dims:
    curves = [curve(ds, m)[0] for m in trio]
    ordered = (curves[0] < curves[1]) & (curves[1] < curves[2])
    valid = np.isfinite(curves[0]) & np.isfinite(curves[1]) & np.isfinite(curves[2])
    print(f"{' < '.join(trio)} holds at {int(ordered.where(valid, False).sum())} of "
          f"{int(valid.sum())} grid points")
else:
    print("not all of Bayes, softmax and linear are in this dataset:", trio)

# %% [markdown]
# ## Figures

# %%
figures = {}
for name, fn in FIGURES.items():
    try:
        figures[name] = fn(ds)
    except NothingToPlot as why:
        print(f"skipped {name}: {why}")
for fig in figures.values():
    display(fig)
