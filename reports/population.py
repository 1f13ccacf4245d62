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
# # Population: which attention layer reaches the Bayes risk?
#
# **The question.** With unlimited data, how close does one attention layer with a fixed
# query get to the best possible predictor (the Bayes risk) in single-location regression,
# and which property of the activation decides it: normalisation (softmax, softplus-normalised)
# or exponential growth (softmax only)?
#
# **The paper's claims** (Duranthon et al., arXiv 2509.21936; reconstructed in the suite's
# docs): at its best overlaps softmax attention *is* the Bayes predictor (its attention
# weights equal the posterior of the hidden location), so its excess risk equals the Bayes
# risk at every signal strength ν and length L. Linear attention cannot reach it, and on
# max-SLR with ν = ∞ its excess risk grows towards the trivial 1 as L grows. Erf attention
# (not normalised) suffers when the sequence length varies; softplus-normalised attention
# (no exponential growth) has a gap that grows with L.
#
# **How the numbers are made.** `population:<activation>` optimises the activation's overlaps
# on one Monte Carlo set and evaluates the excess risk on an independent one (error bars: one
# standard error); `population:bayes` is `1 - E[sum_l P_l^2]`. When the optimum sits at
# |k| → ∞ (softmax on max-SLR with ν = ∞), the value is an upper bound on the infimum and is
# marked with an open triangle.
#
# The results directory is the parameter `results` (environment variable `BAYESSLR_RESULTS`);
# `bayesslr report RESULTS --notebooks` sets it. A directory given that holds no results is an
# error; with none given, `results/quick` if it exists, else the shipped reference results
# (every figure from them is titled "shipped reference").

# %%
from bayesslr.report import claims, show, tables

# %% tags=["parameters"]
results = show.results_parameter()

# %%
tree = show.open_results(results)

# %% [markdown]
# ## Against the signal strength ν
#
# One panel per (variant, L). The dashed black line is the Bayes risk; a curve on it is a
# Bayes-optimal activation. The y axis is logarithmic: softmax's excess risk is expected to
# fall like exp(-ν/4) with the Bayes risk, linear's only like 1/ν.

# %%
show.figure("population_vs_nu", tree)

# %% [markdown]
# ## Against the sequence length L, fixed and variable
#
# One panel per (variant, ν). Fixed lengths are joined by lines; length laws (`U{1,2,3}`:
# L drawn uniformly from 1, 2, 3 for each sequence, one predictor for all lengths) are the
# diamonds right of the dotted separator. On max-SLR with ν = ∞ the hidden token is the
# argmax of the teacher's scores, so the Bayes risk is 0.

# %%
show.figure("population_vs_L", tree)

# %% [markdown]
# ## The numbers
#
# Every population point: excess risk ± one standard error, one row per setting, one column per
# activation (`bayes` is the Bayes risk); `≤` marks a value at the optimiser's bound (an upper
# bound on the infimum).

# %%
show.table(tables.population_pivot(tree) if tree is not None else None, "population results")

# %% [markdown]
# ## What the data says about the paper's claims
#
# Each verdict compares two estimates through their difference and its standard error:
# *holds* when the data support the claim by more than two standard errors (or, for an
# equality, agree within two), *does not hold* when they contradict it by more than two,
# *not enough data* otherwise or when a setting is missing (the line says which). L = 1 is
# left out of the orderings: with one token every activation is exact.

# %%
show.verdicts(claims.population_claims, tree)
