"""``bayesslr export posteriordb OUT``: the stored targets in posteriordb's layout.

Written (the layout the official ``posteriordb`` Python package reads)::

    OUT/posteriors/<name>.json                        posterior: model, data, reference names,
                                                      dimensions, the Bayes-optimal error
    OUT/models/info/slr_marginal.info.json            the model (one for every target: the
                                                      variant, nu and Delta are data)
    OUT/models/pymc/slr_marginal.py                   its code: bayesslr/export/slr_pymc.py
    OUT/data/info/<data>.info.json, OUT/data/data/<data>.json.zip
    OUT/reference_posteriors/draws/info/<name>.info.json
    OUT/reference_posteriors/draws/draws/<name>.json.zip

``<name>`` is the target's name with its dots written ``p`` (posteriordb takes everything after
the first dot of a file name for an extension): ``slr_spiked_L3_nu2_delta0p01-D100_alpha5_seed0``
(``bayesslr.target`` accepts it; ``bayesslr_target`` in the posterior's info holds the other).

Model code ships only in a language whose implementation is checked here against the JAX log
density: PyMC (``tests/test_targets_docs.py``); no Stan code (it could not be compiled and
checked on these machines). posteriordb's Python package knows the frameworks ``stan`` and
``pymc3`` for ``Model.implementation``; this model is under ``pymc`` (PyMC 5), read with
``Model.code("pymc")``.

**Reference draws.** The stored reference (docs/inference.md) keeps predictions, not draws. The
export reruns its teacher-start chains with the stored settings and the same keys
(:func:`bayesslr.ground_truth.build_task`'s), checks that their predictor reproduces the
stored reference predictions (the largest absolute difference and the two errors are in the
draws' info), and keeps every ``thin``-th draw. ``reference_draws="quick"`` runs 2 short chains
instead (tests; the info says so). Per posteriordb, the draws are a list of chains, each
``{"k[1]": [...], ..., "v[D]": [...]}``.

**Durability.** Every file is encoded in memory and written with the durable write of
:mod:`bayesslr.core.files` (a temporary name unique to its writer, ``fsync``, rename): a write
that fails (disk full, file-size limit, permissions) raises
:class:`~bayesslr.core.files.StoreError` (one line; exit 4) with no temporary file left and
the earlier file intact, and two exports at once never share a temporary name. ``OUT`` must
be new, empty, or an earlier export: ``OUT/bayesslr-export.json`` (checksummed) records the
settings of the export made there, and a rerun with other settings (``reference_draws``,
``thin``) is refused instead of skipping every posterior while reporting the new ones; a
non-empty directory that holds no export is refused instead of being written into beside
the user's files.

**The reference figure.** In this benchmark the reference is the Bayes-optimal *prediction*
error, not the draws: the info fields say so, and give it with its standard error, the oracle
and the state evolution (``bayesslr.score_draws(name, draws)`` scores draws against it on the
stored test inputs).
"""

from __future__ import annotations

import hashlib
import io
import json
import time
import zipfile
from collections.abc import Callable
from importlib import resources
from pathlib import Path
from typing import Any

import numpy as np

from bayesslr.core.files import (
    NotRegularFile,
    StoreError,
    read_regular,
    write_bytes_atomic,
    write_text_atomic,
)
from bayesslr.core.task import ConfigError
from bayesslr.posteriors.target import posteriordb_name

MANIFEST = "bayesslr-export.json"  # the settings of the export in OUT (checksummed)
LAYOUT = ("posteriors", "models", "data", "reference_posteriors")  # what an export holds

MODEL_NAME = "slr_marginal"
ADDED_BY = "bayesslr export posteriordb"
REFERENCE_FIGURE = (
    "The reference figure of this posterior is its Bayes-optimal test (prediction) error, "
    "bayes_optimal_error (the exact posterior-mean predictor of long NUTS chains started at "
    "the teacher, an exact posterior draw, on 4000 stored test inputs). Score draws from any "
    "sampler against it with bayesslr.score_draws(name, draws); the reference draws are a "
    "secondary reference.")


def posteriordb_data_name(target_name: str) -> str:
    """The posteriordb data set name of a target: its posterior name with ``_`` for ``-``."""
    return posteriordb_name(target_name).replace("-", "_")


def _mkdir(path: Path) -> None:
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise StoreError(path, exc) from None


def _write_zip_json(path: Path, inner: str, obj: Any) -> None:
    _mkdir(path.parent)
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", compression=zipfile.ZIP_DEFLATED) as z:
        z.writestr(inner, json.dumps(obj))
    write_bytes_atomic(buf.getbuffer(), path)


