"""The builder of the inference benchmark's ground truth: the Bayes-optimal test error of each
task, measured and stored as data (``bayesslr/data/inference_reference.nc``, read by
:mod:`bayesslr.inference.reference`; the builder lives apart from the data it makes, as
Inference Gym's tools apart from its ``targets/ground_truth``).

Two sources (docs/theory.md, docs/model.md §6):

* **finite D (D <= 200)**: long NUTS runs on the task itself, posteriordb's practice. Per task
  (setting, ``D``, ``alpha``, seed, ``n_test``) the builder runs ``chains`` chains started at
  the teacher (an exact posterior draw in this planted setting, so these chains are at
  equilibrium from step 0) and as many from independent prior draws, with long warm-up and
  many draws; the reference predictor is the exact posterior-mean predictor of the teacher-start
  draws (docs/model.md §6) on the task's fresh test set, and its predictions on that test set are
  stored, so that an algorithm run on the same seed and ``n_test`` is compared *paired*
  (:func:`bayesslr.inference.evaluate.score`). Checked and stored with it: split R-hat and
  bulk/tail ESS of the teacher-start chains, divergences, the Monte Carlo bias of the
  finite-draw predictor (half the chains against all of them: a predictor from ``S`` draws
  exceeds the infinite-draw error by about ``c / S``, so ``bias = err(S/2) - err(S)``), and the
  disagreement with the random-start chains (their error, the paired excess, the predictive
  mean squared difference and the pooled R-hat) -- random starts that stay in a worse mode are
  the benchmark's point, not a failure of the reference;
* **large D**: the state evolution (``theory_bayes``, docs/theory.md), the Bayes-optimal error as
  ``D -> inf`` at fixed ``alpha``, with its Monte Carlo standard error. At finite ``D`` it differs
  from a task's own Bayes error by finite-size and teacher-norm fluctuations (compare
  ``excess_over_oracle`` there).

The shipped dataset is ``bayesslr/data/inference_reference.nc`` (package data): one row per task
(dimension ``task``), the reference predictions (dimension ``test``), the state-evolution values
per setting and ``alpha`` (dimension ``theory``), and provenance attrs (settings, seeds, sizes,
code revision, when). Build or extend it with the study script (the library has no command
line of its own here)::

    nice -n 10 python benchmarks/studies/ground_truth.py build --work DIR [--only D=100]
    python benchmarks/studies/ground_truth.py assemble --work DIR --out bayesslr/data/...

:func:`build` is resumable: each task is written to ``DIR`` as it finishes and skipped when
present.
"""

from __future__ import annotations

import io
import json
import math
import os
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import jax
import numpy as np

from bayesslr.bayes import arviz_adapter
from bayesslr.bayes.model import model_spec
from bayesslr.bayes.sampler import SamplerOptions, init_params, run_nuts
from bayesslr.core.files import write_bytes_atomic, write_json_atomic, write_text_atomic
from bayesslr.core.provenance import git_revision
from bayesslr.core.task import ConfigError, TaskConfig, make_task
from bayesslr.core.thresholds import CONVERGENCE, chain_failures
from bayesslr.inference.evaluate import per_input_errors, predict_draws, task_data
from bayesslr.inference.reference import state_evolution_point

# thresholds of the reference's own checks (documented in docs/inference.md)
REF_RHAT_MAX = CONVERGENCE["reference"].r_hat_max  # bayesslr.core.thresholds: why
REF_ESS_MIN = CONVERGENCE["reference"].ess_min


