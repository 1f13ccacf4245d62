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
# # Dynamics: do gradient methods find the fixed point the theory describes?
#
# **The question.** The empirical risk of attention is not convex and has several local
# minima. Does plain gradient descent (or Adam) reach the ERM minimiser that the replica
# theory describes, from a start near the teacher and from a small random start?
#
# **The paper's claims** (its connection with gradient-based algorithms): on the population
# the symmetric manifold (cross overlaps k·v*, v·k*, k·v zero) is invariant under gradient
# descent, and informed starts reach the replica prediction. What the paper did not show: the
# trajectories themselves at finite D, and whether random starts get there too.
#
# **How to read the figure.** One row of panels per setting (variant, L, ν, α, λ, D).
# Colour is the activation, the line style the start (solid: informed, dashed: random).
# Dotted horizontal lines are the replica fixed point at the same α and λ (band: one standard
# error), dash-dotted ones L-BFGS ERM on data of the same size (mean over seeds). The
# cross-overlap panel shows the largest cross overlap in units of its finite-D noise level
# (for vectors independent of the teacher, k·v*/D has standard deviation sqrt(q_k/D)); the
# dashed line at 4 is the verdict's threshold. The informed start begins on the manifold (up
# to that noise) and is judged along the whole run; a small random start is judged at the end
# only: while |k| grows from it, q_k is tiny and the z-score passes through a transient.

# %%
from bayesslr.report import claims, show, tables

# %% tags=["parameters"]
results = show.results_parameter()

# %%
tree = show.open_results(results)

# %% [markdown]
# ## Overlap trajectories

# %%
show.figure("gd_trajectories", tree)

# %% [markdown]
# ## Where each trajectory ends, beside the fixed point

# %%
show.table(tables.trajectory_table(tree) if tree is not None else None,
           "gradient-descent trajectories")

# %% [markdown]
# ## What the data says about the paper's claims
#
# A trajectory's end is compared with the replica fixed point on the scale of a single run's
# finite-D scatter (the seed-to-seed standard deviation of L-BFGS ERM at the same size,
# combined with the replica's own error); a trajectory still moving over its last tenth is
# not called a failure.

# %%
show.verdicts(claims.dynamics_claims, tree)
