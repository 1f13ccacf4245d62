"""The verbs generated from the registry: the flags of the verbs that existed before (a public
contract), the plugin family's verb, ``bayesslr methods``, and the CLI's presentation."""

from __future__ import annotations

import json
import math
import re
from pathlib import Path

import pytest
import typer

from bayesslr.cli import build_app
from bayesslr.commands.common import emit, plural
from bayesslr.commands.run import law_text
from bayesslr.core.lam import parse_lam
from bayesslr.core.task import ConfigError
from bayesslr.registry import families
from conftest import run_cli

PLUGIN = str(Path(__file__).resolve().parent / "sweep_plugin.py")

# every flag of every verb before the verbs were generated (bayesslr 0.x, commit d266801)
CONTRACT: dict[str, list[str]] = {
    "population": ["--L", "--L-dist", "--activation", "--delta", "--json", "--method", "--nu",
                   "--samples", "--seed", "--variant"],
    "erm": ["--D", "--L", "--L-dist", "--activation", "--alpha", "--delta", "--init", "--json",
            "--lam", "--lam-grid", "--n-test", "--nu", "--restarts", "--seed", "--seeds",
            "--sqrtND", "--variant"],
    "sample": ["--D", "--L", "--L-dist", "--alpha", "--chain-method", "--chains", "--delta",
               "--draws", "--init", "--json", "--model", "--n-test", "--no-tempered",
               "--no-x64", "--nu", "--save-idata", "--seed", "--target-accept", "--tempered",
               "--tempered-delta", "--tempered-nu", "--variant", "--warmup", "--x64"],
    "run": ["--config", "--dry-run", "--force", "--keep-stale", "--out", "--preset", "--quiet",
            "--scheduler", "--workers"],
    "presets": [],
    "report": ["--formats", "--notebooks", "--out", "--reference"],
    "amp": ["--D", "--L", "--L-dist", "--adaptive-damping", "--alpha", "--damping", "--delta",
            "--gumbel-per-sd", "--init", "--json", "--m-clip", "--max-damping", "--max-iter",
            "--max-quadrature", "--max-seconds", "--n-test", "--no-adaptive-damping", "--nu",
            "--seed", "--tol", "--variance", "--variant"],
    "theory erm": ["--L", "--L-dist", "--accel", "--activation", "--alpha", "--continuation",
                   "--damping", "--delta", "--json", "--lam", "--lam-v", "--max-iter",
                   "--no-continuation", "--nu", "--samples", "--seed", "--start", "--sweep",
                   "--test-samples", "--tol", "--variant", "--vh-form"],
    "theory bayes": ["--L", "--L-dist", "--alpha", "--branch", "--continuation", "--delta",
                     "--gh-nodes", "--json", "--no-continuation", "--nu", "--samples", "--seed",
                     "--test-samples", "--tol", "--variant"],
}


def _verbs(app: typer.Typer) -> dict:
    group = typer.main.get_command(app)
    ctx = group.make_context("bayesslr", [], resilient_parsing=True)
    out: dict = {}

    def walk(cmd, words: list[str]) -> None:
        if hasattr(cmd, "list_commands"):  # a group (typer vendors its own click)
            for name in cmd.list_commands(ctx):
                walk(cmd.get_command(ctx, name), [*words, name])
        else:
            out[" ".join(words)] = cmd

    walk(group, [])
    return out


def _flags(cmd) -> set[str]:
    return {o for p in cmd.params for o in (*p.opts, *p.secondary_opts) if o.startswith("-")}


def test_every_verb_and_flag_of_the_contract_is_kept():
    verbs = _verbs(build_app())
    for verb, flags in CONTRACT.items():
        assert verb in verbs, verb
        assert set(flags) <= _flags(verbs[verb]), (verb, set(flags) - _flags(verbs[verb]))


def test_each_family_has_a_verb_with_one_flag_per_option():
    verbs = _verbs(build_app())
    for name, spec in families().items():
        verb = " ".join(spec.face.verb or (name,))
        assert verb in verbs, verb
        flags = _flags(verbs[verb])
        for opt in spec.schema.opts:
            if opt.name not in spec.face.hide:
                flag = spec.face.flags.get(opt.name, "--" + opt.name.replace("_", "-"))
                assert flag in flags, (verb, flag)
    assert {"gd", "inference", "methods"} <= set(verbs)


def test_typed_placeholders_and_real_flags():
    verbs = _verbs(build_app())
    by_flag = {o: p for p in verbs["erm"].params for o in p.opts}
    assert by_flag["--seeds"].metavar == "INT"
    assert by_flag["--alpha"].metavar == "FLOAT"
    assert by_flag["--lam-grid"].metavar == "FLOAT,..."
    assert by_flag["--init"].metavar == "[informed|random]"
    for verb in ("erm", "sample", "run"):
        for p in verbs[verb].params:
            if getattr(p, "is_flag", False):
                assert p.metavar == "", (verb, p.opts)
            else:
                assert p.metavar not in (None, "<str>", "<bool>"), (verb, p.opts)


