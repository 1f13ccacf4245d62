"""ERM performance machinery (issue 15): the one-pass evaluation, the compacting batch solver,
cells sharing data fitted as one unit, compilation shared across cells, and ``lam='replica'``.

Same small shapes as ``test_erm.py`` (``D = 32``, ``N = 160``), so the compiled solver is shared
with it. Tolerances on fitted parameters come from the stopping rule: near a minimiser with
``H >= lam I``, ``|theta - theta*| <= |grad S| / lam`` in rms component, so two runs stopped at
size-free gradient norms ``g1, g2`` differ by at most ``(g1 + g2) / lam``.
"""

from __future__ import annotations

import dataclasses
import json
import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax import monitoring

from bayesslr.core.activations import ACTIVATIONS
from bayesslr.core.task import ConfigError, make_task, sample_task
from bayesslr.erm import lbfgs
from bayesslr.erm import method as M
from bayesslr.erm import protocol as P
from bayesslr.erm.objective import objective_batch, value_and_grad_batch
from bayesslr.registry import Cell, run_cell, run_unit, units
from bayesslr.theory import replica_lam as R

D, N = 32, 160
GRID = (0.01, 0.1, 1.0)
BASE = dict(variant="spiked", L="3", nu=2.0, delta=0.0, alpha=5.0, D=D)
OPTS = {"seeds": 2, "n_test": 2000, "lam_grid": GRID}


@pytest.fixture(scope="module")
def task():
    return make_task("spiked", L=3, nu=2.0, delta=0.0, D=D)


@pytest.mark.parametrize("name", list(ACTIVATIONS))
def test_one_pass_evaluation_equals_autodiff(name):
    """Value and gradient of the chunked pass equal ``jax.grad`` of the plain objective, with
    held-out samples and a chunk size that leaves an overlapping last chunk (variable lengths).

    Both are float32 sums of ``N L = 309`` terms in different orders: the worst-case relative
    rounding gap is ``309 eps ~ 4e-5``; the tolerance is 1e-4 of the largest component.
    """
    act = ACTIVATIONS[name]
    t = make_task("max", L="1,2,3", nu="inf", delta=0.0, D=20)
    _, data, _ = sample_task(jax.random.key(0), t, 103, 0)
    G = 3
    p = {"k": jax.random.normal(jax.random.key(1), (G, 20)),
         "v": jax.random.normal(jax.random.key(2), (G, 20)),
         "theta": jnp.full((G, act.n_params), 0.3)}
    lam = jnp.array([0.1, 1.0, 0.0])
    weight = (jnp.arange(103) < 80).astype(jnp.float32)
    for w in (None, weight):
        f0 = objective_batch(act, p, data, lam, 2 * lam, w)
        g0 = jax.grad(lambda q, w=w: jnp.sum(objective_batch(act, q, data, lam, 2 * lam, w)))(p)
        for chunk in (7, None):
            f1, g1 = value_and_grad_batch(act, p, data, lam, 2 * lam, w, chunk=chunk)
            np.testing.assert_allclose(f1, f0, rtol=1e-4)
            for k in ("k", "v", "theta"):
                scale = float(jnp.max(jnp.abs(g0[k]))) if g0[k].size else 1.0
                np.testing.assert_allclose(g1[k], g0[k], atol=1e-4 * scale, rtol=0)


def test_default_chunk_is_the_whole_data_until_the_fields_grow():
    """The evaluation's default is one chunk (two dense products over the whole data); only a
    batch whose ``(N, L, 2G)`` fields would exceed ``FIELD_BYTES`` is cut into chunks, each
    within that cap."""
    from bayesslr.erm.objective import FIELD_BYTES, chunk_rows

    n, L, D = 22360, 3, 4472  # the paper's size at alpha = 5
    assert chunk_rows(n, L, D) == n
    assert chunk_rows(n, L, D, G=10) == n
    G = 200
    rows = chunk_rows(n, L, D, G=G)
    assert rows < n and 4 * rows * L * 2 * G <= FIELD_BYTES < 4 * (rows + 1) * L * 2 * G
    assert chunk_rows(n, L, D, chunk_bytes=2**21) == 2**21 // (4 * L * D)


