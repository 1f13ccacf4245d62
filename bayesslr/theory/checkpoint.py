"""Checkpoints of a replica continuation path, point by point.

A path of the ``paper`` preset (15 values of ``alpha``, the optimal ``lam`` at each) costs about
two core-hours, and its cells are written only when the whole path is solved (they are one unit
of work, :func:`bayesslr.theory.method._path_key`). A run stopped before the end of a path (the
end of a working session, a machine that goes away) used to lose all of it. Now
:func:`bayesslr.theory.lam_opt.optimal_lambda_curve` writes each solved ``alpha`` here, with the
warm starts the next ``alpha`` needs, and a later run of the same path resumes after the last
point written. The resumed path's numbers are those of an uninterrupted one: the continuation
to an ``alpha`` depends only on the fixed points at the ``alpha`` below it (which are restored
exactly), and every solve uses fixed common random numbers (``tests/test_theory_checkpoint.py``
compares them bit for bit).

Where: ``$BAYESSLR_PATH_CHECKPOINTS``, or ``~/.cache/bayesslr/theory_paths``; the variable set
to ``off`` (or empty, ``0``, ``none``, ``false``) switches checkpoints off. ``bayesslr run
--out OUT`` sets it to ``OUT/theory_paths`` while it runs, unless it is set (the family's
registry ``Checkpoints``, :func:`bayesslr.sweep.runner.family_checkpoints`). One directory per
path, named by a SHA-256 of everything its numbers depend on (task, activation, the sorted
``alpha`` list, the solver and theory options, the ``lam`` grid and search, and the code
versions of the package and of the ``theory_erm`` family); one JSON file per solved ``alpha``,
written atomically. The directory is removed once the path is solved whole. A file that cannot
be read back, or that belongs to another key, is ignored (the point is solved again); a
checkpoint that cannot be written is skipped with a warning: checkpoints never stop a solve.

Every file carries a SHA-256 checksum of its content (like a cell file), and nothing else is
trusted: a file whose checksum does not match (an edited number that is still valid JSON), one
without a checksum (written before they existed), one that is not a JSON object, is nested
deeper than any checkpoint, is larger than :data:`MAX_BYTES`, or is a symbolic link, FIFO or
device (never opened through) is not restored: the point is solved again and its file
replaced, with one warning line naming the file.

The files are plain JSON (no pickle): the two result classes, tuples, dicts with non-string
keys and numpy arrays are tagged, and floats are written with ``repr`` so they read back
exactly (NaN and infinities included).
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import json
import math
import shutil
import time
import warnings
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from bayesslr.core.files import (
    StoreError,
    checked_json_object,
    env_dir,
    read_regular,
    write_text_atomic,
)

CHECKPOINT_ENV = "BAYESSLR_PATH_CHECKPOINTS"
FORMAT = 1  # part of the path key; the checksum came without changing it (files lacking one
# are solved again and replaced)
MAX_BYTES = 64 << 20  # one point with its warm state: about 100 kB
MAX_DEPTH = 64  # JSON nesting of a point (dataclass > map > tuple > array: under 10 levels)


class UntrustedCheckpoint(ValueError):
    """A checkpoint file that fails its checks (the message says why)."""


def _checksum(doc: Mapping[str, Any]) -> str:
    body = {k: v for k, v in doc.items() if k != "checksum"}
    text = json.dumps(body, sort_keys=True, allow_nan=False)
    return "sha256:" + hashlib.sha256(text.encode("utf-8")).hexdigest()


def _depth_ok(text: str, limit: int) -> bool:
    """Whether the JSON ``text`` nests at most ``limit`` deep (brackets outside strings)."""
    depth, in_str, esc = 0, False, False
    for ch in text:
        if in_str:
            if esc:
                esc = False
            elif ch == "\\":
                esc = True
            elif ch == '"':
                in_str = False
        elif ch == '"':
            in_str = True
        elif ch in "[{":
            depth += 1
            if depth > limit:
                return False
        elif ch in "]}":
            depth -= 1
    return True


def read_checkpoint_file(path: Path) -> dict[str, Any]:
    """The checked JSON object of a checkpoint file; :class:`UntrustedCheckpoint` (or
    ``FileNotFoundError``) otherwise: see the module docstring for the checks."""
    try:
        data = read_regular(path, MAX_BYTES)
    except FileNotFoundError:
        raise
    except OSError as exc:  # NotRegularFile included: a link, FIFO, device, too large
        raise UntrustedCheckpoint(str(exc).split("; allowed")[0]) from None
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        raise UntrustedCheckpoint("not UTF-8") from None
    if not _depth_ok(text, MAX_DEPTH):
        raise UntrustedCheckpoint(f"nested deeper than {MAX_DEPTH} levels")
    try:
        doc = json.loads(text)
    except (ValueError, RecursionError):
        raise UntrustedCheckpoint("not JSON") from None
    return checked_json_object(doc, _checksum, UntrustedCheckpoint, require_checksum=True)


def checkpoint_dir() -> Path | None:
    """``$BAYESSLR_PATH_CHECKPOINTS``, or ``~/.cache/bayesslr/theory_paths``; ``None`` when the
    variable is ``off`` (or empty, ``0``, ``none``, ``false``)."""
    return env_dir(CHECKPOINT_ENV, Path.home() / ".cache" / "bayesslr" / "theory_paths")


# ---- a JSON codec for the results of a path ------------------------------------------------------
def _classes() -> dict[str, type]:
    from bayesslr.theory.erm import ErmTheoryResult
    from bayesslr.theory.lam_opt import LamOptResult

    return {"ErmTheoryResult": ErmTheoryResult, "LamOptResult": LamOptResult}


def encode(obj: Any) -> Any:
    """``obj`` as JSON-ready data that :func:`decode` turns back into an equal object."""
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        name = type(obj).__name__
        if name not in _classes():
            raise TypeError(f"cannot checkpoint a {name}")
        return {"__dc__": name,
                "fields": {f.name: encode(getattr(obj, f.name)) for f in dataclasses.fields(obj)}}
    if isinstance(obj, np.ndarray):
        return {"__nd__": str(obj.dtype), "shape": list(obj.shape),
                "data": [encode(float(x)) if obj.dtype.kind == "f" else x.item()
                         for x in obj.ravel()]}
    if isinstance(obj, (bool, np.bool_)):
        return bool(obj)
    if isinstance(obj, (int, np.integer)):
        return int(obj)
    if isinstance(obj, (float, np.floating)):
        x = float(obj)
        return x if math.isfinite(x) else {"__float__": repr(x)}
    if obj is None or isinstance(obj, str):
        return obj
    if isinstance(obj, tuple):
        return {"__tuple__": [encode(x) for x in obj]}
    if isinstance(obj, list):
        return [encode(x) for x in obj]
    if isinstance(obj, Mapping):
        return {"__map__": [[encode(k), encode(v)] for k, v in obj.items()]}
    raise TypeError(f"cannot checkpoint a {type(obj).__name__}")


def decode(data: Any) -> Any:
    """The inverse of :func:`encode`."""
    if isinstance(data, list):
        return [decode(x) for x in data]
    if not isinstance(data, dict):
        return data
    if "__dc__" in data:
        cls = _classes()[data["__dc__"]]
        return cls(**{k: decode(v) for k, v in data["fields"].items()})
    if "__nd__" in data:
        flat = [decode(x) for x in data["data"]]
        return np.array(flat, dtype=np.dtype(data["__nd__"])).reshape(data["shape"])
    if "__float__" in data:
        return float(data["__float__"])
    if "__tuple__" in data:
        return tuple(decode(x) for x in data["__tuple__"])
    if "__map__" in data:
        return {decode(k): decode(v) for k, v in data["__map__"]}
    raise ValueError(f"not a checkpoint value: keys {sorted(data)}")


# ---- one path's checkpoint -----------------------------------------------------------------------
def path_key(**parts: Any) -> str:
    """SHA-256 (first 24 hex digits) of ``parts`` (repr of each, sorted by name) and the code
    versions the numbers depend on."""
    import bayesslr
    from bayesslr.registry import get_method

    blob = repr(sorted((k, repr(v)) for k, v in parts.items()))
    version = get_method("theory_erm:softmax").version
    blob += f"|bayesslr {bayesslr.__version__}|theory_erm {version}"
    blob += f"|format {FORMAT}"
    return hashlib.sha256(blob.encode()).hexdigest()[:24]


@dataclasses.dataclass
class PathCheckpoint:
    """The solved points of one continuation path, kept in ``directory`` (see the module).

    ``restored_s`` is the wall time the restored points cost when they were solved (so that a
    resumed path still reports the time its points took in all), ``restored_cpu_s`` their
    process CPU time (0 for a point whose file predates it).
    """

    directory: Path
    key: str
    restored_s: float = 0.0
    restored_cpu_s: float = 0.0

    @classmethod
    def open(cls, **parts: Any) -> PathCheckpoint | None:
        """The checkpoint of the path that ``parts`` describe, or ``None`` when checkpoints
        are off."""
        root = checkpoint_dir()
        if root is None:
            return None
        key = path_key(**parts)
        return cls(root / key, key)

    def _file(self, alpha: float) -> Path:
        return self.directory / f"alpha-{float(alpha)!r}.json"

    def restore(self, alphas: Sequence[float]) -> list[tuple[Any, Any]]:
        """The stored ``(point, state)`` of the leading ``alphas`` (ascending), up to the first
        one missing or unreadable."""
        out: list[tuple[Any, Any]] = []
        self.restored_s = self.restored_cpu_s = 0.0
        for a in alphas:
            path = self._file(a)
            try:
                doc = read_checkpoint_file(path)
                if doc.get("key") != self.key or doc.get("alpha") != repr(float(a)):
                    break
                point, state = decode(doc["point"]), decode(doc["state"])
                seconds = float(doc.get("seconds", 0.0))
                cpu_seconds = float(doc.get("cpu_seconds", 0.0))
            except FileNotFoundError:
                break
            except UntrustedCheckpoint as exc:
                warnings.warn(f"replica path checkpoint {path} not trusted ({exc}); the "
                              "point is solved again", RuntimeWarning, stacklevel=2)
                break
            except (OSError, ValueError, KeyError, TypeError, AttributeError, RecursionError):
                break
            out.append((point, state))
            self.restored_s += seconds
            self.restored_cpu_s += cpu_seconds
        return out

    def save(self, alpha: float, point: Any, state: Any, seconds: float,
             cpu_seconds: float = 0.0) -> None:
        """Write the solved ``alpha`` (its ``point`` and the warm ``state`` for the next one, the
        wall and CPU ``seconds`` it took); a failure to write only warns."""
        doc = {"key": self.key, "format": FORMAT, "alpha": repr(float(alpha)),
               "seconds": seconds, "cpu_seconds": cpu_seconds,
               "written": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
               "point": encode(point), "state": encode(state)}
        try:
            doc["checksum"] = _checksum(doc)
            self.directory.mkdir(parents=True, exist_ok=True)
            write_text_atomic(json.dumps(doc, allow_nan=False), self._file(alpha))
        except (OSError, StoreError) as exc:
            warnings.warn(f"replica path checkpoint not written ({exc}); the path goes on",
                          RuntimeWarning, stacklevel=2)

    def clear(self) -> None:
        """Remove the checkpoint (the path is solved whole and its cells are on their way),
        and the checkpoint directory too when nothing else is left in it."""
        shutil.rmtree(self.directory, ignore_errors=True)
        with contextlib.suppress(OSError):  # not empty: another path's checkpoint
            self.directory.parent.rmdir()
