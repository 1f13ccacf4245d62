"""The one error measurement of every estimator on fresh test data (docs/model.md §1, §3, §6).

A predictor's values ``y_hat`` on a fresh test set (drawn from the seed's own test key, see
:func:`bayesslr.core.task.sample_task`) are scored against the teacher:

* ``test_error``: the excess error ``E[(y - y_hat)^2] - Delta``, Rao-Blackwellised over the
  hidden location. Since ``P(eps* = l | X) = softmax(c_nu chi*)_l`` exactly (docs/model.md §1),
  ``E[(y - y_hat)^2 | X] - Delta = sum_l P_l (z*_l - y_hat)^2``: the same expectation as
  ``mean (z*_{eps*} - y_hat)^2`` with a smaller variance;
* ``oracle_error``: the same for the teacher-known Bayes predictor ``y_oracle = sum_l P_l z*_l``,
  on the same test set (``sum_l P_l z*_l^2 - y_oracle^2``);
* ``excess_over_oracle = mean (y_hat - y_oracle)^2`` (``= test_error - oracle_error`` exactly,
  paired, with a far smaller standard error);
* ``risk``: ``mean (y - y_hat)^2`` with the noisy test labels.

Each mean comes with its standard error over the test inputs (the names follow the suite's one
convention: ``stderr`` for ``test_error``, ``X_stderr`` for any other ``X``). This is the
finite-``D`` error of this teacher, not a population (``D -> inf``) value.
"""

from __future__ import annotations

from functools import partial
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from bayesslr.core.jaxconfig import Array
from bayesslr.core.task import Data, TaskConfig, Teacher, location_posterior, teacher_fields


class TestErrors(NamedTuple):
    """Errors of one predictor on one fresh test set (module docstring).

    Attributes
    ----------
    test_error, stderr : float or Array
        Excess error (Rao-Blackwellised) and its standard error over test inputs.
    oracle_error, oracle_error_stderr : float or Array
        The teacher-known Bayes predictor's excess error on the same test set.
    excess_over_oracle, excess_over_oracle_stderr : float or Array
        ``mean (y_hat - y_oracle)^2`` and its standard error.
    risk, risk_stderr : float or Array
        ``mean (y - y_hat)^2`` with the noisy labels, and its standard error (at least that of
        ``test_error + Delta``, which is its Rao-Blackwellisation).
    """

    test_error: Array
    stderr: Array
    oracle_error: Array
    oracle_error_stderr: Array
    excess_over_oracle: Array
    excess_over_oracle_stderr: Array
    risk: Array
    risk_stderr: Array


def oracle_terms(task: TaskConfig, teacher: Teacher, test: Data) -> tuple[Array, Array]:
    """Exact location posterior ``P = softmax(c_nu chi*)`` and ``z*`` (zero where masked),
    each ``(n, L_max)``: all the scoring needs of the teacher."""
    chi_s, z_s = teacher_fields(task, teacher, test)
    return location_posterior(task, chi_s, test.mask), jnp.where(test.mask, z_s, 0.0)


def oracle_predict(task: TaskConfig, teacher: Teacher, data: Data) -> Array:
    """Teacher-known Bayes prediction ``sum_l P_l z*_l`` (docs/model.md §3)."""
    P, z_s = oracle_terms(task, teacher, data)
    return jnp.sum(P * z_s, axis=-1)


def score_given(P: Array, z_star: Array, y: Array, y_hat: Array) -> TestErrors:
    """:class:`TestErrors` (as arrays) from the oracle terms; free of the task configuration, so
    one compiled function serves every ``(variant, nu)``; usable inside ``jit``/``vmap``."""
    y_hat = jnp.asarray(y_hat, z_star.dtype)
    y_or = jnp.sum(P * z_star, axis=-1)
    err = jnp.sum(P * (z_star - y_hat[:, None]) ** 2, axis=-1)
    err_or = jnp.sum(P * (z_star - y_or[:, None]) ** 2, axis=-1)
    gap = (y_hat - y_or) ** 2
    n = err.shape[0]

    def se(a):
        return jnp.std(a, ddof=1) / jnp.sqrt(n) if n > 1 else jnp.nan

    sq = (y - y_hat) ** 2
    return TestErrors(jnp.mean(err), se(err), jnp.mean(err_or), se(err_or), jnp.mean(gap),
                      se(gap), jnp.mean(sq), se(sq))


@partial(jax.jit, static_argnames=("task",))
def _score(task: TaskConfig, teacher: Teacher, test: Data, y_hat: Array) -> TestErrors:
    P, z_s = oracle_terms(task, teacher, test)
    return score_given(P, z_s, test.y, y_hat)


def test_errors(task: TaskConfig, teacher: Teacher, test: Data, y_hat: Array) -> TestErrors:
    """Score the predictions ``y_hat`` ``(n,)`` on ``test`` (floats; module docstring).

    Examples
    --------
    >>> import jax, bayesslr as bs
    >>> task = bs.make_task("spiked", L=3, nu=2.0, delta=0.01, D=50)
    >>> teacher, _, test = bs.sample_task(jax.random.key(0), task, 0, 5000)
    >>> zero = bs.test_errors(task, teacher, test, test.y * 0)  # the trivial predictor
    >>> zero.test_error > zero.oracle_error, zero.excess_over_oracle > 0
    (True, True)

    A ``y_hat`` that is not one number per test input raises
    :class:`~bayesslr.core.task.ConfigError` naming it (before any work).
    """
    n = int(np.shape(test.y)[0])
    if np.shape(y_hat) != (n,):
        from bayesslr.core.task import ConfigError

        raise ConfigError(f"y_hat has shape {np.shape(y_hat)}; allowed: ({n},), one "
                          "prediction per test input")
    return TestErrors(*(float(np.asarray(x)) for x in _score(task, teacher, test, y_hat)))
