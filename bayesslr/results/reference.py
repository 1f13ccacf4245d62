"""The shipped results: every setting of the paper's figures, computed once.

The package carries four results files (:data:`SHIPPED`), and two data files with their own
readers (``leaderboard.nc``, :mod:`bayesslr.crosslibrary.board`; ``inference_reference.nc``,
:mod:`bayesslr.inference.reference`):

- ``reference`` (``bayesslr/data/reference.nc``), the ``reference`` preset: the paper's
  settings (docs/paper.md) computed on one two-core machine, with the sizes reduced only where a
  setting was out of reach in about two hours — each reduction is recorded in the file's
  attributes (``reductions``) and in the README;
- ``paper`` (``bayesslr/data/paper.nc``), the ``paper`` preset: the same settings at the
  paper's sizes (``reductions`` empty), a run of several core-hours;
- ``dynamics`` (``bayesslr/data/dynamics.nc``), the ``dynamics`` preset (docs/dynamics.md):
  gradient-descent trajectories and the hard window, at its own sizes;
- ``multihead`` (``bayesslr/data/multihead.nc``), the ``multihead`` preset (docs/multihead.md
  section 8): the multi-head model's attentions, their GD trajectories and the sampled
  Bayes-optimal estimator.

:func:`load_reference` opens any of them like any results directory (``bayesslr.load``);
``bayesslr report --reference OUT [--shipped paper|dynamics|multihead]`` draws the figures from
one without computing anything; the notebooks use ``reference`` when given no results directory.

:func:`build_reference` turns a finished run into such a file: the results tree, plus the
provenance of the run (machine, wall time, the reductions against the ``paper`` preset).
"""

from __future__ import annotations

import importlib.resources
import json
import os
import platform
import re
from pathlib import Path
from typing import Any

import numpy as np
import xarray as xr

from bayesslr.core.task import ConfigError
from bayesslr.results.load import is_results, read_netcdf_tree

PACKAGE_FILE = "reference.nc"

# the shipped results files: name (load_reference's and 'report --shipped') -> (file, what it is)
SHIPPED: dict[str, tuple[str, str]] = {
    "reference": (PACKAGE_FILE, "bayesslr reference results: the paper's settings "
                                "(docs/paper.md), sizes reduced where one machine could not "
                                "reach them in about two hours (reductions)"),
    "paper": ("paper.nc", "bayesslr results at the paper's sizes: the paper preset "
                          "(docs/paper.md), nothing reduced"),
    "dynamics": ("dynamics.nc", "bayesslr dynamics results: the dynamics preset "
                                "(docs/dynamics.md), GD trajectories at D = 200 and the hard "
                                "window at Delta = 1e-4 (state evolution, PT from random and "
                                "teacher starts, GAMP)"),
    "multihead": ("multihead.nc", "bayesslr multi-head results: the multihead preset "
                                  "(docs/multihead.md section 8), three attentions by ERM and "
                                  "GD against the Bayes-optimal estimator by sampling"),
}

# what the reference preset reduces against the paper preset, and why (kept with the data;
# the same list heads bayesslr/sweep/presets/reference.toml and the README)
REDUCTIONS: dict[str, str] = {
    "theory_erm": "7 alphas (0.5, 1, 2, 3, 5, 10, 20) instead of 15, channel samples 5000 instead "
                  "of 20000 (their Monte Carlo error is in stderr_channel): a softmax curve at "
                  "the optimal lam took about 12 min on two cores",
    "erm": "sqrt(N D) = 1000 instead of 10000 (and 500 on spiked nu = 2, a second size), 3 seeds "
           "instead of 5, the replica's 7 alphas instead of 9: a paper-size fit takes minutes "
           "and the validation search seven of them",
    "bayes_sampling": "D = 100 instead of 200, 3 seeds instead of 5 (4 chains of 1000 draws, "
                      "as the paper preset has at alpha >= 3; at alpha = 1, where mixing is "
                      "slow, 60000 draws a chain, where the paper preset affords 20000 at "
                      "D = 200)",
    "population": "none (200000 samples, every setting)",
    "theory_bayes": "none (15 alphas, every setting)",
}


_RESTORE = ("the file as shipped: reinstall bayesslr (pip install --force-reinstall "
            "bayesslr; in a source checkout: git checkout -- bayesslr/data)")


def _check_name(name: str) -> str:
    if name not in SHIPPED:
        raise ConfigError(f"name={name!r} is not a shipped results file; allowed: "
                          + ", ".join(SHIPPED))
    return name


