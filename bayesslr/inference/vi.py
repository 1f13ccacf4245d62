"""Variational inference and MAP on the SLR posterior with NumPyro's SVI (docs/model.md §6).

The target is the marginal model of :mod:`bayesslr.bayes.model` (location summed out), the
same density as the samplers'. Guides (NumPyro autoguides):

* ``advi``: ``AutoNormal``, a mean-field Gaussian on ``(k, v)``;
* ``lowrank``: ``AutoLowRankMultivariateNormal``, a Gaussian with a rank-``rank`` plus diagonal
  covariance;
* ``map``: ``AutoDelta``, a point mass: the ELBO is then the log joint density, so SVI is
  gradient ascent on the log posterior (maximum a posteriori).

**Budget.** One SVI step with ``num_particles`` Monte Carlo particles costs ``num_particles``
gradient evaluations of the log density (the entropy and the reparametrisation are cheap next
to the ``N L D`` likelihood), so a run takes ``budget // num_particles`` steps. Adam with a
cosine decay of the learning rate from ``lr`` to ``lr / 100`` over those steps (optax).

**Prediction.** A distribution predicts with its own predictive mean: ``predict_draws`` draws
of the fitted guide fed to the exact posterior-mean predictor (one softmax over draws and
locations jointly, docs/model.md §6); MAP is the one-draw case, i.e. softmax attention at the MAP
``(k, v)`` with the test tokens' evidence on ``k``.

**MAP is not ERM** (docs/estimators.md): ERM minimises ``1/2 sum (y - f(X))^2 + lam/2 |k,v|^2`` for
the attention predictor ``f = softmax(chi) . z``; MAP maximises
``sum_i log (1/L) sum_l exp(a_l(k)) N(y_i; z_l, Delta) - |k|^2/2 - |v|^2/2``, the likelihood of
a mixture over locations with the known noise ``Delta`` and the token evidence ``a_l(k)``, with
a unit Gaussian prior (not a tuned ridge). The two share the predictor's form (at ``k`` scaled by
``c_nu``) but not the objective: MAP fits each label to *one* token (a mixture), ERM to the
attention-weighted average.

**Convergence.** VI: the mean loss (negative ELBO) of the last tenth of the steps against the
tenth before; converged when their difference is within ``2`` standard errors of the
difference or below ``rtol`` relative. MAP: the root-mean-square gradient of the log posterior
per coordinate at the end is below ``gtol``.
"""

from __future__ import annotations

import functools
import math
import time
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
import optax
from numpyro.infer import SVI, Trace_ELBO
from numpyro.infer.autoguide import AutoDelta, AutoLowRankMultivariateNormal, AutoNormal
from numpyro.infer.initialization import init_to_sample, init_to_value
from numpyro.optim import optax_to_numpyro

from bayesslr.bayes.model import MODELS, ModelSpec
from bayesslr.bayes.nuts import model_args, potential_fn_gen
from bayesslr.core.jaxconfig import AOT_CACHE, Array, PRNGKey
from bayesslr.core.task import Data

VI_ALGORITHMS: tuple[str, ...] = ("advi", "lowrank", "map")
VI_RTOL = 1e-3


class VIRun(NamedTuple):
    """Fitted guide, its draws, cost and diagnostics.

    Attributes
    ----------
    k, v : numpy.ndarray, shape (S, D)
        Draws of the fitted guide (one for MAP).
    losses : numpy.ndarray
        Loss (negative ELBO; minus log joint for MAP) per step.
    steps : int
    grad_evals : int
    final_loss : float
        Mean loss of the last tenth of the steps.
    loss_change, loss_change_stderr : float
        Mean loss of the last tenth minus that of the tenth before, and its standard error.
    grad_rms : float
        Root-mean-square gradient of the log posterior per coordinate at the guide's location.
    converged : bool
    reason : str
    compile_s, run_s : float
    scale_mean : float
        Mean posterior standard deviation of the guide per coordinate (NaN for MAP).
    """

    k: np.ndarray
    v: np.ndarray
    losses: np.ndarray
    steps: int
    grad_evals: int
    final_loss: float
    loss_change: float
    loss_change_stderr: float
    grad_rms: float
    converged: bool
    reason: str
    compile_s: float
    run_s: float
    scale_mean: float


def _guide(model, guide_kind: str, rank: int, init_loc_fn, init_scale: float):
    if guide_kind == "advi":
        return AutoNormal(model, init_loc_fn=init_loc_fn, init_scale=init_scale)
    if guide_kind == "lowrank":
        return AutoLowRankMultivariateNormal(model, init_loc_fn=init_loc_fn, rank=rank,
                                             init_scale=init_scale)
    return AutoDelta(model, init_loc_fn=init_loc_fn)


