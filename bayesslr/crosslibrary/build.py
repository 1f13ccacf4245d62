"""Build the leaderboard: one small file per (target, library), assembled into one Dataset.

:func:`build_one` runs one library on one target (:mod:`bayesslr.crosslibrary.runners`) and
writes it scored at the budgets (:func:`bayesslr.crosslibrary.checkpoints.score_run`) to
``<work>/<target>__<library>.nc``; :func:`build` does every pair whose file is missing (a
rerun resumes; a failed run is written as ``status = failed`` and rerun only with
``retry_failed``); :func:`assemble` joins the files into the Dataset ``target x library x
algorithm x budget`` (pairs without a file: NaN, ``status = missing``) with the derived
``grads_to_reference`` and the provenance in ``attrs``. The study script
``benchmarks/studies/leaderboard.py`` drives them; the shipped file is
``bayesslr/data/leaderboard.nc`` (:func:`bayesslr.crosslibrary.board.leaderboard`).
"""

from __future__ import annotations

import json
import os
import time
import traceback
from pathlib import Path
from typing import Any

import numpy as np
import xarray as xr

from bayesslr.core.files import write_netcdf_atomic
from bayesslr.core.task import ConfigError
from bayesslr.crosslibrary.checkpoints import BUDGET_VARS, failed_row, score_run
from bayesslr.crosslibrary.runners import (
    ALGORITHMS,
    DEFAULT_CHAINS,
    DEFAULT_WARMUP,
    LIBRARIES,
    check_library,
    run_library,
)

BUDGETS: tuple[float, ...] = (1e4, 3e4, 1e5, 3e5)
SCALARS: tuple[str, ...] = ("compile_s", "warmup_grads", "total_grads", "run_wall_s",
                            "run_cpu_s", "steps_per_iteration", "total_draws_per_chain")


def pair_path(work: Path, target: str, library: str) -> Path:
    """``<work>/<target>__<library>.nc``."""
    return Path(work) / f"{target}__{library}.nc"


def check_budgets(budgets: Any) -> tuple[float, ...]:
    """Sorted, distinct budgets in ``[10, 1e9]``, or one line naming ``budgets``.

    Examples
    --------
    >>> check_budgets([3e4, 1e4])
    (10000.0, 30000.0)
    >>> check_budgets([0])  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    bayesslr.core.task.ConfigError: budgets=[0] is out of range; allowed: distinct numbers in ...
    """
    try:
        b = sorted(float(x) for x in budgets)
    except (TypeError, ValueError):
        b = []
    if not b or len(set(b)) != len(b) or not all(np.isfinite(x) and 10 <= x <= 1e9 for x in b):
        raise ConfigError(f"budgets={budgets!r} is out of range; allowed: distinct numbers in "
                          "[10, 1e9]")
    return tuple(b)


def check_targets(names: Any) -> list[str]:
    """Stored target names (:func:`bayesslr.targets`), or one line naming the unknown one."""
    import bayesslr as bs

    known = bs.targets()
    names = list(known if names is None else names)
    for n in names:
        if n not in known:
            raise ConfigError(f"target={n!r} is not a stored target; allowed: one of "
                              "bayesslr.targets() (`bayesslr targets` lists them)")
    return names


def build_one(work: Path, target: str, library: str, *, budgets: tuple[float, ...] = BUDGETS,
              chains: int = DEFAULT_CHAINS, warmup: int = DEFAULT_WARMUP, seed: int = 0
              ) -> xr.Dataset:
    """Run ``library`` on ``target`` to the largest budget, score it, write its file.

    Tested by ``tests/test_leaderboard.py`` (a small run, resumed by :func:`build`).
    """
    import bayesslr as bs

    library = check_library(library)
    (target,) = check_targets([target])
    budgets = check_budgets(budgets)
    t = bs.target(target)
    load0 = os.getloadavg()[0]
    w0, c0 = time.perf_counter(), time.process_time()
    try:
        run = run_library(library, t, chains=chains, warmup=warmup, budget=max(budgets),
                          seed=seed)
        ds = score_run(run, t, budgets)
    except (ImportError, ConfigError):
        raise
    except Exception as exc:  # a library's failure is a result: recorded, not fatal
        ds = failed_row(library, target, budgets,
                        f"{type(exc).__name__}: {exc}\n{traceback.format_exc(limit=5)}")
    ds.attrs.update(load_start=load0, load_end=os.getloadavg()[0],
                    process_wall_s=time.perf_counter() - w0,
                    process_cpu_s=time.process_time() - c0, chains=chains, warmup=warmup,
                    seed=seed, finished=time.strftime("%Y-%m-%dT%H:%M:%S"))
    write_netcdf_atomic(ds, pair_path(work, target, library))
    return ds


def read_pair(path: Path) -> xr.Dataset | None:
    """A pair's file, or None when it is missing or unreadable."""
    try:
        with xr.open_dataset(path, engine="h5netcdf") as ds:
            return ds.load()
    except (OSError, ValueError):
        return None


