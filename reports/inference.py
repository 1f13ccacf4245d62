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
# # Which inference algorithm reaches the Bayes-optimal error of SLR, at what cost?
#
# The SLR posterior (docs/model.md §6) is rugged: several modes and, at some `(alpha, Delta)`, a
# computationally hard phase. Its Bayes-optimal test error is known: from long NUTS runs on the
# task itself (started at the teacher, an exact posterior draw in this planted setting) at
# `D <= 200`, from the state evolution (docs/theory.md) as `D -> inf`. So every algorithm can be
# scored by how far its *prediction* is from the best possible one, at an equal budget of
# gradient evaluations: NUTS, HMC, the explicit-location Gibbs sampler, mean-field and low-rank
# VI, MAP and BlackJAX's tempered SMC (the `inference` family), with ERM and GAMP beside them.
#
# Parameter: `results`, a results directory of `bayesslr run --preset inference-quick` (or
# `--preset inference`; both need the BlackJAX extra, `pip install -e '.[blackjax]'` in the
# source checkout); `bayesslr report RESULTS --notebooks` sets it, and runs this notebook only
# when the results hold the inference benchmark. Without one, only the stored reference tasks
# are shown.

# %%
from IPython.display import display

from bayesslr.core.extras import install_hint
from bayesslr.report import inference as rep
from bayesslr.report import show  # first: it silences the kernel's tqdm IProgress warning
from bayesslr.report.figures import NothingToPlot

# %% tags=["parameters"]
results = show.results_parameter()

# %%
df = None
if results:
    try:
        df = rep.tidy(results)
    except NothingToPlot as why:
        print(f"No inference results in {results!r} ({why}): run `bayesslr run --preset "
              f"inference-quick --out DIR` (needs the blackjax extra: "
              f"{install_hint('blackjax')}) and give DIR.")
else:
    print("No results directory was given: the stored reference tasks only.")

# %% [markdown]
# ## The ground truth
# One row per stored task: the reference error (exact posterior-mean predictor of 4 long NUTS
# chains from the teacher), the Monte Carlo bias of a finite-draw predictor (half the chains
# against all), the chains' R-hat and ESS, and what random-start chains reached on the same
# task (their excess over the reference is the trapping the benchmark is about).

# %%
refs = rep.reference_table()
display(refs.round(4))

# %% [markdown]
# ## Error against cost
# Excess test error over the reference (0 = Bayes-optimal) against the gradient evaluations
# actually used; one line per algorithm and start (a budget per point).

# %%
if df is not None:
    try:
        display(rep.error_vs_cost(df))
    except NothingToPlot as why:
        print("error_vs_cost:", why)

# %% [markdown]
# ## The leaderboard at each budget
# Seed means (standard error over seeds, or the cell's own with one seed), gradient
# evaluations, run and compile seconds, and how many seeds converged by the algorithm's own
# criterion and reached the reference (excess below 3 standard errors).

# %%
boards = {}
if df is not None:
    for b in sorted(df["budget"].dropna().unique()):
        boards[b] = rep.leaderboard(df, b)
        print(f"budget {b:.0e} gradient evaluations")
        display(boards[b].round(4))

# %% [markdown]
# ## Trapped where?

# %%
if df is not None:
    try:
        display(rep.trapped(df))
    except NothingToPlot as why:
        print("trapped:", why)

# %% [markdown]
# ## What the data says

# %%
ok = refs[refs["checks_passed"].astype(bool)]
print(f"The reference check (R-hat <= 1.01, bulk ESS >= 400 over 4 teacher-start chains) "
      f"holds at {len(ok)} of {len(refs)} stored tasks; the largest finite-draw bias is "
      f"{refs['mc_bias'].abs().max():.4f}.")
trap = refs[refs["random_excess_over_reference"]
            > 4 * refs["random_excess_over_reference_stderr"]]
print(f"Random-start NUTS chains (4 x 1500 iterations) stay above the reference by more than "
      f"4 paired standard errors on {len(trap)} of {len(refs)} tasks (largest excess "
      f"{refs['random_excess_over_reference'].max():.3f}).")
for b, board in boards.items():
    inf = board[board["start"] != ""]
    reach = inf[inf["reaches_reference"] == inf["seeds"]]
    miss = inf[inf["reaches_reference"] < inf["seeds"]]
    print(f"At {b:.0e} gradient evaluations: {len(reach)} of {len(inf)} (algorithm, start, "
          f"setting) entries reach the reference on every seed: "
          + ", ".join(sorted({f'{a} ({s})' for a, s in zip(reach['algorithm'], reach['start'],
                                                            strict=True)})) + ".")
    if len(miss):
        worst = miss.sort_values("excess_over_reference").iloc[-1]
        print(f"  The worst: {worst['algorithm']} ({worst['start']}) at alpha "
              f"{worst['alpha']:g}, Delta {worst['delta']:g}: excess "
              f"{worst['excess_over_reference']:+.3f} over the reference.")
