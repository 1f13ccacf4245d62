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


# --------------------------------------------------------------------------------------------
# case 11 (a): a killed external scheduler
# --------------------------------------------------------------------------------------------
def test_dask_log_records_are_one_line_while_a_cluster_is_used():
    """Case 11 (a), the mechanism: while a DaskExecutor is open, a record of a ``distributed``
    logger that carries a traceback is one line (message and exception), and the record of
    a bare cancellation (dask's reconnection, cancelled as its client closes: the first 35
    lines of the issue's output) is dropped; closing puts the loggers back as they were."""
    import asyncio
    import io
    import logging

    from bayesslr.sweep.executors import one_line_logs

    pytest.importorskip("distributed")
    logger = logging.getLogger("distributed.client")
    buf = io.StringIO()
    handler = logging.StreamHandler(buf)
    logger.addHandler(handler)
    before = list(logger.filters)
    try:
        restore = one_line_logs("distributed")
        for exc in (asyncio.CancelledError(), ConnectionRefusedError(111, "refused")):
            try:
                raise exc
            except BaseException:
                logger.exception("" if isinstance(exc, asyncio.CancelledError) else "lost")
        logger.error("Failed to reconnect to scheduler after %s seconds", "20.00")
        restore()
        assert logger.filters == before
    finally:
        logger.removeHandler(handler)
    assert buf.getvalue().splitlines() == [
        "lost (ConnectionRefusedError: [Errno 111] refused)",
        "Failed to reconnect to scheduler after 20.00 seconds"]


def _scheduler_address(proc: subprocess.Popen, deadline: float) -> str:
    """The address a ``dask scheduler`` logs on its stderr ("Scheduler at: tcp://...")."""
    for line in proc.stderr:
        if "Scheduler at:" in line:
            return line.split("Scheduler at:")[1].strip()
        assert time.monotonic() < deadline, "the scheduler did not start"
    raise AssertionError("the scheduler ended before it listened")


