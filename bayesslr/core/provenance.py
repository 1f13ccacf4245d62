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


# the libraries whose versions decide a cell's last bits (ERM's float32 fits, NUTS's warm-up and
# the replica's loose solves amplify them: docs/results.md, "Reproducing a file")
NUMERIC_LIBRARIES = ("jax", "jaxlib", "numpy", "scipy", "numpyro", "blackjax")


def environment() -> dict[str, str]:
    """What the numbers of a run depend on beside the code: Python, the numeric libraries'
    versions (``"absent"`` where not installed) and the CPU model (``/proc/cpuinfo``'s
    ``model name``, or ``platform.processor()``)."""
    import platform
    from importlib import metadata

    out = {"python": platform.python_version()}
    for lib in NUMERIC_LIBRARIES:
        try:
            out[lib] = metadata.version(lib)
        except metadata.PackageNotFoundError:
            out[lib] = "absent"
    cpu = platform.processor() or platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text(encoding="utf-8").splitlines():
            if line.startswith("model name"):
                cpu = line.partition(":")[2].strip()
                break
    except OSError:
        pass
    out["cpu"] = cpu
    return out
