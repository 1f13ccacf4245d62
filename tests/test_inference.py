"""The inference benchmark (issue 13): targets, budgets, the reference, the family, the preset.

Fast checks: the explicit-location (Gibbs) model marginalises to the sampler's model, the Gibbs
conditional is the exact one, budgets are honoured and counted, the paired scoring, the stored
reference reproduces from its seed, the family's refusals. Slow checks (``-m slow``, run by CI):
each sampler's posterior mean on a tiny task against self-normalised importance sampling from
the prior (tolerance ``4`` combined Monte Carlo standard errors), MAP against the best of the
importance draws, and the ``inference-quick`` preset run cell by cell with its figures drawn.
"""

from __future__ import annotations

import builtins
import itertools
import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from bayesslr import ground_truth as builder
from bayesslr.bayes import arviz_adapter
from bayesslr.bayes.model import model_spec
from bayesslr.bayes.nuts import potential_fn_gen
from bayesslr.bayes.sampler import init_params
from bayesslr.core.task import ConfigError, make_task
from bayesslr.inference import reference as ref
from bayesslr.inference.evaluate import per_input_errors, score, task_data
from bayesslr.inference.mcmc import (
    MCMCSettings,
    gibbs_potential_fn_gen,
    location_conditional_logits,
    run_mcmc,
)
from bayesslr.registry import Cell, get_method, run_cell, validate_cell
from conftest import prior_importance

TINY = dict(variant="spiked", L=2, nu=1.0, delta=0.5, D=3)


@pytest.fixture(scope="module")
def tiny():
    task = make_task(**TINY)
    data = task_data(task, 0, 6, 50)
    return task, model_spec(task), data


def _args(data, eps=None):
    d = data.train
    a = (jnp.asarray(d.X), jnp.asarray(d.y), jnp.asarray(d.mask), jnp.ones(d.y.shape),
         jnp.asarray(1.0), jnp.asarray(0.5))
    return a if eps is None else (*a, eps)


# ------------------------------------------------------------------------------------------
# targets
# ------------------------------------------------------------------------------------------
def test_explicit_locations_marginalise_to_the_sampler_model(tiny):
    """log sum over every location assignment of the explicit model's joint = the marginal
    model's joint (docs/model.md §6): the Gibbs sampler targets the same posterior."""
    task, spec, data = tiny
    key = jax.random.key(3)
    params = {"k": jax.random.normal(key, (3,)), "v": jax.random.normal(jax.random.key(4),
                                                                        (3,))}
    marginal = -potential_fn_gen("marginal", "spiked")(*_args(data))(params)
    gen = gibbs_potential_fn_gen("spiked")
    joint = [-gen(*_args(data, jnp.asarray(e, jnp.int32)))(params)
             for e in itertools.product(range(2), repeat=6)]
    np.testing.assert_allclose(float(jax.nn.logsumexp(jnp.asarray(joint))), float(marginal),
                               rtol=1e-5)


def test_gibbs_conditional_is_the_exact_one(tiny):
    """softmax of the conditional logits = the explicit joint normalised over one location."""
    task, spec, data = tiny
    params = {"k": jnp.array([0.3, -1.0, 0.5]), "v": jnp.array([1.0, 0.2, -0.4])}
    d = data.train
    logits = location_conditional_logits("spiked", params["k"], params["v"], d.X, d.y, d.mask,
                                         1.0, 0.5)
    gen = gibbs_potential_fn_gen("spiked")
    base = np.zeros(6, np.int32)
    for i in range(6):
        lj = []
        for l_ in range(2):
            e = base.copy()
            e[i] = l_
            lj.append(-float(gen(*_args(data, jnp.asarray(e)))(params)))
        np.testing.assert_allclose(np.exp(lj - np.logaddexp(*lj)),
                                   np.asarray(jax.nn.softmax(logits[i])), rtol=1e-4)