def reference_path(name: str = "reference") -> Path:
    """Where the shipped results file ``name`` (:data:`SHIPPED`) lives (inside the installed
    package)."""
    return Path(str(importlib.resources.files("bayesslr") / "data" / SHIPPED[_check_name(name)][0]))


def load_reference(name: str = "reference") -> xr.DataTree:
    """The shipped results ``name`` (a results tree, as :func:`bayesslr.load` returns).

    Every name of :data:`SHIPPED`, each a file under ``bayesslr/data/``:

    - ``"reference"`` (``reference.nc``): every setting of the paper's figures, computed once
      with the ``reference`` preset, sizes reduced;
    - ``"paper"`` (``paper.nc``): the ``paper`` preset, the same settings at the paper's sizes;
    - ``"dynamics"`` (``dynamics.nc``): the ``dynamics`` preset (docs/dynamics.md), GD
      trajectories at ``D = 200`` and the hard window at ``Delta = 1e-4``, at its own sizes;
    - ``"multihead"`` (``multihead.nc``): the ``multihead`` preset (docs/multihead.md section
      8), the multi-head model at ``D = 24``.

    The package ships two more data files that are not results trees and have their own
    readers: ``leaderboard.nc`` (:func:`bayesslr.crosslibrary.board.leaderboard`) and
    ``inference_reference.nc`` (:func:`bayesslr.inference.reference.load_inference_reference`).
    The root attributes carry the provenance, ``reductions`` (what was reduced against
    the paper's sizes, and why; empty for ``"paper"``), ``shipped`` (the name) and
    ``certificate`` (:func:`certificate`, computed from the file as it is loaded: revision,
    code versions, converged fractions and sizes per family).

    Parameters
    ----------
    name : {"reference", "paper", "dynamics", "multihead"}
        Which shipped file (:data:`SHIPPED`).

    Returns
    -------
    xarray.DataTree
        One group per method family and the ``cells`` group, as a results directory holds.

    Raises
    ------
    ConfigError
        An unknown ``name``; or this installation does not carry the file, or carries a
        corrupt one (the message names it and says to reinstall).

    Examples
    --------
    >>> import json
    >>> import bayesslr as bs
    >>> ref = bs.load_reference()
    >>> sorted(json.loads(ref.attrs["reductions"]))
    ['bayes_sampling', 'erm', 'population', 'theory_bayes', 'theory_erm']
    >>> se = ref["theory_bayes"].to_dataset()
    >>> bool((se["test_error"] > 0).any())
    True
    """
    _check_name(name)
    path = reference_path(name)
    if not path.exists():
        raise ConfigError(f"shipped results {str(path)!r} are missing from this "
                          "installation; allowed: a results directory written by "
                          "'bayesslr run'" + ("" if name == "reference" else
                                              ", or the shipped 'reference'"))
    try:
        tree = read_netcdf_tree(path)
    except (OSError, ValueError, KeyError) as exc:
        why = " ".join(str(exc).split())[:200] or type(exc).__name__
        raise ConfigError(f"shipped results {str(path)!r} are corrupt ({why}); allowed: "
                          f"{_RESTORE}") from None
    if not is_results(tree):
        raise ConfigError(f"shipped results {str(path)!r} are not bayesslr results; allowed: "
                          f"{_RESTORE}")
    tree.attrs.setdefault("shipped", name)
    tree.attrs["certificate"] = json.dumps(certificate(tree), sort_keys=True)
    return tree


