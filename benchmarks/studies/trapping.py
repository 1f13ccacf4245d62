"""The trapping map: which uninformed samplers reach the Bayes-optimal error, as ``D`` grows
(issue 24; docs/targets.md).

For every cell ``(Delta, D, alpha, seed)`` of spiked ``L = 3``, ``nu = 2`` and every algorithm
``nuts-random``, ``smc-prior``, ``pt-random`` of the inference family, run at one gradient
budget (1e5 by default) from an uninformed start, the draws are scored on 4000 fresh test
inputs of the seed (the suite's data contract) against a reference *on the same inputs*,
paired:

* the stored long-NUTS reference (:mod:`bayesslr.inference.reference`) where the task is stored
  (``D = 50, 100``);
* elsewhere GAMP from the uninformed start on the same training data (docs/amp.md), whose
  posterior-mean predictions on the same test inputs are the reference. Where both exist the
  GAMP - NUTS-reference gap is measured too (``gamp_minus_reference``), to validate GAMP as the
  reference at the smallest sizes;
* where GAMP did not converge (it blows up on some seeds at ``alpha = 5``, ``D = 100-200``) and
  no stored reference exists, a NUTS reference made here (``nutsref``): the stored reference's
  teacher-start chains, settings and keys (:func:`bayesslr.ground_truth.teacher_chains`;
  4 chains x 2000 draws), its checks recorded (R-hat, bulk ESS, divergences). It is run up to
  ``N D <= --nutsref-max-nd`` (2e5 by default, ``D = 200`` at ``alpha = 5``: minutes a run;
  ``D = 400`` costs 4 to 16 times more); beyond that a cell keeps no reference, its algorithms
  are not run (nothing could score them), and the table counts it as such.

A cell *reaches* the reference when its paired excess is at most 3 of its standard errors (the
benchmark's rule). ``reaches`` is also recorded against GAMP where the stored reference exists.

Resumable: each run is one small JSON file in ``--work`` (skipped when present; an algorithm's
run scored against GAMP is run again once a NUTS reference of its cell exists; the test
predictions of GAMP, of the NUTS references and of every algorithm go to
``--work/yhat/*.npy``, 32 kB each, not meant for version control);
``table`` collects them into the fraction of seeds that reach the reference, with its
binomial standard error, per ``(Delta, D, alpha, algorithm)``, and ``figure`` draws it.
A study, not part of the library: a script of ``benchmarks/studies/`` (it runs the family's
algorithms through their records, :data:`bayesslr.inference.algorithms.ALGORITHMS`). Start it
niced::

    nice -n 19 python benchmarks/studies/trapping.py run --work DIR [--only D=25] \
        [--budget 1e5] [--nutsref-max-nd 2e5]
    python benchmarks/studies/trapping.py table --work DIR
    python benchmarks/studies/trapping.py figure --work DIR --out map.png
"""

from __future__ import annotations

import json
import math
import os
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
from study_cli import selected, study_parser

ALGOS: tuple[str, ...] = ("nuts-random", "smc-prior", "pt-random")
SETTINGS: dict[float, tuple[float, ...]] = {0.01: (1.2, 2.0, 5.0), 1e-4: (1.2, 2.0, 5.0)}
DS: tuple[int, ...] = (25, 50, 100, 200, 400)
SEEDS: tuple[int, ...] = (0, 1, 2)
N_TEST = 4000
# the practical criterion of docs/inference.md ("within 0.02 of the Bayes-optimal error"):
# trapped runs sit 0.04-1 above; a predictor of few draws (SMC's ~30 particles at 1e5) carries
# a finite-draw bias of ~c/S that the 3-standard-error rule of reaches_reference does not allow
NEAR = 0.02
# largest N D at which a NUTS reference is run where GAMP fails (D = 200 at alpha = 5: about
# 4 minutes of two cores; the cost of a gradient grows as N D)
NUTSREF_MAX_ND = 200_000


