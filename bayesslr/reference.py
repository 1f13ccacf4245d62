"""The shipped reference results: every setting of the paper's figures, computed once.

The package carries the results file of the ``reference`` preset (``bayesslr/data/
reference.nc``): the paper's settings (docs/paper.md) computed on one two-core machine, with
the sizes reduced only where a setting was out of reach there — each reduction is recorded in
the file's attributes (``reductions``) and in the README. :func:`load_reference` opens it like
any results directory (``bayesslr.load``); ``bayesslr report --reference OUT`` draws the
paper's figures from it without computing anything; the notebooks use it when given no results
directory.

:func:`build_reference` turns a finished ``reference`` run into that file: the results tree,
plus the provenance of the run (machine, wall time, the reductions against the ``paper``
preset).
"""

from __future__ import annotations

import importlib.resources
import json
import os
import platform
from pathlib import Path

import xarray as xr

from bayesslr.task import ConfigError

PACKAGE_FILE = "reference.nc"

# what the reference preset reduces against the paper preset, and why (kept with the data;
# the same list heads bayesslr/sweep/presets/reference.toml and the README)
REDUCTIONS: dict[str, str] = {
    "theory_erm": "7 alphas (0.5, 1, 2, 3, 5, 10, 20) instead of 15, channel samples 5000 instead "
                  "of 20000 (their Monte Carlo error is in stderr_channel): a softmax curve at "
                  "the optimal lam took about 12 min on two cores",
    "erm": "sqrt(N D) = 1000 instead of 10000 (and 500 on spiked nu = 2, a second size), 3 seeds "
           "instead of 5, the replica's 7 alphas instead of 9: a paper-size fit takes minutes "
           "and the validation search seven of them",
    "bayes_sampling": "D = 100 instead of 200, 3 seeds instead of 5",
    "population": "none (200000 samples, every setting)",
    "theory_bayes": "none (15 alphas, every setting)",
}


def reference_path() -> Path:
    """Where the shipped reference results file lives (inside the installed package)."""
    return Path(str(importlib.resources.files("bayesslr") / "data" / PACKAGE_FILE))


def load_reference() -> xr.DataTree:
    """The shipped reference results (a results tree, as :func:`bayesslr.load` returns).

    Every setting of the paper's figures, computed once with the ``reference`` preset; the
    root attributes carry the provenance and ``reductions`` (what was reduced against the
    paper's sizes, and why).

    Returns
    -------
    xarray.DataTree
        One group per method family and the ``cells`` group, as a results directory holds.

    Raises
    ------
    ConfigError
        When this installation carries no reference results, or a corrupt file (the
        message names it and says to reinstall).

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
    path = reference_path()
    if not path.exists():
        raise ConfigError(f"reference results {str(path)!r} are missing from this "
                          "installation; allowed: a results directory written by "
                          "'bayesslr run'")
    try:
        with xr.open_datatree(path, engine="h5netcdf") as tree:
            tree = tree.load()
    except (OSError, ValueError, KeyError) as exc:
        why = " ".join(str(exc).split())[:200] or type(exc).__name__
        raise ConfigError(f"reference results {str(path)!r} are corrupt ({why}); allowed: the "
                          "file as shipped: reinstall bayesslr (pip install --force-reinstall "
                          "bayesslr) to restore it") from None
    from bayesslr.report import is_results

    if not is_results(tree):
        raise ConfigError(f"reference results {str(path)!r} are not bayesslr results; allowed: "
                          "the file as shipped: reinstall bayesslr (pip install "
                          "--force-reinstall bayesslr) to restore it")
    return tree


def build_reference(results: str | Path, out: str | Path | None = None, *,
                    reductions: dict[str, str] | None = None,
                    wall_time_s: float | None = None, notes: str = "") -> Path:
    """Write the package's reference file from a finished run of the ``reference`` preset.

    Parameters
    ----------
    results : path
        The results directory of the run.
    out : path, optional
        Destination (default: the package's data file, :func:`reference_path`).
    reductions : dict, optional
        What the run reduced against the ``paper`` preset and why (setting -> text).
    wall_time_s : float, optional
        Wall time of the whole run on this machine.
    notes : str, optional
        Anything else a reader of the numbers should know (kept as the ``notes`` attribute).

    Returns
    -------
    Path
        The file written.
    """
    from bayesslr.report import load_results

    tree = load_results(results)
    failed = int(tree.attrs.get("cells_failed", 0))
    if failed:
        raise ConfigError(f"results={str(results)!r} has {failed} failed cells; allowed: a "
                          "complete run (rerun the same command to retry them)")
    tree.attrs.update({
        "reference": "bayesslr reference results: the paper's settings (docs/paper.md)",
        "reductions": json.dumps(reductions if reductions is not None else REDUCTIONS,
                                 sort_keys=True),
        "machine": f"{platform.machine()}, {os.cpu_count()} cores, {platform.system()}",
        "wall_time_s": float(wall_time_s) if wall_time_s is not None else float("nan"),
        "notes": notes,
    })
    if "cells" in tree.children and "runtime_s" in tree["cells"].to_dataset():
        tree.attrs["core_time_s"] = float(tree["cells"].to_dataset()["runtime_s"].sum())
    dest = Path(out) if out is not None else reference_path()
    dest.parent.mkdir(parents=True, exist_ok=True)
    from bayesslr.sweep.storage import write_netcdf_atomic

    write_netcdf_atomic(tree, dest)
    return dest
