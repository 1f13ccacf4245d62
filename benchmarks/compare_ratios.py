"""Compare the ratios of two saved timing-suite runs (pytest-benchmark JSON files).

pytest-benchmark's own ``--benchmark-compare``/``--benchmark-compare-fail`` compare seconds,
which only mean something on the same machine. The suite's targets are ratios measured within
one run (``extra_info`` keys ``ratio_*``, lower is better, and ``speedup_*``, higher is
better, see the root ``conftest.py``), which carry across machines. Usage::

    python benchmarks/compare_ratios.py BASELINE NEW [--fail 25]

``BASELINE`` and ``NEW`` are saved runs (``--benchmark-save``/``--benchmark-autosave``), or
folders of them (every ``*.json`` below, read in name order, a later run's ratio replacing an
earlier one's: the suite can be saved module by module).

``--table RUN`` prints instead the ratios of one run (file or folder) as a Markdown table: group,
benchmark, ratio, value, and the load average before and after the benchmark that holds it.

Prints one line per ratio present in both files (benchmark, key, baseline, new, change in
percent; ``worse`` when it moved the wrong way by more than ``--fail`` percent), then the ratios
found in one file only. Exit status 1 when any ratio is worse by more than ``--fail`` percent
(default 25: ratios measured on a shared machine move by 10-20% from run to run), 2 on a file
that cannot be read.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path


def ratios(path: Path) -> dict[tuple[str, str], float]:
    """``{(benchmark fullname, key): value}`` of every ``ratio_*``/``speedup_*`` of a run (a
    JSON file, or every JSON file below a folder, in name order)."""
    path = Path(path)
    files = sorted(path.rglob("*.json")) if path.is_dir() else [path]
    if not files:
        raise ValueError(f"no saved run (*.json) under {path}")
    out = {}
    for f in files:
        for b in json.loads(f.read_text()).get("benchmarks", []):
            for k, v in (b.get("extra_info") or {}).items():
                if k.startswith(("ratio_", "speedup_")) and isinstance(v, int | float):
                    out[(b["fullname"], k)] = float(v)
    return out


def table(path: Path) -> list[str]:
    """The ratios of one run (file or folder) as Markdown table rows, with the load."""
    path = Path(path)
    files = sorted(path.rglob("*.json")) if path.is_dir() else [path]
    rows = ["| group | benchmark | ratio | value | load (1 min) |", "|---|---|---|---|---|"]
    for f in files:
        for b in json.loads(f.read_text()).get("benchmarks", []):
            e = b.get("extra_info") or {}
            for k, v in e.items():
                if k.startswith(("ratio_", "speedup_")) and isinstance(v, int | float):
                    rows.append(f"| {b['group']} | {b['name']} | {k} | {v:.3g} | "
                                f"{e.get('load_before', '?')} -> {e.get('load_after', '?')} |")
    return rows


def compare(base: dict, new: dict, fail_pct: float) -> tuple[list[str], int]:
    """Lines of the comparison and the number of regressions beyond ``fail_pct``."""
    lines, worse = [], 0
    width = max((len(f"{n}::{k}") for n, k in base.keys() | new.keys()), default=20)
    lines.append(f"{'benchmark::ratio':<{width}}  {'baseline':>9}  {'new':>9}  {'change':>8}")
    for key in sorted(base.keys() & new.keys()):
        b, n = base[key], new[key]
        change = 100.0 * (n / b - 1.0) if b else float("inf")
        bad = change > fail_pct if key[1].startswith("ratio_") else -change > fail_pct
        worse += bad
        lines.append(f"{key[0] + '::' + key[1]:<{width}}  {b:9.3f}  {n:9.3f}  {change:+7.1f}%"
                     + ("  worse" if bad else ""))
    for key in sorted(base.keys() ^ new.keys()):
        where = "baseline" if key in base else "new run"
        lines.append(f"{key[0] + '::' + key[1]:<{width}}  only in the {where}")
    return lines, worse


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("baseline", type=Path)
    ap.add_argument("new", type=Path, nargs="?")
    ap.add_argument("--table", action="store_true",
                    help="print the ratios of BASELINE as a Markdown table (no comparison)")
    ap.add_argument("--fail", type=float, default=25.0,
                    help="percent by which a ratio may get worse (default 25)")
    a = ap.parse_args(argv)
    if not a.fail >= 0:
        print(f"--fail must be >= 0 (percent), got {a.fail}", file=sys.stderr)
        return 2
    if a.table or a.new is None:
        try:
            print("\n".join(table(a.baseline)))
        except (OSError, ValueError, KeyError) as exc:
            print(f"cannot read the run: {exc}", file=sys.stderr)
            return 2
        return 0
    try:
        base, new = ratios(a.baseline), ratios(a.new)
    except (OSError, ValueError, KeyError) as exc:
        print(f"cannot read the runs: {exc}", file=sys.stderr)
        return 2
    lines, worse = compare(base, new, a.fail)
    print("\n".join(lines))
    print(f"{worse} ratio(s) worse by more than {a.fail:g}%" if worse else
          f"no ratio worse by more than {a.fail:g}%")
    return 1 if worse else 0


if __name__ == "__main__":
    sys.exit(main())
