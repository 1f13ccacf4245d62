"""Verbs ``run``, ``presets`` and ``report``: sweeps from the command line.

``bayesslr run --preset quick --out results/quick`` runs (or resumes) a sweep and writes
``results/quick/dataset.nc``; ``bayesslr report results/quick`` draws its figures into
``results/quick/figures``. Extra method families can be loaded from modules or ``.py`` files
named in ``$BAYESSLR_PLUGINS`` (comma separated; the test suite registers a tiny method this
way). That variable executes code: every verb (``--help`` included) and every dask worker
imports or runs each entry with the user's rights, so set it to trusted code only
(:func:`bayesslr.sweep.executors.plugin_names`); an entry that cannot be loaded is one line,
exit 2.
"""

from __future__ import annotations

import math
import os
from pathlib import Path

import typer

from bayesslr.commands.common import flag, plural
from bayesslr.core.exit_codes import EXIT_CELLS_FAILED, EXIT_WRITE_FAILED
from bayesslr.core.task import ConfigError


def _fmt_seconds(s: float) -> str:
    if not math.isfinite(s):
        return "?"
    if s < 120:
        return f"{s:.0f} s"
    if s < 7200:
        return f"{s / 60:.1f} min"
    return f"{s / 3600:.1f} h"


def law_text(label: str) -> str:
    """A length label as it reads unambiguously in a list: ``3``, ``U{1,2,3}`` (uniform law),
    ``{1:0.2,3:0.8}`` (weighted law)."""
    if "," not in label:
        return label
    return f"{{{label}}}" if ":" in label else f"U{{{label}}}"


def default_out_dir(name: str, results: Path = Path("results")) -> Path:
    """``results/NAME``, the output directory of a sweep run without ``--out``; a ConfigError
    unless it stays inside ``results/`` once resolved (a name with ``/``, ``..``, an absolute
    path, or a ``results/NAME`` that is a link out of ``results/``)."""
    bad = (not name or name in {".", ".."} or "/" in name or "\\" in name or "\x00" in name
           or Path(name).is_absolute())
    if not bad:
        base = results.resolve()
        target = (results / name).resolve()
        bad = target.parent != base
    if bad:
        raise ConfigError(f"name={name!r} does not name a directory inside results/ (the "
                          "default output directory results/NAME); allowed: a name without "
                          "'/', '\\' or '..' that is not a link out of results/, or --out DIR")
    return results / name


def run_sweep_verb(
    preset: str = typer.Option(None, "--preset", metavar="NAME",
                               help="built-in sweep (see 'presets'); default: quick"),
    config: Path = typer.Option(None, "--config", metavar="FILE", help="TOML sweep file"),
    out: Path = typer.Option(None, "--out", metavar="DIR",
                             help="output directory (default results/NAME)"),
    workers: int = typer.Option(None, "--workers", metavar="N",
                                help="dask LocalCluster with N single-threaded worker "
                                     "processes on 127.0.0.1 (at most 4 per usable core)"),
    scheduler: str = typer.Option(None, "--scheduler", metavar="URL",
                                  help="existing dask scheduler, tls://host:port (or "
                                       "tcp://host:port)"),
    scheduler_security: Path = typer.Option(
        None, "--scheduler-security", metavar="FILE",
        help="with --scheduler: a dask configuration file (YAML) holding the cluster's TLS "
             "credentials (distributed.comm.tls.ca-file, .client.cert, .client.key; README, "
             "Sweeps)"),
    force: bool = flag("--force", "replace the config stored in OUT (finished cells that "
                                  "still match are kept)"),
    keep_draws: bool = flag("--keep-draws", "sampling cells computed by this run write their "
                                            "draws as ArviZ InferenceData, OUT/draws/<cell "
                                            "key>.nc (finished cells are reused as they are)"),
    keep_stale: bool = flag("--keep-stale", "reuse stored cells computed by another code "
                                            "version of their method (default: recompute them)"),
    dry_run: bool = flag("--dry-run", "print the cell count and a cost estimate, run nothing"),
    quiet: bool = flag("--quiet", "no progress bar"),
) -> None:
    """Run (or resume) a sweep; writes OUT/cells/*.nc and OUT/dataset.nc.

    Exit status: 0 every cell ok; 2 bad input, or OUT in use by another run; 3 the sweep
    finished but some cells failed (see OUT/manifest.json); 4 a results file could not be
    written; 5 the connection to the dask scheduler was lost (rerun to resume); 130/143
    interrupted by SIGINT/SIGTERM (rerun to resume).
    """
    from bayesslr.sweep.config import load_config, load_preset
    from bayesslr.sweep.executors import (
        SweepInterrupted,
        load_plugins,
        make_executor,
        plugin_names,
    )
    from bayesslr.sweep.runner import prepare_run, run_sweep
    from bayesslr.sweep.storage import StoreError

    if preset is not None and config is not None:
        raise ConfigError("--preset and --config exclude each other; allowed: one of them")
    executor = make_executor(workers, scheduler, scheduler_security)  # nothing started
    load_plugins(plugin_names())
    cfg = load_config(config) if config is not None else load_preset(preset or "quick")
    out_dir = out if out is not None else default_out_dir(cfg.name)
    if dry_run:
        _dry_run(cfg, out_dir, workers, force, keep_stale)
        return
    prepare_run(cfg, out_dir, force=force)  # validates before anything is written
    try:
        summary = run_sweep(cfg, out_dir, executor, force=force, progress=not quiet,
                            keep_stale=keep_stale, keep_draws=keep_draws,
                            log=lambda line: typer.echo(f"bayesslr: {line}", err=True))
    except SweepInterrupted as exc:
        typer.echo(f"bayesslr: {exc}; finished cells are in {out_dir}/cells, rerun the "
                   "same command to resume", err=True)
        raise typer.Exit(exc.exit_code) from None
    except StoreError as exc:
        typer.echo(f"bayesslr: error: {exc}; the cells finished before are kept in "
                   f"{out_dir}/cells: free space or fix the permissions, then rerun the "
                   "same command to resume", err=True)
        raise typer.Exit(EXIT_WRITE_FAILED) from None
    typer.echo(f"cells: {summary.total} ({summary.reused} reused, {summary.computed} "
               f"computed, {summary.failed} failed) on {summary.executor}")
    typer.echo(f"dataset: {summary.dataset}")
    if summary.failed:
        typer.echo(f"bayesslr: {summary.failed} of {summary.total} cells failed; their "
                   f"errors are in {out_dir}/manifest.json (cells with status 'failed') "
                   f"and in the 'cells' group of {summary.dataset}", err=True)
        raise typer.Exit(EXIT_CELLS_FAILED)

