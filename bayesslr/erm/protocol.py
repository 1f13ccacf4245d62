"""ERM protocols of spec section 4: starts, restarts, batched ``lam`` grids, validation, seeds.

One call of :func:`erm_fit` fits ``seeds`` independent tasks (teacher and data drawn from
``jax.random.key(seed)`` exactly as :func:`bayesslr.task.sample_task` draws them, so every method
fitted with the same seed sees the same teacher, training data and test data) and reports, per
seed, the test errors on fresh data, the training loss, the seven overlaps, the iterations and the
convergence flag.

Batching. Inside one jitted computation, for each seed, the ``restarts x lam grid`` members that
share the same data are fitted as one batch (:func:`bayesslr.erm.lbfgs.lbfgs_solve_batch`), so
the data matrix is read once per function evaluation for all of them; the seeds (which share no
data) run one after another inside the same computation (``lax.map``). The seeds' data are drawn
together, in chunks when they would not fit in ``max_batch_bytes``.

Starts (the algorithm's randomness comes from ``fold_in(key(seed), 1)``, apart from the data):

* ``informed`` (the paper's protocol): ``k = c k* + s xi``, ``v = v* + s zeta`` with
  ``c = c_nu`` (``sqrt(nu)`` spiked, ``nu`` max; :data:`INFORMED_C_INF` when ``nu = inf``),
  ``s = init_noise`` and ``xi, zeta ~ N(0, I_D)`` fresh for each restart;
* ``random``: ``k, v ~ N(0, init_scale^2 I_D)`` independent of the teacher.

The activation's own scalars start at their registry defaults. Among the restarts the one with
the lowest final objective is kept (per seed and per ``lam``).

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

from bayesslr.activations import Activation, get_activation
from bayesslr.erm.lbfgs import (
    DEFAULT_GTOL,
    DEFAULT_MAX_ITER,
    DEFAULT_MEMORY,
    lbfgs_solve_batch,
)
from bayesslr.erm.objective import Params, predict
from bayesslr.jaxconfig import Array, PRNGKey
from bayesslr.metrics import TestErrors, oracle_terms, score_given
from bayesslr.options import Validated, option
from bayesslr.task import (
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

INITS: tuple[str, ...] = ("informed", "random")
INFORMED_C_INF = 5.0  # norm factor of the informed start for max-SLR with nu = inf
DEFAULT_LAM_GRID: tuple[float, ...] = (1e-3, 1e-2, 3e-2, 0.1, 0.3, 1.0, 3.0)


LAM_MODES: tuple[str, ...] = ("validation",)


def parse_lam(value: Any) -> float | str:
    """A ridge penalty: a real ``>= 0``, or ``"validation"`` (grid search on held-out
    training data). ``"auto"`` is refused: it named two different searches (the ERM validation
    search and the replica theory's optimum)."""
    if isinstance(value, str) and value.strip().lower() in LAM_MODES:
        return value.strip().lower()
    if isinstance(value, str) and value.strip().lower() == "auto":
        raise ConfigError("lam='auto' is ambiguous; allowed: real >= 0 or 'validation' (grid "
                          "search on held-out training data)")
    if value is None:
        raise ConfigError("lam is not set; allowed: real >= 0 or 'validation'")
    return check_real("lam", value, low=0.0)


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
    max_batch_bytes : float
        Memory allowed for the training data of the seeds fitted together.
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
    max_batch_bytes: float = option(2e9, low=1.0, doc="memory allowed for the training data "
                                    "of the seeds fitted together")

    def __post_init__(self) -> None:
        super().__post_init__()
        object.__setattr__(self, "lam_grid", tuple(sorted(self.lam_grid)))


@dataclass(frozen=True)
class ERMResult:
    """Per-seed outcome of :func:`erm_fit` (numpy arrays of length ``seeds`` unless noted).

    Attributes
    ----------
    seeds : ndarray of int
        The seeds fitted.
    lam : float
        The ``lam`` used (the chosen one under ``lam = "validation"``).
    test_error, stderr, risk, risk_stderr, oracle_error, oracle_error_stderr,
    excess_over_oracle, excess_over_oracle_stderr : ndarray
        Per seed, see :class:`bayesslr.metrics.TestErrors` (``stderr``: the test-set Monte
        Carlo error of that seed's ``test_error``).
    train_loss : ndarray
        ``1/(2N) sum (y - f)^2`` on the training set at the solution.
    objective : ndarray
        Final per-sample objective ``S / N``.
    overlaps : dict of str to ndarray
        The seven overlaps ``m_k, q_k, m_v, q_v, m_kv, m_vk, q_kv``.
    theta : dict of str to ndarray
        The activation's own trained scalars (erf: ``c``).
    iterations, converged, grad_norm : ndarray
        L-BFGS iterations, convergence flag and final ``|grad S| / sqrt(D)`` of the kept restart.
    start : str
        ``informed`` or ``random``.
    lam_grid, val_risk, val_se : ndarray or None
        Under ``lam = "validation"``: the grid, the validation risk (mean over seeds) and its
        standard error over seeds, per grid point.
    params : dict of str to ndarray or None
        The fitted ``k`` ``(seeds, D)``, ``v`` ``(seeds, D)`` and ``theta`` ``(seeds, P)``.
    runtime_s : float
        Wall time of the call, compilation included.
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
    start: str
    lam_grid: np.ndarray | None = None
    val_risk: np.ndarray | None = None
    val_se: np.ndarray | None = None
    params: dict[str, np.ndarray] | None = None
    runtime_s: float = 0.0
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
            "grad_norm": float(np.max(self.grad_norm)), "init": self.start,
            "restarts": self.options.restarts, "seeds": s, "n_test": self.options.n_test,
            "runtime_s": self.runtime_s,
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
# every (variant, nu, delta) of the same size.
# --------------------------------------------------------------------------------------------
@partial(jax.jit, static_argnames=("task", "n_train", "restarts"))
def _draw_train(keys: Array, informed: Array, init_noise: Array, init_scale: Array, *,
                task: TaskConfig, n_train: int, restarts: int):
    """Teacher, training data and the ``restarts`` starts ``(k, v)`` of each seed."""

    def one(key):
        teacher, data, _ = sample_task(key, task, n_train, 0)
        kinit = algorithm_key(key, "start")
        starts = jax.vmap(lambda r: make_start(jax.random.fold_in(kinit, r), task, teacher,
                                               informed, init_noise, init_scale))(
            jnp.arange(restarts))
        return teacher, data, starts

    return jax.vmap(one)(keys)


@partial(jax.jit, static_argnames=("task", "n_test"))
def _draw_test(key: PRNGKey, *, task: TaskConfig, n_test: int):
    """Teacher, fresh test data and its oracle terms ``(P, z*)`` for one seed."""
    teacher, _, test = sample_task(key, task, 0, n_test)
    return teacher, test, oracle_terms(task, teacher, test)


@partial(jax.jit, static_argnames=("act",))
def _score(params: Params, teacher: Teacher, test: Data, oracle: tuple[Array, Array], *,
           act: Activation):
    f = predict(act, params, test.X, test.mask)
    return score_given(*oracle, test.y, f), overlaps(params["k"], params["v"], teacher)


def _fit_one_seed(data: Data, starts: Params, weight: Array, lam_k: Array, lam_v: Array,
                  max_iter: Array, gtol: Array, *, act: Activation, memory: int):
    """Fit all ``len(lam_k) x restarts`` members of one seed; keep the best restart per lam."""
    G = lam_k.shape[0]
    R = jax.tree_util.tree_leaves(starts)[0].shape[0]
    # members (G, R) flattened into one batch sharing the data
    p0 = jax.tree_util.tree_map(lambda a: jnp.tile(a, (G,) + (1,) * (a.ndim - 1)), starts)
    lk, lv = jnp.repeat(lam_k, R), jnp.repeat(lam_v, R)

    res = lbfgs_solve_batch(act, p0, data, lk, lv, weight, max_iter=max_iter, gtol=gtol,
                            memory=memory)
    res = jax.tree_util.tree_map(lambda a: a.reshape((G, R) + a.shape[1:]), res)
    obj = jnp.where(jnp.isfinite(res.objective), res.objective, jnp.inf)
    best = jnp.argmin(obj, axis=1)
    res = jax.tree_util.tree_map(
        lambda a: jnp.take_along_axis(a, best.reshape((G, 1) + (1,) * (a.ndim - 2)), axis=1)[:, 0],
        res)
    f = jax.vmap(lambda p: predict(act, p, data.X, data.mask))(res.params)  # (G, N)
    r2 = (data.y[None, :] - f) ** 2
    train = 0.5 * jnp.sum(weight * r2, -1) / jnp.sum(weight)
    held = 1.0 - weight
    val = jnp.where(jnp.sum(held) > 0, jnp.sum(held * r2, -1) / jnp.maximum(jnp.sum(held), 1.0),
                    jnp.nan)
    return res, train, val


@partial(jax.jit, static_argnames=("act", "memory"))
def _fit_chunk(data: Data, starts: Params, weight: Array, lam_k: Array, lam_v: Array,
               max_iter: Array, gtol: Array, *, act: Activation, memory: int):
    # seeds one after another: they share no data, and a vmap over seeds turned the shared
    # matrix product into a batched one that XLA's CPU backend ran ~40% slower (measured)
    def one(args):
        d, s = args
        return _fit_one_seed(d, s, weight, lam_k, lam_v, max_iter, gtol, act=act,
                             memory=memory)

    return jax.lax.map(one, (data, starts))


def fit_seeds(task: TaskConfig, activation: str, n_train: int, seeds: Any, lam_k: Any,
              lam_v: Any | None = None, *, opts: ERMOptions | None = None,
              n_fit: int | None = None):
    """Fit every seed and every ``lam`` (a grid, fitted together), on the first ``n_fit`` samples.

    Returns the raw batched results: a :class:`~bayesslr.erm.lbfgs.SolverResult` with leading
    axes ``(seed, lam)``, the training loss ``(seed, lam)`` and the validation risk
    ``mean (y - f)^2`` ``(seed, lam)`` on the held-out samples ``n_fit..n_train`` (NaN when none
    are held out). This is the building block of :func:`erm_fit` and of the ``lam``-grid
    benchmark.
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
    weight = (jnp.arange(n_train) < n_fit).astype(lam_k.dtype)
    # max_iter and gtol are traced (changing them does not recompile); memory is a shape
    max_iter, gtol = jnp.asarray(opts.max_iter), jnp.asarray(opts.gtol, dtype=lam_k.dtype)
    per_seed = 4.0 * 3 * n_train * task.L_max * task.D  # X, its masked copy, slack
    chunk = int(max(1, min(len(seeds), opts.max_batch_bytes // per_seed)))
    n_chunks = -(-len(seeds) // chunk)
    chunk = -(-len(seeds) // n_chunks)
    padded = np.resize(seeds, n_chunks * chunk)  # repeats the first seeds; dropped below
    outs = []
    for c in range(n_chunks):
        keys = _seed_keys(padded[c * chunk:(c + 1) * chunk])
        _, data, (k0, v0) = _draw_train(
            keys, jnp.asarray(opts.init == "informed"), jnp.asarray(opts.init_noise),
            jnp.asarray(opts.init_scale), task=task, n_train=n_train, restarts=opts.restarts)
        theta0 = jnp.broadcast_to(act.init_theta(), k0.shape[:2] + (act.n_params,))
        starts = {"k": k0, "v": v0, "theta": theta0}
        outs.append(jax.tree_util.tree_map(np.asarray, _fit_chunk(
            data, starts, weight, lam_k, lam_v, max_iter, gtol, act=act, memory=opts.memory)))
        del data
    return jax.tree_util.tree_map(lambda *a: np.concatenate(a)[:len(seeds)], *outs)


def evaluate(task: TaskConfig, activation: str, seeds: Any, params: Params,
             n_test: int) -> tuple[TestErrors, dict[str, np.ndarray]]:
    """Test errors on fresh data and overlaps of ``params`` (leading axis: seed), seed by seed."""
    act = get_activation(activation)
    seeds = np.atleast_1d(np.asarray(seeds, dtype=np.int64))
    errs, ovs = [], []
    for i, key in enumerate(_seed_keys(seeds)):
        teacher, test, oracle = _draw_test(key, task=task, n_test=n_test)
        p = jax.tree_util.tree_map(lambda a, i=i: jnp.asarray(a[i]), params)
        e, o = _score(p, teacher, test, oracle, act=act)
        errs.append(e)
        ovs.append(o)
        del test
    return _stack(errs), _stack(ovs)


def _stack(xs: list[Any]) -> Any:
    """Stack a list of equal pytrees of arrays along a new leading axis (numpy)."""
    return jax.tree_util.tree_map(lambda *a: np.stack(a), *xs)


def erm_fit(task: TaskConfig, activation: str, n_train: int, lam: float | str, *,
            seeds: Any = (0,), opts: ERMOptions | None = None) -> ERMResult:
    """Regularised ERM by L-BFGS (spec section 4) for several seeds; see the module docstring.

    Parameters
    ----------
    task : TaskConfig
        The SLR task (its ``D`` is the fitted dimension).
    activation : str
        A key of :data:`bayesslr.activations.ACTIVATIONS`.
    n_train : int
        Training samples ``N = alpha D``.
    lam : float or "validation"
        Ridge penalty ``lam_k = lam_v``, or ``"validation"`` (grid search on held-out training
        data, :func:`select_lam`).
    seeds : sequence of int
        Seeds of teacher, data, test data and starts.
    opts : ERMOptions
        Protocol options.

    Returns
    -------
    ERMResult
    """
    t0 = time.perf_counter()
    opts = opts or ERMOptions()
    act = get_activation(activation)
    seeds = np.atleast_1d(np.asarray(seeds, dtype=np.int64))
    lam = parse_lam(lam)
    n_train = check_int("n_train", n_train, low=2 if lam == "validation" else 1)
    grid = val_risk = val_se = None
    if lam == "validation":
        lam, grid, val_risk, val_se = select_lam(task, activation, n_train, seeds, opts)
    res, train, _ = fit_seeds(task, activation, n_train, seeds, lam, opts=opts)
    res = jax.tree_util.tree_map(lambda a: a[:, 0], res)
    errs, ov = evaluate(task, activation, seeds, res.params, opts.n_test)
    theta = np.asarray(res.params["theta"])
    return ERMResult(
        seeds=seeds, lam=float(lam), test_error=errs.test_error, stderr=errs.stderr,
        risk=errs.risk, risk_stderr=errs.risk_stderr, oracle_error=errs.oracle_error,
        oracle_error_stderr=errs.oracle_error_stderr,
        excess_over_oracle=errs.excess_over_oracle,
        excess_over_oracle_stderr=errs.excess_over_oracle_stderr,
        train_loss=np.asarray(train[:, 0]), objective=np.asarray(res.objective),
        overlaps={k: np.asarray(ov[k]) for k in OVERLAP_NAMES},
        theta={n: theta[:, i] for i, n in enumerate(act.param_names)},
        iterations=np.asarray(res.iterations), converged=np.asarray(res.converged),
        grad_norm=np.asarray(res.grad_norm), start=opts.init, lam_grid=grid,
        val_risk=val_risk, val_se=val_se, params={k: np.asarray(v) for k, v in res.params.items()},
        runtime_s=time.perf_counter() - t0, options=opts)


def select_lam(task: TaskConfig, activation: str, n_train: int, seeds: Any,
               opts: ERMOptions | None = None) -> tuple[float, np.ndarray, np.ndarray, np.ndarray]:
    """Choose ``lam`` on a validation split of the *training* data (spec section 4).

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
                          n_fit=n_train - n_val)
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
        return np.asarray(jax.vmap(lambda q: predict(act, q, X, mask))(p))


_fit_data = jax.jit(_fit_one_seed, static_argnames=("act", "memory"))


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
        Training data (:func:`bayesslr.task.sample_task`, or a user's arrays through
        :func:`bayesslr.task.as_data`).
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
    res, train, _ = _fit_data(data, starts, weight, lam_j, lam_j, jnp.asarray(opts.max_iter),
                              jnp.asarray(opts.gtol, dtype), act=act, memory=opts.memory)
    res = jax.tree_util.tree_map(np.asarray, res)
    return ERMFit(activation, lam_arr, res.params, res.objective, np.asarray(train),
                  res.grad_norm, res.iterations, res.evaluations, res.converged)
