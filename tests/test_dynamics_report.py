"""The report on the shipped dynamics file (docs/dynamics.md): the reviewer's bugs, each a check
that failed before its fix. Everything reuses the shipped file or a few numbers; nothing is
sampled or fitted."""

from __future__ import annotations

import re
from functools import cache
from pathlib import Path

import numpy as np
import pytest

from bayesslr.report.claims import verdict as vd

REPO = Path(__file__).resolve().parent.parent


@cache
def shipped():
    from bayesslr.results.reference import load_reference

    return load_reference("dynamics")


def _claim(verdicts, start):
    (hit,) = [v for v in verdicts if v.claim.startswith(start)]
    return hit


def test_one_record_trajectory_is_not_enough_data():
    """A GD run with one finite record (it diverged after step 0) raised IndexError; now every
    dynamics claim it enters says what is needed."""
    from bayesslr.report.claims import dynamics_claims

    tree = shipped().copy(deep=True)
    gd = tree["gd"].to_dataset()
    keep = {"method": "gd:softmax", "init": "random"}
    for v in gd.data_vars:
        if v.startswith("trajectory_"):
            gd[v].loc[keep] = gd[v].loc[keep].where(gd["step"] == 0)
    tree["gd"] = gd
    out = dynamics_claims(tree)
    rnd = _claim(out, "gradient descent from a random start")
    assert rnd.status == vd.UNDECIDED and "two or more finite records" in rnd.evidence
    cross = _claim(out, "from a random start, GD's cross")  # the linear runs still decide it
    assert cross.evidence.count("one record (needs a trajectory with two or more") == 8


def test_cross_overlaps_are_judged_about_the_teachers_own():
    """The teacher of seed 1 at D = 200 has k*.v*/D = -0.168; an estimator on the manifold
    about it (k = a k*, v = b v*) has z = 0, where the z-score about 0 called it off."""
    from bayesslr.report.claims.dynamics_claims import cross_excess_zscore, teacher_overlaps
    from bayesslr.results.query import cross_zscore

    rho_k, rho_v, c = teacher_overlaps(200.0, 1)
    assert c == pytest.approx(-0.168, abs=1e-3)
    a, b = np.array([1.4, 0.3]), np.array([1.0, 0.6])
    run = {"m_k": a * rho_k, "m_v": b * rho_v, "q_k": a**2 * rho_k, "q_v": b**2 * rho_v,
           "m_kv": a * c, "m_vk": b * c, "q_kv": a * b * c}
    assert np.allclose(cross_excess_zscore(run, 200.0, (rho_k, rho_v, c)), 0.0)
    assert (cross_zscore(run, 200.0) > 2.0).all()


def test_figures_name_the_file_and_the_sampler():
    """The dynamics file is not at the paper's sizes, and its sampler cells are parallel
    tempering: the titles and the legend say so (they said 'paper sizes' and 'NUTS')."""
    from bayesslr.report.figures import draw, shipped_label

    assert shipped_label("paper") == "shipped reference, paper sizes"
    fig = draw("sampler_starts", shipped())
    title = fig._suptitle.get_text()
    assert "paper sizes" not in title and "(shipped dynamics results)" in title
    assert "parallel tempering" in title
    labels = [t.get_text() for leg in fig.legends for t in leg.get_texts()]
    assert any(t.startswith("parallel tempering posterior mean") for t in labels)
    assert not any("NUTS" in t for t in labels)


def test_random_start_tempering_checks_say_not_stored():
    """bayes_sampling keeps swap rates and round trips for the cell's first start only: the
    random start's points say so instead of printing 'swap rate nan'."""
    from bayesslr.report.claims import sampler_claims

    v = _claim(sampler_claims(shipped()), "NUTS chains from the random")
    assert "swap rate nan" not in v.evidence and "nan round trips" not in v.evidence
    assert "swap rates and round trips not stored for this start" in v.evidence


def test_every_shipped_data_file_is_listed():
    """README and load_reference's docstring name every file under bayesslr/data."""
    from bayesslr.results.reference import load_reference

    files = sorted(p.name for p in (REPO / "bayesslr" / "data").glob("*.nc"))
    assert len(files) >= 5
    readme = (REPO / "README.md").read_text()
    assert "Two results files ship" not in readme
    for f in files:
        assert f"`{f}`" in readme, f
        assert f"``{f}``" in load_reference.__doc__, f
    assert re.search(r'name : \{"reference", "paper", "dynamics", "multihead"\}',
                     load_reference.__doc__)
