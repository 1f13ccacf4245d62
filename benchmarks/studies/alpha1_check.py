"""The independent check at alpha = 1 (issue 34, item 4; docs/sampling.md): parallel tempering
against long NUTS and uninformed GAMP on the same data.

Reads the results directory of ``benchmarks/studies/alpha1_check.toml`` and prints, per ``nu``
and seed, each estimator's excess error over the oracle (the same test set for all three: a
seed draws one teacher, one training and one test set for every method), whether its run
converged, and the differences PT - NUTS and PT - GAMP; then per ``nu`` the mean difference
over seeds with its standard error over seeds (a paired statistic: each seed's difference is
taken on one test set). The cells' own standard errors are dominated by the test set, which the
three share, so ``sqrt(se_a^2 + se_b^2)`` would overstate the uncertainty of a difference.

    python benchmarks/studies/alpha1_check.py runs/alpha1-check
"""

from __future__ import annotations

import sys

import numpy as np

from bayesslr.results.load import load_results


def _by_sampler(bs, sampler: str):
    """The ``bayes_sampling`` cells of one sampler: the options the PT and NUTS blocks set
    differently (``sampler``, ``warmup``, ``draws``, ``replicas``, ...) are dimensions of the
    dataset (bayesslr.sweep.dataset.split_options); each cell fills one point of them and the
    others are NaN, so the one value is the NaN-skipping maximum over them."""
    one = bs.sel(sampler=sampler)
    extra = [d for d in one.dims if d not in ("nu", "seed")]
    return one[["excess_over_oracle", "converged"]].max(dim=extra, skipna=True)


def table(results: str) -> str:
    """The check's table as Markdown (see the module doc)."""
    tree = load_results(results)
    bs = tree["bayes_sampling"].to_dataset().squeeze(drop=True)
    amp = tree["amp"].to_dataset().squeeze(drop=True)
    if "sampler" not in bs.dims:
        raise SystemExit(f"results={results!r} holds one sampler only; allowed: the results "
                         "of benchmarks/studies/alpha1_check.toml (PT and NUTS cells)")
    pt, nuts = _by_sampler(bs, "pt"), _by_sampler(bs, "nuts")
    lines = ["| nu | seed | PT excess (converged) | NUTS 4 x 20000 excess (converged) | "
             "GAMP excess | PT - NUTS | PT - GAMP |", "|---|---|---|---|---|---|---|"]
    summary = []
    for nu in pt["nu"].values:
        d_nuts, d_gamp = [], []
        # the long NUTS runs against GAMP needs no PT cell: the two references agree or not
        n_g = [float(nuts["excess_over_oracle"].sel(nu=nu, seed=s)
                     - amp["excess_over_oracle"].sel(nu=nu, seed=s)) for s in pt["seed"].values]
        for seed in pt["seed"].values:
            sel = {"nu": nu, "seed": seed}
            e_pt = float(pt["excess_over_oracle"].sel(sel))
            e_nuts = float(nuts["excess_over_oracle"].sel(sel))
            e_gamp = float(amp["excess_over_oracle"].sel(sel))
            c_pt = bool(pt["converged"].sel(sel) == 1)
            c_nuts = bool(nuts["converged"].sel(sel) == 1)
            if not np.isfinite(e_pt):
                lines.append(f"| {nu:g} | {seed} | not computed | {e_nuts:+.4f} ({c_nuts}) | "
                             f"{e_gamp:+.4f} | | |")
                continue
            d_nuts.append(e_pt - e_nuts)
            d_gamp.append(e_pt - e_gamp)
            lines.append(f"| {nu:g} | {seed} | {e_pt:+.4f} ({c_pt}) | {e_nuts:+.4f} ({c_nuts}) "
                         f"| {e_gamp:+.4f} | {d_nuts[-1]:+.4f} | {d_gamp[-1]:+.4f} |")
        summary.append((nu, d_nuts, d_gamp, n_g))
    lines.append("")
    for nu, dn, dg, ng in summary:
        for what, d in (("PT - NUTS", dn), ("PT - GAMP", dg), ("NUTS - GAMP", ng)):
            d = np.asarray(d)
            if d.size < 2:
                lines.append(f"nu = {nu:g}: {what}: not enough data ({d.size} seeds with a PT "
                             "cell; a standard error over seeds needs 2)")
                continue
            se = d.std(ddof=1) / np.sqrt(d.size)
            lines.append(f"nu = {nu:g}: {what} {d.mean():+.4f} +- {se:.4f} (mean over "
                         f"{d.size} seeds +- its standard error over seeds)")
    return "\n".join(lines)


if __name__ == "__main__":
    print(table(sys.argv[1] if len(sys.argv) > 1 else "runs/alpha1-check"))