@pytest.mark.parametrize("variant,L,nu", [("spiked", "3", 2.0), ("max", "1,2,3", "inf")])
def test_streamed_draw_is_sample_task(variant, L, nu):
    """The chunked draws (:mod:`bayesslr.erm.stream`) give ``sample_task``'s data and test-set
    terms: the same Threefry bits, the same operations; only XLA's fusion of the float
    arithmetic differs (as between any two compilations of ``sample_task``), so values agree
    to float32 rounding: 4 ulp of numbers of order 5 is 2.4e-6."""
    from bayesslr.core.activations import predict
    from bayesslr.core.metrics import oracle_terms
    from bayesslr.erm import stream as S

    t = make_task(variant, L=L, nu=nu, delta=0.01, D=37)
    key = jax.random.key(5)
    n, chunk = 101, 13  # eight chunks, the last one overlapping
    assert S.can_stream(key, n, t)
    teacher, train, test = jax.jit(lambda k: sample_task(k, t, n, n))(key)
    t2, d2 = jax.jit(lambda k: S.draw_train(k, t, n, chunk))(key)
    np.testing.assert_array_equal(t2.k, teacher.k)
    for a, b in zip(train, d2, strict=True):
        np.testing.assert_allclose(b, a, rtol=0, atol=2.4e-6)
    np.testing.assert_array_equal(d2.eps, train.eps)
    k, v = (jax.random.normal(jax.random.key(i), (37,)) for i in (8, 9))

    def consume(X, mask):
        return predict(ACTIVATIONS["softmax"], X, mask, k, v)[:, None]

    _, P_, z_, y_, f_ = jax.jit(lambda kk: S.stream_test(kk, t, n, consume, 1, chunk))(key)
    P0, z0 = oracle_terms(t, teacher, test)
    for got, want in ((P_, P0), (z_, z0), (y_, test.y),
                      (f_[:, 0], predict(ACTIVATIONS["softmax"], test.X, test.mask, k, v))):
        np.testing.assert_allclose(got, want, rtol=0, atol=2.4e-6)


def test_compaction_shrinks_the_batch_and_keeps_each_member(task, monkeypatch):
    """The batch drops its stopped members (sizes 3, 2, 1 here) and every member lands where
    the whole batch puts it (same iterations; only the rounding of the products differs)."""
    act = ACTIVATIONS["softmax"]
    _, data, (k0, v0) = P._draw_train(P._seed_keys(np.array([0]))[0], jnp.asarray(True),
                                      jnp.asarray(0.1), jnp.asarray(1.0), task=task,
                                      n_train=N, restarts=1)
    p0 = {"k": jnp.tile(k0, (3, 1)), "v": jnp.tile(v0, (3, 1)), "theta": jnp.zeros((3, 0))}
    lam = jnp.asarray(GRID)
    whole = lbfgs.lbfgs_solve_compact(act, p0, data, lam, lam, compact=False)
    sizes = []
    real = lbfgs._passes_jit

    def spy(act_, st, *a, **kw):
        sizes.append(st.x.shape[0])
        return real(act_, st, *a, **kw)

    monkeypatch.setattr(lbfgs, "_passes_jit", spy)
    shrunk = lbfgs.lbfgs_solve_compact(act, p0, data, lam, lam, compact=True)
    assert sizes[0] == 3 and sizes == sorted(sizes, reverse=True) and len(sizes) > 1
    assert np.all(np.asarray(whole.converged)) and np.all(np.asarray(shrunk.converged))
    assert len(set(np.asarray(whole.evaluations).tolist())) > 1  # the members stop apart
    for j, lam_j in enumerate(GRID):
        bound = float(whole.grad_norm[j] + shrunk.grad_norm[j]) / lam_j
        for name in ("k", "v"):
            rms = float(jnp.linalg.norm(whole.params[name][j] - shrunk.params[name][j])
                        / math.sqrt(D))
            assert rms <= bound, (lam_j, name, rms, bound)


def test_block_scaling_lands_on_the_scalar_solution(task):
    """The block-diagonal initial inverse Hessian changes the path, not the minimiser: from the
    informed start, at penalties where the fit stays in the start's basin, both scalings
    converge and land within the stopping-rule bound of each other (the bound of the
    compaction test above). An unknown scaling is refused, naming the parameter."""
    act = ACTIVATIONS["softmax"]
    _, data, (k0, v0) = P._draw_train(P._seed_keys(np.array([0]))[0], jnp.asarray(True),
                                      jnp.asarray(0.1), jnp.asarray(1.0), task=task,
                                      n_train=N, restarts=1)
    lams = (0.1, 1.0)
    p0 = {"k": jnp.tile(k0, (2, 1)), "v": jnp.tile(v0, (2, 1)), "theta": jnp.zeros((2, 0))}
    lam = jnp.asarray(lams)
    res = {sc: lbfgs.lbfgs_solve_compact(act, p0, data, lam, lam, scaling=sc)
           for sc in ("scalar", "block")}
    for r in res.values():
        assert np.all(np.asarray(r.converged))
    a, b = res["scalar"], res["block"]
    for j, lam_j in enumerate(lams):
        bound = float(a.grad_norm[j] + b.grad_norm[j]) / lam_j
        for name in ("k", "v"):
            rms = float(jnp.linalg.norm(a.params[name][j] - b.params[name][j]) / math.sqrt(D))
            assert rms <= bound, (lam_j, name, rms, bound)
    with pytest.raises(ValueError, match="scaling='diagonal'"):
        lbfgs.lbfgs_solve_compact(act, p0, data, lam, lam, scaling="diagonal")


