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
# # Multi-head attention: which attention reaches the Bayes-optimal error?
#
# **The model** (docs/multihead.md): `L` tokens in `R^D`; one of them carries a signal along
# one of `F` orthonormal hidden directions, the label reads the paired value direction. The
# students are `H`-head attentions with three normalisations: plain `softmax` (each head's
# weights sum to one), `softmax1` (a null option: `exp / (1 + sum exp)`) and `bayes_softmax`
# (one normalisation over all heads and locations, the form of the Bayes-optimal predictor
# when the teacher is known). They are trained by L-BFGS ERM, the paper's protocol.
#
# **The ground truth.** No theory gives the Bayes-optimal error of this model at finite
# `alpha = N/D`. Here it is computed by sampling the posterior of the teacher-unknown model
# (NUTS on a prior that samples orthonormal frames exactly), with R-hat and ESS computed on
# quantities no permutation of the directions changes. Only cells whose sampler passes that
# rule are used as ground truth; the others are drawn hollow grey and left out of the verdicts.
#
# **The claims** are those of Sagitova, Duranthon and Zdeborová (arXiv 2603.03993), from its
# abstract: plain softmax keeps an error floor, softmax-1 reduces that noise, Bayes-softmax
# reaches optimal prediction, heads can be pruned, and heads specialise in stages.
#
# **How to read the figure.** One row per setting. Left: each student's test error *minus the
# sampled Bayes-optimal estimator's on the same seed* (same teacher, training and test data),
# mean over seeds with one standard error; the black line at zero is the Bayes-optimal
# estimator. This is what the verdicts judge. Middle, labelled *raw*: each estimator's test
# error minus the teacher-known oracle's (0), the sampled posterior mean in black. Right: the
# students' error with only their most important heads kept (no retraining), at the largest α.
# The second figure follows gradient descent from small random starts: the specialisation
# index of the heads (0: every head on one common mixture of the directions, 1: one head per
# direction) and their alignment with the teacher's span, one line per seed.

# %%
from bayesslr.report import claims, show, tables

# %% tags=["parameters"]
results = show.results_parameter()

# %%
tree = show.open_results(results)

# %% [markdown]
# ## The students against the sampled Bayes-optimal estimator

# %%
show.figure("multihead_excess", tree)

# %% [markdown]
# ## Do the heads specialise after an unspecialised phase?
#
# Each line is one seed's gradient-descent trajectory. A seed *shows the stages* (coloured)
# when its heads pass through a record in the teacher's span (alignment >= 0.9) with a
# specialisation index <= 0.15, the unspecialised phase, and end with an index >= 0.9; the
# others are drawn thin and pale. The claim is judged on the fraction of seeds that do, by a
# binomial test against one half.

# %%
show.figure("multihead_specialisation", tree)

# %% [markdown]
# ## The numbers
#
# One row per estimator, setting and α: mean over seeds of the excess over the teacher-known
# oracle (paired on the same test rows) with its seed-to-seed standard error, the number of
# seeds, how many converged (L-BFGS gradient tolerance; the sampler's rule), and for the
# sampler its worst R-hat and smallest bulk ESS over the seeds.

# %%
show.table(tables.multihead_table(tree) if tree is not None else None, "multihead results",
           digits=3)

# %% [markdown]
# ## What the data says about the claims
#
# Each comparison is paired by seed (the difference of two estimators' test errors on the
# same data) and judged on the seed-to-seed standard error with the Student-t quantile of
# its degrees of freedom, so that a few seeds cannot decide by luck; a claim checked at several
# points is judged as one family of comparisons (docs/multihead.md section 8).

# %%
show.verdicts(claims.multihead_claims, tree)
