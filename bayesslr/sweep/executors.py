"""Executors: run cells in-process or on dask.distributed, storing each as it finishes.

* :class:`InProcessExecutor` (the default) runs cells one after another in this process.
* :class:`DaskExecutor` runs them on a dask.distributed cluster: a ``LocalCluster`` bound to
  loopback with one single-threaded worker *process* per requested worker, spawned (never
  forked, because JAX is already imported here), speaking TLS with credentials made for it in
  memory (no other process can use it), or an existing cluster at ``tls://host:port`` or
  ``tcp://host:port`` (its TLS credentials from a dask configuration file,
  :func:`load_security_config`).

Either way the results come back to this process, which writes every cell atomically
(:mod:`bayesslr.sweep.storage`) the moment it arrives. Each cell carries its own seed, so the
numbers do not depend on the backend or on the order of completion. A method that raises is
recorded as a failed cell (``"Type: message"``) and the sweep goes on.

Interrupts: SIGINT and SIGTERM only set a :class:`StopFlag` (:func:`interrupt_on_signals`);
the executors look at it between cells and while they wait (every :data:`POLL_S` seconds),
return without handing over anything more, and the runner then raises
:class:`SweepInterrupted` from ordinary code. Finished cells are on disk; the cells in flight
are discarded (dask futures cancelled, an in-process cell's thread abandoned); rerunning the
same command resumes.

Plugins: extra method families (tests register a tiny deterministic method this way) are
modules or ``.py`` files named in ``$BAYESSLR_PLUGINS`` (separated by commas); they are imported
here and, by name, in every worker before a cell runs.
"""

from __future__ import annotations

import contextlib
import importlib
import importlib.util
import logging
import os
import queue
import re
import signal
import stat
import sys
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any, Protocol

from bayesslr.core import startup
from bayesslr.core.cputime import CpuTimer
from bayesslr.core.draws import keep_draws
from bayesslr.core.jaxconfig import release_compiled_near_map_limit
from bayesslr.core.task import ConfigError
from bayesslr.registry import Cell, run_unit, spread_units, units
from bayesslr.sweep.storage import (
    CellRecord,
    clean_text,
    method_version,
    normalize_outputs,
)

PLUGIN_ENV = "BAYESSLR_PLUGINS"
MAX_ERROR_CHARS = 2000

OnDone = Callable[[CellRecord], None]


class SweepInterrupted(BaseException):
    """Raised by the runner (never by a signal handler) when SIGINT or SIGTERM arrived.

    A ``BaseException`` (like ``KeyboardInterrupt``), so that the per-cell ``except Exception``
    that records method failures never swallows it.

    Attributes
    ----------
    signum : int
        The signal.
    exit_code : int
        ``128 + signum`` (130 for SIGINT, 143 for SIGTERM), the shell's convention.
    """

    def __init__(self, signum: int, detail: str = "") -> None:
        name = signal.Signals(signum).name
        super().__init__(f"interrupted by {name}" + (f" ({detail})" if detail else ""))
        self.signum = signum
        self.exit_code = 128 + signum


class SchedulerLost(Exception):
    """The sweep's client lost its dask scheduler: the cells not finished were never run.

    They are not recorded (a resumed run computes them); the cells finished before stay
    stored.
    """


def _scheduler_lost(exc: BaseException) -> bool:
    """Whether a future's exception is its cancellation because the client lost the
    scheduler (not a failure of the cell)."""
    return getattr(exc, "reason", None) == "scheduler-connection-lost"


class StopFlag:
    """Set by the signal handler, read by the runner and the executors at safe points.

    The handler only stores the signal number (no exception, no lock, no I/O): raising from a
    handler is lost whenever the signal lands in a finalizer or a C callback ("Exception
    ignored ..."), and taking a lock there can deadlock against the interrupted code.
    """

    def __init__(self) -> None:
        self.signum: int | None = None
        self.consumed = False

    def set(self, signum: int) -> None:
        if self.signum is None:
            self.signum = signum

    def __bool__(self) -> bool:
        return self.signum is not None

    def check(self, detail: str = "") -> None:
        """Raise :class:`SweepInterrupted` if a signal arrived."""
        if self.signum is not None:
            self.consumed = True
            raise SweepInterrupted(self.signum, detail)