# ------------------------------------------------------------------------------------------
# budgets
# ------------------------------------------------------------------------------------------
@pytest.mark.parametrize("algorithm", ["nuts", "hmc"])
def test_budget_is_honoured_and_counted(tiny, algorithm):
    """A run stops at the first chunk that reaches the budget: used >= budget, and the
    overshoot is at most one chunk of the deepest trees (chains x chunk x 2^depth)."""
    task, spec, data = tiny
    s = MCMCSettings(algorithm, chains=2, warmup=20, chunk=5, max_tree_depth=4)
    start = init_params(jax.random.key(0), "random", 2, 3)
    r = run_mcmc(jax.random.key(1), spec, data.train, s, start=start, budget=3000)
    hmc_max = math.ceil(s.trajectory_length / 1e-3)  # not reached: steps bounded by the run
    over = 2 * 5 * (2 ** 4 if algorithm == "nuts" else hmc_max)
    assert 3000 <= r.grad_evals <= 3000 + over
    assert r.warmup_done == 20 and not r.budget_exhausted_in_warmup
    assert r.k.shape == (2, r.k.shape[1], 3) and r.k.shape[1] == r.iterations // r.thin
    assert r.compile_s >= 0.0 and r.run_s > 0.0


def test_warmup_cut_by_the_budget_is_reported(tiny):
    task, spec, data = tiny
    s = MCMCSettings("nuts", chains=2, warmup=1000, chunk=5, max_tree_depth=4)
    start = init_params(jax.random.key(0), "random", 2, 3)
    r = run_mcmc(jax.random.key(1), spec, data.train, s, start=start, budget=400,
                 warmup_fraction=0.5)
    assert r.budget_exhausted_in_warmup and r.warmup_done < 1000


# ------------------------------------------------------------------------------------------
# scoring and the reference
# ------------------------------------------------------------------------------------------
def test_paired_score_against_a_reference(tiny):
    task, spec, data = tiny
    y = np.asarray(data.test.y, np.float64) * 0.5
    same = score(task, data.teacher, data.test, y, {"test_error": 0.1, "stderr": 0.01,
                                                    "source": "x", "y_hat": y})
    assert same["reference_paired"] and same["excess_over_reference"] == 0.0
    assert same["excess_over_reference_stderr"] == 0.0
    zero = score(task, data.teacher, data.test, np.zeros_like(y),
                 {"test_error": 0.1, "stderr": 0.01, "source": "x", "y_hat": y})
    e0 = np.asarray(per_input_errors(task, data.teacher, data.test, np.zeros_like(y)))
    e1 = np.asarray(per_input_errors(task, data.teacher, data.test, y))
    assert zero["excess_over_reference"] == pytest.approx(float(np.mean(e0 - e1)))
    none = score(task, data.teacher, data.test, y, None)
    assert math.isnan(none["excess_over_reference"]) and none["reference_source"] == "none"


def test_stored_reference_reproduces_from_its_seed():
    """Each stored task's predictions, scored on the test set regenerated from its seed, give
    its stored error (the dataset and the data contract agree); provenance attrs are there."""
    ds = ref.load_inference_reference()
    assert ds is not None, "bayesslr/data/inference_reference.nc is missing"
    for a in ("settings", "git_revision", "check_thresholds", "sizes", "method"):
        assert ds.attrs.get(a)
    rows = [i for i in range(ds.sizes["task"]) if int(ds["D"][i]) == 50][:2]
    assert rows
    for i in rows:
        r = ds.isel(task=i)
        task = make_task(str(r["variant"].item()), L=str(r["L"].item()), nu=float(r["nu"]),
                         delta=float(r["delta"]), D=int(r["D"]))
        data = task_data(task, int(r["seed"]), int(r["N"]), int(r["n_test"]))
        e = np.asarray(per_input_errors(task, data.teacher, data.test, r["y_hat"].values))
        assert float(e.mean()) == pytest.approx(float(r["test_error"]), rel=1e-4)
        assert float(r["excess_over_oracle"]) >= 0.0
        look = ref.lookup(task, float(r["alpha"]), int(r["seed"]), int(r["n_test"]))
        assert look["source"] == "nuts_long" and look["y_hat"] is not None


