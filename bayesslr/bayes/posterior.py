"""The posterior of given data as one object (the Python API of the Bayes-optimal estimator).

:func:`sample_posterior` runs the suite's NUTS (:mod:`bayesslr.bayes.sampler`) on any data set
(drawn by :func:`bayesslr.core.task.sample_task`, or a user's arrays through
:func:`bayesslr.core.task.as_data`) and returns a :class:`Posterior`: the draws, the ArviZ
``InferenceData``, the diagnostics and their verdict, the posterior-mean overlaps (with a
teacher) and the posterior-mean prediction ``predict(X)`` (the exact Bayes predictor: one
softmax over draws and locations, docs/estimators.md).
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from bayesslr.bayes import arviz_adapter
from bayesslr.bayes.model import ModelSpec, model_spec
from bayesslr.bayes.predict import posterior_overlaps, posterior_predict
from bayesslr.bayes.sampler import (
    SampleResult,
    SamplerOptions,
    init_params,
    sample_anneal,
)
from bayesslr.bayes.sampler import (
    run_nuts as _nuts,
)
from bayesslr.core.jaxconfig import Array, PRNGKey
from bayesslr.core.task import ConfigError, Data, TaskConfig, Teacher

DEFAULT_ANNEAL = (0.125, 0.25, 0.5)


@dataclass(frozen=True)
class Posterior:
    """NUTS draws of the SLR posterior of one data set, and what a user asks of them.

    Attributes
    ----------
    result : SampleResult
        Draws ``(chains, draws, D)`` of ``k`` and ``v``, sample statistics and diagnostics.
    spec : ModelSpec
        The likelihood sampled (variant, ``nu``, ``Delta``; tempered or not).
    task : TaskConfig
        The task whose model was sampled.

    Examples
    --------
    See :func:`sample_posterior`.
    """

    result: SampleResult
    spec: ModelSpec
    task: TaskConfig

    @property
    def k(self) -> np.ndarray:
        """Draws of ``k``, ``(chains, draws, D)``."""
        return self.result.k

    @property
    def v(self) -> np.ndarray:
        """Draws of ``v``, ``(chains, draws, D)``."""
        return self.result.v

    @property
    def diagnostics(self) -> dict[str, Any]:
        """R-hat (max), bulk and tail ESS (min), divergences, gradient evaluations, ESS per
        gradient and the yes/no ``converged`` verdict with its ``reason``."""
        from bayesslr.bayes.method import verdict

        out = self.result.summary()
        out["converged"], out["reason"] = verdict(out, self.result.options.chains)
        return out

    @cached_property
    def idata(self) -> Any:
        """The ArviZ ``InferenceData`` (posterior ``k, v``; sample stats)."""
        return arviz_adapter.to_inference_data(self.result, attrs={
            "task": str(self.task.to_dict()), **self.spec.to_dict()})

    def overlaps(self, teacher: Teacher) -> dict[str, float]:
        """Posterior-mean overlaps with the teacher and the Nishimori gap (docs/model.md)."""
        kf, vf = self.result.flat()
        return posterior_overlaps(teacher, kf.mean(axis=0), vf.mean(axis=0))

    def predict(self, X: Array, mask: Array | None = None, *, exact: bool = True,
                chunk: int = 128) -> np.ndarray:
        """Posterior-mean prediction on ``X`` ``(n, L, D)``: the exact Bayes predictor (one
        softmax over draws and locations), or with ``exact=False`` the plain average of the
        per-draw predictions."""
        X = jnp.asarray(X, jnp.float32)
        mask = jnp.ones(X.shape[:2], bool) if mask is None else jnp.asarray(mask, bool)
        kf, vf = self.result.flat()
        pred = posterior_predict(self.spec, jnp.asarray(kf, jnp.float32),
                                 jnp.asarray(vf, jnp.float32), X, mask, chunk=chunk)
        return np.asarray(pred.exact if exact else pred.plain)


def sample_posterior(key: PRNGKey, data: Data, task: TaskConfig, *,
                     options: SamplerOptions | None = None,
                     init: str | dict[str, Any] = "random", teacher: Teacher | None = None,
                     tempered: bool = False) -> Posterior:
    """Sample the posterior of ``(k, v)`` given ``data`` by NUTS (docs/estimators.md).

    Parameters
    ----------
    key : PRNGKey
        Sampler randomness.
    data : Data
        Training data (``sample_task`` or ``as_data``).
    task : TaskConfig
        The model (variant, ``L``, ``nu``, ``Delta``); its ``D`` must be the data's.
    options : SamplerOptions, optional
        Chains, warm-up, draws, chain method, precision, target acceptance, tree depth.
    init : {"random", "teacher", "anneal"} or dict
        Start: prior draws, the teacher (``teacher`` needed; an exact posterior draw in this
        planted setting), annealing along nested subsets of the data, or explicit
        ``{"k": (chains, D), "v": (chains, D)}``.
    teacher : Teacher, optional
        For ``init="teacher"``.
    tempered : bool
        Accept ``Delta = 0`` / ``nu = inf`` by sampling a tempered likelihood (Delta 0.01,
        nu 10) instead of refusing.

    Returns
    -------
    Posterior

    Examples
    --------
    >>> import jax, bayesslr as bs
    >>> from bayesslr.bayes import SamplerOptions
    >>> task = bs.make_task("spiked", L=3, nu=2.0, delta=0.01, D=8)
    >>> teacher, train, test = bs.sample_task(jax.random.key(0), task, 40, 200)
    >>> post = bs.sample_posterior(jax.random.key(1), train, task, teacher=teacher,
    ...                            init="teacher", options=SamplerOptions(warmup=50, draws=50))
    >>> post.k.shape, post.predict(test.X, test.mask).shape
    ((2, 50, 8), (200,))
    >>> sorted(post.idata.groups())
    ['posterior', 'sample_stats']
    """
    opts = options or SamplerOptions()
    if int(data.X.shape[-1]) != task.D:
        raise ConfigError(f"task D={task.D} differs from the data's D={int(data.X.shape[-1])}; "
                          "allowed: make_task(..., D=X.shape[-1])")
    spec = model_spec(task, tempered=tempered)
    kinit, krun = jax.random.split(key)
    if isinstance(init, dict):
        start = {n: jnp.asarray(init[n]).reshape(opts.chains, -1) for n in ("k", "v")}
        res = _nuts(krun, spec, data, opts, start=start, init="custom")
    elif init == "anneal":
        res, _ = sample_anneal(krun, spec, data, opts, DEFAULT_ANNEAL)
    elif init in ("random", "teacher"):
        start = init_params(kinit, init, opts.chains, task.D, teacher)
        res = _nuts(krun, spec, data, opts, start=start, init=init)
    else:
        raise ConfigError(f"init={init!r} is unknown; allowed: random, teacher, anneal or a "
                          "dict {'k': ..., 'v': ...}")
    return Posterior(res, spec, task)