def certificate(tree: xr.DataTree) -> dict[str, Any]:
    """What a results file can be trusted for, computed from the file itself (never written by
    hand): :func:`load_reference` stores it as the JSON attribute ``certificate``.

    Returns
    -------
    dict
        ``revision`` (the root's ``git_revision``) and ``clean`` (a revision without
        ``-dirty``); ``cells`` and ``cells_failed`` (the ``cells`` group), and
        ``cells_total`` (the sweep's cell count, where the file records it: a partial file
        has fewer ``cells``); per family
        (``families``): ``versions`` (code version -> cells computed by it, from the cells'
        ``method_version``), ``current_version`` (this code's, :func:`bayesslr.registry.
        get_method`), ``at_current_version`` (the fraction of its cells at it),
        ``converged`` (the fraction of its cells with a result whose ``converged`` output is
        true; None without that output), ``cells``, and the sizes: ``D`` and ``sqrtND`` (the
        values run) and ``seeds`` (how many), and ``flagged``: every cell with a result whose
        ``converged`` is false, as its coordinates (the dimensions of the family's dataset that
        have more than one value, and ``method``) and ``reason``; ``certified``: a clean
        revision, no failed cell, every cell at its current version and every converged
        fraction 1, and every cell of the sweep present (a file that ships flagged cells is
        not certified: ``flagged`` says which and why).

    Examples
    --------
    >>> import bayesslr as bs
    >>> cert = certificate(bs.load_reference())
    >>> {"cells", "cells_failed", "certified", "families"} <= set(cert)
    True
    """
    from bayesslr.registry import get_method

    rev = str(tree.attrs.get("git_revision", ""))
    cert: dict[str, Any] = {"revision": rev, "clean": bool(rev) and not rev.endswith("-dirty")}
    fams: dict[str, dict[str, Any]] = {}
    cells = tree["cells"].to_dataset() if "cells" in tree.children else None
    if cells is not None:
        cert["cells"] = int(cells.sizes.get("cell", 0))
        if "cells_total" in tree.attrs:  # the sweep's size: fewer cells is a partial file
            cert["cells_total"] = int(tree.attrs["cells_total"])
        status = [str(x) for x in cells["status"].values] if "status" in cells else []
        cert["cells_failed"] = sum(st != "ok" for st in status)
        versions = cells["method_version"].values if "method_version" in cells else None
        for i, method in enumerate(str(m) for m in cells["method"].values):
            fam = method.split(":", 1)[0]
            f = fams.setdefault(fam, {"cells": 0, "versions": {}, "D": set(), "sqrtND": set(),
                                      "seed": set()})
            f["cells"] += 1
            if versions is not None:
                v = str(versions[i])
                f["versions"][v] = f["versions"].get(v, 0) + 1
            try:
                f.setdefault("current_version", get_method(method).version)
            except Exception:  # a family this code does not have (a plugin)
                f.setdefault("current_version", None)
            if "settings" in cells:
                st = json.loads(str(cells["settings"].values[i]))
                for key in ("D", "sqrtND", "seed"):
                    if st.get(key) is not None:
                        f[key].add(st[key])
    else:
        cert["cells"], cert["cells_failed"] = 0, 0
    for fam, f in fams.items():
        n = sum(f["versions"].values())
        cur = f.get("current_version")
        f["at_current_version"] = (f["versions"].get(cur, 0) / n) if n else None
        f["D"], f["sqrtND"] = sorted(f["D"]), sorted(f["sqrtND"])
        f["seeds"] = len(f.pop("seed"))
        f["converged"], f["flagged"] = None, []
        if fam in tree.children:
            ds = tree[fam].to_dataset()
            if "converged" in ds and "test_error" in ds:
                has = np.isfinite(np.asarray(ds["test_error"].values, float))
                conv = np.asarray(ds["converged"].values, float)
                f["converged"] = float((conv[has] > 0.5).mean()) if has.any() else None
                f["flagged"] = _flagged(ds, has & ~(conv > 0.5))
    cert["families"] = fams
    cert["certified"] = bool(
        cert["clean"] and cert["cells_failed"] == 0 and fams
        and cert.get("cells_total", cert["cells"]) == cert["cells"]
        and all(f["at_current_version"] == 1.0 for f in fams.values())
        and all(f["converged"] in (None, 1.0) for f in fams.values()))
    return cert


def _flagged(ds: xr.Dataset, mask: np.ndarray) -> list[dict[str, Any]]:
    """The cells of ``ds`` where ``mask`` (over ``converged``'s dimensions) holds: the
    coordinates that vary in the family (and ``method``), and the family's ``reason``."""
    dims = ds["converged"].dims
    shown = [d for d in dims if d == "method" or ds.sizes[d] > 1]
    reason = ds["reason"].values if "reason" in ds and ds["reason"].dims == dims else None
    out = []
    for idx in zip(*np.nonzero(mask), strict=True):
        pos = dict(zip(dims, idx, strict=True))
        rec: dict[str, Any] = {d: ds[d].values[pos[d]].item() for d in shown}
        rec["reason"] = (_reprinted(str(reason[tuple(idx)]), ds, tuple(idx))
                         if reason is not None
                         else "converged is false (the family records no reason)")
        out.append(rec)
    return out


# one comparison of a reason: ``r_hat_max 1.01 > 1.01``, ``ess_bulk_min=399.6 < 400``
_COMPARISON = re.compile(r"\b([A-Za-z_]\w*)([ =])([-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?)"
                         r" (<=|>=|<|>) ([-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?)")


