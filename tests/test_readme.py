"""The README and docs/reports.md say what the code does (issue 21, case 7): every command in the
README's code blocks runs (the quick ones) or parses (the long ones: ``--help`` for a verb or a
script, ``--dry-run`` for a sweep, Python's compiler for the Python example); commands are
spelled as they run from a fresh clone (``.venv/bin/...``, never a bare ``python``), none twice;
the counts the docs quote (the quick sweep's cells, the notebooks) are the code's.

Install steps (``python3 -m venv``, ``pip install``) are not run: the tests run in the
installed environment. The commands start subprocesses and JAX, hence ``slow`` for those.
"""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import run_cli

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
COMMAND = re.compile(r"^(python3? |\.venv/bin/|bayesslr )")
# verbs quick enough to run as written (seconds); the rest parse only
QUICK = {"population"}


def code_blocks(text: str) -> tuple[list[str], list[str]]:
    """(logical lines of the indented code blocks, fenced ``python`` blocks) of a markdown
    text; backslash continuations joined."""
    fenced = re.findall(r"^```python\n(.*?)^```", text, re.M | re.S)
    text = re.sub(r"^```.*?^```", "", text, flags=re.M | re.S)
    lines, prev_blank = [], True
    in_block = False
    for line in text.splitlines():
        if line.startswith("    ") and (in_block or prev_blank):
            in_block = True
            lines.append(line[4:])
        else:
            in_block = False
        prev_blank = not line.strip()
    joined = re.sub(r"\\\n\s*", " ", "\n".join(lines)).splitlines()
    return joined, fenced


def readme_commands() -> list[list[str]]:
    """Every command of the README's code blocks (``&&`` chains split), as argv lists."""
    lines, _ = code_blocks(README.read_text(encoding="utf-8"))
    out = []
    for line in lines:
        if not COMMAND.match(line.strip()):
            continue
        tokens = shlex.split(line, comments=True)
        cmd: list[str] = []
        for t in [*tokens, "&&"]:
            if t == "&&":
                if cmd:
                    out.append(cmd)
                cmd = []
            else:
                cmd.append(t)
    return out


def test_commands_are_spelled_for_a_fresh_clone():
    """No bare ``python`` (ModuleNotFoundError outside the venv), and no command twice."""
    cmds = readme_commands()
    assert len(cmds) >= 15
    for c in cmds:
        assert c[0] != "python", shlex.join(c)
    seen = [shlex.join(c) for c in cmds if not _install(c)]
    assert len(seen) == len(set(seen)), [s for s in seen if seen.count(s) > 1]


def test_counts_the_docs_quote_are_the_codes():
    """'the N-cell quick sweep' is the quick preset's cell count; docs/reports.md names as many
    notebooks as there are."""
    from bayesslr.report.notebooks import find_notebooks
    from bayesslr.sweep.config import load_preset

    text = README.read_text(encoding="utf-8")
    for n in re.findall(r"(\d+)-cell quick sweep", text):
        assert int(n) == len(load_preset("quick").cells)
    words = {3: "Three", 4: "Four", 5: "Five", 6: "Six", 7: "Seven"}
    reports = (ROOT / "docs" / "reports.md").read_text(encoding="utf-8")
    assert f"{words[len(find_notebooks())]} notebooks, one per theme" in reports
    assert "not in this version" not in reports


def test_python_example_compiles():
    _, fenced = code_blocks(README.read_text(encoding="utf-8"))
    assert fenced
    for code in fenced:
        compile(code, "README.md", "exec")


def _install(cmd: list[str]) -> bool:
    return cmd[0] == "python3" and cmd[1:3] == ["-m", "venv"] or cmd[0].endswith("/pip")


def _env() -> dict[str, str]:
    # a command runs as a user would type it: not as a pytest-xdist worker (an inherited
    # PYTEST_XDIST_WORKER makes pytest-benchmark disable itself and refuse --benchmark-only)
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTEST_XDIST")}
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), env.get("PYTHONPATH", "")])
    env.setdefault("MPLBACKEND", "Agg")
    return env


@pytest.mark.slow
@pytest.mark.parametrize("cmd", readme_commands(), ids=lambda c: shlex.join(c)[:60])
def test_readme_command_runs_or_parses(cmd, tmp_path, capsys, monkeypatch):
    """Each command of the README: quick ones run as written, the others parse."""
    prog, args = cmd[0], cmd[1:]
    if _install(cmd):
        pytest.skip("an install step: the tests run in the installed environment")
    monkeypatch.chdir(tmp_path)  # nothing lands in the checkout
    if prog.endswith("bayesslr"):
        verb = args[0]
        if verb == "run":
            argv = [*args, "--dry-run"]
        elif verb == "report" and "--reference" in args:
            argv = args  # draws the shipped reference into tmp_path/figures/
        elif verb in QUICK:
            argv = args
        else:
            argv = [*args, "--help"]
        code, out, err = run_cli(argv, capsys)
        assert code == 0, (argv, out, err)
        return
    assert prog.endswith("python"), cmd
    if args[:1] == ["-c"]:
        argv = [sys.executable, *args]
    elif args[:2] == ["-m", "pytest"]:
        argv = [sys.executable, *args, "--help"]
    else:  # a benchmark script: its argparse parses
        argv = [sys.executable, str(ROOT / args[0]), *args[1:], "--help"]
    res = subprocess.run(argv, cwd=ROOT if args[:1] != ["-c"] else tmp_path, env=_env(),
                         capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, (argv, res.stdout[-2000:], res.stderr[-2000:])


def test_readme_is_a_front_page():
    """At most 200 lines (issue 37): what it is, the two commands, the headline figure, where
    to go next; every document and figure it points to exists."""
    text = README.read_text(encoding="utf-8")
    assert len(text.splitlines()) <= 200
    linked = re.findall(r"\]\(([^)#]+)\)", text) + re.findall(r"`((?:docs|benchmarks)/[^`]+)`",
                                                            text)
    missing = [p for p in linked if not p.startswith("http") and not (ROOT / p).exists()]
    assert missing == []