# how often waits wake up to look at the flag (seconds): the latency of Ctrl-C
POLL_S = 0.05

STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM)


@contextlib.contextmanager
def interrupt_on_signals() -> Iterator[StopFlag]:
    """Catch SIGINT/SIGTERM into a :class:`StopFlag` for the duration of the block.

    A signal that no safe point turned into :class:`SweepInterrupted` (it arrived after the
    last one) is sent again, to the handler the caller had, when the block ends: it is never
    lost. Also ignores SIGXFSZ (Python already does at start-up; made sure here), so that a
    write past a file-size limit fails with ``EFBIG`` (reported as one line) instead of
    killing the process. A signal the caller ignores (``SIG_IGN``: a shell starts background
    jobs with SIGINT ignored) stays ignored. Outside the main thread no handler can be
    installed: the flag then stays unset and interrupts reach the caller's own handlers.
    """
    flag = StopFlag()
    if threading.current_thread() is not threading.main_thread():
        yield flag
        return

    def handler(signum: int, _frame: object) -> None:
        if flag.signum is not None and startup.console:
            # a second Ctrl-C: the user will not wait for the clean stop (the console
            # command only; finished cells are on disk already, fsync-ed)
            startup.exit_now(signum, "second signal: stopped at once")
        flag.set(signum)

    old = {s: signal.getsignal(s) for s in (*STOP_SIGNALS, signal.SIGXFSZ)}
    for s in STOP_SIGNALS:
        if old[s] is not signal.SIG_IGN:  # ignored on purpose (a background job's SIGINT)
            signal.signal(s, handler)
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    try:
        yield flag
    finally:
        for s, h in old.items():
            signal.signal(s, h if h is not None else signal.SIG_DFL)
        if flag.signum is not None and not flag.consumed:
            os.kill(os.getpid(), flag.signum)  # to the caller's handler


# --------------------------------------------------------------------------------------------
# plugins
# --------------------------------------------------------------------------------------------
def plugin_names() -> tuple[str, ...]:
    """Plugin modules or files named in ``$BAYESSLR_PLUGINS``.

    **This variable executes code.** Every entry is imported (a module name) or executed (a
    ``.py`` file) by every ``bayesslr`` verb, ``--help`` included, by ``bayesslr.run`` and by
    every dask worker of a sweep, with the rights of the user who runs it. Set it only to
    code you trust, never from a shared or world-writable location, and do not export it in a
    shell profile that other tools inherit.
    """
    return tuple(p.strip() for p in os.environ.get(PLUGIN_ENV, "").split(",") if p.strip())


def load_plugins(plugins: Sequence[str]) -> None:
    """Import each plugin (a module name, or a path to a ``.py`` file) once
    (:func:`plugin_names`: this runs their code).

    An entry that cannot be loaded (no such module or file, a syntax error, an exception while
    it runs) raises one :class:`ConfigError` naming the entry and the error (the CLI: one line,
    exit 2), and leaves nothing half-registered in ``sys.modules``."""
    for p in plugins:
        name = "bayesslr_plugin_" + Path(p).stem if p.endswith(".py") else p
        if name in sys.modules:
            continue
        try:
            if p.endswith(".py"):
                if not Path(p).is_file():
                    raise FileNotFoundError(f"no file {p}")
                spec = importlib.util.spec_from_file_location(name, p)
                if spec is None or spec.loader is None:
                    raise ImportError("not a Python file")
                mod = importlib.util.module_from_spec(spec)
                sys.modules[name] = mod
                spec.loader.exec_module(mod)
            else:
                importlib.import_module(p)
        except (Exception, SystemExit) as exc:
            sys.modules.pop(name, None)
            why = " ".join(f"{type(exc).__name__}: {exc}".split())[:300]
            raise ConfigError(f"{PLUGIN_ENV} entry {p!r} cannot be loaded ({why}); allowed: "
                              "a comma list of importable module names or .py files (each is "
                              "executed by every verb: set it to trusted code only)") from None