@pytest.mark.slow
@pytest.mark.timeout(240)
def test_a_killed_external_scheduler_is_one_line_and_exit_5(tmp_path):
    """Case 11 (a). Before: SIGKILL of the scheduler of ``--scheduler ADDRESS`` while its
    worker ran the first cell printed a 35-line dask traceback (the client's reconnection,
    cancelled as it closed) before the exit-5 line. Now: exit 5, the exit-5 line last, at
    most one line of dask's before it, no traceback."""
    pytest.importorskip("distributed")
    cfg = toml(tmp_path / "c.toml", alphas=(1, 2, 3, 4, 5, 6), sleep=5.0)
    dask = [sys.executable, "-m", "dask"]
    sched = subprocess.Popen([*dask, "scheduler", "--host", "127.0.0.1", "--port", "0",
                              "--no-dashboard"], env=child_env(), text=True,
                             stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    procs = [sched]
    try:
        address = _scheduler_address(sched, time.monotonic() + 120)
        procs.append(subprocess.Popen([*dask, "worker", address, "--nworkers", "1",
                                       "--nthreads", "1", "--no-dashboard"], env=child_env(),
                                      stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
        out = tmp_path / "o"
        run = subprocess.Popen(console(["run", "--config", str(cfg), "--out", str(out),
                                        "--scheduler", address, "--quiet"]),
                               env=child_env(), text=True, stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE)
        procs.append(run)
        t0 = time.monotonic()
        while not (out / "cells").is_dir():  # the cells are submitted
            assert run.poll() is None, run.communicate()
            assert time.monotonic() - t0 < 120, "the run did not start"
            time.sleep(0.05)
        time.sleep(1.0)  # the worker is inside the first cell
        sched.kill()
        _, err = run.communicate(timeout=120)
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
            p.wait(timeout=60)
        sched.stderr.close()
    assert run.returncode == 5, err
    lines = err_lines(err)
    assert "lost the connection to the dask scheduler" in lines[-1], err
    assert len(lines) <= 2 and all("distributed" in ln for ln in lines[:-1]), err


# --------------------------------------------------------------------------------------------
# case 11 (b): the scratch directory of a SIGKILLed --workers run
# --------------------------------------------------------------------------------------------
SCRATCH_THEN_DIE = ("import os, signal, sys\nfrom pathlib import Path\n"
                    "from bayesslr.sweep.executors import make_scratch\n"
                    "path, _ = make_scratch(Path(sys.argv[1]))\n"
                    "print(os.getpid(), path, flush=True)\n"
                    "os.kill(os.getpid(), signal.SIGKILL)\n")


def test_only_dead_runs_scratch_directories_are_removed(tmp_path):
    """Case 11 (b). Before: a ``--workers`` run killed with SIGKILL left its
    ``bayesslr-dask-*`` directory in the temporary directory for ever. Now a cluster's start
    removes those of dead runs, and only those: a name this package made, a real directory
    of this user, its lock free. Kept: a live run's (its lock held, whatever its pid), one
    without its lock file, an old-style name without a pid, a link or a file with the name,
    another user's; a link inside a removed directory is not followed."""
    from bayesslr.sweep.executors import SCRATCH_LOCK, make_scratch, remove_dead_scratch

    proc = subprocess.run([sys.executable, "-c", SCRATCH_THEN_DIE, str(tmp_path)],
                          env=child_env(), capture_output=True, text=True, timeout=120)
    assert proc.returncode == -signal.SIGKILL, proc.stderr
    pid, path = proc.stdout.split()
    dead, dead_pid = Path(path), int(pid)
    assert dead.is_dir() and dead.name.startswith(f"bayesslr-dask-{dead_pid}-")
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "keep.txt").write_text("x")
    (dead / "link").symlink_to(outside)
    live, fd = make_scratch(tmp_path)  # this process: alive
    held = tmp_path / f"bayesslr-dask-{dead_pid}-held"  # pid gone, but its lock is held
    held.mkdir()
    import fcntl

    lock = os.open(held / SCRATCH_LOCK, os.O_WRONLY | os.O_CREAT, 0o600)
    fcntl.flock(lock, fcntl.LOCK_EX)
    kept = [Path(live), held, tmp_path / "bayesslr-dask-abc123_x",
            tmp_path / f"bayesslr-dask-{dead_pid}-file", tmp_path / f"bayesslr-dask-{dead_pid}-ln",
            tmp_path / f"bayesslr-dask-{dead_pid}-nolock"]
    kept[2].mkdir()
    kept[3].write_text("a file, not a directory")
    kept[4].symlink_to(outside)
    kept[5].mkdir()
    if os.getuid() == 0:  # another user's directory (only root can make one here)
        other = tmp_path / f"bayesslr-dask-{dead_pid}-other"
        other.mkdir()
        (other / SCRATCH_LOCK).touch()
        os.chown(other, 12345, 12345)
        kept.append(other)
    try:
        assert remove_dead_scratch(tmp_path) == [dead]
    finally:
        os.close(lock)
        os.close(fd)
    assert not os.path.lexists(dead)
    assert all(os.path.lexists(p) for p in kept), [p for p in kept if not os.path.lexists(p)]
    assert (outside / "keep.txt").read_text() == "x"


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_the_next_workers_run_removes_what_a_sigkilled_one_left(tmp_path):
    """Case 11 (b), end to end: ``run --workers 1`` killed with SIGKILL while its cluster
    works leaves its scratch directory; the same command again resumes, and leaves the
    temporary directory empty."""
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    cfg = toml(tmp_path / "c.toml", alphas=(1, 2, 3, 4), sleep=2.0)
    out = tmp_path / "o"
    args = console(["run", "--config", str(cfg), "--out", str(out), "--workers", "1",
                    "--quiet"])
    env = child_env(TMPDIR=str(tmp))
    proc = subprocess.Popen(args, env=env, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)
    workers: list[int] = []
    try:
        t0 = time.monotonic()
        while not list((out / "cells").glob("*.nc")):  # the cluster runs cells
            assert proc.poll() is None, "the run ended early"
            assert time.monotonic() - t0 < 200, "no progress"
            time.sleep(0.05)
        workers = children(proc.pid)
        proc.kill()
        proc.wait(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
        for w in workers:  # the orphaned workers, this test's own
            if alive(w):
                os.kill(w, signal.SIGKILL)
    left = [p.name for p in tmp.iterdir()]
    assert any(n.startswith(f"bayesslr-dask-{proc.pid}-") for n in left), left
    again = subprocess.run(args, env=env, capture_output=True, text=True, timeout=240)
    assert again.returncode == 0, again.stderr[-2000:]
    assert len(list((out / "cells").glob("*.nc"))) == 4
    assert not list(tmp.iterdir()), list(tmp.iterdir())


# --------------------------------------------------------------------------------------------
# case 11 (c): a closed output pipe
# --------------------------------------------------------------------------------------------
@pytest.mark.parametrize("verb, status, both", [
    ("run", 0, True), ("run-failing", 3, False), ("methods", 0, False),
    ("sweeptest", 0, False)], ids=["run-stdout-and-stderr", "run-with-a-failed-cell",
                                   "methods", "family-verb"])
def test_a_closed_output_pipe_keeps_the_verbs_status(verb, status, both, tmp_path):
    """Case 11 (c). Before: ``bayesslr run ... | head -1`` exited 1 in silence once the
    reader had gone (click's EPIPE handler), whatever the verb had done: a run whose results
    were written, or one with failed cells (3). Now the output the reader left is discarded
    (stdout, and stderr when it is the same pipe, pointed at /dev/null) and every verb ends
    with its own status. The pipe's reader is closed before the command starts, so every
    write fails: the worst case of ``| head``."""
    out = tmp_path / "o"
    if verb.startswith("run"):  # without --quiet, the progress lines go to stderr too
        cfg = toml(tmp_path / "c.toml", fail_seed=0 if verb == "run-failing" else -1)
        args = ["run", "--config", str(cfg), "--out", str(out)]
    else:
        args = {"methods": ["methods"],
                "sweeptest": ["sweeptest", "--activation", "a", "--alpha", "2", "--json"]}[verb]
    r, w = os.pipe()
    os.close(r)
    try:
        proc = subprocess.run(console(args), env=child_env(), stdout=w,
                              stderr=w if both else subprocess.PIPE, timeout=120)
    finally:
        os.close(w)
    err = "" if both else proc.stderr.decode()
    assert proc.returncode == status, err
    assert "Traceback" not in err and "Exception ignored" not in err, err
    if verb.startswith("run"):
        assert (out / "dataset.nc").is_file() and (out / "manifest.json").is_file()