def plan(budget: int, seeds=SEEDS, Ds=DS) -> list[dict[str, Any]]:
    """Runs in the order they are done: first the equal-budget comparison on the stored
    ``alpha = 2`` tasks, then the map by increasing cost (``N D``)."""
    first = [dict(delta=0.01, D=D, alpha=2.0, seed=s) for D in (50, 100) for s in seeds]
    rest = [dict(delta=dl, D=D, alpha=a, seed=s) for dl, alphas in SETTINGS.items()
            for a in alphas for D in Ds for s in seeds]
    rest = [c for c in rest if c not in first]
    rest.sort(key=lambda c: (c["D"] * c["alpha"] * c["D"], c["seed"], -c["delta"], c["alpha"]))
    out = []
    for c in first + rest:
        out.append({**c, "what": "gamp", "budget": 0})
        out.append({**c, "what": "nutsref", "budget": 0})  # run only where GAMP fails
        for a in ALGOS:
            out.append({**c, "what": a, "budget": int(budget)})
    return out


def run_key(r: dict[str, Any]) -> str:
    return (f"delta{r['delta']:g}-D{r['D']}-alpha{r['alpha']:g}-seed{r['seed']}-{r['what']}"
            f"-{r['budget']}")


def _data(r):
    from bayesslr.core.task import make_task
    from bayesslr.inference.evaluate import task_data

    task = make_task("spiked", L=3, nu=2.0, delta=r["delta"], D=r["D"])
    return task, task_data(task, r["seed"], _N(r), N_TEST)


def _N(r: dict[str, Any]) -> int:
    """Training samples of a run's cell."""
    return max(1, int(round(r["alpha"] * r["D"])))


def _gamp_file(work: Path, r: dict[str, Any]) -> Path:
    return work / f"{run_key({**r, 'what': 'gamp', 'budget': 0})}.json"


def _yhat_file(work: Path, r: dict[str, Any], what: str = "gamp") -> Path:
    """Test predictions (4000 floats; kept out of the small JSON records) of GAMP, of the
    NUTS reference (``what="nutsref"``) or of an algorithm's run (``what=None``: ``r``'s own)."""
    key = run_key(r) if what is None else run_key({**r, "what": what, "budget": 0})
    return work / "yhat" / f"{key}.npy"


def _nutsref_file(work: Path, r: dict[str, Any]) -> Path:
    return work / f"{run_key({**r, 'what': 'nutsref', 'budget': 0})}.json"


def _read(path: Path) -> dict[str, Any] | None:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None


def needs_nutsref(r: dict[str, Any], work: Path) -> bool:
    """The cell's GAMP ran and did not converge, and no stored reference exists."""
    g = _read(_gamp_file(work, r))
    return (g is not None and "error" not in g and not g.get("gamp_converged", False)
            and not g.get("stored_reference", False))


def _nutsref(work: Path, r: dict[str, Any]) -> dict[str, Any] | None:
    """The record of the cell's NUTS reference when it ran (checks passed or not)."""
    nref = _read(_nutsref_file(work, r))
    return nref if nref is not None and "error" not in nref else None


def _has_reference(r: dict[str, Any], work: Path) -> bool:
    """A stored reference, a converged GAMP or a NUTS reference that ran."""
    return not needs_nutsref(r, work) or _nutsref(work, r) is not None


def run_nutsref(r: dict[str, Any], work: Path) -> dict[str, Any]:
    """The stored reference's teacher-start NUTS chains (settings, keys) on this cell's data:
    its error on the test inputs, its checks, and its predictions (``yhat/``)."""
    from bayesslr.bayes.model import model_spec
    from bayesslr.ground_truth import (
        RefSettings,
        reference_checks,
        settings_options,
        teacher_chains,
    )
    from bayesslr.inference.evaluate import predict_draws, score

    task, data = _data(r)
    spec = model_spec(task)
    st = RefSettings()
    t0 = time.perf_counter()
    res = teacher_chains(spec, data, r["D"], settings_options(st))
    kf, vf = res.flat()
    y, _ = predict_draws(spec, kf, vf, data.test)
    y = np.asarray(y, np.float64)
    s = score(task, data.teacher, data.test, y, None)
    checks = reference_checks(res)
    if res.divergences:
        checks.append(f"divergences={res.divergences}")
    _yhat_file(work, r, "nutsref").parent.mkdir(parents=True, exist_ok=True)
    np.save(_yhat_file(work, r, "nutsref"), y)
    return {"test_error": s["test_error"], "stderr": s["stderr"],
            "oracle_error": s["oracle_error"], "chains": st.chains, "warmup": st.warmup,
            "draws": st.draws, "r_hat_max": res.r_hat_max, "ess_bulk_min": res.ess_bulk_min,
            "divergences": int(res.divergences), "grad_evals": int(res.grad_evals),
            "nutsref_s": time.perf_counter() - t0, "checks_passed": not checks,
            "checks": "; ".join(checks) or "ok"}


