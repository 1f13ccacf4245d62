"""The shipped dynamics file (issue 36 item 5, issue 34 item 5; docs/dynamics.md):
``load_reference("dynamics")`` opens and holds the three parts of the ``dynamics`` preset
(gradient-descent trajectories with their L-BFGS and replica fixed points; the state evolution
through the hard window at ``Delta = 1e-4``; parallel tempering from the teacher and from
random starts, with GAMP, on the same data), its certificate is what the doc says, and the
doc's generated blocks (every verdict the report gives on the file, the hard-window table,
the flagged cells) are what the code computes on it, so that the doc cannot drift.

``python tests/test_dynamics_reference.py`` rewrites those blocks of docs/dynamics.md from
the shipped file.
"""

from __future__ import annotations

import json
import math
import sys
from functools import cache
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parent.parent
DOC = REPO / "docs" / "dynamics.md"
HARD_DELTA = 1e-4
# the blocks of docs/dynamics.md this module generates: name -> builder of the text
BLOCKS = ("verdicts", "hard-window", "flagged")


def _begin(name: str) -> str:
    return (f"<!-- {name}: generated from the shipped file by tests/test_dynamics_reference.py "
            "(python tests/test_dynamics_reference.py rewrites it) -->")


def _end(name: str) -> str:
    return f"<!-- end {name} -->"


# ---- the preset's structure (no computation) --------------------------------------------------
@cache
def preset_cells():
    from bayesslr.sweep.config import load_preset

    return load_preset("dynamics").cells


def _family(cells, fam):
    return [c for c in cells if c.method.split(":", 1)[0] == fam]


def test_preset_pairs_every_estimator_with_its_reference():
    """Each GD trajectory has L-BFGS ERM on the same data (activation, alpha, lam, D, seed) and
    a replica point at its alpha and lam; every PT cell runs both starts by parallel tempering
    and has GAMP on the same data; its alpha is on the state-evolution grid at its Delta, which
    passes through the hard window (docs/inference.md: 1.175-1.225) and either side of it."""
    cells = preset_cells()
    erm = {(c.method.split(":")[1], c.alpha, str(c.lam), c.D, c.seed, c.delta)
           for c in _family(cells, "erm")}
    rep = {(c.method.split(":")[1], c.alpha, str(c.lam), c.delta)
           for c in _family(cells, "theory_erm")}
    gd = _family(cells, "gd")
    assert {c.options["init"] for c in gd} == {"informed", "random"}
    assert {c.method for c in gd} == {"gd:softmax", "gd:linear"}
    for c in gd:
        act = c.method.split(":")[1]
        assert (act, c.alpha, str(c.lam), c.D, c.seed, c.delta) in erm, c
        assert (act, c.alpha, str(c.lam), c.delta) in rep, c
    assert len({c.seed for c in gd}) >= 4  # the verdict's finite-D scale: 3 dof or more
    se = {c.alpha for c in _family(cells, "theory_bayes") if c.delta == HARD_DELTA}
    assert {1.175, 1.2, 1.225} <= se and min(se) < 1.1 and max(se) > 1.3
    amp = {(c.alpha, c.D, c.seed, c.delta) for c in _family(cells, "amp")}
    pt = _family(cells, "bayes_sampling")
    assert pt and all(c.delta == HARD_DELTA for c in pt)
    for c in pt:
        assert c.options["sampler"] == "pt" and list(c.options["init"]) == ["teacher", "random"]
        assert c.alpha in se and (c.alpha, c.D, c.seed, c.delta) in amp, c
    alphas = {c.alpha for c in pt}
    assert any(1.175 <= a <= 1.225 for a in alphas) and any(a > 1.3 for a in alphas)


# ---- the shipped file -------------------------------------------------------------------------
@cache
def shipped():
    from bayesslr.results.reference import load_reference

    return load_reference("dynamics")


def certificate() -> dict:
    return json.loads(shipped().attrs["certificate"])


def test_shipped_file_holds_the_three_parts():
    from bayesslr.results.query import trajectory_runs
    from bayesslr.results.reference import reference_path

    assert reference_path("dynamics").stat().st_size < 5 * 2**20
    tree = shipped()
    assert tree.attrs["shipped"] == "dynamics"
    assert {"gd", "erm", "theory_erm", "theory_bayes", "bayes_sampling", "amp",
            "cells"} <= set(tree.children)
    runs = trajectory_runs(tree)  # (a) the trajectories the dynamics figure draws
    assert {(str(r["method"]), r["init"]) for r in runs} == {
        (m, i) for m in ("gd:softmax", "gd:linear") for i in ("informed", "random")}
    se = tree["theory_bayes"].to_dataset().sel(delta=HARD_DELTA).squeeze(drop=True)
    hard = se["hard_phase"].values > 0.5  # (b) a hard window, with points either side
    assert hard.any() and not hard[0] and not hard[-1]
    bs = tree["bayes_sampling"].to_dataset()  # (c) both starts on every PT cell
    assert "random_test_error" in bs and set(np.unique(bs["sampler"].values)) - {""} == {"pt"}