def _dry_run(cfg, out_dir: Path, workers: int | None, force: bool,
             keep_stale: bool) -> None:
    from bayesslr.sweep.config import describe_sweep
    from bayesslr.sweep.cost import against_model, estimate, rescaling_cells, wall_seconds
    from bayesslr.sweep.runner import prepare_run

    store = prepare_run(cfg, out_dir, force=force)  # read-only: no lock needed
    messages: list[str] = []
    if store.cells_dir.exists():
        scan = store.scan(cfg.cells, keep_stale=keep_stale)
        todo, done, messages = scan.todo, scan.done, scan.messages()
    else:
        todo, done = list(cfg.cells), {}
    info = describe_sweep(cfg)
    typer.echo(f"sweep {cfg.name}: {plural(info['cells'], 'cell')} "
               f"({len(done)} already in {out_dir}, {len(todo)} to run)")
    for line in messages:
        typer.echo(f"  {line}")
    for m, n in info["by_method"].items():
        typer.echo(f"  {m}: {n}")
    for d, vals in info["values"].items():
        shown = [law_text(v) for v in vals] if d == "L" else vals
        typer.echo(f"  {d}: {', '.join(shown)}")
    cost = estimate(todo, list(done.values()))
    total = cost.pop("total")
    parts = ", ".join(f"{k} {_fmt_seconds(v)}" for k, v in sorted(cost.items()))
    cores = os.cpu_count() or 1
    typer.echo(f"cost estimate (calibrated model, benchmarks/README.md): "
               f"{_fmt_seconds(total)} of core time [{parts}]; about "
               f"{_fmt_seconds(wall_seconds(total, workers))} wall "
               + (f"with {workers} workers" if workers else "in-process (an upper bound)")
               + f" on this {cores}-core machine"
               + ("" if workers or cores == 1 else
                  f", {_fmt_seconds(wall_seconds(total, cores))} with --workers {cores}"))
    used = rescaling_cells(list(done.values()))
    if used:
        by_cpu = sum(r.cpu_s == r.cpu_s for r in used)
        typer.echo(f"  (the model rescaled per family by the {plural(len(used), 'finished cell')}: "
                   f"{by_cpu} by their CPU time, {len(used) - by_cpu} by their wall time, which "
                   "the machine's load stretches)")
        typer.echo("finished cells against the model (not rescaled):")
        for fam, f in sorted(against_model(used).items()):
            how = ("CPU time" if not f["by_wall"] else "wall time" if f["by_wall"] == f["cells"]
                   else f"CPU time, {f['by_wall']} by wall time")
            typer.echo(f"  {fam}: {plural(int(f['cells']), 'cell')}, "
                       f"{_fmt_seconds(f['measured_s'])} measured ({how}) against "
                       f"{_fmt_seconds(f['model_s'])} modelled (x{f['ratio']:.2f})")

def presets() -> None:
    """List the built-in sweeps with their cell counts."""
    from bayesslr.sweep.config import load_preset, preset_names, preset_raw

    for name in preset_names():
        raw = preset_raw(name)
        try:
            n = plural(len(load_preset(name).cells), "cell")
        except ConfigError as exc:
            n = f"not runnable here: {exc}"
        typer.echo(f"{name}: {raw.get('description', '')} [{n}]")


