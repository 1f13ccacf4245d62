"""The shipped leaderboard and a user's draws placed on it (docs/targets.md, "Leaderboard").

:func:`leaderboard` reads ``bayesslr/data/leaderboard.nc``: NUTS in NumPyro, BlackJAX and
PyMC+nutpie on every stored target, each at its library's recommended settings, scored at
equal gradient budgets (:mod:`bayesslr.crosslibrary.build`). :func:`place_on_leaderboard`
puts the score of a user's own draws (:func:`bayesslr.score_draws`) beside the board's rows
of the same target at the largest budget that does not exceed the user's cost.
"""

from __future__ import annotations

import math
from importlib import resources
from pathlib import Path
from typing import Any

import numpy as np
import xarray as xr

from bayesslr.core.task import ConfigError

SHIPPED = "leaderboard.nc"
# the columns of a placed row, in order
PLACE_COLUMNS: tuple[str, ...] = (
    "entrant", "budget", "grad_evals", "excess", "excess_stderr", "reaches_reference",
    "ess_per_grad", "ess_per_s", "converged", "status")


def shipped_path() -> Path:
    """Where the shipped leaderboard file lives (``bayesslr/data/leaderboard.nc``)."""
    return Path(str(resources.files("bayesslr") / "data" / SHIPPED))


def leaderboard(path: str | Path | None = None) -> xr.Dataset:
    """The cross-library leaderboard: ``target x library x algorithm x budget``.

    NUTS in NumPyro, BlackJAX and PyMC+nutpie (``library``; ``algorithm`` ``"nuts"``) on the
    16 stored targets (:func:`bayesslr.targets`), each at its library's recommended settings,
    4 chains started at the teacher, the same 300 warm-up iterations, scored at equal budgets
    of gradient evaluations (all chains, warm-up included; a budget's draws are the prefix of
    one run). Variables (each with its ``description`` attr): ``excess`` ± ``excess_stderr``
    over the reference (:func:`bayesslr.score_draws`), ``reaches_reference``, ``ess_bulk_min``,
    ``ess_tail_min``, ``r_hat_max``, ``converged``, ``ess_per_grad``, ``ess_per_s``,
    ``ess_per_cpu_s``, ``wall_s``, ``cpu_s``, ``status`` per budget; ``grads_to_reference``
    (NaN, and ``never_reaches_reference``, when no budget reaches it), ``compile_s`` and the
    run's totals per (target, library, algorithm). ``attrs``: the git revision, the libraries'
    versions and settings (JSON), the measured seconds and the load.

    Parameters
    ----------
    path : str or Path, optional
        A leaderboard file (``benchmarks/studies/leaderboard.py assemble`` writes one); default
        the shipped one.

    Returns
    -------
    xarray.Dataset

    Examples
    --------
    >>> import bayesslr as bs
    >>> board = bs.leaderboard()
    >>> [str(x) for x in board["library"].values], board.sizes["target"]
    (['numpyro', 'blackjax', 'nutpie'], 16)
    >>> ex = board["excess"].sel(target="slr_spiked_L3_nu2_delta0.01-D50_alpha5_seed0",
    ...                          algorithm="nuts")
    >>> ex.dims
    ('library', 'budget')
    """
    p = shipped_path() if path is None else Path(path)
    if not p.is_file():
        raise ConfigError(f"path={str(p)!r} is not a leaderboard file; allowed: a file that "
                          "benchmarks/studies/leaderboard.py assemble wrote, or None (the "
                          "shipped one)")
    with xr.open_dataset(p, engine="h5netcdf") as ds:
        return ds.load()


