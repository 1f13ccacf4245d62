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
import pandas as pd
import xarray as xr
from IPython.display import display

from bayesslr.report import FIGURES, NothingToPlot, load_results
from bayesslr.report.figures import curve, groups, methods_of

results = os.environ.get("BAYESSLR_RESULTS", "results/quick")
tree = load_results(results)
print(tree.attrs.get("title", ""), "|", tree.attrs.get("git_revision", ""))
fams = groups(tree)
for fam, ds in fams.items():
    print(fam, {d: ds.sizes[d] for d in ds.dims})

# %% [markdown]
# ## Seed-averaged test error by method
# One row per method and alpha (lam tuned per alpha), at every setting of
# `(variant, L, nu, delta)`: the numbers behind the finite-sample figure.

# %%
for fam, ds in fams.items():
    rows = []
    settings = [d for d in ("variant", "L", "nu", "delta") if d in ds.dims]
    for m in methods_of(ds, fam):
        mean, sem = curve(ds, m)
        table = mean.to_dataframe(name="test_error").join(sem.to_dataframe(name="se")[["se"]])
        table = table.dropna(subset=["test_error"])
        table["method"] = m
        rows.append(table.reset_index())
    if rows:
        summary = pd.concat(rows).set_index(["method", *settings])
        cols = [c for c in ("alpha", "test_error", "se") if c in summary]
        print(summary[cols].to_string())

# %% [markdown]
# ## Ordering check: Bayes < softmax < linear
# At each alpha where all three are present: Bayes sampling (or the Bayes-optimal theory), then
# ERM softmax, then ERM linear.

# %%
present = {m: fams[f] for f in ("bayes_sampling", "theory_bayes", "erm", "theory_erm")
           if f in fams for m in methods_of(fams[f], f)}


def first_present(*names):
    return next((n for n in names if n in present), None)


trio = [first_present("bayes_sampling", "theory_bayes"),
        first_present("erm:softmax", "theory_erm:softmax"),
        first_present("erm:linear", "theory_erm:linear")]
if all(trio) and all("alpha" in present[m].dims for m in trio):
    curves = [curve(present[m], m)[0] for m in trio]
    curves = [c.squeeze(drop=True) for c in xr.align(*curves, join="inner")]
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
        figures[name] = fn(tree)
    except NothingToPlot as why:
        print(f"skipped {name}: {why}")
for fig in figures.values():
    display(fig)
