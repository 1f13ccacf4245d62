"""``bayesslr targets``, ``bayesslr score-draws`` and ``bayesslr export posteriordb``
(docs/targets.md).

Not family verbs: ``targets`` lists the stored targets (``targets show NAME`` one of them);
``score-draws`` scores draws made outside the package against a named target
(:func:`bayesslr.score_draws`) and, with ``--out``, writes them as a leaderboard entry
(:mod:`bayesslr.posteriors.entries`); ``export posteriordb`` writes the stored targets in
posteriordb's layout (:mod:`bayesslr.export.posteriordb`).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import typer

from bayesslr.commands.common import JSON_FLAG_HELP, emit, flag
from bayesslr.core.task import ConfigError


def load_draws(path: Path) -> dict[str, np.ndarray]:
    """``k`` and ``v`` from a ``.npz`` (arrays ``k``, ``v``) or an ArviZ netCDF file (its
    ``posterior`` group's ``k``, ``v``: ``(chain, draw, D)``)."""
    if not path.is_file():
        raise ConfigError(f"draws={str(path)!r} is not a file; allowed: a .npz with arrays k "
                          "and v, or an ArviZ .nc with k and v in its posterior group")
    suffix = path.suffix.lower()
    if suffix == ".npz":
        try:
            with np.load(path) as z:
                missing = sorted({"k", "v"} - set(z.files))
                if missing:
                    raise ConfigError(f"draws={str(path)!r} lacks arrays {missing}; allowed: a "
                                      ".npz with arrays k and v")
                return {"k": np.asarray(z["k"]), "v": np.asarray(z["v"])}
        except (OSError, ValueError) as exc:
            raise ConfigError(f"draws={str(path)!r} cannot be read as .npz ({exc})") from None
    if suffix == ".nc":
        import xarray as xr

        try:
            with xr.open_dataset(path, group="posterior", engine="h5netcdf") as ds:
                missing = sorted({"k", "v"} - set(ds.data_vars))
                if missing:
                    raise ConfigError(f"draws={str(path)!r} has no {missing} in its posterior "
                                      "group; allowed: variables k and v (chain, draw, D)")
                return {"k": ds["k"].values, "v": ds["v"].values}
        except (OSError, ValueError) as exc:
            raise ConfigError(f"draws={str(path)!r} cannot be read as an ArviZ netCDF file "
                              f"({exc})") from None
    raise ConfigError(f"draws={str(path)!r} has suffix {suffix!r}; allowed: .npz or .nc")


def score_draws_cmd(
    target: str = typer.Argument(..., metavar="TARGET",
                                 help="Target name (bayesslr.targets() lists them)."),
    draws: Path = typer.Argument(..., metavar="DRAWS",
                                 help="Draws: .npz with k, v or an ArviZ .nc file."),
    name: str = typer.Option(None, metavar="NAME", help="Entrant name (needed with --out)."),
    cost: str = typer.Option(None, metavar="FLOAT",
                             help="What the draws cost, in --cost-unit (with --out)."),
    cost_unit: str = typer.Option("gradient evaluations", metavar="TEXT",
                                  help="Unit of --cost (the benchmark's: gradient "
                                       "evaluations)."),
    note: str = typer.Option("", metavar="TEXT", help="Free text stored with the entry."),
    out: Path = typer.Option(None, metavar="DIR",
                             help="Results directory: write the entry into OUT/entries."),
    as_json: bool = flag("--json", JSON_FLAG_HELP),
) -> None:
    """Score draws made anywhere against a target's Bayes-optimal reference; with --out, put
    them on the leaderboard as an entry."""
    from bayesslr.posteriors.target import parse_name, score_draws
    from bayesslr.posteriors.target import target as make_target

    parse_name(target)  # a malformed name is refused before anything is read
    if out is not None:
        if not name:
            raise ConfigError("--out needs --name (the entrant's name on the leaderboard)")
        if cost is None:
            raise ConfigError("--out needs --cost (what the draws cost, in --cost-unit)")
    d = load_draws(draws)
    t = make_target(target)
    if out is None:
        res = score_draws(t, d)
    else:
        from bayesslr.posteriors.entries import entry, write_entry

        rec = entry(t, d, name=name, cost=cost, cost_unit=cost_unit, note=note)
        path = write_entry(rec, out)
        res = {**rec["result"], "entry": str(path)}
    emit(res, as_json, title=f"score-draws {t.name}")


export_app = typer.Typer(help="Export the inference benchmark's targets to other tools.",
                         no_args_is_help=True, rich_markup_mode=None)


@export_app.command("posteriordb")
def export_posteriordb(
    out: Path = typer.Argument(..., metavar="OUT",
                               help="Directory to write (posteriordb's layout)."),
    only: list[str] = typer.Option(None, "--only", metavar="NAME",
                                   help="Target name (repeatable; default: every stored "
                                        "target)."),
    reference_draws: str = typer.Option(
        "stored", metavar="[stored|quick]",
        help="stored: rerun the stored reference's teacher-start chains with its settings and "
             "keys; quick: 2 chains x 100 draws (for tests; marked)."),
    thin: str = typer.Option("8", metavar="INT", help="Keep every thin-th reference draw (>= 1)."),
    as_json: bool = flag("--json", JSON_FLAG_HELP),
) -> None:
    """Write the stored targets as a posteriordb (posteriors, models, data, reference
    draws)."""
    from bayesslr.core.task import check_int
    from bayesslr.export.posteriordb import export

    if reference_draws not in ("stored", "quick"):
        raise ConfigError(f"reference_draws={reference_draws!r} is unknown; allowed: stored, "
                          "quick")
    res = export(out, names=list(only) if only else None, reference_draws=reference_draws,
                 thin=check_int("thin", thin, low=1), log=None if as_json else print)
    emit(res, as_json, title="export posteriordb")


def _list_text(rows: list[dict]) -> str:
    """The targets as a plain table that fits 80 columns (the name holds the task and its
    size; the error's standard error and the other checks are in ``targets show`` and
    ``--json``)."""
    w = max([len(r["name"]) for r in rows] + [6])
    lines = [f"{'target':<{w}} {'N':>4} {'Bayes':>6} {'R-hat':>5} {'ESS':>5} ok"]
    for r in rows:
        lines.append(f"{r['name']:<{w}} {r['N']:>4} {r['bayes_error']:>6.4f} "
                     f"{r['r_hat_max']:>5.3f} {r['ess_bulk_min']:>5.0f} "
                     f"{'yes' if r['checks_passed'] else 'no'}")
    lines += [f"{len(rows)} targets. Bayes: the Bayes-optimal test error, by long NUTS from the",
              "teacher on each data set; R-hat, ESS (bulk) and ok: that reference's checks.",
              "One target: bayesslr targets show NAME (docs/targets.md)."]
    return "\n".join(lines)


targets_app = typer.Typer(help="The inference benchmark's named targets: posteriors whose "
                               "Bayes-optimal error is known (docs/targets.md).",
                          invoke_without_command=True, rich_markup_mode=None)


@targets_app.callback()
def targets_list(ctx: typer.Context, as_json: bool = flag("--json", "Print one JSON object: "
                                                          "{\"targets\": [records]}.")) -> None:
    """List the stored targets: name (task and size), N, the reference's Bayes-optimal error
    and its quality (R-hat, bulk ESS, checks passed); 'targets show NAME' for one."""
    if ctx.invoked_subcommand is not None:
        return
    import json

    from bayesslr.posteriors.target import target_records

    rows = target_records()
    if as_json:
        print(json.dumps({"targets": rows}, allow_nan=False))
        return
    print(_list_text(rows))


@targets_app.command("show")
def targets_show(
    name: str = typer.Argument(..., metavar="NAME", help="A target name (bayesslr targets)."),
    as_json: bool = flag("--json", JSON_FLAG_HELP),
) -> None:
    """One stored target: its task, size, reference and the reference's checks."""
    from bayesslr.posteriors.target import parse_name, target_name, target_records

    f = parse_name(name)  # a malformed name is one line
    canonical = target_name(f["variant"], f["L"], f["nu"], f["delta"], f["D"], f["alpha"],
                            f["seed"])
    rows = {r["name"]: r for r in target_records()}
    if canonical not in rows:
        raise ConfigError(f"target {name!r} is not stored; allowed: a name that 'bayesslr "
                          f"targets' lists ({len(rows)} stored; bayesslr.target() builds any "
                          "other setting, scored against the state evolution)")
    emit(rows[canonical], as_json, title=f"target {canonical}")


def add_target_verbs(app: typer.Typer) -> None:
    app.add_typer(targets_app, name="targets")
    app.command("score-draws")(score_draws_cmd)
    app.add_typer(export_app, name="export")
