"""The registry: every family's options checked by its schema before any work, huge sizes
refused from the memory models before anything is allocated (issue 14: each case below failed
before the schemas and memory models: a traceback after tens of seconds, an abort, or a
failed cell with exit 0)."""

from __future__ import annotations

import resource

import pytest

from bayesslr.core.task import ConfigError
from bayesslr.registry import Cell, families, get_method, memory_limit, validate_cell
from conftest import run_cli

HUGE = [
    (["population", "--L", "1000000000"], "needs about"),
    (["population", "--samples", "1e12"], "samples="),
    (["sample", "--D", "1000000000"], "needs about"),
    (["sample", "--D", "10", "--alpha", "1e12"], "alpha="),
    (["sample", "--D", "100000", "--alpha", "10"], "needs about"),
    (["erm", "--D", "1e9"], "needs about"),
    (["erm", "--sqrtND", "1e12"], "needs about"),
    (["theory", "erm", "--L", "1e9"], "needs about"),
    (["theory", "bayes", "--L", "1e9"], "needs about"),
    (["theory", "bayes", "--samples", "1e12"], "samples="),
]


@pytest.mark.parametrize("argv,needle", HUGE, ids=[" ".join(a) for a, _ in HUGE])
def test_huge_sizes_are_refused_before_anything_is_allocated(capsys, argv, needle):
    rss0 = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    code, out, err = run_cli(argv, capsys)
    grew_mb = (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - rss0) / 1024
    lines = err.strip().splitlines()
    assert code == 2 and out == "" and len(lines) == 1, err
    assert needle in lines[0]
    if needle == "needs about":  # the estimate, the limit and what lowers it
        assert "the limit is" in lines[0] and "lower " in lines[0]
    assert grew_mb < 300  # nothing of the requested size was allocated


@pytest.mark.parametrize("options,needle", [
    ({"sampels": 5}, "options ['sampels'] are unknown to population"),
    ({"samples": -5}, "samples=-5 is out of range"),
    ({"mc_method": "simpson"}, "mc_method='simpson' is unknown"),
])
def test_options_are_checked_before_the_sweep_starts(tmp_path, capsys, options, needle):
    toml = tmp_path / "bad.toml"
    opts = ", ".join(f"{k} = {v!r}".replace("'", '"') for k, v in options.items())
    toml.write_text(f'name = "bad"\n[options]\npopulation = {{ {opts} }}\n'
                    '[[grid]]\nmethods = ["population:bayes"]\nnu = [1.0, 2.0]\n')
    code, _, err = run_cli(["run", "--config", str(toml), "--out", str(tmp_path / "r")], capsys)
    assert code == 2 and needle in err and len(err.strip().splitlines()) == 1
    assert not (tmp_path / "r").exists()


def test_every_family_declares_what_the_suite_needs():
    specs = families()
    assert {"population", "erm", "gd", "bayes_sampling", "theory_erm", "theory_bayes"} <= set(
        specs)
    for name, spec in specs.items():
        if name == "sweeptest":
            continue
        assert spec.description and spec.version and spec.outputs, name
        names = [o.name for o in spec.outputs]
        assert "test_error" in names, name
        # one naming of standard errors: the declared stderr of an output is declared too,
        # or is the shared 'stderr' of test_error
        for o in spec.outputs:
            if o.stderr is not None:
                assert o.stderr in names or o.stderr == "stderr", (name, o.name)
        for opt in spec.schema.opts:
            assert opt.doc, (name, opt.name)
            assert opt.parse(opt.default) == opt.default or opt.default is None, (name, opt)


@pytest.mark.parametrize("method,member,kind", [
    ("erm:softmax", "softmax", "an activation"),
    ("inference:nuts-random-1e5", "nuts-random-1e5", "an algorithm-start-budget"),
])
def test_a_member_is_what_its_family_declares(method, member, kind):
    """The part after ':' is the cell's member; the family names what its members are."""
    family = method.partition(":")[0]
    assert Cell(method=method).member == member and Cell(method=family).member is None
    assert families()[family].member_kind == kind.split()[1]
    with pytest.raises(ConfigError, match=f"method='{family}' needs {kind}; allowed: "):
        get_method(family)


def test_memory_limit_override(monkeypatch):
    monkeypatch.setenv("BAYESSLR_MEMORY_LIMIT", "1M")
    assert memory_limit() == 2**20
    cell = Cell(method="erm:softmax", alpha=5.0, lam=0.1, D=200)
    with pytest.raises(ConfigError, match="needs about .* the limit is 0.000977 GB"):
        validate_cell(cell)
    monkeypatch.setenv("BAYESSLR_MEMORY_LIMIT", "lots")
    with pytest.raises(ConfigError, match="BAYESSLR_MEMORY_LIMIT='lots' is not a size"):
        memory_limit()


def test_prerequisites_are_declared_on_the_entry_and_costed_once(tmp_path, monkeypatch):
    """ERM's lam='replica' declares what it reads from theory_erm on its registry entry; the
    generic cost layer prices it with theory_erm's own model, once per distinct point."""
    import bayesslr.theory.replica_lam as replica
    from bayesslr.sweep.cost import estimate, model_seconds, prerequisites

    monkeypatch.setenv(replica.REPLICA_CACHE_ENV, str(tmp_path))
    monkeypatch.setattr(replica, "_REPLICA_MEMO", {})
    spec = families()["erm"]
    assert spec.prerequisites is not None and spec.prerequisites.what == "replica lam"
    cells = [Cell("erm:softmax", alpha=2.0, lam="replica", D=40, seed=s) for s in range(3)]
    pending = spec.prerequisites.pending(cells)
    assert len(pending) == 1
    (tcell,) = pending.values()
    assert tcell.family == "theory_erm" and tcell.lam == "optimal"
    got = prerequisites(cells)
    assert got == {"erm (replica lam)": model_seconds(tcell)}
    assert estimate(cells)["erm (replica lam)"] == got["erm (replica lam)"]
    fixed = [Cell("erm:softmax", alpha=2.0, lam=0.1, D=40)]
    assert prerequisites(fixed) == {} and families()["theory_erm"].prerequisites is None