def run_gamp(r: dict[str, Any], work: Path) -> dict[str, Any]:
    from bayesslr.amp.gamp import GampOptions, gamp, gamp_predict
    from bayesslr.core.task import algorithm_key
    from bayesslr.inference import reference as ref
    from bayesslr.inference.evaluate import score

    task, data = _data(r)
    t0 = time.perf_counter()
    g = gamp(algorithm_key(data.key, "sampler"), task, data.train, GampOptions(),
             teacher=data.teacher)
    y = np.asarray(gamp_predict(task, g, data.test.X, data.test.mask), np.float64)
    out = {"gamp_converged": bool(g.converged), "gamp_reason": g.reason,
           "gamp_iterations": int(g.iterations), "gamp_s": time.perf_counter() - t0}
    look = ref.lookup(task, r["alpha"], r["seed"], N_TEST, theory=False)
    s = score(task, data.teacher, data.test, y, look)
    out.update({"test_error": s["test_error"], "stderr": s["stderr"],
                "oracle_error": s["oracle_error"]})
    _yhat_file(work, r).parent.mkdir(parents=True, exist_ok=True)
    np.save(_yhat_file(work, r), y)
    if look is not None:
        out.update({"stored_reference": True, "gamp_minus_reference": s["excess_over_reference"],
                    "gamp_minus_reference_stderr": s["excess_over_reference_stderr"]})
    else:
        out["stored_reference"] = False
    return out


def run_algo(r: dict[str, Any], work: Path) -> dict[str, Any]:
    from bayesslr.bayes.model import model_spec
    from bayesslr.core.task import algorithm_key
    from bayesslr.inference import method as M
    from bayesslr.inference import reference as ref
    from bayesslr.inference.algorithms import ALGORITHMS
    from bayesslr.inference.evaluate import score, score_draws_on_data

    task, data = _data(r)
    spec = model_spec(task)
    alg, start = r["what"].split("-")
    opts = {o.name: o.default for o in M.SCHEMA.opts}
    opts["init"] = start
    kalg = algorithm_key(data.key, "sampler")
    t0 = time.perf_counter()
    K, V, diag = ALGORITHMS[alg].run(kalg, alg, spec, data, opts, r["budget"])
    wall = time.perf_counter() - t0
    gamp = json.loads(_gamp_file(work, r).read_text())
    y_gamp = np.load(_yhat_file(work, r))
    refs = {"gamp": {"test_error": gamp["test_error"], "stderr": gamp["stderr"],
                     "source": "gamp", "y_hat": y_gamp}}
    look = ref.lookup(task, r["alpha"], r["seed"], N_TEST, theory=False)
    if look is not None:
        refs["stored"] = look
    nref = _nutsref(work, r)
    if nref is not None:
        refs["nutsref"] = {"test_error": nref["test_error"], "stderr": nref["stderr"],
                           "source": "nutsref", "y_hat": np.load(_yhat_file(work, r, "nutsref"))}
    out = {k: v for k, v in diag.items() if not isinstance(v, np.ndarray)}
    out["wall_s"] = wall
    y_hat = None
    for name, rf in refs.items():
        if y_hat is None:  # the draws' predictions once, then paired with each reference
            s, y_hat = score_draws_on_data(task, spec, data, K, V, rf)
        else:
            s = score(task, data.teacher, data.test, y_hat, rf)
        e, se = s["excess_over_reference"], s["excess_over_reference_stderr"]
        out[f"excess_{name}"] = e
        out[f"excess_{name}_stderr"] = se
        out[f"reaches_{name}"] = bool(np.isfinite(e) and e <= 3 * se)
        out["test_error"] = s["test_error"]
    np.save(_yhat_file(work, r, None), np.asarray(y_hat, np.float64))  # to score again later
    best = next(n for n in ("stored", "nutsref", "gamp") if n in refs)
    out["reference"] = best
    out["excess"] = out[f"excess_{best}"]
    out["excess_stderr"] = out[f"excess_{best}_stderr"]
    out["reaches"] = out[f"reaches_{best}"]
    return out