def test_certificate_is_what_the_doc_says():
    """Clean revision, every cell of the sweep present and none failed, every family at its
    current code version; the doc states the revision and the converged fractions, and the
    flagged cells are the generated block (see test_doc_blocks_are_the_codes)."""
    cert = certificate()
    assert cert["clean"] and cert["cells_failed"] == 0
    assert cert["cells"] == cert["cells_total"] == len(preset_cells())
    assert all(f["at_current_version"] == 1.0 for f in cert["families"].values())
    text = " ".join(DOC.read_text().split())
    assert f"revision `{cert['revision']}`" in text
    assert f"{cert['cells']} cells" in text
    assert ("`certified: true`" in text) == cert["certified"]
    for fam, f in cert["families"].items():
        if f["converged"] is not None:
            assert f"`{fam}` {f['converged']:.3g}" in text, fam


def test_doc_blocks_are_the_codes():
    """Every verdict the report gives on the file, the hard-window table and the flagged cells
    in docs/dynamics.md are what the code computes on the shipped file now."""
    text = DOC.read_text()
    for name in BLOCKS:
        assert _block(text, name) == generated(name), (
            f"docs/dynamics.md's {name!r} block is not the code's on the shipped file: run "
            "python tests/test_dynamics_reference.py")


def test_report_accepts_the_shipped_name(tmp_path, capsys):
    """``bayesslr report --reference OUT --shipped dynamics`` draws the dynamics figure and
    writes the verdicts, from the file as shipped."""
    from conftest import run_cli

    out = tmp_path / "figs"
    code, _, err = run_cli(["report", "--reference", str(out), "--shipped", "dynamics",
                            "--formats", "png"], capsys)
    assert code == 0, err
    assert (out / "gd_trajectories.png").exists() and (out / "verdicts.txt").exists()


# ---- the generated blocks ---------------------------------------------------------------------
def _block(text: str, name: str) -> str:
    start, end = text.index(_begin(name)), text.index(_end(name)) + len(_end(name))
    return text[start:end]


@cache
def verdicts():
    """Every verdict ``bayesslr report`` writes to verdicts.txt for this file: the themes' and
    the families' own (the finite-size section is empty: no study here, checked below)."""
    from bayesslr.report import family_verdicts
    from bayesslr.report.claims import all_verdicts

    return {**all_verdicts(shipped()), **family_verdicts(shipped())}


def test_the_verdicts_block_is_every_verdict_of_the_report():
    from bayesslr.report import finite_size

    assert finite_size.verdict_lines(shipped()) == []
    assert sum(len(vs) for vs in verdicts().values()) == len(verdict_lines())


def verdict_lines() -> list[str]:
    """One line per verdict: theme, status, claim (the points are in the report's
    verdicts.txt; the doc explains each)."""
    return [f"| {theme} | **{v.status}** | {v.claim} |"
            for theme, vs in verdicts().items() for v in vs]


def _pick(ds, var, **sel):
    if var not in ds:
        return math.nan
    x = ds[var].sel({k: v for k, v in sel.items() if k in ds[var].dims})
    return float(np.asarray(x.squeeze(drop=True).values, float))


