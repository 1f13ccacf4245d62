"""The one error measurement of the inference benchmark (docs/model.md §1, §6, docs/theory.md).

Every algorithm of :mod:`bayesslr.inference` is scored here, the same way:

* the teacher, the training data and a fresh test set come from
  ``sample_task(jax.random.key(seed), task, N, n_test)`` (the data contract of every family);
* an algorithm that returns posterior draws ``(k_s, v_s)`` predicts with the exact posterior-mean
  predictor of docs/model.md §6 (one softmax over draws and locations jointly:
  :func:`bayesslr.bayes.predict.posterior_predict`); an algorithm with a distribution of its own
  (variational inference) predicts with draws of that distribution, the same formula; a point
  estimate (MAP) is the one-draw case;
* the test error is Rao-Blackwellised over the hidden location and paired with the oracle (the
  teacher-known Bayes predictor) on the same test set
  (:func:`bayesslr.core.metrics.test_errors`, the suite's one error measurement);
* against the Bayes-optimal reference (:mod:`bayesslr.inference.reference`) the excess is paired
  too when the reference's predictions on the same test set are stored (same seed, same
  ``n_test``): ``excess_over_reference = mean_x [e_alg(x) - e_ref(x)]`` with
  ``e(x) = sum_l P_l(x) (z*_l(x) - y_hat(x))^2`` the per-input excess error, and its standard
  error over test inputs. Otherwise (a task without stored reference predictions) it is the
  difference of the two errors, with the two standard errors combined.
"""

from __future__ import annotations

import functools
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from bayesslr.bayes.model import ModelSpec
from bayesslr.bayes.predict import posterior_overlaps, posterior_predict
from bayesslr.core.jaxconfig import Array
from bayesslr.core.metrics import oracle_terms, test_errors
from bayesslr.core.task import Data, TaskConfig, Teacher, sample_task, seed_key

# teacher, training and test data in one compiled call (eager generation compiles op by op)
_sample_task = jax.jit(sample_task, static_argnums=(1, 2, 3))


class TaskData(NamedTuple):
    """Teacher and data of one cell (the suite's data contract).

    Attributes
    ----------
    key : jax.Array
        ``seed_key(seed)``; algorithms draw their randomness from
        ``algorithm_key(key, "sampler")``.
    teacher : Teacher
    train, test : Data
    """

    key: Any
    teacher: Teacher
    train: Data
    test: Data


def task_data(task: TaskConfig, seed: int, n_train: int, n_test: int) -> TaskData:
    """Teacher, ``n_train`` training and ``n_test`` test samples of ``seed`` (docs/model.md §1)."""
    key = seed_key(int(seed))
    teacher, train, test = _sample_task(key, task, int(n_train), int(n_test))
    return TaskData(key, teacher, train, test)


@functools.partial(jax.jit, static_argnames=("task",))
def per_input_errors(task: TaskConfig, teacher: Teacher, test: Data, y_hat: Array) -> Array:
    """Per-input excess error ``sum_l P_l (z*_l - y_hat)^2`` (``Delta``
    removed, docs/model.md §1, §6)."""
    P, z_s = oracle_terms(task, teacher, test)
    y_hat = jnp.asarray(y_hat, z_s.dtype)
    return jnp.sum(P * (z_s - y_hat[:, None]) ** 2, axis=-1)


def predict_draws(spec: ModelSpec, k_draws: np.ndarray, v_draws: np.ndarray, test: Data, *,
                  chunk: int = 128) -> tuple[np.ndarray, np.ndarray]:
    """Exact and plain posterior-mean predictions of draws ``(S, D)`` (docs/model.md §6)."""
    pred = posterior_predict(spec, jnp.asarray(k_draws, jnp.float32),
                             jnp.asarray(v_draws, jnp.float32), test.X, test.mask, chunk=chunk)
    return np.asarray(pred.exact, np.float64), np.asarray(pred.plain, np.float64)


def score(task: TaskConfig, teacher: Teacher, test: Data, y_hat: np.ndarray,
          reference: dict[str, Any] | None = None) -> dict[str, Any]:
    """Test error of ``y_hat``, paired with the oracle and (when given) the reference.

    Parameters
    ----------
    reference : dict, optional
        From :func:`bayesslr.inference.reference.lookup`: ``test_error``, ``stderr``,
        ``source`` and, when stored for this very test set, ``y_hat`` (the reference
        predictions, paired comparison).

    Returns
    -------
    dict
        ``test_error``, ``stderr``, ``risk``, ``oracle_error`` (+ ``oracle_error_stderr``),
        ``excess_over_oracle`` (+ ``_stderr``), and with a reference ``reference_error``
        (+ ``reference_error_stderr``), ``excess_over_reference`` (+ ``_stderr``),
        ``reference_paired`` and ``reference_source``.
    """
    err = test_errors(task, teacher, test, y_hat)
    out: dict[str, Any] = {
        "test_error": err.test_error, "stderr": err.stderr,
        "risk": err.risk, "risk_stderr": err.risk_stderr,
        "oracle_error": err.oracle_error, "oracle_error_stderr": err.oracle_error_stderr,
        "excess_over_oracle": err.excess_over_oracle,
        "excess_over_oracle_stderr": err.excess_over_oracle_stderr,
    }
    if reference is None:
        out.update({"reference_error": float("nan"), "reference_error_stderr": float("nan"),
                    "excess_over_reference": float("nan"),
                    "excess_over_reference_stderr": float("nan"), "reference_paired": False,
                    "reference_source": "none"})
        return out
    out["reference_error"] = float(reference["test_error"])
    out["reference_error_stderr"] = float(reference["stderr"])
    out["reference_source"] = str(reference["source"])
    y_ref = reference.get("y_hat")
    if y_ref is not None and np.shape(y_ref) == np.shape(y_hat):
        e_alg = np.asarray(per_input_errors(task, teacher, test, y_hat), np.float64)
        e_ref = np.asarray(per_input_errors(task, teacher, test, np.asarray(y_ref)), np.float64)
        d = e_alg - e_ref
        out["excess_over_reference"] = float(d.mean())
        out["excess_over_reference_stderr"] = float(d.std(ddof=1) / np.sqrt(d.size))
        out["reference_paired"] = True
    else:
        out["excess_over_reference"] = err.test_error - float(reference["test_error"])
        out["excess_over_reference_stderr"] = float(np.hypot(err.stderr,
                                                             float(reference["stderr"])))
        out["reference_paired"] = False
    return out


def score_draws_on_data(task: TaskConfig, spec: ModelSpec, data: TaskData,
                        k_draws: np.ndarray, v_draws: np.ndarray,
                        reference: dict[str, Any] | None = None, *,
                        chunk: int = 128) -> tuple[dict[str, Any], np.ndarray]:
    """:func:`score` of the exact posterior-mean predictor of draws, with the overlaps of the
    draws' mean, the Nishimori gap and the plain predictor's error; returns ``(out, y_hat)``."""
    y_exact, y_plain = predict_draws(spec, k_draws, v_draws, data.test, chunk=chunk)
    out = score(task, data.teacher, data.test, y_exact, reference)
    out["test_error_plain"] = test_errors(task, data.teacher, data.test, y_plain).test_error
    out.update(posterior_overlaps(data.teacher, np.mean(k_draws, axis=0), np.mean(v_draws, axis=0)))
    return out, y_exact
