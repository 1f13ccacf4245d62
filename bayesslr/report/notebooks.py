"""Execute the report notebooks on a results directory and write them as self-contained HTML.

The notebooks are jupytext percent-format ``.py`` files under ``reports/`` in the source tree
(or a directory named by ``$BAYESSLR_NOTEBOOKS``). Each has a cell tagged ``parameters``
defining ``results``; as papermill does, a cell tagged ``injected-parameters`` that sets
``results`` to the directory given is inserted after it, the notebook is executed with
nbclient in a fresh kernel (cwd: the output directory), and exported by nbconvert to one HTML
file with every figure embedded as a ``data:`` image and no script loaded from the network, so
the file opens in any browser, offline. An ``index.html`` lists the notebooks with the verdict
lines each printed.

Interrupts: SIGINT and SIGTERM stop the report at the next safe point with
:class:`~bayesslr.sweep.executors.SweepInterrupted` (the CLI: one line, exit 130/143). While a
kernel runs, the signal cancels the execution in the event loop of this (main) thread; the
kernel is then killed (``shutdown_kernel(now=True)``: its whole process group), its channels
are stopped and its connection file removed, before the exception leaves :func:`execute`.
The notebooks already written stay; the one in flight is not written (every file is written
whole or not at all, :mod:`bayesslr.report.output`), and nor is the index.

The execution stack (jupytext, nbclient, ipykernel, nbconvert) is the optional extra
``notebooks``; without it :func:`write_notebooks` raises a :class:`~bayesslr.core.task.ConfigError`
naming the extra (the CLI prints it on one line and exits 2).
"""

from __future__ import annotations

import asyncio
import contextlib
import html
import importlib.util
import os
import re
import signal
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bayesslr.core.task import ConfigError
from bayesslr.report.output import prepare_out, save_text
from bayesslr.sweep.executors import (
    STOP_SIGNALS,
    StopFlag,
    SweepInterrupted,
    interrupt_on_signals,
)

EXTRA = "notebooks"
# import name -> distribution name, of what the extra installs
REQUIRED = {"jupytext": "jupytext", "nbclient": "nbclient", "nbconvert": "nbconvert",
            "ipykernel": "ipykernel"}
# the suite's notebooks, in reading order; other notebooks in the directory follow, sorted
ORDER = ("population", "finite_sample", "dynamics", "sampler_health")
VERDICT = re.compile(r"^VERDICT \[(holds|does not hold|not enough data)\] .*$", re.M)

# the lab template without the scripts it loads from the network (require.js, MathJax,
# mermaid): the notebooks use no widget, no LaTeX and no diagram, and the file must open offline
# (the figures carry their alternative text, from the figure's title, as PNG metadata "alt")
_TEMPLATE = """{%- extends 'lab/index.html.j2' -%}
{%- block html_head_js_requirejs -%}{%- endblock html_head_js_requirejs -%}
{%- block html_head_js_mathjax -%}{%- endblock html_head_js_mathjax -%}
{%- block html_head_js_mermaidjs -%}{%- endblock html_head_js_mermaidjs -%}
{% block data_png scoped %}
<div class="jp-RenderedImage jp-OutputArea-output {{ extra_class }}">
<img src="data:image/png;base64,{{ output.data['image/png'] | escape_html }}"
alt="{{ (output | get_metadata('alt', 'image/png') or 'figure') | escape_html }}">
</div>
{%- endblock data_png %}
"""


@dataclass
class NotebookRun:
    """The outcome of one executed notebook.

    Attributes
    ----------
    name : str
        File stem of the notebook (``population``).
    source : Path
        The jupytext file.
    html : Path or None
        The HTML written (also when a cell failed: it shows the error).
    error : str
        First line of the error of the failing cell, ``""`` if every cell ran.
    verdicts : list of str
        The ``VERDICT [...]`` lines the notebook printed.
    images : int
        Figures (PNG outputs) embedded.
    seconds : float
        Wall time of the execution.
    title : str
        The notebook's first heading.
    skipped : str
        Why the notebook was not run (the results hold none of its data), ``""`` if it ran.
    """

    name: str
    source: Path
    html: Path | None = None
    error: str = ""
    verdicts: list[str] = field(default_factory=list)
    images: int = 0
    seconds: float = 0.0
    title: str = ""
    skipped: str = ""