def _stale(f: Path, r: dict[str, Any], work: Path) -> bool:
    """An algorithm's record scored against GAMP while its cell now has a NUTS reference."""
    if r["what"] in ("gamp", "nutsref"):
        return False
    old = _read(f)
    return (old is not None and old.get("reference") == "gamp"
            and _nutsref(work, r) is not None)


def run_trapping_map(work: Path, budget: int, only: list[str], seeds=SEEDS, Ds=DS,
                     nutsref_max_nd: int = NUTSREF_MAX_ND) -> None:
    from bayesslr.core.jaxconfig import configure_jax

    configure_jax()
    work.mkdir(parents=True, exist_ok=True)
    for r in plan(budget, seeds, Ds):
        if not selected(r, only):
            continue
        f = work / f"{run_key(r)}.json"
        if r["what"] == "gamp" and f.exists() and not _yhat_file(work, r).exists():
            # a fresh clone: the records are committed, GAMP's predictions (yhat/) are not;
            # they are made again (seconds), the record is kept as it was
            run_gamp(r, work)
            continue
        if f.exists() and not _stale(f, r, work):
            continue
        if r["what"] != "gamp" and not _yhat_file(work, r).exists():
            continue  # its GAMP reference failed to run or was filtered out
        if r["what"] not in ("gamp", "nutsref") and not _has_reference(r, work):
            continue  # GAMP failed and no NUTS reference: the table could not score it
        if r["what"] == "nutsref":
            nd = _N(r) * r["D"]
            if not needs_nutsref(r, work):
                continue
            if nd > nutsref_max_nd:
                print(f"{run_key(r)}: GAMP did not converge; no NUTS reference at N D = {nd} > "
                      f"--nutsref-max-nd {nutsref_max_nd} (the cell has no reference)",
                      flush=True)
                continue
        t0 = time.perf_counter()
        try:
            run = {"gamp": run_gamp, "nutsref": run_nutsref}.get(r["what"], run_algo)
            res = run(r, work)
        except Exception as exc:  # one failed run is recorded, the map goes on
            res = {"error": f"{type(exc).__name__}: {exc}"}
        row = {**r, **res, "run_wall_s": time.perf_counter() - t0,
               "load_avg": os.getloadavg()[0],
               "when": time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime())}
        tmp = f.with_suffix(".tmp")
        tmp.write_text(json.dumps(row, default=float))
        os.replace(tmp, f)
        msg = (f"excess {row.get('excess', float('nan')):+.4f} reaches {row.get('reaches')}"
               f" ({row.get('reference')})" if r["what"] not in ("gamp", "nutsref")
               else f"err {row.get('test_error', float('nan')):.4f} {row.get('checks', '')}")
        print(f"{run_key(r)}: {msg} {row.get('error', '')} ({row['run_wall_s']:.0f} s)",
              flush=True)


def load_rows(work: Path) -> list[dict[str, Any]]:
    rows = []
    for f in sorted(Path(work).glob("*.json")):
        r = json.loads(f.read_text())
        r.pop("y_hat", None)
        rows.append(r)
    return rows


