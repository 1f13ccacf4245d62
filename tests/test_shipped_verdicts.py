"""Every verdict of the shipped results files is quoted in the docs, as the code computes it
(issue 36, item 2): the README's table for the paper file, docs/results.md's for the reduced
reference, docs/multihead.md's for the multi-head file (its own theme). The tables are checked
against ``all_verdicts`` on the shipped files, row by row (theme, status, the claim's first
words), so a change of a file or of a claim's rule that moves a verdict fails here until the
table, and its explanation, are updated."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

import bayesslr as bs
from bayesslr.report.claims import CLAIMS, all_verdicts

ROOT = Path(__file__).resolve().parents[1]
DOCS = {"paper": ROOT / "README.md", "reference": ROOT / "docs" / "results.md",
        "multihead": ROOT / "docs" / "multihead.md"}
# the themes each file's table quotes: the one-head files every theme but the multi-head
# model's (whose claims need its own cells), the multi-head file that theme only
THEMES = {"multihead": ("multihead",)}
ONE_HEAD = tuple(k for k in CLAIMS if k != "multihead")
HEADER = "| theme | verdict | claim | why, where it is not *holds* |"
STATUSES = ("holds", "does not hold", "not enough data")


def table_rows(path: Path) -> list[tuple[str, str, str, str]]:
    """The rows ``(theme, status, claim prefix, why)`` of the verdict table in ``path``."""
    lines = path.read_text(encoding="utf-8").splitlines()
    start = lines.index(HEADER) + 2  # the header and its rule
    rows = []
    for line in lines[start:]:
        if not line.startswith("|"):
            break
        cells = [c.strip().replace("\\|", "|")
                 for c in re.split(r"(?<!\\)\|", line.strip().strip("|"))]
        theme, status, claim, why = cells
        rows.append((theme, status, claim.removesuffix("…"), why))
    return rows


@pytest.fixture(scope="module", params=sorted(DOCS))
def shipped(request):
    return request.param, all_verdicts(bs.load_reference(request.param),
                                       THEMES.get(request.param, ONE_HEAD))


def test_every_verdict_is_quoted(shipped):
    name, verdicts = shipped
    computed = [(theme, v.status, v.claim) for theme, vs in verdicts.items() for v in vs]
    rows = table_rows(DOCS[name])
    assert len(rows) == len(computed), (name, len(rows), len(computed))
    for (theme, status, claim), (r_theme, r_status, prefix, why) in zip(computed, rows,
                                                                        strict=True):
        assert (r_theme, r_status) == (theme, status), (name, claim, r_status)
        assert len(prefix) >= 40 and claim.startswith(prefix), (name, prefix, claim)
        # a verdict other than holds carries its reason; a holding one none
        assert bool(why) == (status != "holds"), (name, claim, why)


def test_table_parser_reads_escaped_pipes(tmp_path):
    p = tmp_path / "t.md"
    p.write_text(f"{HEADER}\n|---|---|---|---|\n| population | not enough data | as \\|k\\|→∞… "
                 "| why |\nafter\n", encoding="utf-8")
    assert table_rows(p) == [("population", "not enough data", "as |k|→∞", "why")]
    assert set(s for _, s, _, _ in table_rows(DOCS["paper"])) <= set(STATUSES)