def check_extra() -> None:
    """Raise :class:`ConfigError` (one line) unless the ``notebooks`` extra is installed."""
    missing = [dist for mod, dist in REQUIRED.items() if importlib.util.find_spec(mod) is None]
    if missing:
        from bayesslr.core.extras import install_hint

        raise ConfigError(f"--notebooks needs the optional extra '{EXTRA}' (missing: "
                          f"{', '.join(missing)}); install it with: {install_hint(EXTRA)}")


def notebook_dir() -> Path:
    """Where the notebooks are: ``$BAYESSLR_NOTEBOOKS``, else ``reports/`` of the source tree
    this package is imported from."""
    env = os.environ.get("BAYESSLR_NOTEBOOKS", "").strip()
    if env:
        p = Path(env)
        if not p.is_dir():
            raise ConfigError(f"BAYESSLR_NOTEBOOKS={env!r} is not a directory; allowed: a "
                              "directory of jupytext .py notebooks")
        return p
    p = Path(__file__).resolve().parents[2] / "reports"
    if not p.is_dir():
        raise ConfigError("the report notebooks are not found (no reports/ beside the package: "
                          "an installed wheel does not ship them); allowed: a source checkout "
                          "(pip install -e .) or BAYESSLR_NOTEBOOKS=DIR")
    return p


def find_notebooks(directory: str | Path | None = None) -> list[Path]:
    """The jupytext percent notebooks of ``directory`` (default :func:`notebook_dir`), the
    suite's in :data:`ORDER`, then the others by name."""
    d = Path(directory) if directory is not None else notebook_dir()
    found = [p for p in sorted(d.glob("*.py"))
             if "jupytext:" in p.read_text(encoding="utf-8", errors="replace")[:2000]]
    rank = {n: i for i, n in enumerate(ORDER)}
    return sorted(found, key=lambda p: (rank.get(p.stem, len(ORDER)), p.stem))


def inject_parameters(nb: Any, results: str | Path) -> None:
    """Insert, after the cell tagged ``parameters`` (first, if none), a cell tagged
    ``injected-parameters`` setting ``results`` (papermill's convention)."""
    import nbformat

    code = f"# Parameters\nresults = {str(results)!r}\n"
    cell = nbformat.v4.new_code_cell(code, metadata={"tags": ["injected-parameters"]})
    at = 0
    for i, c in enumerate(nb.cells):
        if "parameters" in c.get("metadata", {}).get("tags", []):
            at = i + 1
            break
    nb.cells.insert(at, cell)


def _texts(nb: Any) -> str:
    out = []
    for c in nb.cells:
        for o in c.get("outputs", []):
            if o.get("output_type") == "stream":
                out.append(o.get("text", ""))
            elif "data" in o and "text/plain" in o["data"]:
                out.append(o["data"]["text/plain"])
    return "\n".join(out)


def _images(nb: Any) -> int:
    return sum(1 for c in nb.cells for o in c.get("outputs", [])
               if "image/png" in o.get("data", {}))


def _title(nb: Any, default: str) -> str:
    for c in nb.cells:
        if c.cell_type == "markdown":
            for line in c.source.splitlines():
                if line.startswith("# "):
                    return line[2:].strip()
    return default


def kernel_env(results: str | Path | None = None) -> dict[str, str]:
    """The environment of a notebook's kernel: this process's, with the directory this
    ``bayesslr`` is imported from first on ``PYTHONPATH`` (made absolute), so the kernel, which
    runs in the output directory, draws with the same code as the command that started it;
    ``BAYESSLR_RESULTS`` is the results directory (for a notebook without a parameters cell
    that reads it)."""
    import bayesslr

    root = str(Path(bayesslr.__file__).resolve().parents[1])
    rest = [str(Path(p).resolve()) for p in os.environ.get("PYTHONPATH", "").split(os.pathsep)
            if p]
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(dict.fromkeys([root, *rest]))
    env.setdefault("MPLBACKEND", "Agg")
    if results:
        env["BAYESSLR_RESULTS"] = str(Path(results).resolve())
    return env


