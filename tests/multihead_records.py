"""Synthetic multi-head records with known answers, shared by the claims tests
(tests/test_multihead_preset.py) and the report's every-figure tests (tests/test_report.py)."""

from __future__ import annotations

import numpy as np

from bayesslr.registry import Cell
from bayesslr.sweep.storage import CellRecord, normalize_outputs


def _rec(method, out, **cell):
    opts = cell.pop("options", {})
    return CellRecord(Cell(method, variant="multihead", L="3", nu=9.0, delta=0.05, D=24,
                           options=opts, **cell), "ok", normalize_outputs(out), "", 1.0)


def multihead_records(*, floor: bool = True, converged: bool = True, seeds: int = 6,
                      prune_cost: float = 0.0) -> list[CellRecord]:
    """Six seeds at alpha 4, 16, 64. Bayes (sampled) excess 0.4 / alpha; bayes_softmax 1 /
    alpha above it, softmax1 3 / alpha, softmax 5 / alpha plus a floor of 0.2 (or none);
    seed noise 0.002. H = 4 students lose ``prune_cost`` when pruned to F = 2 heads."""
    rng = np.random.default_rng(1)
    recs = []
    for seed in range(seeds):
        for a in (4.0, 16.0, 64.0):
            b = 0.4 / a + 0.002 * rng.standard_normal()
            recs.append(_rec("multihead:bayes_sampling", {
                "test_error": 0.1 + b, "stderr": 0.01, "oracle_error": 0.1,
                "excess_over_oracle": b, "excess_over_oracle_stderr": 0.001,
                "converged": converged, "reason": "converged" if converged else "r_hat",
                "r_hat_max": 1.002 if converged else 1.05, "n_directions": 2},
                alpha=a, seed=seed, options={"F": 2}))
            for m, c in (("softmax", 5.0), ("softmax1", 3.0), ("bayes_softmax", 1.0)):
                for H in (2, 4):
                    e = b + c / a + (0.2 if (floor and m == "softmax") else 0.0) \
                        + 0.002 * rng.standard_normal()
                    # heads kept 0, 1, ..., H; F = 2 kept: e + prune_cost (H = 4)
                    curve = ([1.0, e + 0.3, e] if H == 2
                             else [1.0, e + 0.5, e + prune_cost, e + 0.1, e])
                    recs.append(_rec(f"multihead:{m}", {
                        "test_error": 0.1 + e, "stderr": 0.01, "oracle_error": 0.1,
                        "excess_over_oracle": e, "excess_over_oracle_stderr": 0.005,
                        "converged": True, "reason": "converged", "n_heads": H,
                        "n_directions": 2, "prune_excess_over_oracle": curve},
                        alpha=a, lam=0.01, seed=seed, options={"F": 2, "H": H}))
    return recs


# two records of a trajectory that passes the unspecialised phase and ends specialised, and
# of one that stays unspecialised (multihead_claims.shows_stages)
STAGES = {True: ([0.3, 0.98, 0.97, 0.98], [0.5, 0.02, 0.6, 0.99]),
          False: ([0.3, 0.98, 0.8, 0.8], [0.5, 0.02, 0.01, 0.01])}


def multihead_gd_records(shown: dict[str, int], *, seeds: int = 12) -> list[CellRecord]:
    """``multihead_gd`` trajectories at alpha 64, ``shown[member]`` of ``seeds`` seeds passing
    the unspecialised phase and ending specialised, the others staying unspecialised."""
    recs = []
    for m, k in shown.items():
        for seed in range(seeds):
            a, s = STAGES[seed < k]
            recs.append(_rec(f"multihead_gd:{m}", {
                "test_error": 0.2, "stderr": 0.01, "excess_over_oracle": 0.1,
                "excess_over_oracle_stderr": 0.01, "specialisation_K": s[-1],
                "alignment_K": a[-1], "n_heads": 2, "n_directions": 2,
                "step": [0, 10, 20, 30], "trajectory_alignment_K": a,
                "trajectory_specialisation_K": s}, alpha=64.0, lam=0.01, seed=seed,
                options={"F": 2}))
    return recs
