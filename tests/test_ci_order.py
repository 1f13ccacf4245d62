"""CI's file order (root conftest): the heaviest files first, every one of them a real file."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
_spec = importlib.util.spec_from_file_location("root_conftest", ROOT / "conftest.py")
conftest = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(conftest)  # the root conftest (``import conftest`` is tests/')


def test_heaviest_first_names_existing_files():
    missing = [f for f in conftest.HEAVIEST_FIRST if not (ROOT / f).is_file()]
    assert not missing, f"HEAVIEST_FIRST names files that do not exist: {missing}"
    assert len(set(conftest.HEAVIEST_FIRST)) == len(conftest.HEAVIEST_FIRST)


def test_collection_puts_the_heaviest_files_first():
    out = subprocess.run([sys.executable, "-m", "pytest", "--collect-only", "-q", "-m", "",
                          "-p", "no:cacheprovider", "tests/test_ci_order.py",
                          "tests/test_pt.py", "tests/test_notebooks.py"],
                         cwd=ROOT, capture_output=True, text=True, timeout=300)
    files = []
    for line in out.stdout.splitlines():
        if "::" in line:
            f = line.split("::", 1)[0]
            if not files or files[-1] != f:
                files.append(f)
    assert files == ["tests/test_notebooks.py", "tests/test_pt.py", "tests/test_ci_order.py"], \
        out.stdout[-2000:]