# --------------------------------------------------------------------------------------------
# one cell
# --------------------------------------------------------------------------------------------
def execute_unit(cells: Sequence[Cell], draws_dir: Path | None = None) -> list[CellRecord]:
    """Run one unit of work (:func:`bayesslr.registry.units`: one cell, or cells its family
    runs together); an exception becomes failed records, never a crash of the sweep. The
    unit's wall time, and its process CPU time (:mod:`bayesslr.core.cputime`), are shared
    evenly by its cells.

    Each record carries the code version of its method *where it ran* (a remote worker with
    other code shows up as stale when the sweep resumes).
    """
    t0, cpu = time.perf_counter(), CpuTimer()
    versions = []
    for c in cells:
        try:
            versions.append(method_version(c.method))
        except Exception:  # an unknown family fails below, with its message
            versions.append("")
    try:
        with keep_draws(draws_dir):  # sampling cells write OUT/draws/<key>.nc (--keep-draws)
            outs = [normalize_outputs(o) for o in run_unit(cells)]
    except Exception as exc:  # recorded per cell; the sweep goes on
        text = clean_text(" ".join(f"{type(exc).__name__}: {exc}".split())[:MAX_ERROR_CHARS])
        dt, dc = (time.perf_counter() - t0) / len(cells), cpu.seconds() / len(cells)
        return [CellRecord(c, "failed", {}, text, dt, v, dc)
                for c, v in zip(cells, versions, strict=True)]
    finally:
        release_compiled_near_map_limit()  # a long-lived worker must not run out of mmaps
    dt, dc = (time.perf_counter() - t0) / len(cells), cpu.seconds() / len(cells)
    return [CellRecord(c, "ok", o, "", dt, v, dc)
            for c, o, v in zip(cells, outs, versions, strict=True)]


def execute_cell(cell: Cell) -> CellRecord:
    """Run one cell alone (:func:`execute_unit` of one cell)."""
    return execute_unit([cell])[0]


def _remote_unit(cells: list[Cell], plugins: tuple[str, ...],
                 draws_dir: Path | None = None) -> list[CellRecord]:
    """What a dask worker runs: JAX set up as the driver's, the plugins, then the unit."""
    from bayesslr.core.jaxconfig import configure_jax

    configure_jax(host_devices=None)
    load_plugins(plugins)
    return execute_unit(cells, draws_dir)


class Executor(Protocol):
    """Runs cells and hands each finished record to ``on_done`` (in the calling thread).

    :meth:`check` validates cheaply and writes nothing (a scheduler address that nobody
    listens at fails here, before the output directory is created); :meth:`open` acquires the
    resources (a cluster) and may raise :class:`~bayesslr.core.task.ConfigError`. :meth:`run`
    returns early, without calling ``on_done`` again, once ``stop`` is set: waits wake up
    every :data:`POLL_S` seconds to look at it, and the cells in flight are discarded.
    """

    name: str
    # where sampling cells keep their draws (``run --keep-draws``), or None; the runner sets it
    draws_dir: Path | None

    def check(self) -> None: ...

    def open(self) -> None: ...

    def run(self, cells: Sequence[Cell], on_done: OnDone, stop: StopFlag | None = None
            ) -> None: ...

    def close(self) -> None: ...


# threads of in-process cells abandoned at an interrupt (still computing; results discarded)
_ABANDONED: list[threading.Thread] = []


def abandoned_cells() -> list[threading.Thread]:
    """Threads of in-process cells abandoned at an interrupt that are still running.

    A process that exits while one runs must leave with :func:`os._exit` (the CLI does):
    tearing down the interpreter under a thread that is inside compiled code can crash.
    """
    _ABANDONED[:] = [t for t in _ABANDONED if t.is_alive()]
    return list(_ABANDONED)


class InProcessExecutor:
    """Cells one after another in this process.

    Each cell runs in a short-lived daemon thread while the calling thread waits for it,
    waking every :data:`POLL_S` seconds to look at the stop flag, so that Ctrl-C stops a long
    cell at once: the cell is abandoned (its thread finishes in the background, its result is
    discarded) and nothing of it is written.
    """

    name = "in-process"
    draws_dir: Path | None = None

    def check(self) -> None:
        return None

    def open(self) -> None:
        return None

    def run(self, cells: Sequence[Cell], on_done: OnDone, stop: StopFlag | None = None
            ) -> None:
        for unit in units(cells):
            if stop:
                return
            done, recs = call_interruptibly(execute_unit, unit, self.draws_dir, stop=stop,
                                            name=f"bayesslr-cell-{unit[0].method}")
            if not done:
                return
            for rec in recs:
                on_done(rec)

    def close(self) -> None:
        return None