def place_on_leaderboard(score: dict[str, Any], grad_evals: float, *,
                         board: xr.Dataset | None = None, name: str = "yours",
                         ess_bulk: float | None = None, seconds: float | None = None
                         ) -> Any:
    """A user's score beside the board's rows of the same target, at equal cost.

    Parameters
    ----------
    score : dict
        What :func:`bayesslr.score_draws` returned (its ``target`` names the row of the board).
    grad_evals : float
        Gradient evaluations the user's draws cost (all chains, warm-up included), > 0.
    board : xarray.Dataset, optional
        Default :func:`leaderboard`.
    name : str
        The user's row label.
    ess_bulk, seconds : float, optional
        The draws' bulk ESS and wall seconds, for ``ess_per_grad`` and ``ess_per_s``.

    Returns
    -------
    pandas.DataFrame
        One row per (library, algorithm) of the board at the largest budget at most
        ``grad_evals`` (every budget is larger: the smallest, marked in ``status``), and the
        user's row; sorted by ``excess``.

    Examples
    --------
    Draws made anywhere (here: around the teacher), placed in three lines:

    >>> import jax, bayesslr as bs
    >>> t = bs.target("slr_spiked_L3_nu2_delta0.01-D50_alpha5_seed0")
    >>> draws = {c: t.teacher[c] + 0.05 * t.init(jax.random.key(1), 200)[c] for c in "kv"}
    >>> board = bs.leaderboard()
    >>> s = bs.score_draws(t, draws)
    >>> table = bs.place_on_leaderboard(s, grad_evals=1e5, board=board)
    >>> sorted(table["entrant"]), int(table["budget"].max())
    (['blackjax', 'numpyro', 'nutpie', 'yours'], 100000)
    >>> list(table.columns[:5])
    ['entrant', 'budget', 'grad_evals', 'excess', 'excess_stderr']
    """
    import pandas as pd

    if not isinstance(score, dict) or "target" not in score or "excess_over_reference" not in (
            score):
        raise ConfigError("score must be what bayesslr.score_draws returned (a dict with "
                          "'target' and 'excess_over_reference'); allowed: "
                          "bayesslr.score_draws(target, draws)")
    try:
        g = float(grad_evals)
    except (TypeError, ValueError):
        g = float("nan")
    if not (math.isfinite(g) and g > 0):
        raise ConfigError(f"grad_evals={grad_evals!r} is out of range; allowed: a finite "
                          "number of gradient evaluations > 0")
    board = leaderboard() if board is None else board
    names = [str(x) for x in board["target"].values]
    if score["target"] not in names:
        raise ConfigError(f"target={score['target']!r} is not on the leaderboard; allowed: "
                          "one of bayesslr.targets() (the board's targets)")
    budgets = np.asarray(board["budget"].values, float)
    below = budgets[budgets <= g]
    b = float(below.max() if below.size else budgets.min())
    row = board.sel(target=score["target"], budget=b)
    out = []
    for lib in row["library"].values:
        for alg in row["algorithm"].values:
            r = row.sel(library=lib, algorithm=alg)
            st = str(r["status"].values)
            out.append({"entrant": f"{lib}" if row.sizes["algorithm"] == 1 else f"{lib}:{alg}",
                        "budget": b, "grad_evals": float(r["grad_evals"]),
                        "excess": float(r["excess"]), "excess_stderr": float(r["excess_stderr"]),
                        "reaches_reference": bool(r["reaches_reference"] == 1),
                        "ess_per_grad": float(r["ess_per_grad"]),
                        "ess_per_s": float(r["ess_per_s"]),
                        "converged": bool(r["converged"] == 1),
                        "status": st if below.size else f"{st} (smallest budget > grad_evals)"})
    e, se = score["excess_over_reference"], score["excess_over_reference_stderr"]
    out.append({"entrant": name, "budget": b, "grad_evals": g, "excess": float(e),
                "excess_stderr": float(se), "reaches_reference": bool(score.get(
                    "reaches_reference", e <= 3 * se)),
                "ess_per_grad": np.nan if ess_bulk is None else float(ess_bulk) / g,
                "ess_per_s": (np.nan if ess_bulk is None or not seconds
                              else float(ess_bulk) / float(seconds)),
                "converged": None, "status": "yours"})
    return (pd.DataFrame(out, columns=list(PLACE_COLUMNS))
            .sort_values("excess", na_position="last").reset_index(drop=True))


def _fmt_excess(e: float, se: float, reach: bool, conv: bool, status: str) -> str:
    if not math.isfinite(e):
        return {"warmup_unfinished": "warm-up > budget", "missing": "not run"}.get(status,
                                                                                 status)
    s = f"{e:+.4f} ± {se:.4f}"
    s = f"**{s}**" if reach else s
    return s if conv else s + " †"


def _fmt_num(x: float, fmt: str) -> str:
    return "—" if not math.isfinite(x) else format(x, fmt)


def markdown_table(board: xr.Dataset | None = None, budget: float | None = None) -> str:
    """The board as the Markdown table of docs/targets.md ("Leaderboard"), at ``budget``
    (default the largest): per target, each library's excess ± se (bold: it reaches the
    reference; †: not converged; otherwise the status: the warm-up alone exceeded the budget,
    the pair was not run), gradients to reach the reference (— never), ESS per 1000 gradients
    and ESS per CPU second (—: no draws).

    Examples
    --------
    >>> from bayesslr.crosslibrary.board import markdown_table
    >>> lines = markdown_table().splitlines()
    >>> lines[0].startswith("| target |"), len(lines)
    (True, 18)
    """
    board = leaderboard() if board is None else board
    b = float(board["budget"].max()) if budget is None else float(budget)
    libs = [str(x) for x in board["library"].values]
    alg = str(board["algorithm"].values[0])
    head = ("| target | " + " | ".join(f"{x} excess" for x in libs)
            + " | gradients to reference (" + ", ".join(libs) + ") | ESS per 1000 gradients"
            + " | ESS per CPU-s |")
    out = [head, "|" + "---|" * (1 + len(libs) + 3)]
    for name in board["target"].values:
        r = board.sel(target=name, algorithm=alg)
        at = r.sel(budget=b)
        cells = [_fmt_excess(float(at["excess"].sel(library=x)),
                             float(at["excess_stderr"].sel(library=x)),
                             bool(at["reaches_reference"].sel(library=x) == 1),
                             bool(at["converged"].sel(library=x) == 1),
                             str(at["status"].sel(library=x).values)) for x in libs]
        g2r = ", ".join(_fmt_num(float(r["grads_to_reference"].sel(library=x)), ".0e")
                        for x in libs)
        epg = ", ".join(_fmt_num(1000 * float(at["ess_per_grad"].sel(library=x)), ".2f")
                        for x in libs)
        eps = ", ".join(_fmt_num(float(at["ess_per_cpu_s"].sel(library=x)), ".0f")
                        for x in libs)
        out.append(f"| `{name}` | " + " | ".join(cells) + f" | {g2r} | {epg} | {eps} |")
    return "\n".join(out)