def execute(path: str | Path, results: str | Path, *, cwd: str | Path | None = None,
            timeout: int = 900, kernel: str = "python3",
            stop: StopFlag | None = None) -> tuple[Any, str]:
    """Run one notebook on ``results``; returns ``(executed notebook, error)`` with ``error``
    the first line of a failing cell's error (``""`` when every cell ran).

    ``stop`` (from :func:`~bayesslr.sweep.executors.interrupt_on_signals`): while the kernel
    runs, SIGINT and SIGTERM set it and cancel the execution (main thread only); the kernel is
    killed and :class:`~bayesslr.sweep.executors.SweepInterrupted` raised. Without ``stop``,
    a ``KeyboardInterrupt`` still kills the kernel before it propagates."""
    check_extra()
    import jupytext
    from nbclient import NotebookClient
    from nbclient.exceptions import CellExecutionError, DeadKernelError

    nb = jupytext.read(str(path))
    inject_parameters(nb, Path(results).resolve() if results else results)
    nb.metadata["title"] = _title(nb, Path(path).stem)
    if stop is not None:
        stop.check(f"before notebook {Path(path).stem}")
    client = NotebookClient(nb, timeout=timeout, kernel_name=kernel,
                            resources={"metadata": {"path": str(cwd or Path.cwd())}},
                            extra_arguments=["--IPKernelApp.log_level=ERROR"])
    error = ""
    try:
        _run_in_own_loop(_execute_owned(client, kernel_env(results)), stop)
    except (CellExecutionError, DeadKernelError, TimeoutError, RuntimeError) as exc:
        if stop is not None:  # a cell that failed because its kernel was killed for a signal
            stop.check(f"notebook {Path(path).stem}: its kernel stopped")
        lines = [ln for ln in str(exc).splitlines() if ln.strip()]
        error = next((ln for ln in reversed(lines) if "Error" in ln), lines[-1] if lines
                     else type(exc).__name__)
        error = re.sub(r"\x1b\[[0-9;]*m", "", error).strip()
    return nb, error


async def _execute_owned(client: Any, env: dict[str, str]) -> None:
    """nbclient's ``async_execute`` with the kernel's life held here: started, every cell run,
    and always shut down (killed at once when the run did not finish: a cancellation, an
    error) with its channels stopped. nbclient's own ``async_setup_kernel`` is not used: it
    replaces this process's SIGINT/SIGTERM handlers with one that shuts the kernel down behind
    the running cell (a 95-line traceback: issue 40, case 8) and resets them to the defaults
    when it leaves."""
    from jupyter_core.utils import ensure_async

    client.reset_execution_trackers()
    client.km = client.create_kernel_manager()
    finished = False
    try:
        await client.async_start_new_kernel(env=env)
        await client.async_start_new_kernel_client()
        info = await client.async_wait_for_reply(await ensure_async(client.kc.kernel_info()))
        if info is not None and "language_info" in info["content"]:
            client.nb.metadata["language_info"] = info["content"]["language_info"]
        for index, cell in enumerate(client.nb.cells):
            await client.async_execute_cell(cell, index,
                                            execution_count=client.code_cells_executed + 1)
        client.set_widgets_metadata()
        finished = True
    finally:
        km, kc = client.km, client.kc
        client.km = client.kc = None
        try:
            if km.has_kernel and not finished:
                # SIGKILL to its process group first: the shutdown would interrupt it before
                # killing it, and a kernel still starting prints a traceback when interrupted
                with contextlib.suppress(RuntimeError, OSError):
                    await ensure_async(km.signal_kernel(signal.SIGKILL))
            if km.has_kernel:
                await ensure_async(km.shutdown_kernel(now=not finished))
        finally:
            await ensure_async(km.cleanup_resources())
            if kc is not None:
                await ensure_async(kc.stop_channels())