def _write_json(path: Path, obj: Any) -> None:
    _mkdir(path.parent)
    write_text_atomic(json.dumps(obj, indent=1, default=float), path)


def _checksum(doc: dict[str, Any]) -> str:
    body = json.dumps({k: v for k, v in doc.items() if k != "checksum"}, sort_keys=True)
    return "sha256:" + hashlib.sha256(body.encode("utf-8")).hexdigest()


def stored_settings(out: Path) -> dict[str, Any] | None:
    """The settings recorded by the export in ``out`` (``None``: no manifest). ConfigError
    when the manifest is a link or special file, unreadable, or fails its checksum."""
    path = out / MANIFEST
    try:
        doc = json.loads(read_regular(path, 1 << 20).decode("utf-8"))
    except FileNotFoundError:
        return None
    except NotRegularFile as exc:
        raise ConfigError(str(exc)) from None
    except (OSError, ValueError) as exc:
        raise ConfigError(f"{path} cannot be read ({type(exc).__name__}); allowed: the "
                          "manifest an export wrote (or another OUT)") from None
    if not isinstance(doc, dict) or doc.get("checksum") != _checksum(doc):
        raise ConfigError(f"{path} fails its checksum; allowed: the manifest an export wrote "
                          "(or another OUT)")
    return {k: doc.get(k) for k in ("reference_draws", "thin")}


def check_out(out: Path, settings: dict[str, Any]) -> bool:
    """ConfigError unless ``out`` is new, empty, or an export made with ``settings`` (an
    earlier export without a manifest: a directory holding only the posteriordb layout).
    Touches nothing; returns whether the manifest must be written."""
    if out.is_symlink() and not out.exists():
        raise ConfigError(f"out={str(out)!r} is a symbolic link to a missing directory; "
                          "allowed: a directory path")
    if not out.exists():
        return True
    if not out.is_dir():
        raise ConfigError(f"out={str(out)!r} exists and is not a directory; allowed: a "
                          "directory path")
    stored = stored_settings(out)
    if stored is not None:
        if stored != settings:
            raise ConfigError(
                f"out={str(out)!r} holds an export made with reference_draws="
                f"{stored['reference_draws']!r}, thin={stored['thin']!r} (its posteriors "
                f"would be skipped, not remade with reference_draws="
                f"{settings['reference_draws']!r}, thin={settings['thin']!r}); allowed: "
                "the same settings, or another OUT")
        return False
    foreign = sorted(p.name for p in out.iterdir() if p.name not in LAYOUT)
    if foreign:
        raise ConfigError(f"out={str(out)!r} is not empty and holds no bayesslr export "
                          f"(e.g. {foreign[0]!r}); allowed: a new or empty directory, or an "
                          "earlier export's")
    return True


def _write_manifest(out: Path, settings: dict[str, Any]) -> None:
    import bayesslr

    doc = {**settings, "written_by": ADDED_BY, "bayesslr_version": bayesslr.__version__}
    doc["checksum"] = _checksum(doc)
    _mkdir(out)
    write_text_atomic(json.dumps(doc, indent=1, sort_keys=True), out / MANIFEST)


def reference_chains(t, mode: str) -> tuple[np.ndarray, np.ndarray, dict[str, Any]]:
    """Teacher-start NUTS chains of target ``t``: the stored reference's own (same settings,
    same keys) or, ``quick``, 2 x 100. Returns ``k, v`` ``(chains, draws, D)`` and facts."""
    from bayesslr.bayes.sampler import SamplerOptions
    from bayesslr.ground_truth import RefSettings, settings_options, teacher_chains
    from bayesslr.inference.evaluate import per_input_errors, predict_draws, task_data
    from bayesslr.inference.reference import load_inference_reference

    data = task_data(t.task, t.seed, t.N, t.n_test)
    if mode == "stored":
        st = RefSettings(**json.loads(load_inference_reference().attrs["settings"]))
        opt = settings_options(st)
    else:
        opt = SamplerOptions(chains=2, warmup=100, draws=100, target_accept=0.9)
    t0 = time.perf_counter()
    res = teacher_chains(t.spec, data, t.D, opt)  # build_task's keys
    facts: dict[str, Any] = {
        "chains": opt.chains, "warmup": opt.warmup, "draws_per_chain": opt.draws,
        "target_accept": opt.target_accept, "adapt": opt.adapt, "start": "teacher",
        "r_hat_max": res.r_hat_max, "ess_bulk_min": res.ess_bulk_min,
        "ess_tail_min": res.ess_tail_min, "divergences": res.divergences,
        "grad_evals": res.grad_evals, "seconds": time.perf_counter() - t0}
    kf, vf = res.flat()
    y, _ = predict_draws(t.spec, kf, vf, data.test)
    look = t.stored_reference()
    if look is not None and look.get("y_hat") is not None:
        y_ref = np.asarray(look["y_hat"], np.float64)
        err = float(np.mean(per_input_errors(t.task, data.teacher, data.test, y)))
        facts["reproduces_stored_reference"] = {
            "max_abs_prediction_difference": float(np.max(np.abs(y - y_ref))),
            "error_of_these_chains": err, "stored_reference_error": float(look["test_error"])}
    return np.asarray(res.k, np.float64), np.asarray(res.v, np.float64), facts