@dataclass(frozen=True)
class RefTask:
    """One task of the reference set.

    Attributes
    ----------
    variant, L, nu, delta : task setting (docs/model.md §1).
    D : int
    alpha : float
    seed : int
    n_test : int
        Test inputs of the stored predictions (an algorithm must use the same to be paired).
    """

    variant: str
    L: str
    nu: float
    delta: float
    D: int
    alpha: float
    seed: int
    n_test: int = 4000

    @property
    def N(self) -> int:
        return max(1, int(round(self.alpha * self.D)))

    def task(self) -> TaskConfig:
        return make_task(self.variant, L=self.L, nu=self.nu, delta=self.delta, D=self.D)

    def key(self) -> str:
        return (f"{self.variant}-L{self.L}-nu{self.nu:g}-delta{self.delta:g}-D{self.D}-"
                f"alpha{self.alpha:g}-seed{self.seed}-ntest{self.n_test}")


@dataclass(frozen=True)
class RefSettings:
    """NUTS settings of the reference runs (per start)."""

    chains: int = 4
    warmup: int = 1000
    draws: int = 2000
    random_warmup: int = 500
    random_draws: int = 1000
    target_accept: float = 0.9
    # the warm-up of both starts: Stan's windowed adaptation, with which the shipped
    # inference_reference.nc was built (before the sampler's default became grad / auto)
    adapt: str = "stan"


# the tasks the inference presets use (spec-section-6 settings of the issue: spiked L = 3,
# nu = 2, Delta = 0.01 at alpha = 2, 5; the hard window of the state evolution at Delta = 1e-4,
# alpha = 1.2, where the uninformed branch persists: theory_bayes hard range 1.175-1.225)
def preset_tasks() -> list[RefTask]:
    """The reference set in build order (the cheap and most-used tasks first)."""
    out = []
    for seed in (0, 1, 2):
        for D in (50, 100):
            for alpha in (2.0, 5.0):
                out.append(RefTask("spiked", "3", 2.0, 0.01, D, alpha, seed))
        if seed < 2:
            for D in (50, 100):
                out.append(RefTask("spiked", "3", 2.0, 1e-4, D, 1.2, seed))
    return out


THEORY_POINTS: tuple[tuple[str, str, float, float, float], ...] = tuple(
    [("spiked", "3", 2.0, 0.01, a) for a in (1.0, 1.2, 1.5, 2.0, 3.0, 5.0, 8.0)]
    + [("spiked", "3", 2.0, 1e-4, a) for a in (1.0, 1.1, 1.15, 1.2, 1.25, 1.5, 2.0, 5.0)])


# ------------------------------------------------------------------------------------------
# building
# ------------------------------------------------------------------------------------------
def _halves_bias(spec, k, v, data, task, err_all: float) -> float:
    """``err(first half of the chains) - err(all)``: the finite-draw bias of the pooled
    predictor (a ``c/S`` bias halves when ``S`` doubles, so this is its size at ``S``)."""
    c = k.shape[0]
    if c < 2:
        return float("nan")
    h = c // 2
    errs = []
    for part in (slice(0, h), slice(h, c)):
        kk = k[part].reshape(-1, k.shape[-1])
        vv = v[part].reshape(-1, v.shape[-1])
        y, _ = predict_draws(spec, kk, vv, data.test)
        errs.append(float(np.mean(per_input_errors(task, data.teacher, data.test, y))))
    return float(np.mean(errs) - err_all)


def reference_keys(data) -> tuple[Any, Any, Any]:
    """``(teacher chains, random chains, initial points)`` keys of the reference runs of a
    task's data (not the algorithms' ``fold_in(key, 1)``)."""
    kalg = jax.random.fold_in(data.key, 1001)
    k_t, k_r, k_init = jax.random.split(kalg, 3)
    return k_t, k_r, k_init


def teacher_chains(spec, data, D: int, opt: SamplerOptions):
    """The reference's teacher-start NUTS chains on ``data`` (its keys, :func:`reference_keys`)
    with sampler options ``opt``: what :func:`build_task` stores, what the posteriordb export
    reruns, and the trapping map's NUTS reference where GAMP fails."""
    k_t, _, k_init = reference_keys(data)
    return run_nuts(k_t, spec, data.train, opt, init="teacher",
                    start=init_params(k_init, "teacher", opt.chains, D, data.teacher))


