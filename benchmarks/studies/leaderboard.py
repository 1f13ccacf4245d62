"""The cross-library leaderboard (issue 38, item 2): NUTS in NumPyro, BlackJAX and PyMC+nutpie
on every stored target at equal gradient budgets, the shipped ``bayesslr/data/leaderboard.nc``.

The functions are the library's (:mod:`bayesslr.crosslibrary`); this script only drives them::

    nice -n 5 .venv/bin/python benchmarks/studies/leaderboard.py run [--work DIR] [--targets A,B]
        [--libraries numpyro,blackjax,nutpie] [--retry-failed]     # one file per (target, library)
    .venv/bin/python benchmarks/studies/leaderboard.py assemble [--work DIR] [--out FILE]
    .venv/bin/python benchmarks/studies/leaderboard.py figure [--board FILE] [--out PNG]
        # the figure, docs/figures/leaderboard.png, and the table of docs/targets.md rewritten
        # between its markers from the board (tests/test_leaderboard.py checks they agree)

``run --reverse`` is a second builder on the same work directory (each pair is claimed by the
builder that runs it). ``run`` resumes: a pair whose file exists in the work directory (default
``benchmarks/studies/leaderboard_work``) is not run again. ``assemble`` joins them (missing
pairs: NaN, ``status = missing``) into ``--out`` (default ``bayesslr/data/leaderboard.nc``);
run it at a clean, committed tree so that the file's ``revision`` names the code that made it.
Needs the ``bench`` extra for nutpie (without it the nutpie pairs are skipped and reported).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
WORK = ROOT / "benchmarks" / "studies" / "leaderboard_work"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = p.add_subparsers(dest="cmd", required=True)
    r = sub.add_parser("run")
    r.add_argument("--work", type=Path, default=WORK)
    r.add_argument("--targets", default=None)
    r.add_argument("--libraries", default=None)
    r.add_argument("--retry-failed", action="store_true")
    r.add_argument("--reverse", action="store_true", help="targets from the last (a second "
                   "builder on the same work directory)")
    a = sub.add_parser("assemble")
    a.add_argument("--work", type=Path, default=WORK)
    a.add_argument("--out", type=Path, default=ROOT / "bayesslr" / "data" / "leaderboard.nc")
    a.add_argument("--revision", default=None, help="the revision to record (default the "
                   "tree's, -dirty when tracked files are modified)")
    f = sub.add_parser("figure")
    f.add_argument("--board", type=Path, default=None)
    f.add_argument("--out", type=Path, default=ROOT / "docs" / "figures" / "leaderboard.png")
    args = p.parse_args(argv)

    import bayesslr as bs
    from bayesslr.core.task import ConfigError

    try:
        if args.cmd == "run":
            bs.configure_jax()
            from bayesslr.crosslibrary.build import build

            split = lambda s: None if s is None else [x for x in s.split(",") if x]  # noqa: E731
            build(args.work, targets=split(args.targets), libraries=split(args.libraries),
                  retry_failed=args.retry_failed, reverse=args.reverse,
                  log=lambda m: print(m, flush=True))
        elif args.cmd == "assemble":
            from bayesslr.crosslibrary.build import assemble

            ds = assemble(args.work, args.out, revision=args.revision)
            print(f"{args.out}: revision {ds.attrs['revision']}, missing "
                  f"{ds.attrs['missing']}, failed {ds.attrs['failed']}")
        else:
            from bayesslr.crosslibrary.figure import error_vs_grads

            board = None if args.board is None else bs.leaderboard(args.board)
            fig = error_vs_grads(board)
            fig.savefig(args.out, dpi=110)
            print(args.out)
            from bayesslr.crosslibrary.board import markdown_table

            table = markdown_table(board)
            doc = ROOT / "docs" / "targets.md"
            head, rest = doc.read_text().split("<!-- leaderboard table:", 1)
            line, rest = rest.split("-->", 1)
            _, tail = rest.split("<!-- end leaderboard table -->", 1)
            doc.write_text(f"{head}<!-- leaderboard table:{line}-->\n{table}\n"
                           f"<!-- end leaderboard table -->{tail}")
            print(table)
    except ConfigError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
