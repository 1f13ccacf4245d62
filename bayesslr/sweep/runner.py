"""Run a validated sweep into an output directory and assemble its dataset.

Order of events (the guarantees of ``bayesslr run``):

1. everything is validated first (config, methods, output path, the config already stored in
   the directory, the scheduler address); a failure raises
   :class:`~bayesslr.core.task.ConfigError` and nothing is written;
2. the directory's exclusive lock is taken for the rest of the run
   (:class:`~bayesslr.sweep.storage.DirectoryLock`): a second run on it is refused with
   :class:`~bayesslr.sweep.storage.DirectoryBusy`, naming the holder's pid;
3. the stored cells are scanned: finished ones are reused, corrupt ones (unreadable, or
   failing their checksum) and, unless ``keep_stale``, stale ones (computed by another code
   version of their method) are queued again and reported, one line each, through ``log``;
4. the remaining cells run on the executor; each is written atomically as it arrives;
5. the dataset is assembled from every finished cell and written atomically, then the
   manifest.

SIGINT/SIGTERM only set a flag (:func:`~bayesslr.sweep.executors.interrupt_on_signals`); the
run stops at the next safe point (between cells, or within
:data:`~bayesslr.sweep.executors.POLL_S` seconds while waiting for one) and raises
:class:`~bayesslr.sweep.executors.SweepInterrupted`: the finished cells are on disk, the ones
in flight are discarded, no temporary file is left. A write that fails (disk full, quota,
permissions, file-size limit) stops the run with
:class:`~bayesslr.sweep.storage.StoreError`, the cells written before it intact.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import bayesslr
from bayesslr.core.files import write_netcdf_atomic
from bayesslr.core.task import ConfigError
from bayesslr.sweep.config import SweepConfig, cell_key
from bayesslr.sweep.dataset import build_dataset
from bayesslr.sweep.executors import (
    Executor,
    InProcessExecutor,
    call_interruptibly,
    interrupt_on_signals,
)
from bayesslr.sweep.progress import SweepProgress
from bayesslr.sweep.storage import CellRecord, ResultStore, ResumeScan


@dataclass(frozen=True)
class RunSummary:
    """What a run did.

    Attributes
    ----------
    total : int
        Cells in the sweep.
    reused : int
        Finished cells found in the directory and not recomputed.
    computed : int
        Cells run now.
    failed : int
        Cells whose method raised (all of the sweep, reused included).
    dataset : Path
        The dataset file.
    executor : str
        Which executor ran the cells.
    corrupt : int
        Stored cell files found corrupt (unreadable or failing their checksum), recomputed.
    stale : int
        Stored cells computed by another code version of their method (recomputed unless
        ``keep_stale``).
    """

    total: int
    reused: int
    computed: int
    failed: int
    dataset: Path
    executor: str
    corrupt: int = 0
    stale: int = 0


def prepare_run(cfg: SweepConfig, out: str | Path, *, force: bool = False) -> ResultStore:
    """Validate the output directory against ``cfg`` (no writes)."""
    store = ResultStore(out)
    store.check_config(cfg, force=force)
    return store


@contextlib.contextmanager
def family_checkpoints(out: Path) -> Iterator[None]:
    """Keep the checkpoints of every family that has them (its registry ``Checkpoints``: the
    replica theory's continuation paths, :mod:`bayesslr.theory.checkpoint`) in the output
    directory while a sweep runs, ``OUT/<directory>``, unless the family's variable is set: a
    solve stopped half-way resumes with the run directory, on this machine or on another one
    it is copied to. Set in this process's environment (cells run in-process, and the workers
    of a local cluster, started inside, inherit it; a family's cells may run another's, as
    ERM's ``lam = "replica"`` runs the theory's), and restored afterwards."""
    from bayesslr.registry import checkpoint_dirs

    set_here = []
    for c in checkpoint_dirs():
        if c.env not in os.environ:
            os.environ[c.env] = str(Path(out) / c.directory)
            set_here.append(c.env)
    try:
        yield
    finally:
        for env in set_here:
            os.environ.pop(env, None)


DRAWS_DIR = "draws"  # OUT/draws/<cell key>.nc: the kept draws (run --keep-draws)


def draws_directory(out: Path) -> Path:
    """``OUT/draws``, created; refused (one line) when it is a link or not a directory."""
    d = Path(out) / DRAWS_DIR
    if d.is_symlink() or (d.exists() and not d.is_dir()):
        raise ConfigError(f"draws directory {str(d)!r} is a link or not a directory; allowed: "
                          "a plain directory inside OUT (remove it)")
    d.mkdir(exist_ok=True)
    return d.resolve()


def run_sweep(cfg: SweepConfig, out: str | Path, executor: Executor | None = None, *,
              force: bool = False, progress: bool = True, keep_stale: bool = False,
              keep_draws: bool = False,
              log: Callable[[str], None] | None = None) -> RunSummary:
    """Run (or resume) ``cfg`` into ``out``; see the module docstring.

    Parameters
    ----------
    keep_stale : bool
        Reuse stored cells computed by another code version of their method (default: they
        are recomputed).
    keep_draws : bool
        The sampling cells this run computes write their draws as ArviZ ``InferenceData``,
        ``OUT/draws/<cell key>.nc`` (finished cells are reused as they are: delete a cell's
        file to get its draws). With an external scheduler the workers write there
        themselves: ``OUT`` must be on a filesystem they share.
    log : callable, optional
        Receives one line per anomaly found when resuming (corrupt files, stale cells).

    Raises
    ------
    ConfigError
        Before any write, when ``out`` cannot be used; ``DirectoryBusy`` when another run
        holds it.
    SweepInterrupted
        On SIGINT/SIGTERM; every cell finished so far is on disk.
    StoreError
        When a file cannot be written; every cell written before is on disk.
    """
    executor = executor or InProcessExecutor()
    store = prepare_run(cfg, out, force=force)  # read-only
    executor.check()  # read-only (a scheduler that does not answer fails here)
    with interrupt_on_signals() as stop, store.lock():
        store.check_config(cfg, force=force)  # again, now that nobody else can write here
        scan: ResumeScan = store.scan(cfg.cells, keep_stale=keep_stale)
        for line in scan.messages():
            if log is not None:
                log(line)
        records: dict[str, CellRecord] = dict(scan.done)
        reused = len(scan.done)
        todo = scan.todo
        stop.check()
        with family_checkpoints(store.out):
            try:
                if todo:  # a cluster that cannot be reached fails before any write
                    def _open() -> None:
                        executor.open()
                        if stop:  # interrupted while it started: do not leave it running
                            executor.close()

                    # a local cluster takes seconds to start: Ctrl-C must not wait for it
                    call_interruptibly(_open, stop=stop, name="bayesslr-executor-open")
                stop.check()
                store.prepare(cfg)
                if keep_draws:
                    executor.draws_dir = draws_directory(store.out)
                with SweepProgress(len(cfg.cells), reused, cfg.name, enabled=progress) as bar:
                    def on_done(rec: CellRecord) -> None:
                        store.write(rec)
                        records[rec.key] = rec
                        bar.advance(failed=rec.status != "ok")

                    if todo:
                        executor.run(todo, on_done, stop)
            finally:
                executor.close()
        stop.check()

        ordered = [records[cell_key(c)] for c in cfg.cells if cell_key(c) in records]
        ds = build_dataset(cfg, ordered)
        write_netcdf_atomic(ds, store.dataset_path)
        store.write_manifest(cfg, ordered, {"bayesslr_version": bayesslr.__version__,
                                            "executor": executor.name,
                                            "git_revision": ds.attrs["git_revision"]})
        stop.check("arrived after the dataset was written")
    return RunSummary(len(cfg.cells), reused, len(todo),
                      sum(r.status != "ok" for r in ordered), store.dataset_path,
                      executor.name, scan.corrupt, scan.stale)