def settings_options(settings: RefSettings) -> SamplerOptions:
    """Sampler options of the teacher-start reference chains."""
    return SamplerOptions(chains=settings.chains, warmup=settings.warmup, draws=settings.draws,
                          target_accept=settings.target_accept, adapt=settings.adapt)


def reference_checks(res) -> list[str]:
    """The reference's checks that teacher-start chains ``res`` fail (R-hat, bulk ESS against
    ``CONVERGENCE["reference"]``, :func:`bayesslr.core.thresholds.chain_failures`), one phrase
    each; empty when they pass."""
    return chain_failures({"r_hat_max": res.r_hat_max, "ess_bulk_min": res.ess_bulk_min},
                          CONVERGENCE["reference"])


def build_task(t: RefTask, settings: RefSettings) -> dict[str, Any]:
    """Run the reference chains of one task and measure everything stored about it."""
    task = t.task()
    spec = model_spec(task)
    data = task_data(task, t.seed, t.N, t.n_test)
    _, k_r, k_init = reference_keys(data)
    res_t = teacher_chains(spec, data, t.D, settings_options(settings))
    kf, vf = res_t.flat()
    y_ref, _ = predict_draws(spec, kf, vf, data.test)
    e_ref = np.asarray(per_input_errors(task, data.teacher, data.test, y_ref), np.float64)
    n = e_ref.size
    from bayesslr.core.metrics import test_errors

    err = test_errors(task, data.teacher, data.test, y_ref)
    bias = _halves_bias(spec, res_t.k, res_t.v, data, task, float(e_ref.mean()))

    opt_r = SamplerOptions(chains=settings.chains, warmup=settings.random_warmup,
                           draws=settings.random_draws, target_accept=settings.target_accept,
                           adapt=settings.adapt)
    res_r = run_nuts(k_r, spec, data.train, opt_r, init="random",
                             start=init_params(k_init, "random", settings.chains, t.D))
    kr, vr = res_r.flat()
    y_r, _ = predict_draws(spec, kr, vr, data.test)
    e_r = np.asarray(per_input_errors(task, data.teacher, data.test, y_r), np.float64)
    d = e_r - e_ref
    m = min(res_t.k.shape[1], res_r.k.shape[1])  # the last m draws of every chain
    pooled = arviz_adapter.diagnostics({"k": np.concatenate([res_t.k[:, -m:], res_r.k[:, -m:]]),
                                        "v": np.concatenate([res_t.v[:, -m:], res_r.v[:, -m:]])})
    checks = reference_checks(res_t)
    return {
        **asdict(t), "key": t.key(), "N": t.N,
        "test_error": float(e_ref.mean()), "stderr": float(e_ref.std(ddof=1) / math.sqrt(n)),
        "oracle_error": err.oracle_error, "excess_over_oracle": err.excess_over_oracle,
        "excess_over_oracle_stderr": err.excess_over_oracle_stderr,
        "mc_bias": bias,
        "r_hat_max": res_t.r_hat_max, "ess_bulk_min": res_t.ess_bulk_min,
        "ess_tail_min": res_t.ess_tail_min, "divergences": res_t.divergences,
        "grad_evals": res_t.grad_evals, "runtime_s": res_t.runtime_s,
        "step_size_mean": float(np.mean(res_t.step_size)),
        "checks_passed": not checks, "checks": "; ".join(checks) or "ok",
        "random_test_error": float(e_r.mean()),
        "random_excess_over_reference": float(d.mean()),
        "random_excess_over_reference_stderr": float(d.std(ddof=1) / math.sqrt(n)),
        "random_disagreement": float(np.mean((y_r - y_ref) ** 2)),
        "random_r_hat_max": res_r.r_hat_max, "random_ess_bulk_min": res_r.ess_bulk_min,
        "random_grad_evals": res_r.grad_evals, "random_runtime_s": res_r.runtime_s,
        "pooled_r_hat_max": pooled["r_hat_max"],
        "y_hat": y_ref.tolist(),
    }