def call_interruptibly(fn: Callable[..., Any], *args: Any, stop: StopFlag | None,
                       name: str = "bayesslr-work") -> tuple[bool, Any]:
    """Run ``fn(*args)`` in a daemon thread while this thread waits, waking every
    :data:`POLL_S` seconds to look at ``stop``. Returns ``(True, result)``, or ``(False,
    None)`` when ``stop`` was set first (the thread is abandoned: it finishes in the background
    and its result is discarded). An exception of ``fn`` is raised here."""
    box: queue.Queue = queue.Queue(maxsize=1)

    def target() -> None:
        try:
            box.put((True, fn(*args)))
        except BaseException as exc:  # noqa: BLE001  (re-raised in the waiting thread)
            box.put((False, exc))

    th = threading.Thread(target=target, daemon=True, name=name)
    th.start()
    while True:
        try:
            ok, value = box.get(timeout=POLL_S)
            break
        except queue.Empty:
            if stop:
                _ABANDONED.append(th)
                return False, None
    if not ok:
        raise value
    return True, value


def _probe(address: str, timeout: float = 5.0) -> None:
    """Fail fast (ConfigError) when nothing listens at a ``tcp://host:port`` scheduler address
    (dask's own client would retry for its whole timeout)."""
    import socket
    from urllib.parse import urlsplit

    if not address.startswith(("tcp://", "tls://")):
        return
    try:
        parts = urlsplit(address)
        host, port = parts.hostname, parts.port
    except ValueError:
        host, port = None, None
    if not host or port is None:
        raise ConfigError(f"scheduler={address!r} is not an address; allowed: tcp://host:port")
    try:
        with socket.create_connection((host, port), timeout=timeout):
            pass
    except OSError as exc:
        raise ConfigError(f"scheduler={address!r} cannot be reached ({exc.strerror or exc})"
                          ) from None