def trapping_table(work: Path):
    """Fraction of seeds reaching the reference per ``(delta, D, alpha, algorithm)`` with its
    binomial standard error ``sqrt(p (1 - p) / n)``, the same for ``excess <= NEAR`` (0.02), the
    mean excess with its standard error
    over seeds, and the GAMP - stored reference gap where both exist. Runs whose reference is
    a GAMP run that did not converge, or a NUTS reference that failed its checks, are left out
    and counted (``no_reference``), as failed runs are (``failed``)."""
    import pandas as pd

    every = load_rows(work)
    failed: dict[tuple, int] = {}
    for r in every:  # failed runs are counted apart, never as seeds
        if "error" in r:
            k = (r["delta"], r["D"], r["alpha"], r["what"])
            failed[k] = failed.get(k, 0) + 1
    rows = [r for r in every if "error" not in r]
    if not rows:
        return pd.DataFrame()
    # a GAMP run that did not converge is no reference: its cells are counted apart
    bad_gamp = {(r["delta"], r["D"], r["alpha"], r["seed"]) for r in rows
                if r["what"] == "gamp" and not r.get("gamp_converged", False)}
    bad_nutsref = {(r["delta"], r["D"], r["alpha"], r["seed"]) for r in rows
                   if r["what"] == "nutsref" and not r.get("checks_passed", False)}
    no_ref: dict[tuple, int] = {}
    for r in rows:
        cell = (r["delta"], r["D"], r["alpha"], r["seed"])
        if r["what"] in ("gamp", "nutsref"):
            continue
        if (r.get("reference") == "gamp" and cell in bad_gamp) or (
                r.get("reference") == "nutsref" and cell in bad_nutsref):
            k = (r["delta"], r["D"], r["alpha"], r["what"])
            no_ref[k] = no_ref.get(k, 0) + 1
            r["_drop"] = True
    df = pd.DataFrame([r for r in rows if not r.get("_drop")])
    out = []
    alg = df[~df["what"].isin(["gamp", "nutsref"])]
    for key, g in alg.groupby(["delta", "D", "alpha", "what"]):
        n = len(g)
        p = float(g["reaches"].astype(bool).mean())
        ex = g["excess"].astype(float)
        q = float((ex <= NEAR).mean())
        out.append({"delta": key[0], "D": key[1], "alpha": key[2], "algorithm": key[3],
                    "seeds": n, "seed_list": ",".join(str(s) for s in sorted(g["seed"])),
                    "reach_fraction": p, "reach_se": math.sqrt(p * (1 - p) / n),
                    "near_fraction": q, "near_se": math.sqrt(q * (1 - q) / n),
                    "excess_mean": float(ex.mean()),
                    "excess_se": float(ex.std(ddof=1) / math.sqrt(n)) if n > 1 else float(
                        g["excess_stderr"].iloc[0]),
                    "reference": ",".join(sorted(set(g["reference"]))),
                    "grad_evals": float(g["grad_evals"].mean()),
                    "run_s": float(g["run_s"].mean()), "failed": failed.get(key, 0),
                    "no_reference": no_ref.get(key, 0)})
    gam = df[(df["what"] == "gamp") & df.get("stored_reference", False).astype(bool)
             & df.get("gamp_converged", False).astype(bool)]
    for key, g in gam.groupby(["delta", "D", "alpha"]):
        x = g["gamp_minus_reference"].astype(float)
        n = len(g)
        out.append({"delta": key[0], "D": key[1], "alpha": key[2],
                    "algorithm": "gamp - stored reference", "seeds": n,
                    "seed_list": ",".join(str(s) for s in sorted(g["seed"])),
                    "excess_mean": float(x.mean()),
                    "excess_se": float(x.std(ddof=1) / math.sqrt(n)) if n > 1 else float(
                        g["gamp_minus_reference_stderr"].iloc[0]),
                    "reference": "stored"})
    return pd.DataFrame(out).sort_values(["delta", "alpha", "D", "algorithm"])


