"""Run a validated sweep into an output directory and assemble its dataset.

Order of events (the guarantees of ``bayesslr run``):

1. everything is validated first (config, methods, output path, the config already stored in
   the directory, the cluster connection); a failure raises
   :class:`~bayesslr.task.ConfigError` and nothing is written;
2. finished cells are read back and skipped, the directory is prepared;
3. the remaining cells run on the executor; each is written atomically as it arrives;
4. the dataset is assembled from every finished cell and written atomically.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import bayesslr
from bayesslr.sweep.config import SweepConfig, cell_key
from bayesslr.sweep.dataset import build_dataset
from bayesslr.sweep.executors import Executor, InProcessExecutor, interrupt_on_signals
from bayesslr.sweep.progress import SweepProgress
from bayesslr.sweep.storage import CellRecord, ResultStore, write_netcdf_atomic


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
    """

    total: int
    reused: int
    computed: int
    failed: int
    dataset: Path
    executor: str


def prepare_run(cfg: SweepConfig, out: str | Path, *, force: bool = False) -> ResultStore:
    """Validate the output directory against ``cfg`` (no writes)."""
    store = ResultStore(out)
    store.check_config(cfg, force=force)
    return store


def run_sweep(cfg: SweepConfig, out: str | Path, executor: Executor | None = None, *,
              force: bool = False, progress: bool = True) -> RunSummary:
    """Run (or resume) ``cfg`` into ``out``; see the module docstring.

    Raises
    ------
    ConfigError
        Before any write, when ``out`` cannot be used.
    SweepInterrupted
        On SIGINT/SIGTERM; every cell finished so far is on disk.
    """
    executor = executor or InProcessExecutor()
    store = prepare_run(cfg, out, force=force)
    todo, done = store.pending(cfg.cells)  # read-only
    reused = len(done)
    records: dict[str, CellRecord] = dict(done)
    with interrupt_on_signals():
        try:
            if todo:
                executor.open()  # a cluster that cannot be reached fails before any write
            store.prepare(cfg)
            with SweepProgress(len(cfg.cells), reused, cfg.name, enabled=progress) as bar:
                def on_done(rec: CellRecord) -> None:
                    store.write(rec)
                    records[rec.key] = rec
                    bar.advance(failed=rec.status != "ok")

                if todo:
                    executor.run(todo, on_done)
        finally:
            executor.close()

    ordered = [records[cell_key(c)] for c in cfg.cells if cell_key(c) in records]
    ds = build_dataset(cfg, ordered)
    write_netcdf_atomic(ds, store.dataset_path)
    store.write_manifest(cfg, ordered, {"bayesslr_version": bayesslr.__version__,
                                        "executor": executor.name,
                                        "git_revision": ds.attrs["git_revision"]})
    return RunSummary(len(cfg.cells), reused, len(todo),
                      sum(r.status != "ok" for r in ordered), store.dataset_path, executor.name)