def test_plugin_family_gets_a_verb(capsys, monkeypatch):
    monkeypatch.setenv("BAYESSLR_PLUGINS", PLUGIN)
    code, out, err = run_cli(["sweeptest", "--activation", "b", "--alpha", "3", "--nu", "5",
                              "--seed", "2", "--json"], capsys)
    assert code == 0, err
    res = json.loads(out)
    assert res["variant"] == "spiked" and res["alpha"] == 3.0 and res["seed"] == 2
    assert res["converged"] is True and res["trace"] == [1.0, 0.5, 1 / 3, 0.25]
    code, out, err = run_cli(["sweeptest", "--alpha", "1", "--sleep", "-1"], capsys)
    assert code == 2 and "sleep=" in err and len(err.strip().splitlines()) == 1


def test_methods_lists_families_options_outputs_and_versions(capsys):
    code, out, _ = run_cli(["methods", "--json"], capsys)
    assert code == 0
    got = json.loads(out)
    assert set(got) == set(families())
    for name, spec in families().items():
        assert got[name]["version"] == spec.version
        assert [o["name"] for o in got[name]["options"]] == list(spec.schema.names)
        assert [o["name"] for o in got[name]["outputs"]] == [o.name for o in spec.outputs]
    assert got["bayes_sampling"]["verb"] == "sample"
    code, out, _ = run_cli(["methods", "erm"], capsys)
    assert code == 0 and "lam_grid" in out and "test_error" in out


def test_readable_table_of_points_has_no_json_inside(capsys):
    result = {"variant": "spiked", "solver": {"tol": 1e-6, "damping": 0.5},
              "points": [{"alpha": 1.0, "test_error": 0.25, "converged": True,
                          "branches": {"informed": {"m_k": 0.5}}},
                         {"alpha": 2.0, "test_error": 0.125, "converged": False}]}
    emit(result, False, title="theory bayes", columns=("alpha", "test_error", "converged"))
    out = capsys.readouterr().out
    assert "{" not in out and "solver.tol" in out and "theory bayes: 2 points" in out
    assert re.search(r"2\s.*0\.125\s.*false", out)


def test_plural_and_law_printing():
    assert plural(1, "figure") == "1 figure" and plural(2, "figure") == "2 figures"
    assert plural(0, "cell") == "0 cells"
    assert [law_text(x) for x in ("2", "1,2,3", "1:0.2,3:0.8")] == [
        "2", "U{1,2,3}", "{1:0.2,3:0.8}"]


@pytest.mark.parametrize("bad", ["Validation", "auto", "AUTO", "ridge", "-1"])
def test_lam_is_parsed_once_and_refuses_other_spellings(bad):
    with pytest.raises(ConfigError, match=r"^lam=") as exc:
        parse_lam(bad)
    assert "\n" not in str(exc.value)


def test_erm_verb_refuses_a_capitalised_lam_mode(capsys):
    code, out, err = run_cli(["erm", "--lam", "Validation", "--D", "10"], capsys)
    assert code == 2 and out == "" and len(err.strip().splitlines()) == 1 and "lam=" in err


def test_gd_verb_runs_one_cell(capsys):
    code, out, err = run_cli(["gd", "--activation", "linear", "--alpha", "2", "--lam", "0.1",
                              "--D", "8", "--steps", "4", "--record-every", "2",
                              "--n-test", "50", "--json"], capsys)
    assert code == 0, err
    res = json.loads(out)
    assert res["activation"] == "linear" and res["D"] == 8 and res["step"] == [0, 2, 4]


def test_inference_verb_runs_an_algorithm_from_the_table(capsys):
    """``bayesslr inference`` (generated) runs one budgeted algorithm looked up in
    ``inference.algorithms.ALGORITHMS`` (one record each); the method's suffix names
    algorithm, start and budget."""
    from bayesslr.inference.algorithms import ALGORITHMS
    from bayesslr.inference.method import METHODS

    assert {m.split("-")[0] for m in METHODS} == set(ALGORITHMS)
    assert all(callable(a.run) and a.starts and a.options for a in ALGORITHMS.values())
    code, out, err = run_cli(["inference", "--activation", "map-random-1e3", "--alpha", "2",
                              "--D", "6", "--delta", "0.05", "--reference", "none",
                              "--n-test", "200", "--json"], capsys)
    assert code == 0, err
    res = json.loads(out)
    assert res["algorithm"] == "map" and res["budget"] == 1000.0 and res["D"] == 6
    assert math.isfinite(res["test_error"])


def test_rendered_help_has_no_type_names_and_wraps_at_words(capsys):
    """Issue 21, case 8: the help a user reads (top level and every verb) shows no ``<bool>``
    or ``<str>`` placeholder (the rich panels printed one for ``--help`` itself) and breaks
    lines between words, never inside one."""
    import re

    verbs = ["", *sorted(_verbs(build_app()))]
    for verb in verbs:
        code, out, _ = run_cli([*verb.split(), "--help"] if verb else ["--help"], capsys)
        assert code == 0, verb
        assert "<bool>" not in out and "<str>" not in out, verb
        words = set(re.findall(r"[A-Za-z]{4,}", out))
        for line in out.splitlines():
            m = re.search(r"([A-Za-z]+)$", line.rstrip())
            nxt = out.splitlines()[out.splitlines().index(line) + 1:][:1]
            if m and nxt and re.match(r"\s+([a-z]+)", nxt[0]):
                joined = m.group(1) + re.match(r"\s+([a-z]+)", nxt[0]).group(1)
                assert joined not in words or len(m.group(1)) < 2, (verb, line)