def test_reference_checks_pass_for_the_stored_tasks():
    """posteriordb's practice: the reference chains passed R-hat and ESS, or say why not."""
    ds = ref.load_inference_reference()
    ok = ds["checks_passed"].values.astype(bool)
    assert np.all(ds["r_hat_max"].values[ok] <= builder.REF_RHAT_MAX)
    assert np.all(ds["ess_bulk_min"].values[ok] >= builder.REF_ESS_MIN)
    assert all(str(c) != "ok" for c in ds["checks"].values[~ok])


# ------------------------------------------------------------------------------------------
# the family
# ------------------------------------------------------------------------------------------
def test_family_refusals_name_the_problem():
    with pytest.raises(ConfigError, match="chains"):
        validate_cell(Cell("inference:map-random-1e4", alpha=2.0, D=10, delta=0.01,
                           options={"chains": 4}))
    with pytest.raises(ConfigError, match="inference:nuts-random-1e4"):
        get_method("inference:nuts-sideways-1e4")
    with pytest.raises(ConfigError, match="delta"):
        validate_cell(Cell("inference:nuts-random-1e4", alpha=2.0, D=10, delta=0.0))
    with pytest.raises(ConfigError, match="n_test"):
        validate_cell(Cell("inference:nuts-random-1e4", alpha=2.0, D=10, delta=0.01,
                           options={"n_test": 1}))


def test_smc_without_blackjax_refuses_with_the_extra(monkeypatch):
    real = builtins.__import__

    def no_blackjax(name, *a, **k):
        if name == "blackjax" or name.startswith("blackjax."):
            raise ImportError("no blackjax")
        return real(name, *a, **k)

    monkeypatch.setattr(builtins, "__import__", no_blackjax)
    with pytest.raises(ConfigError, match=r"pip install -e '\.\[blackjax\]'"):
        validate_cell(Cell("inference:smc-prior-1e4", alpha=2.0, D=10, delta=0.01))


# ------------------------------------------------------------------------------------------
# slow: each sampler's target against importance sampling; MAP; the quick preset
# ------------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def importance(tiny):
    """Self-normalised importance sampling from the prior: posterior mean of (k, v) and its
    standard error (delta method: sqrt(sum w^2 (x - m)^2) / sum w)."""
    task, spec, data = tiny
    m, se, Z, ll, ess = prior_importance(spec, data.train)
    assert ess > 1000  # the reference is itself resolved
    return m, se, Z, ll


@pytest.mark.slow
@pytest.mark.parametrize("algorithm", ["nuts", "hmc", "gibbs", "dgibbs"])
def test_samplers_find_the_posterior_mean(tiny, importance, algorithm):
    task, spec, data = tiny
    m, se, _, _ = importance
    s = MCMCSettings(algorithm, chains=4, warmup=200, chunk=50)
    start = init_params(jax.random.key(0), "random", 4, 3)
    r = run_mcmc(jax.random.key(2), spec, data.train, s, start=start, budget=80_000,
                 max_draws=2000)
    draws = np.concatenate([r.k, r.v], axis=2)
    mc = arviz_adapter.mcse_mean(draws)
    z = np.abs(draws.mean(axis=(0, 1)) - m) / np.sqrt(se ** 2 + mc ** 2)
    assert z.max() < 4.0, (z, r.r_hat_max)


@pytest.mark.slow
def test_smc_finds_the_posterior_mean(tiny, importance):
    """Eight independent SMC runs: the mean of their particle means against importance
    sampling, the standard error from the spread of the eight runs (t with 7 dof; 4 standard
    errors is a 0.5% two-sided tail)."""
    pytest.importorskip("blackjax", reason="inference:smc needs the blackjax extra")
    from bayesslr.inference.smc import run_smc

    task, spec, data = tiny
    m, se, _, _ = importance
    means = []
    for r_ in range(8):
        run = run_smc(jax.random.key(100 + r_), spec, data.train, budget=60_000,
                      particles=256, mcmc_steps=4, integration_steps=5)
        assert run.final_lambda == 1.0
        means.append(np.concatenate([run.k, run.v], axis=1).mean(0))
    means = np.asarray(means)
    run_se = means.std(0, ddof=1) / math.sqrt(len(means))
    z = np.abs(means.mean(0) - m) / np.sqrt(se ** 2 + run_se ** 2)
    assert z.max() < 4.0, z


