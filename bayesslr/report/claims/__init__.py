"""What the data says about the paper's claims: one :class:`Verdict` per claim.

The claims are those of docs/paper.md (population orderings, the finite-sample curves, the
connection with gradient methods, the sampler's reliability), one module per theme
(:mod:`~bayesslr.report.claims.population_claims`,
:mod:`~bayesslr.report.claims.finite_sample_claims`,
:mod:`~bayesslr.report.claims.dynamics_claims`, :mod:`~bayesslr.report.claims.sampler_claims`,
and the multi-head model's :mod:`~bayesslr.report.claims.multihead_claims`).
Each function takes the results of a sweep and returns verdicts computed from the tables of
:mod:`bayesslr.report.tables` (the same reductions as the figures: seed mean, one standard
error, ``lam`` tuned per ``alpha``). The decision rule, stated once, and the :class:`Verdict`
are :mod:`~bayesslr.report.claims.verdict`.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

from bayesslr.report.claims.dynamics_claims import dynamics_claims
from bayesslr.report.claims.finite_sample_claims import finite_sample_claims
from bayesslr.report.claims.multihead_claims import multihead_claims
from bayesslr.report.claims.population_claims import population_claims
from bayesslr.report.claims.sampler_claims import sampler_claims
from bayesslr.report.claims.verdict import FAILS, HOLDS, STATUSES, UNDECIDED, Verdict
from bayesslr.results.query import Results

__all__ = ["CLAIMS", "FAILS", "HOLDS", "STATUSES", "UNDECIDED", "Verdict", "all_verdicts",
           "dynamics_claims", "finite_sample_claims", "multihead_claims", "population_claims",
           "sampler_claims"]


CLAIMS: dict[str, Callable[[Results], list[Verdict]]] = {
    "population": population_claims,
    "finite_sample": finite_sample_claims,
    "dynamics": dynamics_claims,
    "sampler_health": sampler_claims,
    "multihead": multihead_claims,
}


def all_verdicts(results: Results, themes: Iterable[str] | None = None
                 ) -> dict[str, list[Verdict]]:
    """Every theme's verdicts (``bayesslr report`` writes them to ``verdicts.txt``)."""
    return {k: CLAIMS[k](results) for k in (themes or CLAIMS)}