def report(
    results: Path = typer.Argument(None, help="a directory written by 'bayesslr run', or a "
                                              "results file (its dataset.nc, a partial.nc)"),
    out: Path = typer.Option(None, "--out", metavar="DIR",
                             help="figure directory (default RESULTS/figures; beside a "
                                  "results file: its folder's figures/)"),
    reference: Path = typer.Option(
        None, "--reference", metavar="OUT",
        help="instead of RESULTS: draw the paper's figures from the shipped reference results "
             "into this directory (computes nothing)"),
    shipped: str = typer.Option(
        "reference", "--shipped", metavar="NAME",
        help="with --reference: which shipped results, 'reference' (the reference preset, "
             "sizes reduced), 'paper' (the paper preset, the paper's sizes), 'dynamics' or "
             "'multihead' (their presets)"),
    formats: str = typer.Option("png,pdf", "--formats", metavar="png,pdf,svg",
                                help="comma list of png, pdf, svg"),
    notebooks: bool = flag("--notebooks", "also execute the report notebooks on RESULTS and "
                                          "write each as self-contained HTML beside the "
                                          "figures (needs the 'notebooks' extra)"),
) -> None:
    """Write the standard figures of a results directory (PNG and PDF) and the verdicts;
    with --notebooks, also the report notebooks as HTML (open index.html in a browser)."""
    from bayesslr.report import default_out, load_reference, load_results, write_report
    from bayesslr.results.reference import SHIPPED

    fmts = tuple(f.strip().lower() for f in formats.split(",") if f.strip())
    bad = [f for f in fmts if f not in {"png", "pdf", "svg"}]
    if bad or not fmts:
        raise ConfigError(f"formats={formats!r} is not allowed; allowed: a comma list of "
                          "png, pdf, svg")
    if (results is None) == (reference is None):
        raise ConfigError("give a results directory, or --reference OUT (not both); "
                          "allowed: 'bayesslr report RESULTS' or 'bayesslr report "
                          "--reference OUT'")
    if shipped not in SHIPPED:
        raise ConfigError(f"shipped={shipped!r} is not a shipped results file; allowed: "
                          + ", ".join(SHIPPED))
    if reference is None and shipped != "reference":
        raise ConfigError("--shipped NAME chooses the file --reference OUT draws; allowed only "
                          "with --reference OUT")
    if reference is not None:
        if notebooks or out is not None:
            raise ConfigError("--reference OUT writes the figures into OUT; allowed "
                              "without --out and --notebooks")
        written, skipped = write_report(load_reference(shipped), reference, formats=fmts)
        for name, why in skipped:
            typer.echo(f"skipped {name}: {why}", err=True)
        from bayesslr.report.figures import shipped_label

        typer.echo(f"figures: {reference} ({plural(len(written), 'file')}, from the "
                   f"{shipped_label(shipped)})")
        return
    if notebooks:
        from bayesslr.report.notebooks import check_extra, find_notebooks

        check_extra()
        find_notebooks()
        load_results(results)  # a bad RESULTS fails here, before anything is written
    written, skipped = write_report(results, out, formats=fmts)
    for name, why in skipped:
        typer.echo(f"skipped {name}: {why}", err=True)
    fig_dir = out if out is not None else default_out(results)  # beside a results file
    typer.echo(f"figures: {fig_dir} ({plural(len(written), 'file')}: "
               + ", ".join(sorted({p.stem for p in written})) + ")")
    lines = (fig_dir / "verdicts.txt").read_text(encoding="utf-8").splitlines()
    counts = {s: sum(ln.startswith(f"VERDICT [{s}]") for ln in lines)
              for s in ("holds", "does not hold", "not enough data")}
    typer.echo(f"verdicts: {fig_dir / 'verdicts.txt'} ("
               + ", ".join(f"{s}: {n}" for s, n in counts.items()) + ")")
    from bayesslr.report.finite_size import section

    for line in section(lines):  # the finite-size verdicts, printed in full
        typer.echo(line)
    if notebooks:
        from bayesslr.report.notebooks import write_notebooks

        runs = write_notebooks(results, fig_dir)
        for r in runs:
            if r.skipped:
                typer.echo(f"notebook {r.name}: not run, {r.skipped}")
                continue
            typer.echo(f"notebook {r.name}: {r.html} ({plural(r.images, 'figure')}, "
                       f"{plural(len(r.verdicts), 'verdict')}, {r.seconds:.0f} s)"
                       + (f"; a cell failed: {r.error}" if r.error else ""))
        typer.echo(f"report: {fig_dir / 'index.html'}")
        if any(r.error for r in runs):
            raise typer.Exit(1)


def add_sweep_verbs(app: typer.Typer) -> None:
    """Add ``run``, ``presets`` and ``report`` to ``app``."""
    app.command("run")(run_sweep_verb)
    app.command("presets")(presets)
    app.command("report")(report)
