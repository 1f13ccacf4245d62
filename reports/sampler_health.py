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
# # Sampler health: can the Bayes-optimal numbers computed by NUTS be trusted?
#
# **The question.** The suite computes the Bayes-optimal estimator by sampling the posterior
# with NUTS, something the paper did not do (its Bayes curve is the state evolution). Are the
# chains converged, is the Nishimori identity of the Bayes-optimal setting satisfied, and do
# chains started away from the teacher find the same posterior? Where random starts get
# trapped, is it the computational hardness that the state evolution predicts (its hard
# phase, at low α in some settings) or a failure of the sampler?
#
# **Why random and annealed starts.** In this planted setting the teacher is an exact draw
# from the posterior, so chains started at the teacher are at equilibrium from the first step
# and their R-hat cannot reveal that other starts would be trapped. The suite therefore also
# runs chains from a random start and from an annealed one (data added in stages, each stage
# started from the previous one's draws) and compares their predictions, their
# log-likelihood and their pooled R-hat with the teacher start.
#
# **How to read the figures.** The first figure has one row per setting: R-hat per start (the
# red line is the 1.01 threshold of the convergence verdict; stars: R-hat pooled over all
# starts), ESS per gradient evaluation (filled: bulk, open: tail), divergent transitions and
# the Nishimori gap max|m − q|. The second draws each start's test error against α over the
# state evolution (hard window shaded, if any), and below it the log-likelihood gap per sample
# between the teacher start and the worst other start.

# %%
from bayesslr.report import claims, show, tables

# %% tags=["parameters"]
results = show.results_parameter()

# %%
tree = show.open_results(results)

# %% [markdown]
# ## Convergence diagnostics against α

# %%
show.figure("sampler_diagnostics", tree)

# %% [markdown]
# ## Teacher, random and annealed starts against the state evolution

# %%
show.figure("sampler_starts", tree)

# %% [markdown]
# ## The numbers
#
# One row per cell and start: the test error (standard error for the reported, teacher start)
# and the diagnostics (ESS per gradient evaluation, warm-up included).

# %%
samples = tables.sampler_table(tree) if tree is not None else None
show.table(samples, "bayes_sampling results", digits=3, columns=[
    "variant", "L", "nu", "alpha", "D", "start", "test_error", "se", "r_hat_max",
    "ess_bulk_min", "ess_tail_min", "ess_per_grad", "ess_tail_per_grad", "divergences"])

# %% [markdown]
# Per cell, the comparison across starts: the largest mean log-likelihood gap per sample
# (teacher start minus another), the R-hat pooled over every chain of every start, the
# largest mean squared difference of the predictions, and the sampler's own verdict with its
# reason.

# %%
show.table(samples[samples.converged.notna()] if samples is not None else None,
           "bayes_sampling results", columns=[
               "variant", "L", "nu", "alpha", "D", "log_lik_gap", "r_hat_max_pooled",
               "disagreement", "converged", "reason"])

# %% [markdown]
# ## What the data says
#
# The convergence thresholds are the sampler's own (R-hat ≤ 1.01, bulk and tail ESS at least
# 100 per chain, no divergence). The Nishimori check compares m − q with its expected scatter
# sqrt(q(1 − m)/D) after removing the bias (1 − m)/ESS of a posterior mean from ESS effective
# draws. A start is *trapped* when its test error differs from the teacher start's by more
# than two standard errors.

# %%
show.verdicts(claims.sampler_claims, tree)

# %% [markdown]
# ## The draws of the cells that did not converge
#
# A sweep run with `--keep-draws` keeps each sampling cell's draws as ArviZ InferenceData in
# `OUT/draws/<cell key>.nc` (`arviz.from_netcdf` opens one). For each flagged cell: the
# coordinates of `k` and `v` with the largest R-hat, their trace and rank plots (chains that
# mix have flat, overlapping rank histograms), and the reason the verdict gave.

# %%
show.kept_draws(results)