class DaskExecutor:
    """Cells as dask.distributed tasks.

    Parameters
    ----------
    workers : int, optional
        Start a ``LocalCluster`` on 127.0.0.1 with this many single-threaded worker processes.
    scheduler : str, optional
        Address of an existing scheduler (``tcp://host:port``); the workers there must have
        bayesslr (and the plugins) installed.
    """

    def __init__(self, *, workers: int | None = None, scheduler: str | None = None,
                 security: str | Path | None = None) -> None:
        if (workers is None) == (scheduler is None):
            raise ConfigError("give exactly one of workers or scheduler")
        if security is not None and scheduler is None:
            raise ConfigError("--scheduler-security is for --scheduler; allowed: with "
                              "--scheduler (the --workers cluster makes its own credentials)")
        self.workers = workers
        self.scheduler = scheduler
        self.draws_dir: Path | None = None  # workers write there: a shared filesystem
        self.security_file = None if security is None else Path(security)
        self._security_config = (None if self.security_file is None
                                 else load_security_config(self.security_file))
        self.name = f"dask ({workers} local workers)" if workers else f"dask ({scheduler})"
        self._client = None
        self._cluster = None
        self._scratch: str | None = None
        self._scratch_lock: int | None = None
        self._quiet_logs: Callable[[], None] | None = None
        self._pids: list[int] = []
        self.interrupted = False

    _CONFIG = {"distributed.worker.multiprocessing-method": "spawn",
               "distributed.worker.daemon": False,
               "distributed.admin.system-monitor.gil.enabled": False,
               "logging.distributed": "error"}

    def check(self) -> None:
        """A scheduler address must answer (cheap; nothing is started)."""
        if self.scheduler is not None:
            _probe(self.scheduler)

    def open(self) -> None:
        """Connect to the scheduler, or start the local cluster (workers are spawned).

        The local cluster speaks TLS with credentials made for it in memory
        (``Security.temporary()``: a fresh key and self-signed certificate that only this
        process and the workers it spawns hold), so another user or process of the machine
        cannot connect to it, let alone run code in its workers. Its workers keep their
        scratch space in a private temporary directory (:func:`make_scratch`) removed at
        :meth:`close`; those a killed run left are removed first (:func:`remove_dead_scratch`).
        Until :meth:`close`, dask's log records are one line each (:func:`one_line_logs`)."""
        import tempfile

        import dask
        from distributed import Client, LocalCluster
        from distributed.security import Security

        if self._client is not None:
            return
        self.interrupted = False
        self._quiet_logs = one_line_logs("distributed")
        if self.scheduler is None:
            remove_dead_scratch(Path(tempfile.gettempdir()))  # what SIGKILLed runs left
            self._scratch, self._scratch_lock = make_scratch(Path(tempfile.gettempdir()))
        config = {**self._CONFIG, **(self._security_config or {})}
        if self._scratch is not None:
            config["temporary-directory"] = self._scratch
        if self.scheduler is None:
            config[_PRE_SPAWN] = _worker_environ()
        with dask.config.set(config):
            if self.scheduler is not None:
                _probe(self.scheduler)
                try:
                    security = Security() if self._security_config else None
                    self._client = Client(self.scheduler, timeout="20s", security=security)
                except (OSError, TimeoutError, ValueError, TypeError) as exc:
                    raise ConfigError(f"scheduler={self.scheduler!r} cannot be reached ("
                                      f"{' '.join(str(exc).split()) or type(exc).__name__})"
                                      ) from None
                return
            try:
                security = Security.temporary()
            except ImportError:
                raise ConfigError("--workers needs the 'cryptography' package for the "
                                  "cluster's TLS credentials; install bayesslr[distributed]"
                                  ) from None
            self._cluster = LocalCluster(n_workers=self.workers, threads_per_worker=1,
                                         processes=True, host="127.0.0.1", scheduler_port=0,
                                         protocol="tls://", security=security,
                                         local_directory=self._scratch,
                                         # a free port for the scheduler's HTTP server: with
                                         # None it takes 8787 and warns when another cluster
                                         # (a second sweep on this machine) holds it
                                         dashboard_address="127.0.0.1:0", silence_logs=40)
            self._client = Client(self._cluster)
            self._pids = _worker_pids(self._cluster)

    def close(self) -> None:
        """Close the client and, when this executor started it, the local cluster (its worker
        processes end with it), then remove the workers' scratch directory.

        After an interrupt nothing waits for the cells in flight: the local workers are
        killed (SIGKILL, by the process ids recorded when they started: only this
        executor's own children) before the cluster is closed with short timeouts, so the
        process leaves within a second or two of the signal. Their nannies are told first
        that the cluster is closing (:func:`_no_restarts`): a nanny restarts a worker that
        died unexpectedly, and a worker it spawned between the kill and the close was still
        starting when the close's timeout ran out, and outlived the run (seen on a loaded
        CI machine, and reproduced by delaying the close half a second after the kill)."""
        client, self._client = self._client, None
        cluster, self._cluster = self._cluster, None
        quick = self.interrupted
        if quick:
            if cluster is not None:
                _no_restarts(cluster)
            for pid in self._pids:
                with contextlib.suppress(OSError):
                    os.kill(pid, signal.SIGKILL)
        if client is not None:
            with contextlib.suppress(Exception):
                client.close(timeout=1 if quick else 10)
        if cluster is not None:
            with contextlib.suppress(Exception):
                cluster.close(timeout=1 if quick else 20)
        self._pids = []
        scratch, self._scratch = self._scratch, None
        if scratch is not None:
            import shutil

            shutil.rmtree(scratch, ignore_errors=True)
        lock, self._scratch_lock = self._scratch_lock, None
        if lock is not None:
            with contextlib.suppress(OSError):
                os.close(lock)
        restore, self._quiet_logs = self._quiet_logs, None
        if restore is not None:
            restore()

    def run(self, cells: Sequence[Cell], on_done: OnDone, stop: StopFlag | None = None
            ) -> None:
        from distributed import as_completed

        from bayesslr.sweep.config import cell_key

        self.open()
        client = self._client
        plugins = plugin_names()
        futures = {}
        handled = 0
        try:
            # the units sharing a replica path wait for one solve: start each path first
            for unit in spread_units(units(cells)):
                if stop:
                    return
                fut = client.submit(_remote_unit, unit, plugins, self.draws_dir, pure=False,
                                    key=f"unit-{cell_key(unit[0])}")
                futures[fut.key] = (fut, unit)
            ac = as_completed([f for f, _ in futures.values()])
            while not ac.is_empty():
                if stop:
                    return
                batch = ac.next_batch(block=False)
                if not batch:
                    time.sleep(POLL_S)
                    continue
                for fut in batch:
                    if stop:  # results of a cluster being torn down are not trusted
                        return
                    unit = futures[fut.key][1]
                    try:
                        recs = fut.result()
                    except Exception as exc:  # worker died (KilledWorker) or lost
                        if _scheduler_lost(exc):
                            raise SchedulerLost(
                                f"lost the connection to the dask scheduler; "
                                f"{len(futures) - handled} of {len(futures)} units of cells "
                                f"not run (the finished cells are stored): rerun the same "
                                f"command to resume") from exc
                        text = clean_text(" ".join(f"{type(exc).__name__}: {exc}".split()))
                        recs = [CellRecord(c, "failed", {}, text[:MAX_ERROR_CHARS])
                                for c in unit]
                    for rec in recs:
                        on_done(rec)
                    handled += 1
                    fut.release()
        finally:
            if stop:
                self.interrupted = True  # close() kills the workers instead of waiting
            live = [f for f, _ in futures.values() if not f.done()]
            if live:
                with contextlib.suppress(Exception):
                    client.cancel(live, force=True)