def _cells(lams, seed=0, method="erm:softmax", **kw):
    return [Cell(method=method, lam=lam, seed=seed, options=dict(OPTS), **{**BASE, **kw})
            for lam in lams]


def test_cells_differing_only_in_lam_are_one_unit():
    cells = _cells(GRID) + _cells((0.1,), seed=5) + _cells((0.1,), alpha=2.0)
    groups = units(cells)
    assert [len(g) for g in groups] == [3, 1, 1]
    assert {c.lam for c in groups[0]} == set(GRID)


def test_a_unit_returns_what_each_cell_returns_alone(task):
    """The batch contract (:attr:`bayesslr.registry.MethodSpec.batch`): overlaps within the
    stopping-rule bound, test errors within a hundredth of their test-set error bar."""
    cells = _cells(GRID)
    together = run_unit(cells)
    teacher, _, _ = sample_task(P._seed_keys(np.array([0]))[0], task, N)
    rms_k = float(jnp.linalg.norm(teacher.k) / math.sqrt(D))
    rms_v = float(jnp.linalg.norm(teacher.v) / math.sqrt(D))
    for cell, out in zip(cells, together, strict=True):
        alone = run_cell(cell)
        assert out["lam"] == alone["lam"] == cell.lam and out["lam_mode"] == "fixed"
        assert out["converged"] and alone["converged"]
        b = (out["grad_norm"] + alone["grad_norm"]) / cell.lam
        # |k1.k* - k2.k*| / D <= rms(k1 - k2) rms(k*); |q1 - q2| <= rms(k1 - k2) (rms1 + rms2)
        assert abs(out["m_k"] - alone["m_k"]) <= b * rms_k
        assert abs(out["m_v"] - alone["m_v"]) <= b * rms_v
        assert abs(out["q_k"] - alone["q_k"]) <= b * (math.sqrt(out["q_k"])
                                                      + math.sqrt(alone["q_k"]))
        assert abs(out["test_error"] - alone["test_error"]) <= 0.01 * alone["stderr_test"]


def test_no_recompilation_across_seeds_and_lams():
    """One compilation serves every seed and lam of a shape (here: a lone cell, then a unit of
    three): the second cell and the second unit trace and compile nothing."""
    events: list[str] = []

    def listen(name, _dur, **_kw):
        if name.startswith("/jax/core/compile/"):
            events.append(name)

    run_cell(_cells((0.1,))[0])
    run_unit(_cells(GRID, seed=1))
    monitoring.register_event_duration_secs_listener(listen)
    try:
        run_cell(_cells((0.3,), seed=7)[0])
        run_unit(_cells((0.02, 0.2, 2.0), seed=9))
    finally:
        monitoring.unregister_event_duration_listener(listen)
    assert events == []


# ----------------------------------------------------------------------------------------------
# lam = "replica"
# ----------------------------------------------------------------------------------------------
@pytest.fixture
def replica_env(tmp_path, monkeypatch):
    """An empty on-disk cache and a stand-in for the theory's search (counted)."""
    monkeypatch.setenv(R.REPLICA_CACHE_ENV, str(tmp_path))
    monkeypatch.setattr(R, "_REPLICA_MEMO", {})
    calls: list[Cell] = []
    answer = {"lam": 0.3, "test_error": 0.41, "stderr": 0.01, "converged": True,
              "at_boundary": False, "reason": "converged"}

    def fake(tcell):
        calls.append(tcell)
        return {**answer, "cell": tcell.to_json()}

    monkeypatch.setattr(R, "_solve_replica", fake)
    return tmp_path, calls, answer