def build(work: Path, tasks: list[RefTask], settings: RefSettings, *,
          theory: bool = True) -> None:
    """Resumable build: each task (and the theory table) is a JSON file in ``work``."""
    work.mkdir(parents=True, exist_ok=True)
    meta = work / "settings.json"
    if not meta.exists():
        write_json_atomic({"settings": asdict(settings), "started": time.strftime(
            "%Y-%m-%dT%H:%M:%S"), "git_revision": git_revision()}, meta)
    if theory and not (work / "theory.json").exists():
        rows = [state_evolution_point(p) for p in THEORY_POINTS]
        write_text_atomic(json.dumps(rows), work / "theory.json")
        print(f"theory: {len(rows)} points", flush=True)
    for t in tasks:
        f = work / f"{t.key()}.json"
        if f.exists():
            continue
        t0 = time.perf_counter()
        row = build_task(t, settings)
        row["wall_s"] = time.perf_counter() - t0
        row["load_avg"] = os.getloadavg()[0]
        write_text_atomic(json.dumps(row), f)
        print(f"{t.key()}: err {row['test_error']:.4f} +- {row['stderr']:.4f} bias "
              f"{row['mc_bias']:.4f} rhat {row['r_hat_max']:.3f} ess {row['ess_bulk_min']:.0f}"
              f" random {row['random_test_error']:.4f} ({row['wall_s']:.0f} s)", flush=True)


def assemble_ground_truth(work: Path, out: Path) -> Path:
    """Collect the task files of ``work`` into the reference netCDF dataset ``out``."""
    import xarray as xr

    rows = [json.loads(f.read_text()) for f in sorted(work.glob("*.json"))
            if f.name not in {"settings.json", "theory.json"}]
    if not rows:
        raise ConfigError(f"work={str(work)!r} holds no finished task; run build first")
    n_test = max(len(r["y_hat"]) for r in rows)
    yh = np.full((len(rows), n_test), np.nan)
    for i, r in enumerate(rows):
        yh[i, :len(r["y_hat"])] = r["y_hat"]
    cols = [k for k in rows[0] if k != "y_hat"]
    data = {c: ("task", np.asarray([r[c] for r in rows])) for c in cols}
    data["y_hat"] = (("task", "test"), yh)
    th = json.loads((work / "theory.json").read_text()) if (work / "theory.json").exists() else []
    for c in (th[0] if th else {}):
        data[f"theory_{c}"] = ("theory", np.asarray([r[c] for r in th]))
    meta = json.loads((work / "settings.json").read_text())
    ds = xr.Dataset(data)
    ds.attrs.update({
        "title": "bayesslr inference benchmark: Bayes-optimal reference errors",
        "method": "exact posterior-mean predictor (docs/model.md §6) of long NUTS runs started at "
                  "the teacher; random-start chains for the disagreement check; state "
                  "evolution (docs/theory.md) per setting and alpha",
        "settings": json.dumps(meta["settings"]),
        "check_thresholds": json.dumps({"r_hat_max": REF_RHAT_MAX,
                                        "ess_bulk_min": REF_ESS_MIN}),
        "git_revision": meta.get("git_revision", "unknown"),
        "assembled_git_revision": git_revision(),
        "started": meta.get("started", ""),
        "assembled": time.strftime("%Y-%m-%dT%H:%M:%S"),
        "jax_version": jax.__version__,
        "sizes": json.dumps({"tasks": len(rows), "n_test": n_test}),
    })
    out.parent.mkdir(parents=True, exist_ok=True)
    enc = {v: {"compression": "gzip", "compression_opts": 4} for v in ("y_hat",)}
    buf = io.BytesIO()
    ds.to_netcdf(buf, engine="h5netcdf", encoding=enc)
    write_bytes_atomic(buf.getbuffer(), out)
    return out