@pytest.mark.slow
def test_map_beats_every_importance_draw(tiny, importance):
    """The MAP's log joint is at least the best of 400k prior draws' (an optimiser that
    stopped early, or at a worse mode, fails this), and its gradient vanishes."""
    from bayesslr.inference.vi import run_vi

    task, spec, data = tiny
    _, _, Z, ll = importance
    r = run_vi(jax.random.key(0), spec, data.train, "map", budget=5000, start=None, lr=0.05)
    logjoint = ll - 0.5 * (Z ** 2).sum(1)
    pot = potential_fn_gen("marginal", "spiked")(*_args(data))
    at_map = -float(pot({"k": jnp.asarray(r.k[0]), "v": jnp.asarray(r.v[0])}))
    # the potential carries the prior's normalising constant: remove it to compare
    at_map += 0.5 * 6 * math.log(2 * math.pi)
    assert at_map >= logjoint.max() - 1e-3
    assert r.converged and r.grad_rms < 1e-2


@pytest.mark.slow
def test_quick_preset_runs_and_its_figures_are_drawn(tmp_path, monkeypatch):
    """Every cell of ``inference-quick`` runs through the registry, respects its budget, and the
    figures and the leaderboard are drawn from the records; NUTS from the teacher (at
    equilibrium from step 0) reaches the stored reference within 4 standard errors."""
    from bayesslr.inference.method import parse_method
    from bayesslr.report import inference as rep
    from bayesslr.sweep.config import load_preset

    cfg = load_preset("inference-quick")
    cells = list(cfg.cells)
    try:
        import blackjax  # noqa: F401
    except ImportError:  # the optional extra: its cell is left out, the rest still runs
        cells = [c for c in cells if not c.method.startswith("inference:smc")]
    records = []
    for cell in cells:
        res = run_cell(cell)
        budget = parse_method(cell.member)[2]
        assert res["grad_evals"] >= budget * 0.9
        assert res["reference_source"] == "nuts_long" and res["reference_paired"]
        records.append({"cell": {**json_cell(cell)}, "status": "ok", "result": res})
    df = rep.tidy(records)
    # the control (teacher start, at equilibrium) differs from the reference by test-set noise
    # (paired standard error) and the bias of a predictor of finitely many draws, c / ESS, with
    # c measured by the reference itself: err(half its chains) - err(all) = c / ESS_ref
    ctrl_rec = next(r for r in records if r["cell"]["method"] == "inference:nuts-teacher-3e4")
    ds = ref.load_inference_reference()
    i = [j for j in range(ds.sizes["task"]) if int(ds["D"][j]) == 50 and
         float(ds["alpha"][j]) == 5.0 and int(ds["seed"][j]) == 0 and
         float(ds["delta"][j]) == 0.01][0]
    c = max(float(ds["mc_bias"][i]), 0.0) * float(ds["ess_bulk_min"][i])
    res = ctrl_rec["result"]
    assert res["excess_over_reference"] <= (4 * res["excess_over_reference_stderr"]
                                            + c / res["ess_bulk_min"])
    written, skipped = rep.write_inference_figures(records, tmp_path)
    assert not skipped, skipped
    assert {p.name for p in written} >= {"inference_error_vs_cost.png",
                                         "inference_trapped.png",
                                         "inference_leaderboard_3e+04.csv"}
    board = rep.leaderboard(df)
    assert len(board) == len(cells)
    # the notebook runs on these records and closes with its verdicts
    import json
    import os

    import jupytext
    from nbclient import NotebookClient

    rec_dir = tmp_path / "records"
    rec_dir.mkdir()
    for i, r in enumerate(records):
        (rec_dir / f"{i}.json").write_text(json.dumps(r, default=float))
    nb = jupytext.read(os.path.join(os.path.dirname(__file__), "..", "reports", "inference.py"))
    monkeypatch.setenv("BAYESSLR_RESULTS", str(rec_dir))
    NotebookClient(nb, timeout=600, kernel_name="python3").execute()
    text = "".join(o.get("text", "") for c in nb.cells for o in c.get("outputs", []))
    assert "reach the reference on every seed" in text


def json_cell(cell: Cell) -> dict:
    import json

    return json.loads(cell.to_json())