def export(out: str | Path, *, names: list[str] | None = None, reference_draws: str = "stored",
           thin: int = 8, log: Callable[[str], None] | None = print) -> dict[str, Any]:
    """Write the targets ``names`` (default: every stored one) under ``out``; resumable (a
    posterior whose files are all present is skipped). Returns a summary."""
    from bayesslr.posteriors.target import targets

    stored = targets()
    names = list(stored) if names is None else list(names)
    unknown = [n for n in names if n not in stored]
    if unknown:
        raise ConfigError(f"targets {unknown} are not stored; allowed: the names "
                          "bayesslr.targets() lists")
    if reference_draws not in ("stored", "quick"):
        raise ConfigError(f"reference_draws={reference_draws!r} is unknown; allowed: stored, "
                          "quick")
    out = Path(out)
    settings = {"reference_draws": reference_draws, "thin": int(thin)}
    new = check_out(out, settings)  # before any work or write
    today = time.strftime("%Y-%m-%d")
    if new:
        _write_manifest(out, settings)
    _write_model(out, today)
    written = [_export_posterior(out, bname, reference_draws, thin, log, today)
               for bname in names]
    return {"out": str(out), "posteriors": written, "reference_draws": reference_draws,
            "thin": thin}


def _write_model(out: Path, today: str) -> None:
    """The one model: its PyMC code and its info."""
    code_rel = f"models/pymc/{MODEL_NAME}.py"
    code = (resources.files("bayesslr.export") / "slr_pymc.py").read_text()
    _mkdir(out / "models" / "pymc")
    write_text_atomic(code, out / code_rel)
    _write_json(out / "models" / "info" / f"{MODEL_NAME}.info.json", {
        "name": MODEL_NAME, "title": "Single-location regression, location summed out",
        "description": "Prior k, v ~ N(0, I_D); sum_i log (1/L_i) sum_l exp(a_l(k)) "
                       "N(y_i; x_il.v/sqrt(D), delta), a_l = sqrt(nu) x_il.k/sqrt(D) - "
                       "nu |k|^2/(2D) (spiked) or log L_i + nu chi_l - logsumexp (max). "
                       "Planted: the teacher is an exact posterior draw. Multimodal; at "
                       "alpha = N/D ~ 2 samplers from random starts stay in worse modes.",
        "keywords": ["bayesslr", "single-location regression", "attention", "multimodal",
                     "planted", "marginalised discrete latent"],
        "urls": ["https://arxiv.org/abs/2509.21936"],
        "references": ["Duranthon, Marion, Boyer, Loureiro, Zdeborova 2025, arXiv 2509.21936"],
        "model_implementations": {"pymc": {"model_code": code_rel}},
        "checked": "the PyMC log density equals bayesslr's JAX log density (Target."
                   "log_density, the NUTS model's potential) in float64 "
                   "(tests/test_targets_docs.py); no Stan code is shipped (not compiled and "
                   "checked here)",
        "added_by": ADDED_BY, "added_date": today})


