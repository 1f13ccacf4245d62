"""Executors: run cells in-process or on dask.distributed, storing each as it finishes.

* :class:`InProcessExecutor` (the default) runs cells one after another in this process.
* :class:`DaskExecutor` runs them on a dask.distributed cluster: a ``LocalCluster`` bound to
  loopback with one single-threaded worker *process* per requested worker, spawned (never
  forked, because JAX is already imported here), or an existing cluster at ``tcp://host:port``.

Either way the results come back to this process, which writes every cell atomically
(:mod:`bayesslr.sweep.storage`) the moment it arrives. Each cell carries its own seed, so the
numbers do not depend on the backend or on the order of completion. A method that raises is
recorded as a failed cell (``"Type: message"``) and the sweep goes on. SIGINT and SIGTERM stop
the sweep between two writes: only the cells in flight are lost, and rerunning the same command
resumes.

Plugins: extra method families (tests register a tiny deterministic method this way) are
modules or ``.py`` files named in ``$BAYESSLR_PLUGINS`` (separated by commas); they are imported
here and, by name, in every worker before a cell runs.
"""

from __future__ import annotations

import contextlib
import importlib
import importlib.util
import os
import signal
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Protocol

from bayesslr.methods import Cell, run_unit, units
from bayesslr.sweep.storage import CellRecord, normalize_outputs
from bayesslr.task import ConfigError

PLUGIN_ENV = "BAYESSLR_PLUGINS"
MAX_ERROR_CHARS = 2000

OnDone = Callable[[CellRecord], None]


class SweepInterrupted(BaseException):
    """Raised in the main thread when SIGINT or SIGTERM arrives during a sweep.

    A ``BaseException`` (like ``KeyboardInterrupt``), so that the per-cell ``except Exception``
    that records method failures never swallows it.
    """

    def __init__(self, signum: int) -> None:
        super().__init__(f"interrupted by signal {signal.Signals(signum).name}")
        self.signum = signum


@contextlib.contextmanager
def interrupt_on_signals() -> Iterator[None]:
    """Turn SIGINT/SIGTERM into :class:`SweepInterrupted` for the duration of the block."""
    def handler(signum: int, _frame: object) -> None:
        raise SweepInterrupted(signum)

    old = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM)}
    for s in old:
        signal.signal(s, handler)
    try:
        yield
    finally:
        for s, h in old.items():
            signal.signal(s, h)


# --------------------------------------------------------------------------------------------
# plugins
# --------------------------------------------------------------------------------------------
def plugin_names() -> tuple[str, ...]:
    """Plugin modules or files named in ``$BAYESSLR_PLUGINS``."""
    return tuple(p.strip() for p in os.environ.get(PLUGIN_ENV, "").split(",") if p.strip())


def load_plugins(plugins: Sequence[str]) -> None:
    """Import each plugin (a module name, or a path to a ``.py`` file) once."""
    for p in plugins:
        if p.endswith(".py"):
            name = "bayesslr_plugin_" + Path(p).stem
            if name in sys.modules:
                continue
            spec = importlib.util.spec_from_file_location(name, p)
            if spec is None or spec.loader is None:
                raise ConfigError(f"{PLUGIN_ENV} entry {p!r} cannot be loaded")
            mod = importlib.util.module_from_spec(spec)
            sys.modules[name] = mod
            spec.loader.exec_module(mod)
        else:
            importlib.import_module(p)


# --------------------------------------------------------------------------------------------
# one cell
# --------------------------------------------------------------------------------------------
def execute_unit(cells: Sequence[Cell]) -> list[CellRecord]:
    """Run one unit of work (:func:`bayesslr.methods.units`: one cell, or cells its family
    runs together); an exception becomes failed records, never a crash of the sweep. The
    unit's wall time is shared evenly by its cells."""
    t0 = time.perf_counter()
    try:
        outs = [normalize_outputs(o) for o in run_unit(cells)]
    except Exception as exc:  # recorded per cell; the sweep goes on
        text = " ".join(f"{type(exc).__name__}: {exc}".split())[:MAX_ERROR_CHARS]
        dt = (time.perf_counter() - t0) / len(cells)
        return [CellRecord(c, "failed", {}, text, dt) for c in cells]
    dt = (time.perf_counter() - t0) / len(cells)
    return [CellRecord(c, "ok", o, "", dt) for c, o in zip(cells, outs, strict=True)]


def execute_cell(cell: Cell) -> CellRecord:
    """Run one cell alone (:func:`execute_unit` of one cell)."""
    return execute_unit([cell])[0]


def _remote_unit(cells: list[Cell], plugins: tuple[str, ...]) -> list[CellRecord]:
    """What a dask worker runs: JAX set up as the driver's, the plugins, then the unit."""
    from bayesslr.jaxconfig import configure_jax

    configure_jax(host_devices=None)
    load_plugins(plugins)
    return execute_unit(cells)