def trapping_figure(work: Path):
    """The fraction of seeds reaching the reference against ``D``, one panel per
    ``(Delta, alpha)``, a line per algorithm (error bars: binomial standard errors); the state
    evolution's hard window is at ``Delta = 1e-4``, ``alpha`` 1.175 - 1.225 (docs)."""
    from matplotlib.figure import Figure
    from matplotlib.ticker import NullFormatter

    t = trapping_table(work)
    t = t[t["algorithm"].isin(ALGOS)]
    panels = sorted({(d, a) for d, a in zip(t["delta"], t["alpha"], strict=True)},
                    key=lambda p: (-p[0], p[1]))
    fig = Figure(figsize=(3.4 * max(len(panels), 1), 5.6), layout="constrained")
    axes = fig.subplots(2, max(len(panels), 1), squeeze=False)
    for j, (d, a) in enumerate(panels):
        sub = t[(t["delta"] == d) & (t["alpha"] == a)]
        for row, (col, what) in enumerate((("reach", "reach the reference (3 se)"),
                                           ("near", f"excess <= {NEAR:g}"))):
            ax = axes[row, j]
            seeds = []
            for i, alg in enumerate(ALGOS):
                g = sub[sub["algorithm"] == alg].sort_values("D")
                if g.empty:
                    continue
                ax.errorbar(g["D"] * (1 + 0.04 * (i - 1)), g[f"{col}_fraction"],
                            yerr=g[f"{col}_se"], marker="o", ms=4, capsize=2, label=alg,
                            color=f"C{i}")
                lo, hi = int(g["seeds"].min()), int(g["seeds"].max())
                seeds.append(f"{alg.split('-')[0]} {lo}" + (f"-{hi}" if hi != lo else ""))
            ax.set_xscale("log")
            ax.set_xlim(min(DS) / 1.3, max(DS) * 1.3)
            ax.set_xticks(list(DS), [str(x) for x in DS])
            ax.xaxis.set_minor_formatter(NullFormatter())
            ax.set_ylim(-0.05, 1.05)
            hard = "\n(SE hard window)" if d == 1e-4 and 1.175 <= a <= 1.225 else ""
            ax.set_title(f"Delta={d:g}, alpha={a:g}{hard}", fontsize=8)
            ax.set_xlabel("D\n(seeds per D: " + ", ".join(seeds) + ")", fontsize=7)
            ax.set_ylabel(f"fraction of seeds: {what}", fontsize=7)
    # one legend for the figure, under the panels: a legend inside a panel covered its data
    handles: dict = {}
    for ax in axes.flat:
        for h, lab in zip(*ax.get_legend_handles_labels(), strict=True):
            handles.setdefault(lab, h)
    labels = list(handles)
    fig.legend([handles[lab] for lab in labels], labels, loc="outside lower center",
               ncol=len(labels), fontsize=7)
    fig.suptitle("Trapping map: uninformed samplers at 1e5 gradients, spiked L=3, nu=2",
                 fontsize=9)
    return fig


def trapping_main(argv: list[str] | None = None) -> int:
    ap, sub = study_parser("python benchmarks/studies/trapping.py",
                           {"run": "run the map (resumable)",
                            "table": "the reach fractions as CSV on stdout",
                            "figure": "draw the map"}, only=("run",))
    sub["run"].add_argument("--budget", type=float, default=1e5)
    sub["run"].add_argument("--seeds", default="0,1,2")
    sub["run"].add_argument("--D", default=",".join(map(str, DS)))
    sub["run"].add_argument("--nutsref-max-nd", type=float, default=NUTSREF_MAX_ND,
                            help="largest N D at which a NUTS reference replaces a GAMP that "
                                 "did not converge")
    sub["figure"].add_argument("--out", required=True, type=Path)
    args = ap.parse_args(argv)
    if args.cmd == "run":
        run_trapping_map(args.work, int(args.budget), args.only,
                         tuple(int(s) for s in args.seeds.split(",")),
                         tuple(int(d) for d in args.D.split(",")),
                         int(args.nutsref_max_nd))
    elif args.cmd == "table":
        print(trapping_table(args.work).to_csv(index=False, float_format="%.4g"))
    else:
        trapping_figure(args.work).savefig(args.out, dpi=120)
        print(args.out)
    return 0


if __name__ == "__main__":
    sys.exit(trapping_main())
