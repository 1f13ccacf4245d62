"""What the report notebooks call: open the results, show a figure, a table, the verdicts.

Every function degrades to one printed sentence when there is nothing to show (no results, a
method family absent), never an exception, so a notebook runs top to bottom on any results
directory. The drawing itself is :mod:`bayesslr.report.figures` (the same functions
``bayesslr report`` writes to files), the numbers :mod:`bayesslr.report.tables` and the
verdicts :mod:`bayesslr.report.claims`.
"""

from __future__ import annotations

import html
import io
import os
import warnings
from collections.abc import Callable, Sequence
from pathlib import Path

import pandas as pd
import xarray as xr

from bayesslr.core.task import ConfigError
from bayesslr.report.claims import Verdict
from bayesslr.report.figures import FIGURES, NothingToPlot, draw
from bayesslr.results.query import Results, groups

DEFAULT_RESULTS = "results/quick"
DPI = 100
# a notebook kernel has no ipywidgets: tqdm (imported by the samplers) warns about it once
warnings.filterwarnings("ignore", message="IProgress not found")
_COLORS = {"holds": "#1a7f37", "does not hold": "#b42318", "not enough data": "#8a6d00"}


def _display(obj: object) -> None:
    try:
        from IPython.display import display
    except ImportError:  # plain Python: print what can be printed
        print(obj)
        return
    display(obj)


def results_parameter() -> str:
    """The default of a notebook's ``results`` parameter: ``$BAYESSLR_RESULTS``, else ``""``
    (no results directory given: :func:`open_results` then shows ``results/quick`` if it
    exists, else the shipped reference)."""
    return os.environ.get("BAYESSLR_RESULTS", "").strip()


def open_results(results: str | Path | None) -> xr.DataTree | None:
    """The results a notebook shows.

    A directory (or ``dataset.nc``) given explicitly must hold results: otherwise
    :class:`~bayesslr.core.task.ConfigError` (a mistyped path is never replaced by other
    numbers). With none given (``None`` or ``""``): ``results/quick`` when it holds a sweep,
    else the suite's shipped reference results (``bayesslr.load_reference``), said so in a
    sentence and in every figure's title; None, with a sentence, when this installation has
    neither.
    """
    from bayesslr import report

    if results:
        p = Path(results)
        if not ((p / "dataset.nc").exists() or (p.is_file() and p.suffix == ".nc")):
            raise ConfigError(f"results={str(results)!r} holds no results (no dataset.nc); "
                              "allowed: a directory written by 'bayesslr run' (or give none "
                              "to see the shipped reference)")
        tree = report.load_results(p)
        print(f"Results: {p.resolve()} ({tree.attrs.get('title', 'a sweep')}, "
              f"revision {tree.attrs.get('git_revision', '?')}; families: "
              f"{', '.join(groups(tree)) or 'none'}).")
        return tree
    if (Path(DEFAULT_RESULTS) / "dataset.nc").exists():
        print(f"No results directory was given: showing {DEFAULT_RESULTS}.")
        return open_results(DEFAULT_RESULTS)
    try:
        tree = report.load_reference()
    except ConfigError as exc:
        print(f"No results directory was given and {exc}; there is nothing to show.")
        return None
    print("No results directory was given: showing the suite's shipped reference results "
          f"({tree.attrs.get('reference', '')}; reductions against the paper's sizes: "
          f"{tree.attrs.get('reductions', '?')}); every figure drawn from them says "
          "'shipped reference' in its title.")
    return tree


def figure(which: str | Callable[[Results], object], results: Results | None, *,
           dpi: int = DPI) -> None:
    """Draw one figure of :data:`~bayesslr.report.figures.FIGURES` (by name or function) and
    display it as a PNG (embedded in the notebook and its HTML export); a sentence instead
    when the results do not hold what it draws."""
    fn = FIGURES[which] if isinstance(which, str) else which
    name = which if isinstance(which, str) else getattr(fn, "__name__", "figure")
    if results is None:
        print(f"Figure {name} not drawn: no results.")
        return
    try:
        fig = draw(fn, results)
    except NothingToPlot as why:
        print(f"Figure {name} not drawn: {why}.")
        return
    _show_png(fig, name, dpi)


def _show_png(fig, name: str, dpi: int = DPI) -> None:
    """Display a matplotlib figure as a PNG (embedded in the notebook and its HTML), its
    title (else ``name``) as the image's alt text."""
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=dpi)
    try:
        from IPython.display import Image
    except ImportError:
        print(f"[figure {name}: {len(buf.getvalue())} bytes of PNG]")
        return
    title = fig._suptitle.get_text() if getattr(fig, "_suptitle", None) else name
    _display(Image(data=buf.getvalue(), format="png", metadata={"alt": title}))