def _reprinted(reason: str, ds: xr.Dataset, idx: tuple[int, ...]) -> str:
    """``reason`` (as the file stores it) with each comparison ``NAME X op T`` whose ``NAME``
    is a variable of the cell printed from the stored value with the digits that show the
    comparison (:func:`bayesslr.core.thresholds.num`): a file written before the samplers'
    reasons did so reads ``r_hat_max 1.01 > 1.01``, its certificate ``r_hat_max 1.0103 >
    1.01``. A number that is not the stored value rounded is left as it is.

    Examples
    --------
    >>> ds = xr.Dataset({"r_hat_max": ("seed", [1.0103388, 1.2])})
    >>> _reprinted("r_hat_max 1.01 > 1.01; 2 divergent transitions", ds, (0,))
    'r_hat_max 1.0103 > 1.01; 2 divergent transitions'
    >>> _reprinted("r_hat_max 1.5 > 1.01", ds, (1,))
    'r_hat_max 1.5 > 1.01'
    """
    from bayesslr.core.thresholds import num

    dims = ds["converged"].dims if "converged" in ds else None

    def one(m: re.Match[str]) -> str:
        name, sep, shown, op, bound = m.groups()
        var = ds.get(name)
        if var is None or var.dims != (dims or var.dims) or len(var.dims) != len(idx):
            return m.group(0)
        try:
            x = float(var.values[idx])
        except (TypeError, ValueError):
            return m.group(0)
        digits = len(shown.lstrip("+-").split("e")[0].split("E")[0].replace(".", "").lstrip("0"))
        if not np.isfinite(x) or float(f"{x:.{max(digits, 1)}g}") != float(shown):
            return m.group(0)  # not this variable's stored value: keep the text
        return f"{name}{sep}{num(x, float(bound))} {op} {bound}"

    return _COMPARISON.sub(one, reason)


def build_reference(results: str | Path, out: str | Path | None = None, *,
                    reductions: dict[str, str] | None = None,
                    wall_time_s: float | None = None, notes: str = "",
                    name: str = "reference") -> Path:
    """Write a shipped results file from a finished run: of the ``reference`` preset
    (``name="reference"``) or of the ``paper`` preset (``name="paper"``).

    Parameters
    ----------
    results : path
        The results directory of the run.
    out : path, optional
        Destination (default: the package's data file, :func:`reference_path` of ``name``).
    reductions : dict, optional
        What the run reduced against the ``paper`` preset and why (setting -> text); default
        :data:`REDUCTIONS` for ``"reference"``, none for ``"paper"``.
    wall_time_s : float, optional
        Wall time of the whole run on this machine.
    notes : str, optional
        Anything else a reader of the numbers should know (kept as the ``notes`` attribute).
    name : {"reference", "paper", "dynamics", "multihead"}
        Which shipped file this is (:data:`SHIPPED`; the ``shipped`` attribute).

    Returns
    -------
    Path
        The file written.
    """
    from bayesslr.results.load import load_results

    _check_name(name)
    if reductions is None:
        reductions = REDUCTIONS if name == "reference" else {}
    tree = load_results(results)
    failed = int(tree.attrs.get("cells_failed", 0))
    if failed:
        raise ConfigError(f"results={str(results)!r} has {failed} failed cells; allowed: a "
                          "complete run (rerun the same command to retry them)")
    tree.attrs.update({
        "reference": SHIPPED[name][1],
        "shipped": name,
        "reductions": json.dumps(reductions, sort_keys=True),
        "machine": f"{platform.machine()}, {os.cpu_count()} cores, {platform.system()}",
        "wall_time_s": float(wall_time_s) if wall_time_s is not None else float("nan"),
        "notes": notes,
    })
    if "cells" in tree.children and "runtime_s" in tree["cells"].to_dataset():
        cells = tree["cells"].to_dataset()
        tree.attrs["core_time_s"] = float(cells["runtime_s"].sum())
        if "cpu_s" in cells:  # process CPU time, where the cells recorded it
            cpu = np.asarray(cells["cpu_s"].values, float)
            tree.attrs["cpu_time_s"] = float(np.nansum(cpu))
            tree.attrs["cpu_time_cells"] = int(np.isfinite(cpu).sum())
    dest = Path(out) if out is not None else reference_path(name)
    dest.parent.mkdir(parents=True, exist_ok=True)
    from bayesslr.core.files import write_netcdf_atomic

    write_netcdf_atomic(tree, dest)
    return dest