_PRE_SPAWN = "distributed.nanny.pre-spawn-environ"


def _worker_environ() -> dict[str, Any]:
    """The environment dask's nanny gives the local cluster's workers, less
    ``MALLOC_TRIM_THRESHOLD_``.

    dask sets ``MALLOC_TRIM_THRESHOLD_=65536`` in every worker, so that freed memory goes back
    to the OS. Setting it switches off glibc's adaptive ``mmap`` threshold: every temporary
    buffer above 128 kB (XLA's, per call of a jitted function) is then a fresh ``mmap`` that is
    page-faulted in and unmapped again. On a replica ``lam='optimal'`` search (softmax,
    ``2e4`` channel samples) that was 7.8 million page faults instead of 1.4 million and 32%
    more CPU time (system time 23.8 s instead of 4.7 s, same numbers; benchmarks/README.md,
    "The local cluster's workers and glibc's malloc", group ``worker_malloc``: 1.70x). The
    workers of an existing cluster (``--scheduler``) keep what their operator set."""
    import dask
    import distributed  # noqa: F401  (loads distributed's configuration defaults)

    env = dict(dask.config.get(_PRE_SPAWN, default={}) or {})
    env.pop("MALLOC_TRIM_THRESHOLD_", None)
    return env


def _no_restarts(cluster: Any, timeout: float = 1.0) -> None:
    """Tell a LocalCluster's nannies that the cluster is closing (``close_gracefully``,
    on the cluster's event loop): a worker process that dies from now on is not restarted,
    its nanny closes instead. Best effort within ``timeout`` seconds: a cluster that does
    not answer is closed all the same."""
    nannies = [n for n in getattr(cluster, "workers", {}).values()
               if callable(getattr(n, "close_gracefully", None))]
    if not nannies:
        return

    async def mark() -> None:
        for nanny in nannies:
            nanny.close_gracefully()

    with contextlib.suppress(Exception):
        cluster.sync(mark, callback_timeout=timeout)


def _worker_pids(cluster: Any) -> list[int]:
    """Process ids of a LocalCluster's worker processes (its nannies' children)."""
    pids = []
    for nanny in getattr(cluster, "workers", {}).values():
        proc = getattr(getattr(nanny, "process", None), "process", None)
        pid = getattr(proc, "pid", None)
        if isinstance(pid, int) and pid > 0:
            pids.append(pid)
    return pids


SCRATCH_PREFIX = "bayesslr-dask-"
# bayesslr-dask-<pid of the run, for people>-<mkdtemp's suffix: letters, digits, _>
_SCRATCH_NAME = re.compile(re.escape(SCRATCH_PREFIX) + r"([0-9]+)-[A-Za-z0-9_]+\Z")
SCRATCH_LOCK = "owner.lock"