def _run_in_own_loop(coro: Any, stop: StopFlag | None) -> None:
    """Run ``coro`` to its end in a fresh event loop, closed afterwards (no task, socket or
    generator outlives it). In the main thread with a ``stop`` flag, SIGINT and SIGTERM (unless
    ignored) are caught by the loop meanwhile: the first sets ``stop`` and cancels ``coro``,
    whose ``finally`` then shuts its kernel down undisturbed (a later signal is only noted);
    the handlers the caller had are put back afterwards."""
    loop = asyncio.new_event_loop()
    main = loop.create_task(coro)
    caught: dict[int, Any] = {}
    if stop is not None and threading.current_thread() is threading.main_thread():
        def on_signal(signum: int) -> None:
            first = not stop
            stop.set(signum)
            if first:
                main.cancel()

        for s in STOP_SIGNALS:
            old = signal.getsignal(s)
            if old is not signal.SIG_IGN:
                caught[s] = old
                loop.add_signal_handler(s, on_signal, int(s))
    if stop:  # arrived before the loop caught the signals: never start the kernel
        main.cancel()
    try:
        loop.run_until_complete(main)
    except asyncio.CancelledError:
        if stop is None or not stop:
            raise
    finally:
        for s, old in caught.items():
            loop.remove_signal_handler(s)
            signal.signal(s, old if old is not None else signal.SIG_DFL)
        try:
            rest = [t for t in asyncio.all_tasks(loop) if not t.done()]
            for t in rest:  # nbclient's kernel-alive poll outlives a cancelled cell,
                t.cancel()
            # and a KeyboardInterrupt (no ``stop``) leaves ``coro`` itself to kill its kernel
            if rest:
                loop.run_until_complete(asyncio.gather(*rest, return_exceptions=True))
            loop.run_until_complete(loop.shutdown_asyncgens())
            loop.run_until_complete(loop.shutdown_default_executor())
        finally:
            loop.close()
    if stop is not None:
        stop.check("a notebook's kernel stopped")


def to_html(nb: Any) -> str:
    """The executed notebook as one self-contained HTML page (figures as ``data:`` images, the
    lab theme's CSS inline, no script from the network)."""
    check_extra()
    import jinja2
    from nbconvert import HTMLExporter

    exporter = HTMLExporter(template_name="lab",
                            extra_loaders=[jinja2.DictLoader({"bayesslr.html.j2": _TEMPLATE})])
    exporter.template_file = "bayesslr.html.j2"
    exporter.exclude_input_prompt = True
    exporter.exclude_output_prompt = True
    body, _ = exporter.from_notebook_node(nb)
    return body


def missing_data(name: str, tree: Any) -> str:
    """Why the notebook ``name`` has nothing to show on the results ``tree`` (``""`` when it
    has): a theme notebook (:data:`~bayesslr.report.figures.THEMES`) needs one of its figures
    drawable, the ``inference`` notebook an ``inference`` group; other notebooks always run."""
    from bayesslr.core.extras import install_hint
    from bayesslr.report.figures import FIGURES, THEMES, NothingToPlot

    if name in THEMES:
        why = []
        for fig in THEMES[name]:
            try:
                FIGURES[fig](tree)
            except NothingToPlot as exc:
                why.append(str(exc))
            else:
                return ""
        return "; ".join(dict.fromkeys(why)) or "no figure to draw"
    if name == "inference" and "inference" not in tree.children:
        return ("the results hold no inference benchmark (run 'bayesslr run --preset "
                f"inference-quick', which needs the blackjax extra: {install_hint('blackjax')})")
    return ""


