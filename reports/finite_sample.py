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
# # Finite sample: how far is trained attention from Bayes-optimal, and does the theory hold?
#
# **The question.** With N = αD samples, what test error do softmax and linear attention
# reach when trained by regularised ERM, how far is that from the Bayes-optimal error, and
# does the asymptotic (D → ∞) theory describe the finite-D algorithms?
#
# **The paper's claims.** Softmax attention trained by ERM approaches the Bayes-optimal error
# and beats linear attention at every α (its finite-sample figure: replica curves for softmax
# and linear at the optimal λ per α, ERM markers at sqrt(ND) = 10⁴, the Bayes-optimal curve of
# the state evolution, which decreases to the Bayes risk as α → ∞). The paper notes disagreement
# between theory and simulation at low signal and low regularisation. What the paper could
# not show and this suite adds: the Bayes-optimal estimator *computed* on the data (NUTS
# posterior mean, with the oracle that knows the teacher on the same test set), and ERM at two
# sizes, so the reader sees whether the gap to the replica line closes as D grows.
#
# **How to read the figure.** One panel per (variant, L, ν). Lines are D → ∞ theories (band:
# one standard error); markers are finite-D estimates (one standard error over seeds); for ERM
# smaller D is lighter and smaller. The dotted horizontal line is the Bayes risk (α → ∞).
# Where the state evolution has two fixed points the informed and uninformed branches are
# drawn and the hard window (the uninformed start misses the Bayes-optimal branch) is shaded.
# A hollow grey marker is a cell whose method did not converge (the title says why): read it
# as flagged, not as a measurement.

# %%
from bayesslr.report import claims, show, tables

# %% tags=["parameters"]
results = show.results_parameter()

# %%
tree = show.open_results(results)

# %% [markdown]
# ## Excess over the Bayes risk against α: what the verdicts judge
#
# Each estimator less its oracle (the teacher known) on the same teacher and test set, each
# theory less the Bayes risk: pairing removes the teacher-to-teacher and test-set noise, so a
# Bayes estimator sits below the state evolution only by its own Monte Carlo error.

# %%
show.figure("excess_vs_alpha", tree)

# %% [markdown]
# ## Test error against α (raw, not paired)
#
# The raw errors the paper plots. At finite D a teacher's norm moves every estimator on its
# data, the oracle too, so a marker may sit below a D -> inf theory line by more than its
# error bar; the figure above is the one to read a verdict from.

# %%
show.figure("error_vs_alpha", tree)

# %% [markdown]
# ## The numbers
#
# Every point of the figure: seed mean of the test excess error, its standard error and the
# number of seeds; for ERM the λ chosen at each α without the test data: `validation` or
# `replica` where the cell chose it itself, else the λ of the grid at which the replica theory
# is lowest (never the lowest *test* error, which would flatter ERM). `size` is `inf` for the
# theories.

# %%
show.table(tables.finite_sample_table(tree) if tree is not None else None,
           "finite-sample results")

# %% [markdown]
# ## What the data says about the paper's claims
#
# Same rule as everywhere in the report: two estimates are compared through their difference
# and its standard error; two standard errors decide, more when an error bar is the spread of
# a few seeds (the Student-t quantile of its degrees of freedom, column `dof` above: 3.3 for
# four seeds). The evidence lists every point.

# %%
show.verdicts(claims.finite_sample_claims, tree)