def hard_window_rows() -> list[dict]:
    """Per PT cell (alpha, seed): the state evolution's flags and branches less the Bayes
    risk, and each estimator's excess over its oracle on the same test set (PT from the
    teacher, PT from random starts, GAMP from the uninformed start), with the PT cell's
    convergence."""
    from bayesslr.report.figures.error_vs_alpha import bayes_risk_line

    tree = shipped()
    sel = {"variant": "spiked", "L": "3", "nu": 2.0, "delta": HARD_DELTA}
    bs = tree["bayes_sampling"].to_dataset().sel(sel).squeeze(drop=True)
    amp = tree["amp"].to_dataset().sel(sel).squeeze(drop=True)
    se = tree["theory_bayes"].to_dataset().sel(sel).squeeze(drop=True)
    risk = bayes_risk_line(tree, sel)
    rows = []
    for alpha in bs["alpha"].values:
        for seed in bs["seed"].values:
            at = {"alpha": alpha, "seed": seed}
            te = _pick(bs, "test_error", **at)
            if not math.isfinite(te):
                continue
            oracle = _pick(bs, "oracle_error", **at)
            s_at = {"alpha": alpha}
            rows.append({
                "alpha": float(alpha), "seed": int(seed),
                "hard": _pick(se, "hard_phase", **s_at) > 0.5,
                "informed": _pick(se, "test_error_informed", **s_at) - risk[0],
                "uninformed": _pick(se, "test_error_uninformed", **s_at) - risk[0],
                "teacher": _pick(bs, "excess_over_oracle", **at),
                "teacher_se": _pick(bs, "excess_over_oracle_stderr", **at),
                "random": _pick(bs, "random_test_error", **at) - oracle,
                "gamp": _pick(amp, "excess_over_oracle", **at),
                "gamp_ok": _pick(amp, "converged", **at) > 0.5,
                "pooled": _pick(bs, "r_hat_max_pooled", **at),
                "random_rhat": _pick(bs, "random_r_hat_max", **at),
                "trips": _pick(bs, "round_trips", **at),
                "converged": _pick(bs, "converged", **at) > 0.5,
            })
    return rows


def _gamp(x: float) -> str:
    return f"{x:.3f}" if abs(x) < 10 else f"{x:.2g} (blew up)"


def hard_window_table() -> list[str]:
    out = ["| `alpha` | seed | SE hard phase | SE informed | SE uninformed | PT teacher | "
           "PT random | GAMP uninformed | random R-hat | pooled R-hat | round trips | PT cell |",
           "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in hard_window_rows():
        out.append(
            f"| {r['alpha']:g} | {r['seed']} | {'yes' if r['hard'] else 'no'} | "
            f"{r['informed']:.3f} | {r['uninformed']:.3f} | {r['teacher']:.3f} "
            f"\u00b1 {r['teacher_se']:.3f} | {r['random']:.3f} | {_gamp(r['gamp'])}"
            f"{'' if r['gamp_ok'] else ' (not converged)'} | {r['random_rhat']:.2f} | "
            f"{r['pooled']:.2f} | {r['trips']:.0f} | "
            f"{'converged' if r['converged'] else 'flagged'} |")
    return out


def flagged_lines() -> list[str]:
    """Every flagged cell of the certificate, with its reason."""
    out = []
    for fam, f in sorted(certificate()["families"].items()):
        for rec in f["flagged"]:
            where = ", ".join(f"{k} {v}" for k, v in rec.items() if k != "reason")
            out.append(f"* `{fam}` {where}: {rec['reason']}")
    return out or ["* none"]


def generated(name: str) -> str:
    body = {"verdicts": lambda: ["| theme | verdict | claim |", "|---|---|---|",
                                 *verdict_lines()],
            "hard-window": hard_window_table, "flagged": flagged_lines}[name]()
    return "\n".join([_begin(name), "", *body, "", _end(name)])


# the figures docs/dynamics.md shows: the report's figure functions on the shipped file
DOC_FIGURES = ("gd_trajectories", "sampler_starts", "excess_vs_alpha")


def write_figures(out: Path = REPO / "docs" / "figures") -> list[Path]:
    """docs/figures/dynamics_<name>.png: :data:`bayesslr.report.figures.FIGURES` called on the
    shipped file (as ``bayesslr report`` does), titled as this file's."""
    from bayesslr.report.figures import FIGURES
    from bayesslr.report.output import save_figure

    written = []
    for name in DOC_FIGURES:
        fig = FIGURES[name](shipped())
        title = getattr(fig, "_suptitle", None)
        if title is not None:
            first, nl, rest = title.get_text().partition("\n")
            title.set_text(f"{first} (shipped dynamics file){nl}{rest}")
        written.append(save_figure(fig, out / f"dynamics_{name}.png", dpi=110))
    return written


def test_doc_figures_exist():
    text = DOC.read_text()
    for name in DOC_FIGURES:
        assert (REPO / "docs" / "figures" / f"dynamics_{name}.png").exists(), name
        assert f"(figures/dynamics_{name}.png)" in text, name


if __name__ == "__main__":
    sys.path.insert(0, str(REPO))
    if "--figures" in sys.argv:
        print(*write_figures(), sep="\n")
    text = DOC.read_text()
    for name in BLOCKS:
        text = text.replace(_block(text, name), generated(name))
    DOC.write_text(text)
    for theme, vs in verdicts().items():
        for v in vs:
            print(f"[{theme}] {v}")