def build(work: Path, *, targets: Any = None, libraries: Any = None,
          budgets: tuple[float, ...] = BUDGETS, chains: int = DEFAULT_CHAINS,
          warmup: int = DEFAULT_WARMUP, retry_failed: bool = False, reverse: bool = False,
          log: Any = print) -> None:
    """Every (target, library) whose file is missing in ``work``, one after the other.

    Libraries not installed (nutpie and PyMC are the ``bench`` extra) are reported and left
    missing. Several builders may share a work directory (``reverse``: the targets from the
    last): each pair is claimed by a ``.claim`` file holding the builder's process id, and a
    claim whose process is gone is taken over.
    """
    names = check_targets(targets)
    libs = [check_library(x) for x in (LIBRARIES if libraries is None else libraries)]
    budgets = check_budgets(budgets)
    work = Path(work)
    work.mkdir(parents=True, exist_ok=True)
    for name in (reversed(names) if reverse else names):
        for lib in libs:
            path = pair_path(work, name, lib)
            old = read_pair(path) if path.exists() else None
            if old is not None and not (retry_failed and "failure" in old.attrs):
                continue
            if not _claim(path):
                continue  # another builder on the same work directory runs it
            try:
                ds = build_one(work, name, lib, budgets=budgets, chains=chains, warmup=warmup)
            except ImportError as exc:
                log(f"{name} {lib}: skipped ({exc})")
                continue
            finally:
                path.with_suffix(".claim").unlink(missing_ok=True)
            ok = ds["status"].values
            log(f"{name} {lib}: {', '.join(map(str, ok))}; "
                f"{ds.attrs['process_wall_s']:.0f} s wall, {ds.attrs['process_cpu_s']:.0f} "
                f"CPU-s, load {ds.attrs['load_end']:.1f}")