def kept_draws(results: str | Path | None, *, at_most: int = 4, coordinates: int = 2) -> None:
    """The sampler's own plots of the cells whose chains did not converge, from the draws a
    run kept (``bayesslr run ... --keep-draws``: ``OUT/draws/<cell key>.nc``, ArviZ
    ``InferenceData``): for each flagged cell (at most ``at_most``), ArviZ's trace and rank
    plots of the ``coordinates`` coordinates of ``k`` and ``v`` with the largest R-hat, and
    the cell's reason. A sentence instead when no draws were kept or none is flagged."""
    if not results:
        print("No results directory given: the shipped files keep no draws.")
        return
    d = Path(results) / "draws"
    files = sorted(d.glob("*.nc")) if d.is_dir() and not d.is_symlink() else []
    if not files:
        print(f"No draws kept in {d} (rerun the sweep with --keep-draws to keep each sampling "
              "cell's draws as ArviZ InferenceData).")
        return
    import arviz as az
    import matplotlib.pyplot as plt
    import numpy as np

    flagged = []
    for f in files:
        idata = az.from_netcdf(str(f))
        if str(idata.posterior.attrs.get("converged", "")) == "False":
            flagged.append((f, idata))
    print(f"{len(files)} cells' draws kept in {d}; {len(flagged)} of them flagged "
          f"(not converged){': the first ' + str(at_most) if len(flagged) > at_most else ''}.")
    for f, idata in flagged[:at_most]:
        post = idata.posterior
        rhat = az.rhat(idata)
        picks = []
        for var in ("k", "v"):
            r = np.nan_to_num(np.asarray(rhat[var].values, float), nan=np.inf)
            for i in np.argsort(-r)[:coordinates]:
                picks.append((var, int(i), float(r[i])))
        print(f"{f.name}: {post.attrs.get('reason', '')} (sampler "
              f"{post.attrs.get('sampler', 'nuts')}); worst R-hat: "
              + ", ".join(f"{v}[{i}] {r:.3g}" for v, i, r in picks))
        sel = {v: post[v].isel(D=[i for w, i, _ in picks if w == v]) for v in ("k", "v")}
        sub = az.convert_to_inference_data(xr.Dataset(sel))
        for kind, fn in (("trace", az.plot_trace), ("rank", az.plot_rank)):
            with warnings.catch_warnings():
                # ArviZ's KDE of a chain stuck at one value, and its use of a matplotlib
                # helper that matplotlib 3.11 deprecates: neither is about these draws
                warnings.simplefilter("ignore", RuntimeWarning)
                warnings.filterwarnings("ignore", message=".*alias_mapping.*")
                warnings.filterwarnings("ignore", message=".*single value or no finite.*")
                axes = np.atleast_1d(fn(sub, compact=False) if kind == "trace" else fn(sub))
            fig = axes.ravel()[0].figure
            fig.suptitle(f"{f.stem}: {kind} plot of the worst coordinates", fontsize=9)
            _show_png(fig, f"{f.stem} {kind}")
            plt.close(fig)


def table(df: pd.DataFrame | None, what: str, *, columns: Sequence[str] | None = None,
          digits: int = 4) -> None:
    """Display a table, numbers to ``digits`` significant digits, or a sentence when it is
    empty."""
    if df is None or df.empty:
        print(f"No {what} in these results.")
        return
    out = df[list(columns)] if columns is not None else df
    with pd.option_context("display.max_rows", 200, "display.max_columns", 40,
                           "display.max_colwidth", None, "display.width", 160,
                           "display.float_format", lambda x: f"{x:.{digits}g}"):
        _display(out.reset_index(drop=True))


class VerdictList:
    """Verdicts as a notebook shows them: plain ``VERDICT [...]`` lines (text), and in HTML
    each claim with its status in colour and the points checked as a list."""

    def __init__(self, verdicts: Sequence[Verdict]) -> None:
        self.verdicts = list(verdicts)

    def __repr__(self) -> str:
        return "\n".join(v.line() for v in self.verdicts)

    def _repr_html_(self) -> str:
        items = []
        for v in self.verdicts:
            pts = v.points or (((v.status, v.evidence),) if v.evidence else ())
            sub = "".join(
                f'<li><span style="color:{_COLORS.get(st, "#000")}">[{html.escape(st)}]</span> '
                f"{html.escape(text)}</li>" for st, text in pts)
            items.append(
                f'<li style="margin-bottom:.6em"><b style="color:{_COLORS.get(v.status, "#000")}">'
                f"VERDICT [{html.escape(v.status)}]</b> <b>{html.escape(v.claim)}</b> \u2014"
                f'<ul style="margin-top:.2em">{sub}</ul></li>')
        # one verdict per line of the page's text (tags stripped), as in the text form
        return '<ul style="list-style:none;padding-left:0">\n' + "\n".join(items) + "\n</ul>"


def verdicts(claims: Callable[[Results], list[Verdict]], results: Results | None) -> None:
    """Compute and display the verdicts of one theme (text: one ``VERDICT [...]`` line each,
    with the numbers; HTML: the same, as a list)."""
    out = claims(results if results is not None else xr.DataTree())
    _display(VerdictList(out))
