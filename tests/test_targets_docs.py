"""docs/targets.md: every recipe runs as written (plain JAX, BlackJAX NUTS, PyMC + nutpie), and
BlackJAX NUTS started at the teacher reaches the Bayes-optimal reference.

The page's ``python`` blocks are executed in order in one namespace (later recipes reuse the
helpers of the first). Slow: each compiles a sampler and draws a few thousand states."""

from __future__ import annotations

import importlib.util
import re
from pathlib import Path

import numpy as np
import pytest

from bayesslr.bayes import arviz_adapter

DOC = Path(__file__).resolve().parent.parent / "docs" / "targets.md"
BLOCKS = re.findall(r"```python\n(.*?)```", DOC.read_text(), re.S)


def _run(i: int, ns: dict) -> dict:
    exec(compile(BLOCKS[i], f"docs/targets.md#python-block-{i}", "exec"), ns)
    return ns


@pytest.fixture(scope="module")
def plain_jax():
    return _run(0, {})


def test_the_page_has_the_three_recipes():
    assert len(BLOCKS) == 3
    assert "jax.lax.scan" in BLOCKS[0] and "blackjax.nuts" in BLOCKS[1]
    assert "nutpie.sample" in BLOCKS[2] and "compile_logp" in BLOCKS[2]


@pytest.mark.slow
def test_plain_jax_recipe_runs(plain_jax):
    s = plain_jax["score"]
    assert 0.3 < float(plain_jax["acc"].mean()) < 1.0
    assert np.isfinite(s["excess_over_reference"]) and s["reference_paired"]


def _tolerance(score: dict, draws: dict, t) -> float:
    """4 paired standard errors plus the finite-draw bias c / ESS of the draws' predictor,
    with ``c = mc_bias * ESS`` measured by the stored reference itself (docs/inference.md)."""
    from bayesslr.inference.reference import load_inference_reference

    ds = load_inference_reference()
    i = [j for j in range(ds.sizes["task"]) if int(ds["D"][j]) == t.D and
         float(ds["alpha"][j]) == t.alpha and int(ds["seed"][j]) == t.seed and
         float(ds["delta"][j]) == t.task.delta][0]
    c = max(float(ds["mc_bias"][i]), 0.0) * float(ds["ess_bulk_min"][i])
    ess = arviz_adapter.diagnostics(draws)["ess_bulk_min"]
    return 4 * score["excess_over_reference_stderr"] + c / ess


@pytest.mark.slow
def test_blackjax_nuts_from_the_teacher_reaches_the_reference(plain_jax):
    pytest.importorskip("blackjax", reason="the recipe needs the blackjax extra")
    ns = _run(1, plain_jax)
    s, t, xs = ns["score"], ns["t"], np.asarray(ns["xs"])
    draws = {"k": xs[..., : t.D], "v": xs[..., t.D:]}
    assert s["reference_paired"] and s["draws"] == xs.shape[0] * xs.shape[1]
    assert s["excess_over_reference"] <= _tolerance(s, draws, t), s
    # and the draws are not a degenerate point: they disagree with the reference predictions
    # by no more than the reference's own finite-draw scale
    assert s["disagreement"] < 0.01


@pytest.mark.slow
@pytest.mark.filterwarnings("ignore:PyTensor could not link to a BLAS:UserWarning")
def test_pymc_nutpie_recipe_checks_the_log_density_and_runs(plain_jax):
    missing = [m for m in ("pymc", "nutpie") if importlib.util.find_spec(m) is None]
    if missing:
        pytest.skip(f"{', '.join(missing)} not installed: the PyMC recipe needs the bench extra "
                    "(pip install 'bayesslr[bench]')")
    ns = _run(2, plain_jax)  # asserts the PyMC log density equals the JAX one at two points
    s = ns["score"]
    assert s["reference_paired"] and np.isfinite(s["excess_over_reference"])


@pytest.mark.slow
@pytest.mark.filterwarnings("ignore:PyTensor could not link to a BLAS:UserWarning")
def test_pymc_model_log_density_equals_the_jax_one():
    """The shipped PyMC model (posteriordb's model code) against the JAX log density, float64
    on both sides (tiny task, both variants): equal to rounding."""
    missing = [m for m in ("pymc", "pytensor") if importlib.util.find_spec(m) is None]
    if missing:
        pytest.skip(f"{', '.join(missing)} not installed: the PyMC model needs the bench extra "
                    "(pip install 'bayesslr[bench]')")
    import jax
    import jax.numpy as jnp

    import bayesslr as bs
    from bayesslr.export.slr_pymc import model
    from bayesslr.posteriors.target import _log_density

    for variant, L in (("spiked", 3), ("max", "1,2,3")):
        t = bs.target(variant=variant, L=L, D=6, alpha=3, seed=1, n_test=10)
        d = {**t.data, "variant": variant, "nu": t.task.nu, "delta": t.task.delta}
        logp = model(d).compile_logp()
        pts = [t.teacher, {c: x[0] for c, x in t.init(jax.random.key(0), 1).items()}]
        for th in pts:
            with jax.enable_x64(True):
                ours = float(_log_density(
                    jnp.asarray(th["k"], jnp.float64), jnp.asarray(th["v"], jnp.float64),
                    jnp.asarray(t.data["X"], jnp.float64), jnp.asarray(t.data["y"], jnp.float64),
                    jnp.asarray(t.data["mask"]), t.task.nu, t.task.delta, variant=variant))
            theirs = float(logp({c: np.asarray(th[c], np.float64) for c in "kv"}))
            assert ours == pytest.approx(theirs, rel=1e-12, abs=1e-9), (variant, ours, theirs)