def _claim(path: Path) -> bool:
    """Claim ``path``'s pair for this process: False when a live process holds it."""
    claim = path.with_suffix(".claim")
    for _ in range(2):
        try:
            fd = os.open(claim, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
        except FileExistsError:
            try:
                pid = int(claim.read_text().strip() or 0)
                os.kill(pid, 0)
                return False
            except (ValueError, ProcessLookupError, FileNotFoundError):
                claim.unlink(missing_ok=True)  # its builder is gone: take it over
                continue
            except PermissionError:
                return False
        with os.fdopen(fd, "w") as f:
            f.write(str(os.getpid()))
        return True
    return False


def _stack(rows: dict[tuple[str, str], xr.Dataset], names: list[str], libs: list[str],
           budgets: tuple[float, ...]) -> xr.Dataset:
    shape = (len(names), len(libs), len(ALGORITHMS), len(budgets))
    data: dict[str, Any] = {v: np.full(shape, np.nan) for v in BUDGET_VARS}
    data.update({v: np.full(shape[:3], np.nan) for v in SCALARS})
    status = np.full(shape, "missing", dtype=object)
    for (name, lib), ds in rows.items():
        i, j = names.index(name), libs.index(lib)
        ds = ds.reindex(budget=list(budgets))
        for v in BUDGET_VARS:
            data[v][i, j, 0] = ds[v].values
        for v in SCALARS:
            data[v][i, j, 0] = float(ds[v])
        st = ds["status"].values
        status[i, j, 0] = [s if isinstance(s, str) else "missing" for s in st]
    dims4, dims3 = ("target", "library", "algorithm", "budget"), ("target", "library",
                                                                   "algorithm")
    out = xr.Dataset({v: (dims4, data[v]) for v in BUDGET_VARS}
                     | {v: (dims3, data[v]) for v in SCALARS}
                     | {"status": (dims4, status.astype(str))},
                     coords={"target": names, "library": libs, "algorithm": list(ALGORITHMS),
                             "budget": list(budgets)})
    reach = out["reaches_reference"] == 1
    first = reach.argmax("budget")
    out["grads_to_reference"] = xr.where(reach.any("budget"),
                                         out["grad_evals"].isel(budget=first), np.nan)
    out["never_reaches_reference"] = ~reach.any("budget")
    return out


VAR_DOCS: dict[str, str] = {
    "grad_evals": "gradient evaluations of the prefix scored, all chains, warm-up included",
    "draws_per_chain": "post-warm-up draws per chain in the prefix",
    "test_error": "test error of the draws' posterior-mean predictor (4000 test inputs)",
    "excess": "test error minus the reference's (paired), bayesslr.score_draws",
    "excess_stderr": "standard error of excess (paired on the same test inputs)",
    "reaches_reference": "1 if excess <= 3 excess_stderr",
    "ess_bulk_min": "smallest bulk ESS over the 2D coordinates (ArviZ), all chains",
    "ess_tail_min": "smallest tail ESS over the 2D coordinates",
    "r_hat_max": "largest split R-hat over the 2D coordinates",
    "divergences": "divergent transitions after warm-up in the prefix",
    "converged": "1 if r_hat_max <= 1.05, ess_bulk_min >= 100 and no divergence "
                 "(CONVERGENCE['inference'])",
    "ess_per_grad": "ess_bulk_min / grad_evals",
    "wall_s": "wall seconds to reach grad_evals, compilation apart (timeline, interpolated)",
    "cpu_s": "CPU seconds (all threads) to reach grad_evals, compilation apart",
    "ess_per_s": "ess_bulk_min / wall_s",
    "ess_per_cpu_s": "ess_bulk_min / cpu_s",
    "status": "ok, warmup_unfinished, too_few_draws, budget_not_reached, failed, missing",
    "compile_s": "wall seconds of compilation (JAX AOT compiles; nutpie.compile_pymc_model)",
    "warmup_grads": "gradients of the start and the warm-up, all chains",
    "total_grads": "gradients of the whole run",
    "run_wall_s": "wall seconds of the whole run, compilation apart",
    "run_cpu_s": "CPU seconds of the whole run, compilation apart",
    "steps_per_iteration": "mean leapfrog steps per post-warm-up iteration",
    "total_draws_per_chain": "post-warm-up draws per chain of the whole run",
    "grads_to_reference": "grad_evals of the first budget that reaches the reference; NaN if "
                          "none does",
    "never_reaches_reference": "True if no budget reaches the reference (or none was run)",
}


def assemble(work: Path, out: Path | None = None, *, targets: Any = None,
             budgets: tuple[float, ...] = BUDGETS, revision: str | None = None) -> xr.Dataset:
    """The pairs' files in ``work`` as one Dataset (written to ``out`` when given).

    ``attrs``: the git revision (``revision``, default the tree's, with ``+dirty`` when it has
    uncommitted changes), the libraries' versions and settings (JSON, per library), the
    budgets, chains and warm-up, the summed wall and CPU seconds of the pairs and the load
    averages they saw, and what was missing or failed.

    Examples
    --------
    An empty work directory: every pair missing.

    >>> import tempfile
    >>> from bayesslr.crosslibrary.build import assemble
    >>> t = "slr_spiked_L3_nu2_delta0.01-D50_alpha5_seed0"
    >>> ds = assemble(tempfile.mkdtemp(), targets=[t], budgets=(3000.0, 1e4))
    >>> dict(ds.sizes), sorted({str(x) for x in ds["status"].values.ravel()})
    ({'target': 1, 'library': 3, 'algorithm': 1, 'budget': 2}, ['missing'])
    >>> bool(ds["never_reaches_reference"].all()), bool(ds["grads_to_reference"].isnull().all())
    (True, True)
    """
    from bayesslr.core.provenance import git_revision

    names = check_targets(targets)
    budgets = check_budgets(budgets)
    libs = list(LIBRARIES)
    rows = {}
    for name in names:
        for lib in libs:
            ds = read_pair(pair_path(Path(work), name, lib))
            if ds is not None:
                rows[(name, lib)] = ds
    board = _stack(rows, names, libs, budgets)
    for name, doc in VAR_DOCS.items():
        board[name].attrs["description"] = doc
    settings = {lib: json.loads(next((ds.attrs["settings"] for (n, x), ds in rows.items()
                                      if x == lib and ds.attrs.get("settings", "{}") != "{}"),
                                     "{}")) for lib in libs}
    loads = [float(ds.attrs[k]) for ds in rows.values() for k in ("load_start", "load_end")
             if k in ds.attrs]
    board.attrs.update(
        title="bayesslr leaderboard: NUTS in NumPyro, BlackJAX and PyMC+nutpie at equal "
              "gradient budgets on the stored targets",
        revision=revision or git_revision(),
        settings=json.dumps(settings, sort_keys=True),
        budgets=json.dumps(list(budgets)),
        chains=int(next((ds.attrs["chains"] for ds in rows.values()), DEFAULT_CHAINS)),
        warmup=int(next((ds.attrs["warmup"] for ds in rows.values()), DEFAULT_WARMUP)),
        start="teacher (the same exact posterior draw for every library and chain)",
        budget_rule="a budget's draws are the prefix of one run (warm-up counted)",
        process_wall_s=float(sum(ds.attrs.get("process_wall_s", 0.0) for ds in rows.values())),
        process_cpu_s=float(sum(ds.attrs.get("process_cpu_s", 0.0) for ds in rows.values())),
        load_min=min(loads, default=float("nan")), load_max=max(loads, default=float("nan")),
        cores=os.cpu_count() or 0,
        missing=json.dumps([f"{n} {x}" for n in names for x in libs if (n, x) not in rows]),
        failed=json.dumps({f"{n} {x}": ds.attrs["failure"].splitlines()[0]
                           for (n, x), ds in rows.items() if "failure" in ds.attrs}),
        finished=max((ds.attrs.get("finished", "") for ds in rows.values()), default=""))
    if out is not None:
        write_netcdf_atomic(board, Path(out))
    return board
