"""Reliability, third round (issue 40), the cases about signals, pipes and what a dead process
leaves behind: an interrupted ``report --notebooks`` (case 8), a lost external scheduler, a
SIGKILLed local cluster's scratch directory and a closed output pipe (case 11).

Each test names the case of the issue and how it failed before the change. The sweep method
is the test-only family ``sweeptest`` (tests/sweep_plugin.py); the console command is started
as the installed script starts it (``test_reliability2.console``).
"""

from __future__ import annotations

import gc
import os
import signal
import subprocess
import sys
import textwrap
import time
import warnings
from pathlib import Path

import pytest
from test_reliability2 import alive, child_env, children, console, no_tmp, toml

from conftest import run_cli

pytestmark = pytest.mark.usefixtures("plugin")  # the test family (conftest.py)


def err_lines(err: str) -> list[str]:
    """stderr less the report's ``skipped FIGURE: why`` notes; never a traceback."""
    assert "Traceback" not in err and "Exception ignored" not in err, err
    return [ln for ln in err.strip().splitlines() if not ln.startswith("skipped ")]


# --------------------------------------------------------------------------------------------
# case 8: SIGINT / SIGTERM during report --notebooks
# --------------------------------------------------------------------------------------------
NOTEBOOK = textwrap.dedent("""\
    # ---
    # jupyter:
    #   jupytext:
    #     text_representation:
    #       extension: .py
    #       format_name: percent
    # ---

    # %% [markdown]
    # # {name}

    # %% tags=["parameters"]
    results = ""

    # %%
    import pathlib, time
    pathlib.Path({marker!r}).touch()
    time.sleep({sleep})
    """)


def kernels_of(pid: int) -> list[int]:
    """The notebook kernels (``ipykernel_launcher``) among the children of ``pid``."""
    found = []
    for c in children(pid):
        try:
            cmd = Path(f"/proc/{c}/cmdline").read_bytes()
        except OSError:
            continue
        if b"ipykernel" in cmd:
            found.append(c)
    return found


@pytest.fixture
def notebook_report(tmp_path, capsys):
    """A finished two-cell sweep and two notebooks: ``a_quick`` (done at once) and ``b_slow``
    (a cell of 300 s); each touches a marker file when its cell starts."""
    pytest.importorskip("nbclient")
    res = tmp_path / "res"
    code, _, err = run_cli(["run", "--config", str(toml(tmp_path / "r.toml")), "--out",
                            str(res), "--quiet"], capsys)
    assert code == 0, err
    nbs = tmp_path / "nbs"
    nbs.mkdir()
    for name, sleep in (("a_quick", 0), ("b_slow", 300)):
        (nbs / f"{name}.py").write_text(NOTEBOOK.format(name=name, sleep=sleep,
                                                        marker=str(tmp_path / f"{name}.on")))
    return res, nbs


@pytest.mark.usefixtures("sigint_not_ignored")
@pytest.mark.timeout(240)
@pytest.mark.parametrize("sig, moment", [(signal.SIGINT, "cell"), (signal.SIGTERM, "kernel")],
                         ids=["SIGINT-in-a-cell", "SIGTERM-at-kernel-start"])
def test_an_interrupted_notebook_report_exits_128_plus_signal_and_kills_its_kernel(
        sig, moment, notebook_report, tmp_path):
    """Case 8. Before: nbclient's own signal handler shut the kernel down behind the running
    cell; the command printed a 95-line traceback (``DeadKernelError``, then an
    ``AssertionError`` of its clean-up) and exited 1. Now: SIGINT while ``b_slow``'s cell runs,
    or SIGTERM as soon as its kernel process exists (it is still starting), ends the command
    with 128 + signal and one line; the kernel is gone; ``a_quick.html``, written before,
    stays; ``b_slow.html`` and ``index.html`` are not written, and no temporary file is left."""
    res, nbs = notebook_report
    figures = res / "figures"
    proc = subprocess.Popen(console(["report", str(res), "--notebooks", "--formats", "png"]),
                            cwd=tmp_path, env=child_env(BAYESSLR_NOTEBOOKS=str(nbs)),
                            text=True, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    kernels: list[int] = []
    try:
        t0 = time.monotonic()
        while True:  # b_slow's kernel (a_quick's is gone once a_quick.html is written)
            assert proc.poll() is None, proc.communicate()
            assert time.monotonic() - t0 < 180, "no kernel started"
            if (figures / "a_quick.html").exists():
                kernels = kernels_of(proc.pid)
                if kernels and (moment == "kernel" or (tmp_path / "b_slow.on").exists()):
                    break
            time.sleep(0.02)
        proc.send_signal(sig)
        _, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    lines = err_lines(err)
    assert proc.returncode == 128 + sig, err
    assert len(lines) == 1, err
    assert f"interrupted by {signal.Signals(sig).name}" in lines[0]
    assert "b_slow" in lines[0] and "written: a_quick" in lines[0]
    deadline = time.monotonic() + 10
    while any(alive(k) for k in kernels) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not [k for k in kernels if alive(k)], "a notebook kernel outlived the command"
    assert (figures / "a_quick.html").stat().st_size > 0
    assert not (figures / "b_slow.html").exists() and not (figures / "index.html").exists()
    no_tmp(res)


def test_a_notebook_run_in_process_leaves_the_signal_handlers_as_they_were(notebook_report,
                                                                           tmp_path):
    """Case 8, the mechanism: a notebook executed in this process catches SIGINT/SIGTERM only
    while its kernel runs and puts the caller's handlers back (nbclient's own set-up reset them
    to the defaults); its kernel and channels are closed (warnings are errors here: an unclosed
    socket or kernel manager would fail the test)."""
    from bayesslr.report.notebooks import execute
    from bayesslr.sweep.executors import StopFlag

    res, nbs = notebook_report
    before = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM)}
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        nb, error = execute(nbs / "a_quick.py", res, cwd=res, stop=StopFlag())
        gc.collect()
    assert error == "" and (tmp_path / "a_quick.on").exists()
    assert {s: signal.getsignal(s) for s in before} == before
    assert not [str(w.message) for w in caught if issubclass(w.category, ResourceWarning)]