def run_vi(key: PRNGKey, spec: ModelSpec, data: Data, guide_kind: str, *, budget: int,
           start: dict[str, Array] | None, lr: float = 0.01, num_particles: int = 1,
           rank: int = 10, init_scale: float = 0.1, predict_draws: int = 1000,
           gtol: float = 1e-2, chunk: int = 100) -> VIRun:
    """Fit ``guide_kind`` to the posterior of ``data`` in ``budget`` gradient evaluations.

    Parameters
    ----------
    key : PRNGKey
    spec : ModelSpec
    data : Data
        Training data.
    guide_kind : {"advi", "lowrank", "map"}
    budget : int
        Gradient evaluations: ``budget // num_particles`` SVI steps.
    start : dict or None
        ``{"k": (D,), "v": (D,)}`` initial location; None draws it from the prior.
    lr : float
        Peak Adam learning rate (cosine decay to ``lr / 100``).
    num_particles : int
        ELBO particles per step (1 for MAP).
    rank : int
        Rank of the low-rank guide.
    init_scale : float
        Initial guide standard deviation.
    predict_draws : int
        Guide draws for the prediction.
    gtol : float
        MAP convergence threshold of the RMS gradient per coordinate.
    chunk : int
        SVI steps per compiled call.
    """
    if guide_kind == "map":
        num_particles = 1
    steps = max(chunk, (int(budget) // num_particles) // chunk * chunk)
    model = functools.partial(MODELS["marginal"], variant=spec.variant)
    init_loc_fn = (init_to_sample if start is None else
                   init_to_value(values={n: jnp.asarray(start[n], jnp.float32)
                                         for n in ("k", "v")}))
    guide = _guide(model, guide_kind, rank, init_loc_fn, init_scale)
    sched = optax.cosine_decay_schedule(lr, steps, alpha=0.01)
    svi = SVI(model, guide, optax_to_numpyro(optax.adam(sched)),
              Trace_ELBO(num_particles=num_particles))
    args = model_args(spec, data)
    k_init, k_pred = jax.random.split(key)
    aot = AOT_CACHE
    t0 = time.perf_counter()
    state = svi.init(k_init, *args)

    def run_chunk(st, *a):
        def body(s, _):
            s, loss = svi.update(s, *a)
            return s, loss

        return jax.lax.scan(body, st, None, length=chunk)

    fn = jax.jit(run_chunk)
    losses = []
    t_exec = 0.0
    for _ in range(steps // chunk):
        # a fresh jit per run (the SVI object is new): compiled through the persistent cache
        c1 = aot.compile_s
        t1 = time.perf_counter()
        state, ls = aot(f"svi-{id(svi)}", fn, state, *args)
        losses.append(np.asarray(ls))
        t_exec += time.perf_counter() - t1 - (aot.compile_s - c1)
    losses = np.concatenate(losses).astype(np.float64)
    params = svi.get_params(state)
    if guide_kind == "map":
        loc = guide.median(params)
        K = np.asarray(loc["k"], np.float64)[None]
        V = np.asarray(loc["v"], np.float64)[None]
        scale_mean = math.nan
    else:
        draws = guide.sample_posterior(k_pred, params, sample_shape=(predict_draws,))
        K = np.asarray(draws["k"], np.float64)
        V = np.asarray(draws["v"], np.float64)
        loc = guide.median(params)
        scale_mean = float(np.mean(np.concatenate([K.std(0), V.std(0)])))
    pot = potential_fn_gen("marginal", spec.variant)(*args)
    g = jax.grad(pot)({n: jnp.asarray(loc[n], jnp.float32) for n in ("k", "v")})
    # everything but the execution of the compiled steps is set-up: tracing and compiling
    # SVI's init, the guide's sampler and the final gradient (the persistent cache serves
    # them in later processes)
    compile_s = time.perf_counter() - t0 - t_exec
    grad_rms = float(np.sqrt(np.mean(np.concatenate([np.asarray(g["k"]),
                                                     np.asarray(g["v"])]) ** 2)))
    m = max(1, steps // 10)
    last, prev = losses[-m:], losses[-2 * m:-m]
    change = float(last.mean() - prev.mean())
    se = float(math.hypot(last.std(ddof=1) / math.sqrt(m), prev.std(ddof=1) / math.sqrt(m))
               ) if m > 1 else math.nan
    final = float(last.mean())
    if guide_kind == "map":
        converged = bool(grad_rms < gtol)
        reason = (f"rms gradient {grad_rms:.2e} {'<' if converged else '>='} gtol {gtol:g} "
                  f"after {steps} steps")
    else:
        plateau = abs(change) <= 2 * se if math.isfinite(se) else False
        small = abs(change) <= VI_RTOL * abs(final)
        converged = bool(plateau or small)
        reason = (f"ELBO change over the last tenth {change:+.3g} (stderr {se:.2g}, "
                  f"|final| {abs(final):.4g}): " + ("plateau" if converged else
                                                    "still moving"))
    return VIRun(K, V, losses, steps, steps * num_particles + 1, final, change, se, grad_rms,
                 converged, reason, float(compile_s), float(t_exec), scale_mean)