def make_scratch(parent: Path) -> tuple[str, int]:
    """A private scratch directory for the local cluster's workers, in ``parent``:
    ``bayesslr-dask-<pid>-<random>`` (mode 0700) with ``owner.lock`` in it, held (``flock``)
    by this process until it closes the descriptor returned, or dies: a run killed with
    SIGKILL can be told from a live one by the next (:func:`remove_dead_scratch`). The
    directory is made under a hidden name and renamed once its lock is held, so no other
    process can see it with its lock free while its owner lives."""
    import fcntl
    import shutil
    import tempfile

    hidden = tempfile.mkdtemp(prefix=f".{SCRATCH_PREFIX}{os.getpid()}-", dir=parent)
    try:
        fd = os.open(os.path.join(hidden, SCRATCH_LOCK),
                     os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            path = os.path.join(parent, os.path.basename(hidden)[1:])
            os.rename(hidden, path)  # a new name: mkdtemp's random suffix, never taken
        except OSError:
            os.close(fd)
            raise
    except OSError:
        shutil.rmtree(hidden, ignore_errors=True)
        raise
    return path, fd


def _lock_free(path: str) -> bool:
    """Whether ``path`` is a regular file (not a link) that no process holds a ``flock`` on:
    its owner is dead. Anything else there, or nothing, is not taken as proof of death."""
    import fcntl

    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError:
        return False
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return False
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            return False
        return True
    finally:
        os.close(fd)


def remove_dead_scratch(parent: Path) -> list[Path]:
    """Remove from ``parent`` the scratch directories of local clusters whose run died without
    cleaning up (SIGKILL, a crash); returns those removed.

    Only a directory that this package named (``bayesslr-dask-<pid>-<random>``, from
    :func:`make_scratch`), that is a real directory (not a link) owned by this user, and whose
    ``owner.lock`` is a regular file that no process holds (the kernel releases a ``flock``
    when its holder dies, however it dies), is removed; anything else in ``parent``, another
    user's or a live run's, is left alone. The removal does not follow links inside the
    directory."""
    import shutil

    removed: list[Path] = []
    try:
        entries = list(os.scandir(parent))
    except OSError:
        return removed
    for entry in entries:
        if _SCRATCH_NAME.match(entry.name) is None:
            continue
        try:
            st = entry.stat(follow_symlinks=False)
        except OSError:
            continue
        if (not stat.S_ISDIR(st.st_mode) or st.st_uid != os.getuid()
                or not _lock_free(os.path.join(entry.path, SCRATCH_LOCK))):
            continue
        shutil.rmtree(entry.path, ignore_errors=True)
        if not os.path.lexists(entry.path):
            removed.append(Path(entry.path))
    return removed


class _OneLine(logging.Filter):
    """Turns a log record into one line: its message and, instead of a traceback, the
    exception's type and message; a record that says nothing but that a coroutine was
    cancelled (dask's reconnection, stopped as its client closes) is dropped."""

    def filter(self, record: logging.LogRecord) -> bool:
        text = " ".join(record.getMessage().split())
        exc = record.exc_info[1] if record.exc_info else None
        if exc is not None:
            import asyncio

            if isinstance(exc, asyncio.CancelledError) and text in ("", str(exc)):
                return False
            why = " ".join(f"{type(exc).__name__}: {exc}".split()).rstrip(": ")
            text = why if text in ("", str(exc).strip()) else f"{text} ({why})"
        record.msg, record.args = text[:MAX_ERROR_CHARS], ()
        record.exc_info, record.exc_text, record.stack_info = None, None, None
        return True


def one_line_logs(prefix: str) -> Callable[[], None]:
    """Make every log record of the loggers named ``prefix`` or ``prefix.*`` one line
    (:class:`_OneLine`; dask logs a 35-line traceback when its client loses the scheduler,
    before the sweep stops with one line of its own); returns the function that undoes it."""
    filt = _OneLine()
    loggers = [logging.getLogger(prefix)] + [
        lg for name, lg in list(logging.root.manager.loggerDict.items())
        if name.startswith(prefix + ".") and isinstance(lg, logging.Logger)]
    for lg in loggers:
        lg.addFilter(filt)

    def restore() -> None:
        for lg in loggers:
            lg.removeFilter(filt)

    return restore


def load_security_config(path: Path) -> dict[str, Any]:
    """The TLS settings of an existing cluster from a dask configuration file (YAML, the
    format dask documents for TLS: ``distributed.comm.tls.ca-file`` and
    ``distributed.comm.tls.client.cert`` / ``.key``, optionally
    ``distributed.comm.require-encryption``), checked: ConfigError naming what is wrong.
    Returned as flat dask config keys for :func:`dask.config.set`."""
    import yaml

    where = f"scheduler-security={str(path)!r}"
    try:
        doc = yaml.safe_load(Path(path).read_text(encoding="utf-8"))
    except OSError as exc:
        raise ConfigError(f"{where} cannot be read ({exc.strerror or exc})") from None
    except (UnicodeDecodeError, yaml.YAMLError) as exc:
        why = " ".join(str(exc).split())[:200]
        raise ConfigError(f"{where} is not a YAML file ({why}); allowed: a dask configuration "
                          "file with distributed.comm.tls") from None
    tls = (((doc or {}).get("distributed") or {}).get("comm") or {}).get("tls") if isinstance(
        doc, dict) else None
    if not isinstance(tls, dict):
        raise ConfigError(f"{where} has no distributed.comm.tls section; allowed: a dask "
                          "configuration file with distributed.comm.tls.ca-file and "
                          "distributed.comm.tls.client.cert/key")
    client = tls.get("client") or {}
    files = {"ca-file": tls.get("ca-file"), "client.cert": client.get("cert"),
             "client.key": client.get("key")}
    config: dict[str, Any] = {"distributed.comm.require-encryption": True}
    for key, value in files.items():
        if key == "client.key" and value is None:  # the key may be inside the cert file
            continue
        if not isinstance(value, str) or not Path(value).expanduser().is_file():
            raise ConfigError(f"{where}: distributed.comm.tls.{key}={value!r} is not a file; "
                              "allowed: the path of a PEM file")
        config[f"distributed.comm.tls.{key}"] = str(Path(value).expanduser())
    for key in ("ciphers", "min-version", "max-version"):
        if tls.get(key) is not None:
            config[f"distributed.comm.tls.{key}"] = tls[key]
    return config


def usable_cores() -> int:
    """Cores this process may run on (its CPU affinity; ``os.cpu_count()`` where unknown)."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):
        return max(1, os.cpu_count() or 1)


WORKERS_PER_CORE = 4


def max_local_workers() -> int:
    """Most ``--workers`` accepted: :data:`WORKERS_PER_CORE` per usable core. Each local
    worker is a process holding its own JAX runtime (a few hundred MB) running
    single-threaded cells, so more workers than cores only adds memory and contention."""
    return WORKERS_PER_CORE * usable_cores()


def make_executor(workers: int | None, scheduler: str | None,
                  security: str | Path | None = None) -> Executor:
    """In-process unless ``workers`` or ``scheduler`` is given (validated, nothing started);
    ``security``: a dask configuration file with the TLS credentials of ``scheduler``
    (:func:`load_security_config`)."""
    if workers is not None and scheduler is not None:
        raise ConfigError("--workers and --scheduler exclude each other; allowed: one of them")
    if workers is not None:
        hi = max_local_workers()
        if not 1 <= workers <= hi:
            raise ConfigError(f"workers={workers} is out of range; allowed: integer from 1 to "
                              f"{hi} ({WORKERS_PER_CORE} per usable core, {usable_cores()} "
                              "here); use --scheduler for a bigger cluster")
    if scheduler is not None and not scheduler.startswith(("tcp://", "tls://", "inproc://",
                                                           "ws://", "wss://")):
        raise ConfigError(f"scheduler={scheduler!r} is not an address; allowed: tcp://host:port")
    if scheduler is not None and scheduler.startswith(("tcp://", "tls://")):
        try:
            from urllib.parse import urlsplit

            parts = urlsplit(scheduler)
            ok = bool(parts.hostname) and parts.port is not None
        except ValueError:
            ok = False
        if not ok:
            raise ConfigError(f"scheduler={scheduler!r} is not an address; allowed: "
                              "tcp://host:port or tls://host:port")
    if security is not None and scheduler is None:
        raise ConfigError("--scheduler-security is for --scheduler; allowed: with --scheduler "
                          "(the --workers cluster makes its own credentials)")
    if workers is None and scheduler is None:
        return InProcessExecutor()
    try:
        import distributed  # noqa: F401
    except ImportError:
        from bayesslr.core.extras import install_hint

        raise ConfigError("--workers/--scheduler need dask.distributed; install it with "
                          f"{install_hint('distributed')}") from None
    return DaskExecutor(workers=workers, scheduler=scheduler, security=security)
