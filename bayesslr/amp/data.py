"""The suite's teacher, training and test data for GAMP, with one copy of ``X`` at a time.

:func:`bayesslr.task.sample_task` is the data contract: a seed's key is split into
``(k_teacher, k_train, k_test)``, and the teacher, the training set and the test set are drawn
by :func:`~bayesslr.task.sample_teacher` and :func:`~bayesslr.task._sample_data` from those
keys. :func:`amp_task_data` makes exactly the same calls (so GAMP, NUTS and ERM see the same
numbers for the same seed; checked bit for bit in the tests), but compiles each draw on its
own: one compiled program holding the training and the test tokens at once would keep both
(``N L D`` and ``n_test L D`` floats) alive together with XLA's temporaries, whereas here
each ``X`` is drawn in one fused pass (random bits, the spike, the mask) and handed over.
At ``D = 10^4``, ``alpha = 5``, ``L = 3`` the training ``X`` is 6 GB in float32.
"""

from __future__ import annotations

from functools import partial

import jax

from bayesslr.jaxconfig import PRNGKey
from bayesslr.task import Data, TaskConfig, Teacher, _sample_data, check_int, sample_teacher


@partial(jax.jit, static_argnums=1)
def _teacher(key: PRNGKey, task: TaskConfig) -> Teacher:
    return sample_teacher(key, task)


@partial(jax.jit, static_argnums=(1, 3))
def _data(key: PRNGKey, task: TaskConfig, teacher: Teacher, n: int) -> Data:
    return _sample_data(key, task, teacher, n)


def amp_task_data(key: PRNGKey, task: TaskConfig, n_train: int,
                  n_test: int) -> tuple[Teacher, Data, Data]:
    """Teacher, training and test data of ``key``: the draws of
    ``sample_task(key, task, n_train, n_test)`` (spec section 1), one compiled draw each.

    Parameters
    ----------
    key : PRNGKey
        ``jax.random.key(seed)``.
    task : TaskConfig
        The task (its ``D``).
    n_train, n_test : int
        Training samples ``N = round(alpha D)`` and test samples (both ``>= 1``).

    Returns
    -------
    (Teacher, Data, Data)
        Teacher, training data, test data (float32 unless x64 is on).
    """
    n_train = check_int("n_train", n_train, low=1)
    n_test = check_int("n_test", n_test, low=1)
    kt, ktr, kte = jax.random.split(key, 3)
    teacher = _teacher(kt, task)
    train = _data(ktr, task, teacher, n_train)
    test = _data(kte, task, teacher, n_test)
    return teacher, train, test