def _export_posterior(out: Path, bname: str, reference_draws: str, thin: int,
                      log: Callable[[str], None] | None, today: str) -> dict[str, Any]:
    """One target's data, reference draws and posterior (skipped when already written);
    its line of the summary."""
    from bayesslr.posteriors.target import target

    t = target(bname)
    name = posteriordb_name(bname)
    dn = posteriordb_data_name(bname)
    post = out / "posteriors" / f"{name}.json"
    draws_zip = out / "reference_posteriors" / "draws" / "draws" / f"{name}.json.zip"
    if post.exists() and draws_zip.exists():
        return {"name": name, "skipped": True}
    if log:
        log(f"{name}: data, reference chains ({reference_draws}) ...")
    _write_data(out, t, name, dn, today)
    k, v, facts = reference_chains(t, reference_draws)
    k, v = k[:, ::thin], v[:, ::thin]
    chains = [{**{f"k[{j + 1}]": k[c, :, j].tolist() for j in range(t.D)},
               **{f"v[{j + 1}]": v[c, :, j].tolist() for j in range(t.D)}}
              for c in range(k.shape[0])]
    _write_zip_json(draws_zip, f"{name}.json", chains)
    ref = t.reference
    bayes = {"value": ref["bayes_error"], "stderr": ref["bayes_error_stderr"],
             "source": ref["source"], "checks_passed": ref["checks_passed"],
             "n_test": t.n_test, "oracle_error": ref["oracle_error"],
             "state_evolution_D_to_inf": ref["state_evolution"],
             "state_evolution_stderr": ref["state_evolution_stderr"]}
    _write_draws_info(out, name, k.shape, facts, bayes, reference_draws, thin, today)
    _write_json(post, {
        "name": name, "bayesslr_target": bname, "model_name": MODEL_NAME,
        "data_name": dn, "reference_posterior_name": name,
        "dimensions": {"k": t.D, "v": t.D},
        "keywords": ["bayesslr", "multimodal", "planted", "Bayes-optimal error known"],
        "bayes_optimal_error": bayes, "reference_figure": REFERENCE_FIGURE,
        "urls": ["https://arxiv.org/abs/2509.21936"], "references": [],
        "added_by": ADDED_BY, "added_date": today})
    if log:
        log(f"{name}: written ({facts['seconds']:.0f} s)")
    return {"name": name, "skipped": False, "reference_seconds": round(facts["seconds"], 1),
            **({"max_abs_prediction_difference": facts[
                "reproduces_stored_reference"]["max_abs_prediction_difference"]}
               if "reproduces_stored_reference" in facts else {})}


def _write_data(out: Path, t, name: str, dn: str, today: str) -> None:
    """The target's training data and its info."""
    _write_zip_json(out / "data" / "data" / f"{dn}.json.zip", f"{dn}.json", {
        "N": t.N, "L": int(t.task.L_max), "D": t.D, "variant": t.task.variant,
        "nu": t.task.nu, "delta": t.task.delta, "alpha": t.alpha, "seed": t.seed,
        "X": t.data["X"].astype(float).tolist(), "y": t.data["y"].astype(float).tolist(),
        "mask": t.data["mask"].astype(int).tolist()})
    _write_json(out / "data" / "info" / f"{dn}.info.json", {
        "name": dn, "title": f"SLR training data of {name}",
        "description": f"N = {t.N} samples of L = {t.task.L_max} tokens in D = {t.D}, "
                       f"drawn by bayesslr.sample_task(seed_key({t.seed}), ...) from the "
                       "teacher; X float32 values stored as JSON numbers",
        "data_file": f"data/data/{dn}.json", "keywords": ["bayesslr", "synthetic"],
        "urls": [], "references": [], "added_by": ADDED_BY, "added_date": today})


def _write_draws_info(out: Path, name: str, shape: tuple[int, ...], facts: dict[str, Any],
                      bayes: dict[str, Any], reference_draws: str, thin: int,
                      today: str) -> None:
    """The reference draws' info: how they were made (``shape``: the kept draws'
    ``(chains, draws, D)``), their diagnostics and the reference figure."""
    import bayesslr

    _write_json(out / "reference_posteriors" / "draws" / "info" / f"{name}.info.json", {
        "name": name,
        "inference": {"method": "NUTS (NumPyro, bayesslr.bayes.sampler) started at the "
                                "teacher" + (" (quick: NOT the reference's settings)"
                                             if reference_draws == "quick" else ""),
                      "method_arguments": {**{k_: facts[k_] for k_ in (
                          "chains", "warmup", "draws_per_chain", "target_accept",
                          "adapt")}, "thin": thin}},
        "diagnostics": {"r_hat_max": facts["r_hat_max"],
                        "ess_bulk_min": facts["ess_bulk_min"],
                        "ess_tail_min": facts["ess_tail_min"],
                        "divergences": facts["divergences"],
                        "ndraws": int(shape[1]), "nchains": int(shape[0])},
        "checks_made_objects": {"reproduces_stored_reference":
                                facts.get("reproduces_stored_reference")},
        "reference_figure": REFERENCE_FIGURE, "bayes_optimal_error": bayes,
        "comments": "chains started at the teacher are at equilibrium from step 0 (planted "
                    "setting); random starts stay in worse modes, which R-hat over these "
                    "chains cannot show (docs/inference.md)",
        "added_by": ADDED_BY, "added_date": today,
        "versions": {"bayesslr": bayesslr.__version__}})