class Executor(Protocol):
    """Runs cells and hands each finished record to ``on_done`` (in the calling thread).

    :meth:`open` acquires the resources (a cluster connection) and may raise
    :class:`~bayesslr.task.ConfigError`; the runner calls it before writing anything.
    """

    name: str

    def open(self) -> None: ...

    def run(self, cells: Sequence[Cell], on_done: OnDone) -> None: ...

    def close(self) -> None: ...


class InProcessExecutor:
    """Cells one after another in this process."""

    name = "in-process"

    def open(self) -> None:
        return None

    def run(self, cells: Sequence[Cell], on_done: OnDone) -> None:
        for unit in units(cells):
            for rec in execute_unit(unit):
                on_done(rec)

    def close(self) -> None:
        return None


def _probe(address: str, timeout: float = 5.0) -> None:
    """Fail fast (ConfigError) when nothing listens at a ``tcp://host:port`` scheduler address
    (dask's own client would retry for its whole timeout)."""
    import socket
    from urllib.parse import urlsplit

    if not address.startswith("tcp://"):
        return
    parts = urlsplit(address)
    try:
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

    def __init__(self, *, workers: int | None = None, scheduler: str | None = None) -> None:
        if (workers is None) == (scheduler is None):
            raise ConfigError("give exactly one of workers or scheduler")
        self.workers = workers
        self.scheduler = scheduler
        self.name = f"dask ({workers} local workers)" if workers else f"dask ({scheduler})"
        self._client = None
        self._cluster = None

    _CONFIG = {"distributed.worker.multiprocessing-method": "spawn",
               "distributed.worker.daemon": False,
               "distributed.admin.system-monitor.gil.enabled": False,
               "logging.distributed": "error"}

    def open(self) -> None:
        """Connect to the scheduler, or start the local cluster (workers are spawned)."""
        import dask
        from distributed import Client, LocalCluster

        if self._client is not None:
            return
        with dask.config.set(self._CONFIG):
            if self.scheduler is not None:
                _probe(self.scheduler)
                try:
                    self._client = Client(self.scheduler, timeout="20s")
                except (OSError, TimeoutError) as exc:
                    raise ConfigError(f"scheduler={self.scheduler!r} cannot be reached ({exc})"
                                      ) from None
                return
            self._cluster = LocalCluster(n_workers=self.workers, threads_per_worker=1,
                                         processes=True, host="127.0.0.1", scheduler_port=0,
                                         dashboard_address=None, silence_logs=40)
            self._client = Client(self._cluster)

    def close(self) -> None:
        if self._client is not None:
            self._client.close()
            self._client = None
        if self._cluster is not None:
            self._cluster.close()
            self._cluster = None

    def run(self, cells: Sequence[Cell], on_done: OnDone) -> None:
        from distributed import as_completed

        from bayesslr.sweep.config import cell_key

        self.open()
        client = self._client
        plugins = plugin_names()
        futures = {}
        for unit in units(cells):
            fut = client.submit(_remote_unit, unit, plugins, pure=False,
                                key=f"unit-{cell_key(unit[0])}")
            futures[fut.key] = (fut, unit)
        try:
            for fut in as_completed([f for f, _ in futures.values()]):
                unit = futures[fut.key][1]
                try:
                    recs = fut.result()
                except Exception as exc:  # worker died (KilledWorker) or lost
                    text = " ".join(f"{type(exc).__name__}: {exc}".split())
                    recs = [CellRecord(c, "failed", {}, text[:MAX_ERROR_CHARS]) for c in unit]
                for rec in recs:
                    on_done(rec)
                fut.release()
        finally:
            client.cancel([f for f, _ in futures.values()])


def make_executor(workers: int | None, scheduler: str | None) -> Executor:
    """In-process unless ``workers`` or ``scheduler`` is given."""
    if workers is not None and scheduler is not None:
        raise ConfigError("--workers and --scheduler exclude each other; allowed: one of them")
    if workers is not None and workers < 1:
        raise ConfigError(f"workers={workers} is out of range; allowed: integer >= 1")
    if scheduler is not None and not scheduler.startswith(("tcp://", "tls://", "inproc://",
                                                           "ws://", "wss://")):
        raise ConfigError(f"scheduler={scheduler!r} is not an address; allowed: tcp://host:port")
    if workers is None and scheduler is None:
        return InProcessExecutor()
    try:
        import distributed  # noqa: F401
    except ImportError:
        raise ConfigError("--workers/--scheduler need dask.distributed; install "
                          "bayesslr[distributed]") from None
    return DaskExecutor(workers=workers, scheduler=scheduler)
