"""Inference algorithms on the SLR posterior, scored against a Bayes-optimal reference.

:func:`entry` and :func:`write_entry` (:mod:`bayesslr.inference.entries`) put draws made
outside the package on the leaderboard (docs/targets.md); loaded on first use.
"""

from __future__ import annotations

from typing import Any

_LAZY = {"entry": "bayesslr.inference.entries", "write_entry": "bayesslr.inference.entries"}


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        import importlib

        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'bayesslr.inference' has no attribute {name!r}")