def test_replica_lam_is_solved_once_and_recorded(replica_env):
    root, calls, answer = replica_env
    a = run_cell(_cells(("replica",), seed=0)[0])
    b = run_cell(Cell(method="erm:softmax", lam="replica", seed=3, options={"n_test": 500},
                      **{**BASE, "D": 24}))  # another seed and size: same theory point
    assert len(calls) == 1
    t = calls[0]
    assert (t.method, t.lam, t.alpha, t.nu, t.seed) == ("theory_erm:softmax", "optimal", 5.0,
                                                        2.0, 0)
    for out in (a, b):
        assert out["lam"] == answer["lam"] and out["lam_mode"] == "replica"
        assert out["replica_test_error"] == answer["test_error"]
        assert out["replica_test_error_stderr"] == answer["stderr"]
        assert out["replica_converged"] is True
    files = list(root.glob("*.json"))
    assert len(files) == 1 and json.loads(files[0].read_text())["lam"] == answer["lam"]
    R._REPLICA_MEMO.clear()  # a new process: the answer comes from disk
    run_cell(_cells(("replica",), seed=1)[0])
    assert len(calls) == 1
    # other theory options, or another activation, are another point
    run_cell(Cell(method="erm:softmax", lam="replica", seed=0,
                  options={**OPTS, "replica_samples": 500}, **BASE))
    run_cell(_cells(("replica",), method="erm:linear")[0])
    assert len(calls) == 3


def test_replica_path_is_solved_once_and_every_point_kept(tmp_path, monkeypatch):
    """lam='replica' on the continuation path: the first ERM cell solves the whole of
    REPLICA_PATH in one theory unit and keeps every point under its own key (its path below
    it), so a cell at another alpha of the path solves nothing; an alpha off the path solves a
    path with it inserted and keeps only the points at and below it (those above are not on
    the canonical path). Cells wanting the same path share one lock."""
    import bayesslr.registry as methods

    monkeypatch.setenv(R.REPLICA_CACHE_ENV, str(tmp_path))
    monkeypatch.setattr(R, "_REPLICA_MEMO", {})
    units = []

    def fake_unit(cells):
        units.append([c.alpha for c in cells])
        assert all(c.options["path"] == sorted({*R.REPLICA_PATH, cells[-1].alpha, *(
            c2.alpha for c2 in cells)}) for c in cells)
        return [{"lam": c.alpha / 100, "test_error": 1 / (1 + c.alpha), "stderr": 0.01,
                 "converged": True, "reason": "converged"} for c in cells]

    monkeypatch.setattr(methods, "run_unit", fake_unit)
    opts = M.SCHEMA.validate({})
    ask = [Cell(method="erm:softmax", lam="replica", alpha=a, **{k: v for k, v in BASE.items()
                                                                 if k != "alpha"})
           for a in (5.0, 2.0, 20.0, 0.5, 4.0, 3.0)]
    got = {c.alpha: R.replica_lam(c, opts) for c in ask}
    assert units == [list(R.REPLICA_PATH), sorted({*R.REPLICA_PATH, 4.0})]
    assert all(got[a]["lam"] == pytest.approx(a / 100) for a in got)
    assert json.loads(R.replica_cell(ask[0], opts).to_json())["options"]["path"] == [
        0.5, 1.0, 2.0, 3.0, 5.0]
    assert "path" not in R.replica_cell(ask[3], opts).options  # alpha = 0.5: nothing below
    assert len(list(tmp_path.glob("*.json"))) == 10  # 9 path points and alpha = 4
    assert R._lock_name(R.replica_cell(ask[0], opts)) == R._lock_name(
        R.replica_cell(ask[2], opts))
    R._REPLICA_MEMO.clear()  # a new process: every point from disk, no solve
    assert R.replica_lam(ask[1], opts)["lam"] == pytest.approx(0.02) and len(units) == 2
    off = M.SCHEMA.validate({"replica_path": False})
    assert "path" not in R.replica_cell(ask[0], off).options


def test_replica_lam_unconverged_fails_the_cell(replica_env, monkeypatch):
    monkeypatch.setattr(R, "_solve_replica", lambda tcell: {
        "lam": math.nan, "test_error": math.nan, "stderr": math.nan, "converged": False,
        "at_boundary": False, "reason": "max_iter", "cell": tcell.to_json()})
    with pytest.raises(RuntimeError, match="lam='replica'.*did not converge.*max_iter"):
        run_cell(_cells(("replica",))[0])


