"""Provenance: which code computed a result (one helper, used by every file the suite writes)."""

from __future__ import annotations

import subprocess
from pathlib import Path


def source_root() -> Path:
    """The directory that holds the ``bayesslr`` package (a git checkout's root, when it is
    one)."""
    return Path(__file__).resolve().parents[2]


def git_revision() -> str:
    """The source tree's ``HEAD`` commit, with ``-dirty`` when tracked files are modified;
    ``unknown`` outside a git checkout (an installed wheel)."""
    root = source_root()
    try:
        rev = subprocess.run(["git", "rev-parse", "HEAD"], cwd=root, capture_output=True,
                             text=True, timeout=10, check=True).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"],
                               cwd=root, capture_output=True, text=True, timeout=10,
                               check=True).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return "unknown"
    return rev + ("-dirty" if dirty else "")