def write_notebooks(results: str | Path, out: str | Path | None = None, *,
                    notebooks: Sequence[str | Path] | None = None,
                    timeout: int = 900) -> list[NotebookRun]:
    """Execute every notebook whose data the results hold (:func:`missing_data`) on
    ``results`` and write ``OUT/<name>.html`` and ``OUT/index.html`` (``OUT`` defaults to
    ``RESULTS/figures``); a notebook without data is not run, and the index says why in one
    line (its :class:`NotebookRun` has ``skipped``). A notebook whose cell fails is still
    written (the HTML shows the error) and reported in its :class:`NotebookRun`."""
    check_extra()
    from bayesslr.results.load import load_results

    res = Path(results)
    out_dir = Path(out) if out is not None else (
        res / "figures" if res.is_dir() else res.parent / "figures")
    paths = [Path(p) for p in notebooks] if notebooks is not None else find_notebooks()
    if not paths:
        raise ConfigError(f"no jupytext notebook found in {notebook_dir()}")
    tree = load_results(res)
    out_dir = prepare_out(out_dir)
    runs: list[NotebookRun] = []
    with interrupt_on_signals() as stop:
        for p in paths:
            stop.check(_written(runs))
            why = missing_data(p.stem, tree)
            if why:
                runs.append(NotebookRun(p.stem, p, title=p.stem, skipped=why))
                continue
            t0 = time.perf_counter()
            try:
                nb, error = execute(p, res, cwd=out_dir, timeout=timeout, stop=stop)
            except SweepInterrupted as exc:  # its kernel is gone; say what was kept
                raise SweepInterrupted(exc.signum, f"notebook {p.stem} stopped, not "
                                       "written; " + _written(runs)) from None
            run = NotebookRun(p.stem, p, error=error, title=nb.metadata.get("title", p.stem))
            run.seconds = time.perf_counter() - t0
            run.verdicts = [m.group(0) for m in VERDICT.finditer(_texts(nb))]
            run.images = _images(nb)
            page = to_html(nb)
            stop.check(f"notebook {p.stem} not written; " + _written(runs))
            html_path = out_dir / f"{p.stem}.html"
            save_text(page, html_path)  # whole or not at all; a signal meanwhile waits
            run.html = html_path
            runs.append(run)
        stop.check("index.html not written; " + _written(runs))
        save_text(index_html(res, runs), out_dir / "index.html")
    return runs


def _written(runs: Sequence[NotebookRun]) -> str:
    """What an interrupted report kept, in words (for its one line)."""
    done = [r.name for r in runs if r.html is not None]
    return (f"written: {', '.join(done)}" if done else "no notebook written")


_STATUS_COLOR = {"holds": "#1a7f37", "does not hold": "#b42318", "not enough data": "#8a6d00"}


def index_html(results: Path, runs: Sequence[NotebookRun]) -> str:
    """A page linking every notebook's HTML with the verdicts it printed."""
    items = []
    left_out = [f"<li><b>{html.escape(r.name)}</b>: not run, {html.escape(r.skipped)}</li>"
                for r in runs if r.skipped]
    for r in runs:
        if r.skipped:
            continue
        lines = []
        for v in r.verdicts:
            m = re.match(r"VERDICT \[([^\]]+)\] (.*)", v)
            status, rest = (m.group(1), m.group(2)) if m else ("", v)
            claim, _, evidence = rest.partition(" \u2014 ")
            points = "".join(f"<li><small>{html.escape(p)}</small></li>"
                             for p in re.split(r"(?<=\]); ", evidence) if p)
            lines.append(
                f'<li><b style="color:{_STATUS_COLOR.get(status, "#000")}">[{html.escape(status)}]'
                f"</b> {html.escape(claim)}<ul>{points}</ul></li>")
        err = (f'<p style="color:#b42318">a cell failed: {html.escape(r.error)}</p>'
               if r.error else "")
        link = html.escape(r.html.name) if r.html else "#"
        items.append(f'<h2><a href="{link}">{html.escape(r.title)}</a></h2>{err}'
                     f'<p>{r.images} figure(s), run in {r.seconds:.0f} s</p><ul>'
                     + "".join(lines) + "</ul>")
    return ("<!DOCTYPE html><html lang='en'><head><meta charset='utf-8'>"
            "<title>bayesslr report</title><style>body{font-family:sans-serif;max-width:60em;"
            "margin:2em auto;line-height:1.4}li{margin:.4em 0}small{color:#444}</style></head>"
            f"<body><h1>bayesslr report</h1><p>Results: <code>{html.escape(str(results))}"
            "</code>. Each notebook opens in this browser (figures embedded, no Jupyter "
            "needed); the verdicts say what the data says about the paper's claims.</p>"
            + "".join(items)
            + (f"<h2>Notebooks left out</h2><ul>{''.join(left_out)}</ul>" if left_out else "")
            + "</body></html>")