def test_replica_lam_in_a_sweep(replica_env, tmp_path):
    """A sweep mixing ``lam = 'replica'`` and numbers: one unit per seed, the dataset's lam
    coordinate shows the word, ``lam_used`` the number."""
    from bayesslr.sweep.config import parse_config
    from bayesslr.sweep.runner import run_sweep

    _, calls, answer = replica_env
    cfg = parse_config({"name": "replica", "defaults": {"delta": 0.0}, "grid": [{
        "methods": ["erm:softmax"], "alpha": 5.0, "D": D, "lam": ["replica", 0.1],
        "seeds": [0, 1], "options": {"erm": {"n_test": 500}}}]})
    assert [len(u) for u in units(cfg.cells)] == [2, 2]
    summary = run_sweep(cfg, tmp_path / "out", progress=False)
    assert summary.failed == 0 and len(calls) == 1
    import xarray as xr

    ds = xr.open_datatree(summary.dataset, engine="h5netcdf").load()["erm"].to_dataset()
    assert set(ds["lam"].values.tolist()) == {"replica", "0.1"}
    used = ds["lam_used"].sel(lam="replica").values
    assert np.allclose(used[np.isfinite(used)], answer["lam"])


def test_replica_lam_refused_where_no_theory():
    with pytest.raises(ConfigError, match="lam='replica'"):
        P.run_erm_protocol(make_task("spiked", L=3, nu=2.0, delta=0.0, D=D), "softmax", N,
                           "replica")
    assert P.parse_erm_lam(" replica ") == "replica"
    with pytest.raises(ConfigError, match=r"lam='Replica' is not allowed.*\(lower case\)"):
        P.parse_erm_lam("Replica")  # one spelling, parsed once (bayesslr.core.lam)
    with pytest.raises(ConfigError, match="allowed: real >= 0, 'validation'.*'replica'"):
        P.parse_erm_lam("often")


@pytest.mark.slow
def test_replica_lam_is_the_theory_optimum(tmp_path, monkeypatch):
    """The real theory (few channel samples): the ERM cell fits at exactly the lam that
    :func:`bayesslr.theory.lam_opt.optimal_lambda` returns for that task and alpha."""
    from bayesslr.theory.lam_opt import optimal_lambda
    from bayesslr.theory.method import erm_options

    monkeypatch.setenv(R.REPLICA_CACHE_ENV, str(tmp_path))
    monkeypatch.setattr(R, "_REPLICA_MEMO", {})
    cell = Cell(method="erm:softmax", lam="replica", seed=0,
                options={**OPTS, "replica_samples": 300, "replica_path": False},
                **{**BASE, "delta": 0.01})
    out = run_cell(cell)
    tcell = R.replica_cell(cell, M.SCHEMA.validate(cell.options))
    topts = R.get_method(tcell.method).schema.validate(tcell.options)
    direct = optimal_lambda(tcell.task(D=1), "softmax", 5.0, erm_options(topts, 0))
    assert out["lam"] == pytest.approx(direct.lam, rel=1e-9)
    assert out["replica_test_error"] == pytest.approx(direct.test_error, rel=1e-6)
    assert out["converged"]


@pytest.mark.slow
def test_replica_lam_on_the_path_is_the_curve_point(tmp_path, monkeypatch):
    """The real theory (few channel samples) on the continuation path: the ERM cell's lam is
    the point of :func:`bayesslr.theory.lam_opt.optimal_lambda_curve` along REPLICA_PATH at
    its alpha, and the points below it (a path depends only on what lies below) are kept."""
    from bayesslr.theory.lam_opt import optimal_lambda_curve
    from bayesslr.theory.method import erm_options

    monkeypatch.setenv(R.REPLICA_CACHE_ENV, str(tmp_path))
    monkeypatch.setattr(R, "_REPLICA_MEMO", {})
    monkeypatch.setattr(R, "REPLICA_PATH", (0.5, 1.0, 2.0))  # three points: CI time
    cell = Cell(method="erm:softmax", lam="replica", seed=0,
                options={**OPTS, "replica_samples": 300},
                **{**BASE, "delta": 0.01, "alpha": 1.0})
    out = run_cell(cell)
    tcell = R.replica_cell(cell, M.SCHEMA.validate(cell.options))
    topts = R.get_method(tcell.method).schema.validate(tcell.options)
    curve = optimal_lambda_curve(tcell.task(D=1), "softmax", [0.5, 1.0],
                                 erm_options(topts, 0))
    assert out["lam"] == pytest.approx(curve[1].lam, rel=1e-9)
    assert out["replica_test_error"] == pytest.approx(curve[1].test_error, rel=1e-6)
    below = R.replica_lam(dataclasses.replace(cell, alpha=0.5),
                          M.SCHEMA.validate(cell.options))
    assert below["lam"] == pytest.approx(curve[0].lam, rel=1e-9)
    assert len(list(tmp_path.glob("*.json"))) == len(R.REPLICA_PATH)
