"""ERM protocols of docs/estimators.md: starts, restarts, batched ``lam`` grids, validation, seeds.

One call of :func:`run_erm_protocol` fits ``seeds`` independent tasks (teacher and data drawn from
``jax.random.key(seed)`` exactly as :func:`bayesslr.core.task.sample_task` draws them, so every
method fitted with the same seed sees the same teacher, training data and test data) and reports,
per seed, the test errors on fresh data, the training loss, the seven overlaps, the iterations
and the convergence flag.

Batching. For each seed, the ``restarts x lam grid`` members that share the same data are
fitted as one batch (:func:`bayesslr.erm.lbfgs.lbfgs_solve_compact`): every function evaluation
is one pass over the data for all of them, and the batch shrinks as its members stop, so a
stopped member stops costing evaluations. The seeds (which share no data) run one after another,
each with only its own data in memory, drawn chunk by chunk (:mod:`bayesslr.erm.stream`: the
numbers of :func:`bayesslr.core.task.sample_task` without its several full-size temporaries; the
test set is streamed through the scoring and never held whole). One compilation of the solver
serves every task, seed and ``lam`` of the same shapes (``N``, ``D``, ``L``, batch size).

Starts (the algorithm's randomness comes from ``fold_in(key(seed), 1)``, apart from the data):

* ``informed`` (the paper's protocol): ``k = c k* + s xi``, ``v = v* + s zeta`` with
  ``c = c_nu`` (``sqrt(nu)`` spiked, ``nu`` max; :data:`INFORMED_C_INF` when ``nu = inf``),
  ``s = init_noise`` and ``xi, zeta ~ N(0, I_D)`` fresh for each restart;
* ``random``: ``k, v ~ N(0, init_scale^2 I_D)`` independent of the teacher.

The activation's own scalars start at their registry defaults. Among the restarts the one with
the lowest final objective is kept (per seed and per ``lam``).

``lam = "replica"``: the ``lam`` minimising the replica theory's test error at the cell's task
and ``alpha`` (resolved, and cached on disk, by the one service
:func:`bayesslr.theory.replica_lam.replica_lam`; this module receives the number).

``lam = "validation"``: the last ``val_frac`` of the training samples is held out; every ``lam``
of the grid is fitted on the rest; the ``lam`` with the smallest validation risk ``mean (y - f)^2``
(noisy labels, averaged over seeds) is chosen for this ``alpha``; the model is then refitted on
the whole training set with that ``lam``. The test set never enters the selection: the selection
code receives only the training data.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field
from functools import partial
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from bayesslr.core.activations import Activation, get_activation
from bayesslr.core.jaxconfig import Array, PRNGKey
from bayesslr.core.lam import LAM_REPLICA, LAM_VALIDATION, parse_lam
from bayesslr.core.metrics import TestErrors, oracle_terms, score_given
from bayesslr.core.options import Validated, option
from bayesslr.core.task import (
    OVERLAP_NAMES,
    ConfigError,
    Data,
    TaskConfig,
    Teacher,
    algorithm_key,
    check_int,
    check_real,
    make_task,
    overlaps,
    sample_task,
)
from bayesslr.erm.lbfgs import (
    DEFAULT_GTOL,
    DEFAULT_MAX_ITER,
    DEFAULT_MEMORY,
    SolverResult,
    lbfgs_solve_compact,
)
from bayesslr.erm.objective import Params, predict_params
from bayesslr.erm.stream import can_stream, stream_test
from bayesslr.erm.stream import draw_train as stream_draw_train

INITS: tuple[str, ...] = ("informed", "random")
INFORMED_C_INF = 5.0  # norm factor of the informed start for max-SLR with nu = inf
DEFAULT_LAM_GRID: tuple[float, ...] = (1e-3, 1e-2, 3e-2, 0.1, 0.3, 1.0, 3.0)


ERM_LAM_MODES: tuple[str, ...] = (LAM_VALIDATION, LAM_REPLICA)  # the words of lam ERM takes


def parse_erm_lam(value: Any) -> float | str:
    """A ridge penalty of ERM (:func:`bayesslr.core.lam.parse_lam` narrowed to
    :data:`ERM_LAM_MODES`): a real ``>= 0``, ``"validation"`` (grid search on held-out training
    data) or ``"replica"`` (the lam minimising the replica theory's test error, resolved by
    :func:`bayesslr.theory.replica_lam.replica_lam`)."""
    return parse_lam(value, ERM_LAM_MODES)


@dataclass(frozen=True)
class ERMOptions(Validated):
    """Options of the L-BFGS ERM protocol (each field checked on construction).

    Attributes
    ----------
    init : {"informed", "random"}
        Start (see the module docstring).
    restarts : int
        Starts per seed and ``lam``; the lowest final objective is kept.
    init_noise : float
        Perturbation size ``s`` of the informed start.
    init_scale : float
        Standard deviation of the random start's components.
    n_test : int
        Fresh test samples per seed.
    max_iter : int
        L-BFGS iteration cap.
    gtol : float
        Tolerance on ``|grad S| / sqrt(D)``.
    memory : int
        L-BFGS history size.
    lam_grid : tuple of float
        Grid searched by ``lam = "validation"``.
    val_frac : float
        Fraction of the training samples held out for the validation of ``lam``.
    """

    init: str = option("informed", choices=INITS, doc="start: informed (near the teacher, the "
                       "paper's protocol) or random")
    restarts: int = option(1, low=1, high=1000, doc="starts per seed and lam; the lowest "
                           "final objective is kept")
    init_noise: float = option(0.1, low=0.0, doc="perturbation size of the informed start")
    init_scale: float = option(1.0, low=0.0, low_open=True,
                               doc="standard deviation of the random start's components")
    n_test: int = option(10_000, low=2, high=10**8, doc="fresh test samples per seed")
    max_iter: int = option(DEFAULT_MAX_ITER, low=1, high=10**6, doc="L-BFGS iteration cap")
    gtol: float = option(DEFAULT_GTOL, low=0.0, low_open=True,
                         doc="tolerance on |grad S| / sqrt(D)")
    memory: int = option(DEFAULT_MEMORY, low=1, high=1000, doc="L-BFGS history size")
    lam_grid: tuple[float, ...] = option(DEFAULT_LAM_GRID, low=0.0, max_len=200,
                                         doc="grid searched by lam='validation'")
    val_frac: float = option(0.2, low=0.0, high=0.9, low_open=True,
                             doc="fraction of the training set held out to choose lam")

    def __post_init__(self) -> None:
        super().__post_init__()
        object.__setattr__(self, "lam_grid", tuple(sorted(self.lam_grid)))


@dataclass(frozen=True)
class ERMResult:
    """Per-seed outcome of :func:`run_erm_protocol` (numpy arrays of length ``seeds`` unless noted).

    Attributes
    ----------
    seeds : ndarray of int
        The seeds fitted.
    lam : float
        The ``lam`` used (the chosen one under ``lam = "validation"``).
    test_error, stderr, risk, risk_stderr, oracle_error, oracle_error_stderr,
    excess_over_oracle, excess_over_oracle_stderr : ndarray
        Per seed, see :class:`bayesslr.core.metrics.TestErrors` (``stderr``: the test-set Monte
        Carlo error of that seed's ``test_error``).
    train_loss : ndarray
        ``1/(2N) sum (y - f)^2`` on the training set at the solution.
    objective : ndarray
        Final per-sample objective ``S / N``.
    overlaps : dict of str to ndarray
        The seven overlaps ``m_k, q_k, m_v, q_v, m_kv, m_vk, q_kv``.
    theta : dict of str to ndarray
        The activation's own trained scalars (erf: ``c``).
    iterations, converged, grad_norm, evaluations : ndarray
        L-BFGS iterations, convergence flag, final ``|grad S| / sqrt(D)`` and function
        evaluations of the kept restart.
    start : str
        ``informed`` or ``random``.
    lam_grid, val_risk, val_se : ndarray or None
        Under ``lam = "validation"``: the grid, the validation risk (mean over seeds) and its
        standard error over seeds, per grid point.
    params : dict of str to ndarray or None
        The fitted ``k`` ``(seeds, D)``, ``v`` ``(seeds, D)`` and ``theta`` ``(seeds, P)``.
    runtime_s : float
        Wall time of the call, compilation included (shared evenly by the results of one
        :func:`run_erm_protocol_grid` call).
    time_data_s, time_fit_s, time_score_s : float
        Its parts: drawing the training data and starts, fitting (the ``lam`` selection
        included), drawing the test data and scoring.
    options : ERMOptions
        Options used.
    """

    seeds: np.ndarray
    lam: float
    test_error: np.ndarray
    stderr: np.ndarray
    risk: np.ndarray
    risk_stderr: np.ndarray
    oracle_error: np.ndarray
    oracle_error_stderr: np.ndarray
    excess_over_oracle: np.ndarray
    excess_over_oracle_stderr: np.ndarray
    train_loss: np.ndarray
    objective: np.ndarray
    overlaps: dict[str, np.ndarray]
    theta: dict[str, np.ndarray]
    iterations: np.ndarray
    converged: np.ndarray
    grad_norm: np.ndarray
    evaluations: np.ndarray
    start: str
    lam_grid: np.ndarray | None = None
    val_risk: np.ndarray | None = None
    val_se: np.ndarray | None = None
    params: dict[str, np.ndarray] | None = None
    runtime_s: float = 0.0
    time_data_s: float = 0.0
    time_fit_s: float = 0.0
    time_score_s: float = 0.0
    options: ERMOptions = field(default_factory=ERMOptions)

    def summary(self) -> dict[str, Any]:
        """Scalars over seeds: means, and ``stderr`` of ``test_error``.

        ``stderr`` is the standard error over seeds (teacher, data and test set all vary); with a
        single seed it is the test-set Monte Carlo error of that seed, which ignores the
        teacher-to-teacher spread. ``stderr_test`` is the test-set part alone (root mean square
        of the seeds' own errors over the number of seeds).
        """
        s = len(self.seeds)

        def over_seeds(x: np.ndarray, own: np.ndarray) -> float:
            return float(np.std(x, ddof=1) / math.sqrt(s)) if s > 1 else float(own[0])

        gap = self.excess_over_oracle
        out: dict[str, Any] = {
            "test_error": float(np.mean(self.test_error)),
            "stderr": over_seeds(self.test_error, self.stderr),
            "stderr_test": float(np.sqrt(np.mean(self.stderr**2) / s)),
            "risk": float(np.mean(self.risk)), "oracle_error": float(np.mean(self.oracle_error)),
            "oracle_error_stderr": over_seeds(self.oracle_error, self.oracle_error_stderr),
            "excess_over_oracle": float(np.mean(gap)),
            "excess_over_oracle_stderr": over_seeds(gap, self.excess_over_oracle_stderr),
            "train_loss": float(np.mean(self.train_loss)),
            "objective": float(np.mean(self.objective)),
        }
        out.update({k: float(np.mean(v)) for k, v in self.overlaps.items()})
        out.update({f"theta_{k}": float(np.mean(v)) for k, v in self.theta.items()})
        out.update({
            "lam": self.lam, "converged": bool(np.all(self.converged)),
            "converged_fraction": float(np.mean(self.converged)),
            "iterations": int(np.max(self.iterations)),
            "evaluations": int(np.sum(self.evaluations)),
            "grad_norm": float(np.max(self.grad_norm)), "init": self.start,
            "restarts": self.options.restarts, "seeds": s, "n_test": self.options.n_test,
            "runtime_s": self.runtime_s, "time_data_s": self.time_data_s,
            "time_fit_s": self.time_fit_s, "time_score_s": self.time_score_s,
        })
        if self.lam_grid is not None:
            out["lam_grid"] = [float(x) for x in self.lam_grid]
            out["val_risk"] = [float(x) for x in self.val_risk]
        return out


# --------------------------------------------------------------------------------------------
# starts
# --------------------------------------------------------------------------------------------
def informed_scale(task: TaskConfig) -> float:
    """``c`` of the informed start: ``c_nu``, or :data:`INFORMED_C_INF` when ``nu = inf``."""
    return INFORMED_C_INF if math.isinf(task.c_nu) else float(task.c_nu)


def make_start(key: PRNGKey, task: TaskConfig, teacher: Teacher, informed: Array,
               init_noise: Array, init_scale: Array) -> tuple[Array, Array]:
    """``(k, v)`` of one start (see the module docstring); ``key`` is the restart's key.

    ``informed`` is a traced boolean (informed or random start), so that one compilation of
    the data draw serves both.
    """
    kk, kv = jax.random.split(key)
    xi = jax.random.normal(kk, (task.D,))
    zeta = jax.random.normal(kv, (task.D,))
    k = jnp.where(informed, informed_scale(task) * teacher.k + init_noise * xi, init_scale * xi)
    v = jnp.where(informed, teacher.v + init_noise * zeta, init_scale * zeta)
    return k, v


def _seed_keys(seeds: np.ndarray) -> Array:
    return jax.vmap(jax.random.key)(jnp.asarray(seeds, dtype=jnp.uint32))


# --------------------------------------------------------------------------------------------
# jitted pieces. Data and starts are drawn by small task-specific functions; the expensive fit
# depends only on shapes, the activation and the solver settings, so one compilation serves
# every (variant, nu, delta, seed, lam) of the same size.
# --------------------------------------------------------------------------------------------
@partial(jax.jit, static_argnames=("task", "n_train", "restarts", "stream"))
def _draw_train(key: PRNGKey, informed: Array, init_noise: Array, init_scale: Array, *,
                task: TaskConfig, n_train: int, restarts: int, stream: bool = False):
    """Teacher, training data and the ``restarts`` starts ``(k, v)`` of one seed (``stream``:
    the data built chunk by chunk, :func:`bayesslr.erm.stream.draw_train`)."""
    if stream:
        teacher, data = stream_draw_train(key, task, n_train)
    else:
        teacher, data, _ = sample_task(key, task, n_train, 0)
    kinit = algorithm_key(key, "start")
    starts = jax.vmap(lambda r: make_start(jax.random.fold_in(kinit, r), task, teacher,
                                           informed, init_noise, init_scale))(
        jnp.arange(restarts))
    return teacher, data, starts


@partial(jax.jit, static_argnames=("task", "n_test", "act", "stream"))
def _score(params: Params, key: PRNGKey, *, task: TaskConfig, n_test: int, act: Activation,
           stream: bool = False):
    """Test errors and overlaps of ``G`` fits of one seed (``params`` with leading axis
    ``G``) on that seed's fresh test set, drawn once (``stream``: chunk by chunk, never held
    whole, :func:`bayesslr.erm.stream.stream_test`)."""
    G = params["k"].shape[0]

    def predict_all(X, mask):
        return jax.vmap(lambda p: predict_params(act, p, X, mask))(params).T  # (n, G)

    if stream:
        teacher, P, z_s, y, f = stream_test(key, task, n_test, predict_all, G)
    else:
        teacher, _, test = sample_task(key, task, 0, n_test)
        (P, z_s), y, f = oracle_terms(task, teacher, test), test.y, predict_all(test.X,
                                                                                test.mask)
    errs = jax.vmap(lambda fj: score_given(P, z_s, y, fj), in_axes=1)(f)
    return errs, jax.vmap(lambda p: overlaps(p["k"], p["v"], teacher))(params)


@partial(jax.jit, static_argnames=("restarts",))
def _members(starts: Params, lam_k: Array, lam_v: Array, *, restarts: int):
    """The ``G x restarts`` members of one seed (lam-major), flattened into one batch."""
    G = lam_k.shape[0]
    p0 = jax.tree_util.tree_map(lambda a: jnp.tile(a, (G,) + (1,) * (a.ndim - 1)), starts)
    return p0, jnp.repeat(lam_k, restarts), jnp.repeat(lam_v, restarts)


@partial(jax.jit, static_argnames=("act", "restarts"))
def _keep_best(res: SolverResult, data: Data, weight: Array, *, act: Activation,
               restarts: int):
    """Per lam, the restart with the lowest final objective; its training loss and the
    validation risk ``mean (y - f)^2`` on the held-out samples (NaN when none)."""
    R = restarts
    G = res.objective.shape[0] // R
    res = jax.tree_util.tree_map(lambda a: a.reshape((G, R) + a.shape[1:]), res)
    obj = jnp.where(jnp.isfinite(res.objective), res.objective, jnp.inf)
    best = jnp.argmin(obj, axis=1)
    res = jax.tree_util.tree_map(
        lambda a: jnp.take_along_axis(a, best.reshape((G, 1) + (1,) * (a.ndim - 2)), axis=1)[:, 0],
        res)
    f = jax.vmap(lambda p: predict_params(act, p, data.X, data.mask))(res.params)  # (G, N)
    r2 = (data.y[None, :] - f) ** 2
    train = 0.5 * jnp.sum(weight * r2, -1) / jnp.sum(weight)
    held = 1.0 - weight
    val = jnp.where(jnp.sum(held) > 0, jnp.sum(held * r2, -1) / jnp.maximum(jnp.sum(held), 1.0),
                    jnp.nan)
    return res, train, val


def compact_default(n_train: int, task: TaskConfig) -> bool:
    """Whether :func:`fit_seeds` shrinks a batch as its members stop: when the data are large
    enough (``N L D >= COMPACT_MIN_ELEMENTS``) for the saved evaluations to outweigh the
    compilation of the smaller batch sizes."""
    return n_train * task.L_max * task.D >= COMPACT_MIN_ELEMENTS


COMPACT_MIN_ELEMENTS = 2**20


def fit_seeds(task: TaskConfig, activation: str, n_train: int, seeds: Any, lam_k: Any,
              lam_v: Any | None = None, *, opts: ERMOptions | None = None,
              n_fit: int | None = None, compact: bool | None = None,
              timings: dict[str, float] | None = None, passes: dict[int, int] | None = None):
    """Fit every seed and every ``lam`` (a grid, fitted together), on the first ``n_fit`` samples.

    For each seed (one after another: they share no data), the teacher, training data and
    starts are drawn, then the ``len(lam) x restarts`` members are fitted as one batch that
    shares every pass over the data (:func:`bayesslr.erm.lbfgs.lbfgs_solve_compact`), shrunk as
    members stop when ``compact`` (default :func:`compact_default`).

    Returns the raw batched results: a :class:`~bayesslr.erm.lbfgs.SolverResult` with leading
    axes ``(seed, lam)``, the training loss ``(seed, lam)`` and the validation risk
    ``mean (y - f)^2`` ``(seed, lam)`` on the held-out samples ``n_fit..n_train`` (NaN when none
    are held out). This is the building block of :func:`run_erm_protocol` and of the ``lam``-grid
    benchmark. ``timings``, when given, receives the seconds spent drawing the data
    (``data_s``) and fitting (``fit_s``, compilation included); ``passes`` the shared
    evaluations run per batch size (summed over seeds).
    """
    opts = opts or ERMOptions()
    act = get_activation(activation)
    n_train = check_int("n_train", n_train, low=1)
    n_fit = n_train if n_fit is None else check_int("n_fit", n_fit, low=1, high=n_train)
    seeds = np.atleast_1d(np.asarray(seeds, dtype=np.int64))
    lam_k = jnp.atleast_1d(jnp.asarray(lam_k, dtype=jnp.result_type(float)))
    lam_v = lam_k if lam_v is None else jnp.atleast_1d(
        jnp.asarray(lam_v, dtype=jnp.result_type(float)))
    if lam_k.shape != lam_v.shape:
        raise ConfigError(f"lam_v has {lam_v.shape[0]} values, lam_k {lam_k.shape[0]}; "
                          "allowed: the same number")
    for lam in np.asarray(lam_k).tolist() + np.asarray(lam_v).tolist():
        check_real("lam", lam, low=0.0)
    compact = compact_default(n_train, task) if compact is None else bool(compact)
    weight = (jnp.arange(n_train) < n_fit).astype(lam_k.dtype)
    flags = (jnp.asarray(opts.init == "informed"), jnp.asarray(opts.init_noise),
             jnp.asarray(opts.init_scale))
    outs = []
    t_data = t_fit = 0.0
    for key in _seed_keys(seeds):
        t0 = time.perf_counter()
        _, data, (k0, v0) = jax.block_until_ready(_draw_train(
            key, *flags, task=task, n_train=n_train, restarts=opts.restarts,
            stream=can_stream(key, n_train, task)))
        t1 = time.perf_counter()
        theta0 = jnp.broadcast_to(act.init_theta(), k0.shape[:1] + (act.n_params,))
        p0, lk, lv = _members({"k": k0, "v": v0, "theta": theta0}, lam_k, lam_v,
                              restarts=opts.restarts)
        res = lbfgs_solve_compact(act, p0, data, lk, lv, weight, max_iter=opts.max_iter,
                                  gtol=opts.gtol, memory=opts.memory, compact=compact,
                                  passes=passes)
        outs.append(jax.tree_util.tree_map(np.asarray, _keep_best(
            res, data, weight, act=act, restarts=opts.restarts)))
        del data
        t_data += t1 - t0
        t_fit += time.perf_counter() - t1
    if timings is not None:
        timings.update(data_s=t_data, fit_s=t_fit)
    return jax.tree_util.tree_map(lambda *a: np.stack(a), *outs)


def evaluate(task: TaskConfig, activation: str, seeds: Any, params: Params,
             n_test: int) -> tuple[TestErrors, dict[str, np.ndarray]]:
    """Test errors on fresh data and overlaps of ``params`` (leading axis: seed), seed by seed."""
    params = jax.tree_util.tree_map(lambda a: np.asarray(a)[:, None], params)
    errs, ovs = evaluate_grid(task, activation, seeds, params, n_test)
    return errs[0], ovs[0]


def evaluate_grid(task: TaskConfig, activation: str, seeds: Any, params: Params, n_test: int
                  ) -> tuple[list[TestErrors], list[dict[str, np.ndarray]]]:
    """:func:`evaluate` of several fits per seed (``params`` with leading axes ``(seed, fit)``),
    drawing each seed's test set once; one ``(errors, overlaps)`` per fit."""
    act = get_activation(activation)
    seeds = np.atleast_1d(np.asarray(seeds, dtype=np.int64))
    errs, ovs = [], []
    for i, key in enumerate(_seed_keys(seeds)):
        p = jax.tree_util.tree_map(lambda a, i=i: jnp.asarray(a[i]), params)
        e, o = _score(p, key, task=task, n_test=n_test, act=act,
                      stream=can_stream(key, n_test, task))
        errs.append(jax.tree_util.tree_map(np.asarray, e))
        ovs.append(jax.tree_util.tree_map(np.asarray, o))
    n_fits = int(np.shape(params["k"])[1])
    return ([_stack([jax.tree_util.tree_map(lambda a, j=j: a[j], e) for e in errs])
             for j in range(n_fits)],
            [_stack([{k: v[j] for k, v in o.items()} for o in ovs]) for j in range(n_fits)])


def _stack(xs: list[Any]) -> Any:
    """Stack a list of equal pytrees of arrays along a new leading axis (numpy)."""
    return jax.tree_util.tree_map(lambda *a: np.stack(a), *xs)


def run_erm_protocol(task: TaskConfig, activation: str, n_train: int, lam: float | str, *,
            seeds: Any = (0,), opts: ERMOptions | None = None) -> ERMResult:
    """Regularised ERM by L-BFGS (docs/estimators.md) for several seeds; see the module docstring.

    Parameters
    ----------
    task : TaskConfig
        The SLR task (its ``D`` is the fitted dimension).
    activation : str
        A key of :data:`bayesslr.core.activations.ACTIVATIONS`.
    n_train : int
        Training samples ``N = alpha D``.
    lam : float or "validation"
        Ridge penalty ``lam_k = lam_v``, or ``"validation"`` (grid search on held-out training
        data, :func:`select_lam`). ``"replica"`` is resolved to a number by the registry entry
        (:func:`bayesslr.theory.replica_lam.replica_lam`) before it gets here.
    seeds : sequence of int
        Seeds of teacher, data, test data and starts.
    opts : ERMOptions
        Protocol options.

    Returns
    -------
    ERMResult
    """
    res = run_erm_protocol_grid(task, activation, n_train, [lam], seeds=seeds, opts=opts)
    return res[0]


def run_erm_protocol_grid(task: TaskConfig, activation: str, n_train: int, lams: Any, *,
                 seeds: Any = (0,), opts: ERMOptions | None = None) -> list[ERMResult]:
    """:func:`run_erm_protocol` for several penalties on the same data, one batch per seed.

    ``lams`` holds reals ``>= 0`` and at most one ``"validation"``; the fixed values (and the
    validation choice's refit) are fitted together, so each pass over a seed's data serves all
    of them, and each returned :class:`ERMResult` is what :func:`run_erm_protocol` gives for that
    ``lam`` alone (the members of a batch never influence each other; only the rounding of the
    shared matrix products can differ). The validation search (:func:`select_lam`) runs first,
    on its own held-out split. Runtimes are shared evenly by the results.
    """
    t0 = time.perf_counter()
    opts = opts or ERMOptions()
    act = get_activation(activation)
    seeds = np.atleast_1d(np.asarray(seeds, dtype=np.int64))
    lams = [parse_erm_lam(x) for x in lams]
    if "replica" in lams:
        raise ConfigError("lam='replica' is resolved by the registry entry erm:<activation> "
                          "(bayesslr.theory.replica_lam.replica_lam); allowed here: real >= 0 or "
                          "'validation'")
    if lams.count("validation") > 1:
        raise ConfigError("lam='validation' is given twice; allowed: once")
    validation = "validation" in lams
    n_train = check_int("n_train", n_train, low=2 if validation else 1)
    grid = val_risk = val_se = None
    tim: dict[str, float] = {"data_s": 0.0, "fit_s": 0.0}
    values = list(lams)
    if validation:
        sel: dict[str, float] = {}
        lam_v, grid, val_risk, val_se = select_lam(task, activation, n_train, seeds, opts,
                                                   timings=sel)
        tim = {k: tim[k] + sel[k] for k in tim}
        values[lams.index("validation")] = lam_v
    distinct = sorted(set(values))
    fit: dict[str, float] = {}
    res, train, _ = fit_seeds(task, activation, n_train, seeds, distinct, opts=opts,
                              timings=fit)
    tim = {k: tim[k] + fit[k] for k in tim}
    t_score = time.perf_counter()
    errs, ov = evaluate_grid(task, activation, seeds, res.params, opts.n_test)
    t_score = time.perf_counter() - t_score
    runtime = (time.perf_counter() - t0) / len(lams)
    out = []
    for lam, value in zip(lams, values, strict=True):
        j = distinct.index(value)
        e, o = errs[j], ov[j]
        theta = np.asarray(res.params["theta"][:, j])
        is_val = lam == "validation"
        out.append(ERMResult(
            seeds=seeds, lam=float(value), test_error=e.test_error, stderr=e.stderr,
            risk=e.risk, risk_stderr=e.risk_stderr, oracle_error=e.oracle_error,
            oracle_error_stderr=e.oracle_error_stderr, excess_over_oracle=e.excess_over_oracle,
            excess_over_oracle_stderr=e.excess_over_oracle_stderr,
            train_loss=np.asarray(train[:, j]), objective=np.asarray(res.objective[:, j]),
            overlaps={k: np.asarray(o[k]) for k in OVERLAP_NAMES},
            theta={n: theta[:, i] for i, n in enumerate(act.param_names)},
            iterations=np.asarray(res.iterations[:, j]),
            converged=np.asarray(res.converged[:, j]), grad_norm=np.asarray(res.grad_norm[:, j]),
            evaluations=np.asarray(res.evaluations[:, j]), start=opts.init,
            lam_grid=grid if is_val else None, val_risk=val_risk if is_val else None,
            val_se=val_se if is_val else None,
            params={k: np.asarray(v[:, j]) for k, v in res.params.items()},
            runtime_s=runtime, time_data_s=tim["data_s"] / len(lams),
            time_fit_s=tim["fit_s"] / len(lams), time_score_s=t_score / len(lams),
            options=opts))
    return out


def select_lam(task: TaskConfig, activation: str, n_train: int, seeds: Any,
               opts: ERMOptions | None = None, *, timings: dict[str, float] | None = None
               ) -> tuple[float, np.ndarray, np.ndarray, np.ndarray]:
    """Choose ``lam`` on a validation split of the *training* data (docs/estimators.md).

    The last ``round(val_frac * n_train)`` training samples are held out, every grid value is
    fitted on the others (one batched computation), and the ``lam`` with the smallest validation
    risk averaged over seeds is returned (ties: the smaller ``lam``). No test data is drawn here.

    Returns
    -------
    lam, grid, val_risk, val_se : float, ndarray, ndarray, ndarray
        Chosen value, grid, mean validation risk per grid point and its standard error over seeds.
    """
    opts = opts or ERMOptions()
    n_val = min(max(1, int(round(opts.val_frac * n_train))), n_train - 1)
    grid = np.asarray(opts.lam_grid, dtype=float)
    _, _, val = fit_seeds(task, activation, n_train, seeds, grid, opts=opts,
                          n_fit=n_train - n_val, timings=timings)
    val = np.where(np.isfinite(val), val, np.inf)
    mean = val.mean(axis=0)
    se = (val.std(axis=0, ddof=1) / math.sqrt(val.shape[0]) if val.shape[0] > 1
          else np.full_like(mean, np.nan))
    return float(grid[int(np.argmin(mean))]), grid, mean, se


# --------------------------------------------------------------------------------------------
# ERM on given data (the Python API: a user's own arrays, a lam grid fitted as one batch)
# --------------------------------------------------------------------------------------------
class ERMFit(NamedTuple):
    """L-BFGS fits of one activation on one data set, one per ``lam`` (leading axis ``G``).

    Attributes
    ----------
    activation : str
        The activation fitted.
    lam : numpy.ndarray, shape (G,)
        Ridge penalties (``lam_k = lam_v``).
    params : dict
        ``{"k": (G, D), "v": (G, D), "theta": (G, P)}``, the kept restart per ``lam``.
    objective : numpy.ndarray, shape (G,)
        Final per-sample objective ``S / N``.
    train_loss : numpy.ndarray, shape (G,)
        ``1/(2N) sum (y - f)^2`` at the solution.
    grad_norm, iterations, evaluations, converged : numpy.ndarray, shape (G,)
        Final ``|grad S| / sqrt(D)``, L-BFGS iterations, function evaluations, and whether the
        gradient tolerance was met.

    Examples
    --------
    See :func:`fit_erm`.
    """

    activation: str
    lam: np.ndarray
    params: dict[str, np.ndarray]
    objective: np.ndarray
    train_loss: np.ndarray
    grad_norm: np.ndarray
    iterations: np.ndarray
    evaluations: np.ndarray
    converged: np.ndarray

    def predict(self, X: Array, mask: Array | None = None) -> np.ndarray:
        """Predictions ``f(X)`` of every fit, ``(G, n)`` (``mask`` defaults to all tokens)."""
        X = jnp.asarray(X)
        mask = jnp.ones(X.shape[:2], bool) if mask is None else jnp.asarray(mask, bool)
        act = get_activation(self.activation)
        p = jax.tree_util.tree_map(jnp.asarray, self.params)
        return np.asarray(jax.vmap(lambda q: predict_params(act, q, X, mask))(p))


def fit_erm(data: Data, activation: str, lam: Any, *, key: PRNGKey | None = None,
            start: str | dict[str, Any] = "random", teacher: Teacher | None = None,
            task: TaskConfig | None = None, options: ERMOptions | None = None) -> ERMFit:
    """Regularised ERM of one activation on *given* data, a ``lam`` grid fitted as one batch.

    The objective, solver and stopping rule are those of the suite's ERM protocol
    (docs/estimators.md): ``S = sum 1/2 (y - f(X))^2 + lam/2 (|k|^2 + |v|^2)`` minimised by the
    batch-native L-BFGS, each ``lam`` (and each restart) an independent member sharing the
    data matrix.

    Parameters
    ----------
    data : Data
        Training data (:func:`bayesslr.core.task.sample_task`, or a user's arrays through
        :func:`bayesslr.core.task.as_data`).
    activation : str
        ``softmax``, ``linear``, ``erf`` or ``softplus``.
    lam : float or sequence of float
        Ridge penalty or penalties (each ``>= 0``).
    key : PRNGKey, optional
        Randomness of the random starts (default ``jax.random.key(0)``).
    start : {"random", "informed"} or dict
        Random (``N(0, init_scale^2 I)``), informed (near ``(c_nu k*, v*)``: needs ``teacher``
        and ``task``), or explicit ``{"k": (D,), "v": (D,)}``.
    teacher, task : optional
        For the informed start.
    options : ERMOptions, optional
        ``restarts``, ``init_scale``, ``init_noise``, ``max_iter``, ``gtol``, ``memory``.

    Returns
    -------
    ERMFit

    Examples
    --------
    >>> import jax, bayesslr as bs
    >>> task = bs.make_task("spiked", L=3, nu=2.0, delta=0.01, D=32)
    >>> teacher, train, test = bs.sample_task(jax.random.key(0), task, 160, 500)
    >>> fit = bs.fit_erm(train, "softmax", [0.1, 1.0], start="informed", teacher=teacher,
    ...                  task=task)
    >>> bool(fit.converged.all()), fit.predict(test.X, test.mask).shape
    (True, (2, 500))
    """
    opts = options or ERMOptions()
    act = get_activation(activation)
    if not isinstance(data, Data):
        raise ConfigError(f"data={type(data).__name__} is not Data; allowed: Data from "
                          "sample_task or as_data(X, y, mask)")
    lam_arr = np.atleast_1d(np.asarray(lam, dtype=float))
    if lam_arr.ndim != 1 or lam_arr.size == 0:
        raise ConfigError(f"lam={lam!r} is not a penalty or a list; allowed: reals >= 0")
    for x in lam_arr.tolist():
        check_real("lam", x, low=0.0)
    D = int(data.X.shape[-1])
    dtype = jnp.result_type(float)
    key = jax.random.key(0) if key is None else key
    keys = jax.random.split(key, opts.restarts)
    if isinstance(start, dict):
        k0 = jnp.broadcast_to(jnp.asarray(start["k"], dtype), (opts.restarts, D))
        v0 = jnp.broadcast_to(jnp.asarray(start["v"], dtype), (opts.restarts, D))
    elif start in INITS:
        informed = start == "informed"
        if informed and (teacher is None or task is None):
            raise ConfigError("start='informed' needs teacher and task; allowed without them: "
                              "'random' or explicit {'k': ..., 'v': ...}")
        ref_task = task if task is not None else make_task(D=D)
        ref = teacher if teacher is not None else Teacher(jnp.zeros(D), jnp.zeros(D))
        k0, v0 = jax.vmap(lambda kk: make_start(kk, ref_task, ref, jnp.asarray(informed),
                                                jnp.asarray(opts.init_noise),
                                                jnp.asarray(opts.init_scale)))(keys)
    else:
        raise ConfigError(f"start={start!r} is unknown; allowed: random, informed or a dict "
                          "{'k': ..., 'v': ...}")
    starts = {"k": k0, "v": v0,
              "theta": jnp.broadcast_to(act.init_theta(), (opts.restarts, act.n_params))}
    lam_j = jnp.asarray(lam_arr, dtype)
    weight = jnp.ones(data.y.shape, dtype)
    p0, lk, lv = _members(starts, lam_j, lam_j, restarts=opts.restarts)
    res = lbfgs_solve_compact(act, p0, data, lk, lv, weight, max_iter=opts.max_iter,
                              gtol=opts.gtol, memory=opts.memory,
                              compact=data.X.size >= COMPACT_MIN_ELEMENTS)
    res, train, _ = jax.tree_util.tree_map(np.asarray, _keep_best(
        res, data, weight, act=act, restarts=opts.restarts))
    return ERMFit(activation, lam_arr, res.params, res.objective, np.asarray(train),
                  res.grad_norm, res.iterations, res.evaluations, res.converged)
