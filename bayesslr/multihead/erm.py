"""Students trained on data: ERM by L-BFGS, gradient descent with overlap trajectories, and head
pruning of the H-head attention student (docs/multihead.md §6).

Conventions fixed here (each stated once, docs/multihead.md §6):

* parameters :class:`MultiheadParams` ``(K, V, bias)``: keys and values ``(H, D)``, per-head
  score offsets ``(H,)`` (start 0; trained unless ``train_bias=False`` or ``sigma="softmax"``,
  where they cancel; never penalised, as the one-head activation scalars ``theta``); the
  predictor is
  :func:`bayesslr.multihead.task.attention_predict`;
* objective ``S = sum_mu 1/2 (y_mu - f(X_mu))^2 + lam/2 (|K|^2 + |V|^2)``; solvers minimise
  ``F = S / N``; the stopping test is on the size-free ``|grad S| / sqrt(D)`` (the one-head
  convention of :mod:`bayesslr.erm.objective`);
* data: ``key`` gives the teacher and the ``n_train`` training samples exactly as
  :func:`bayesslr.multihead.sample_multihead` (same key, same draws), and the test set from the
  third key of that split (the one the data contract reserves for it); the algorithm's
  randomness from ``algorithm_key(key, "start")`` (ERM) or ``"trajectory"`` (GD);
* the test error is the excess error ``mean (y_s - f(X))^2`` on fresh data, ``y_s = theta .
  z*_{eps*}`` the noiseless label (the trivial predictor 0 scores about 1), reported with the
  teacher-known Bayes predictor's error on the same test set and the paired gap;
* overlaps (:func:`head_overlaps`): ``M_k = K K*^T / D`` and ``M_v = V V*^T / D``, ``(H, F)``,
  and the head norms ``q_k = |k_h|^2 / D``, ``q_v = |v_h|^2 / D``.

The L-BFGS is the suite's (:mod:`bayesslr.erm.lbfgs`): its two-loop recursion with one initial
inverse Hessian per parameter block (here ``K``, ``V``, ``bias``), its state, stopping test and
its trial-step pass (:func:`bayesslr.erm.lbfgs.lbfgs_step`: one shared evaluation per pass for
the restarts, backtracking spread over passes), run here around the multi-head objective.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import partial
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from bayesslr.core.jaxconfig import Array, PRNGKey
from bayesslr.core.options import Validated, option
from bayesslr.core.task import ConfigError, algorithm_key, check_int, check_real
from bayesslr.erm.gd import check_record_every
from bayesslr.erm.lbfgs import (
    DEFAULT_GTOL,
    DEFAULT_MAX_ITER,
    DEFAULT_MEMORY,
    LbfgsState,
    init_state,
    lbfgs_step,
    scaled_grad_norm,
    still_active,
)
from bayesslr.multihead.task import (
    SIGMAS,
    MultiheadData,
    MultiheadTask,
    MultiheadTeacher,
    bayes_predict,
    check_choice,
    draw_data,
    head_fields,
    normalise_weights,
    sample_teacher,
    student_predict,
)

__all__ = [
    "PRUNE_RULES",
    "HeadOverlaps",
    "MultiheadERMOptions",
    "MultiheadERMResult",
    "MultiheadGDOptions",
    "MultiheadGDTrajectory",
    "MultiheadParams",
    "PruningResult",
    "Specialisation",
    "head_overlaps",
    "multihead_erm",
    "multihead_gd",
    "prune_heads",
    "specialisation",
]

PRUNE_RULES: tuple[str, ...] = ("output", "value_norm")


# --------------------------------------------------------------------------------------------
# parameters, overlaps, specialisation
# --------------------------------------------------------------------------------------------
class MultiheadParams(NamedTuple):
    """Parameters of an H-head attention student (docs/multihead.md §2).

    Attributes
    ----------
    K, V : Array, shape (H, D)
        Key and value vector of each head.
    bias : Array, shape (H,)
        Per-head score offset (no effect for ``softmax``).
    """

    K: Array
    V: Array
    bias: Array


class HeadOverlaps(NamedTuple):
    """Overlaps of the student heads with the teacher directions (docs/multihead.md §6.2).

    Attributes
    ----------
    key, value : Array, shape (..., H, F)
        ``M_k = K K*^T / D`` and ``M_v = V V*^T / D``.
    key_norm, value_norm : Array, shape (..., H)
        ``q_k = |k_h|^2 / D`` and ``q_v = |v_h|^2 / D``.
    """

    key: Array
    value: Array
    key_norm: Array
    value_norm: Array


def head_overlaps(params: MultiheadParams, teacher: MultiheadTeacher) -> HeadOverlaps:
    """Overlap matrices and head norms (docs/multihead.md §6.2).

    Examples
    --------
    >>> import jax, jax.numpy as jnp
    >>> from bayesslr.multihead import MultiheadTask, sample_multihead
    >>> from bayesslr.multihead.erm import MultiheadParams, head_overlaps
    >>> task = MultiheadTask(L=3, F=2, nu=9.0, D=16)
    >>> teacher, _ = sample_multihead(jax.random.key(0), task, 1024)
    >>> ov = head_overlaps(MultiheadParams(teacher.K, teacher.V, jnp.zeros(2)), teacher)
    >>> bool(jnp.allclose(ov.key, jnp.eye(2), atol=1e-5)), ov.value.shape
    (True, (2, 2))
    """
    D = teacher.K.shape[-1]
    K, V = jnp.asarray(params.K), jnp.asarray(params.V)
    return HeadOverlaps(K @ teacher.K.T / D, V @ teacher.V.T / D,
                        jnp.sum(K * K, -1) / D, jnp.sum(V * V, -1) / D)


class Specialisation(NamedTuple):
    """Permutation-invariant specialisation of the heads (docs/multihead.md §6.2).

    Attributes
    ----------
    cosine : ndarray, shape (H, F)
        ``|c_{hf}| = |k_h . k*_f| / (|k_h| |k*_f|)`` (from an overlap matrix and the norms).
    coverage : ndarray, shape (F,)
        Per teacher direction, ``max_h |c_{hf}|``.
    heads : ndarray, shape (F,)
        Head assigned to each direction by the Hungarian rule (one-to-one, maximising
        ``sum |c|``; -1 for a direction left without a head when ``H < F``).
    share : ndarray, shape (F,)
        Per direction, the assigned head's share of its teacher-span overlap,
        ``c_{hf}^2 / sum_f' c_{hf'}^2`` (``1 / F`` for a head overlapping all directions
        equally, 1 for a head on the direction alone; 0 where no head is assigned).
    index : float
        ``(mean share - 1/F) / (1 - 1/F)``: 0 unspecialised, 1 each direction its own head
        (defined for ``F >= 2``; NaN at ``F = 1``).
    """

    cosine: np.ndarray
    coverage: np.ndarray
    heads: np.ndarray
    share: np.ndarray
    index: float


def specialisation(overlap: Any, norm: Any, teacher_norm: Any = None) -> Specialisation:
    """Specialisation of ``H`` heads on ``F`` teacher directions from one overlap matrix
    (docs/multihead.md §6.2): keys (``HeadOverlaps.key, .key_norm``) or values.

    Parameters
    ----------
    overlap : array, shape (H, F)
        ``W W*^T / D``.
    norm : array, shape (H,)
        ``|w_h|^2 / D``.
    teacher_norm : array, shape (F,), optional
        ``|w*_f|^2 / D`` (default 1, exact for the orthonormal teacher).

    Returns
    -------
    Specialisation

    Examples
    --------
    >>> import numpy as np
    >>> from bayesslr.multihead.erm import specialisation
    >>> specialisation(np.array([[0.0, 2.0], [1.0, 0.0]]), np.array([4.0, 1.0])).index
    1.0
    >>> float(specialisation(np.ones((2, 2)), np.full(2, 2.0)).index)   # equal overlaps
    0.0
    """
    from scipy.optimize import linear_sum_assignment

    M = np.abs(np.asarray(overlap, dtype=np.float64))
    if M.ndim != 2:
        raise ConfigError(f"overlap has shape {M.shape}; allowed: (H, F)")
    H, F = M.shape
    q = np.asarray(norm, dtype=np.float64)
    if q.shape != (H,):
        raise ConfigError(f"norm has shape {q.shape}; allowed: ({H},), one per head")
    Q = np.ones(F) if teacher_norm is None else np.asarray(teacher_norm, dtype=np.float64)
    tiny = np.finfo(np.float64).tiny
    c = M / np.sqrt(np.maximum(q[:, None] * Q[None, :], tiny))
    rows, cols = linear_sum_assignment(-c)
    heads = np.full(F, -1)
    heads[cols] = rows
    span = np.sum(c * c, axis=1)
    share = np.zeros(F)
    share[cols] = c[rows, cols] ** 2 / np.maximum(span[rows], tiny)
    index = (share.mean() - 1.0 / F) / (1.0 - 1.0 / F) if F > 1 else float("nan")
    return Specialisation(c, c.max(axis=0), heads, share, float(index))


# --------------------------------------------------------------------------------------------
# objective and scoring
# --------------------------------------------------------------------------------------------
def _unflatten(x: Array, H: int, D: int) -> MultiheadParams:
    return MultiheadParams(x[:H * D].reshape(H, D), x[H * D:2 * H * D].reshape(H, D),
                           x[2 * H * D:])


def _flatten(p: MultiheadParams) -> Array:
    return jnp.concatenate([p.K.ravel(), p.V.ravel(), p.bias])


def _objective(p: MultiheadParams, data: MultiheadData, lam: Array, sigma: str,
               train_bias: bool) -> Array:
    """``F = S / N`` (module docstring)."""
    bias = p.bias if train_bias else jax.lax.stop_gradient(p.bias)
    r = data.y - student_predict(data.X, p.K, p.V, bias, sigma)
    n = data.y.shape[0]
    return 0.5 * jnp.mean(r * r) + 0.5 * lam * (jnp.sum(p.K ** 2) + jnp.sum(p.V ** 2)) / n


def _signal(teacher: MultiheadTeacher, data: MultiheadData) -> Array:
    """The noiseless label ``y_s = theta . z*_{eps*}``."""
    x_eps = jnp.take_along_axis(data.X, data.eps[:, None, None], axis=1)[:, 0, :]
    return jnp.sum((x_eps @ teacher.V.T) * data.theta, -1) / math.sqrt(data.X.shape[-1])


def _errors(f: Array, y_s: Array, bayes: Array) -> Array:
    """``(test_error, stderr, gap to Bayes, paired stderr, Bayes error, its stderr)`` of
    predictions ``f``; the gap is exactly ``test_error - Bayes error`` (same rows)."""
    e, eb = (y_s - f) ** 2, jnp.broadcast_to((y_s - bayes) ** 2, f.shape)
    n = f.shape[-1]
    se = lambda a: jnp.std(a, -1, ddof=1) / math.sqrt(n)  # noqa: E731
    return jnp.stack([e.mean(-1), se(e), (e - eb).mean(-1), se(e - eb), eb.mean(-1), se(eb)],
                     -1)


def _draw(key: PRNGKey, task: MultiheadTask, n_train: int, n_test: int):
    """Teacher and training data as :func:`sample_multihead`, test data from the third key.

    Not jitted as a whole: the task's own jitted samplers are called, so ERM, GD and pruning
    of one task share their compilations, and a test set of the training set's size reuses
    the training draw's (the random draws dominate the compile time of these small runs)."""
    kt, kd, ktest = jax.random.split(key, 3)
    teacher = sample_teacher(kt, task)
    return (teacher, draw_data(kd, task, teacher, n_train),
            draw_data(ktest, task, teacher, n_test))


def _start(key: PRNGKey, H: int, D: int, init_scale: Array) -> MultiheadParams:
    kk, kv = jax.random.split(key)
    return MultiheadParams(init_scale * jax.random.normal(kk, (H, D)),
                           init_scale * jax.random.normal(kv, (H, D)), jnp.zeros((H,)))


def _scores(task: MultiheadTask, teacher: MultiheadTeacher, test: MultiheadData, sigma: str,
            params: MultiheadParams) -> Array:
    bayes = bayes_predict(task, teacher, test.X)
    f = student_predict(test.X, params.K, params.V, params.bias, sigma)
    return _errors(f, _signal(teacher, test), bayes)


def _trains_bias(train_bias: bool, sigma: str) -> bool:
    """Offsets are trained only where they act: under ``softmax`` they cancel within each head
    (zero gradient; left free, the unpenalised offsets drift on round-off, measured to 1e4)."""
    return bool(train_bias) and sigma != "softmax"


# --------------------------------------------------------------------------------------------
# options
# --------------------------------------------------------------------------------------------
def _check_common(H: Any, sigma: Any, n_train: Any, lam: Any) -> tuple[int, str, int, float]:
    return (check_int("H", H, low=1), check_choice("sigma", sigma, SIGMAS),
            check_int("n_train", n_train, low=1), check_real("lam", lam, low=0.0))


@dataclass(frozen=True)
class MultiheadERMOptions(Validated):
    """Settings of :func:`multihead_erm` (each field checked on construction).

    Attributes
    ----------
    restarts : int
        Random starts, fitted as one batch; the lowest final objective is kept.
    init_scale : float
        Standard deviation of the start's components (``K, V ~ N(0, init_scale^2)``).
    train_bias : bool
        Train the per-head offsets (start 0); False keeps them at 0 (always 0 for
        ``softmax``, where they cancel).
    n_test : int
        Fresh test samples.
    max_iter, gtol, memory :
        L-BFGS iteration cap, tolerance on ``|grad S| / sqrt(D)``, history size.
    """

    restarts: int = option(4, low=1, high=1000, doc="random starts; lowest objective kept")
    init_scale: float = option(0.1, low=0.0, low_open=True,
                               doc="standard deviation of the start's components")
    train_bias: bool = option(True, doc="train the per-head score offsets")
    n_test: int = option(10_000, low=2, high=10**8, doc="fresh test samples")
    max_iter: int = option(DEFAULT_MAX_ITER, low=1, high=10**6, doc="L-BFGS iteration cap")
    gtol: float = option(DEFAULT_GTOL, low=0.0, low_open=True,
                         doc="tolerance on |grad S| / sqrt(D)")
    memory: int = option(DEFAULT_MEMORY, low=1, high=1000, doc="L-BFGS history size")


@dataclass(frozen=True)
class MultiheadGDOptions(Validated):
    """Settings of :func:`multihead_gd` (each field checked on construction).

    Attributes
    ----------
    lr : float
        Step size: ``params <- params - lr D grad F`` (the size-free step of
        :mod:`bayesslr.erm.gd`).
    steps, record_every : int
        Steps, and steps between records (``steps`` a multiple of it).
    init_scale : float
        Standard deviation of the start's components.
    train_bias : bool
        Train the per-head offsets (start 0).
    n_test : int
        Fresh test samples for the recorded test error.
    """

    lr: float = option(0.1, low=0.0, low_open=True, doc="step size")
    steps: int = option(1000, low=1, high=10**7, doc="gradient steps")
    record_every: int = option(10, low=1, high=10**7, doc="steps between records")
    init_scale: float = option(0.01, low=0.0, low_open=True,
                               doc="standard deviation of the start's components")
    train_bias: bool = option(True, doc="train the per-head score offsets")
    n_test: int = option(2000, low=2, high=10**8, doc="fresh test samples")

    def __post_init__(self) -> None:
        super().__post_init__()
        check_record_every(self.steps, self.record_every)


# --------------------------------------------------------------------------------------------
# ERM by L-BFGS
# --------------------------------------------------------------------------------------------
class MultiheadERMResult(NamedTuple):
    """Outcome of :func:`multihead_erm` (docs/multihead.md §6.1).

    Attributes
    ----------
    params : MultiheadParams
        The kept restart's ``(K, V, bias)``.
    objective, train_loss : float
        Final ``S / N`` and ``1/(2N) sum (y - f)^2``.
    test_error, stderr : float
        Excess error ``mean (y_s - f)^2`` on fresh data and its standard error.
    bayes_gap, bayes_gap_stderr : float
        Test error minus the teacher-known Bayes predictor's on the same test set, paired.
    overlaps : HeadOverlaps
        Of the kept restart.
    grad_norm : float
        Final ``|grad S| / sqrt(D)``.
    iterations, evaluations : int
        L-BFGS iterations and function evaluations of the kept restart.
    converged : bool
        ``grad_norm < gtol``.
    restart_objectives : ndarray, shape (restarts,)
        Final objective of every restart.
    oracle_error, oracle_error_stderr : float
        The teacher-known Bayes predictor's excess error on the same test set
        (``test_error - bayes_gap`` exactly).
    """

    params: MultiheadParams
    objective: float
    train_loss: float
    test_error: float
    stderr: float
    bayes_gap: float
    bayes_gap_stderr: float
    overlaps: HeadOverlaps
    grad_norm: float
    iterations: int
    evaluations: int
    converged: bool
    restart_objectives: np.ndarray
    oracle_error: float = math.nan
    oracle_error_stderr: float = math.nan


def _lbfgs(fg, x0: Array, max_iter: Array, gtol: Array, scale: float, *, memory: int,
           blocks: tuple[int, ...]) -> LbfgsState:
    """:mod:`bayesslr.erm.lbfgs`'s solver passes around ``fg`` (``(G, n) -> (G,), (G, n)``):
    one trial point per member per pass, Armijo or approximate Armijo acceptance, halving on
    failure, curvature pairs with ``s.y > 0`` only."""
    step = partial(lbfgs_step, fg=fg, max_iter=max_iter, gtol=gtol, scale=scale, memory=memory,
                   blocks=blocks)
    return jax.lax.while_loop(lambda st: jnp.any(still_active(st, max_iter, gtol, scale)), step,
                              init_state(x0, memory))


@partial(jax.jit, static_argnames=("task", "H", "sigma", "restarts", "memory", "train_bias"))
def _erm(key: PRNGKey, teacher: MultiheadTeacher, data: MultiheadData, test: MultiheadData,
         lam: Array, init_scale: Array, max_iter: Array, gtol: Array, *, task: MultiheadTask,
         H: int, sigma: str, restarts: int, memory: int, train_bias: bool):
    D, n_train = task.D, data.y.shape[0]
    kinit = algorithm_key(key, "start")
    x0 = jax.vmap(lambda r: _flatten(_start(jax.random.fold_in(kinit, r), H, D, init_scale)))(
        jnp.arange(restarts))
    obj = lambda x: _objective(_unflatten(x, H, D), data, lam, sigma, train_bias)  # noqa: E731
    fg = jax.vmap(jax.value_and_grad(obj))
    scale = n_train / math.sqrt(D)
    st = _lbfgs(fg, x0, max_iter, gtol, scale, memory=memory, blocks=(H * D, 2 * H * D))
    f_all = jnp.where(jnp.isfinite(st.f), st.f, jnp.inf)
    best = jnp.argmin(f_all)
    p = _unflatten(st.x[best], H, D)
    r = data.y - student_predict(data.X, p.K, p.V, p.bias, sigma)
    gn = scaled_grad_norm(st, scale)[best]
    return (p, st.f[best], 0.5 * jnp.mean(r * r), _scores(task, teacher, test, sigma, p),
            head_overlaps(p, teacher), gn, st.it[best], st.evals[best], st.f)


def multihead_erm(key: PRNGKey, task: MultiheadTask, H: Any, sigma: str, n_train: Any,
                  lam: Any, *, opts: MultiheadERMOptions | None = None,
                  **kw: Any) -> MultiheadERMResult:
    """Regularised ERM of the H-head attention student by L-BFGS from small random starts
    (docs/multihead.md §6.1).

    Parameters
    ----------
    key : PRNGKey
        Teacher, training and test data (module docstring) and the starts.
    task : MultiheadTask
        The teacher's task.
    H : int
        Heads, ``>= 1``.
    sigma : {"softmax", "softmax1", "bayes_softmax"}
        The attention.
    n_train : int
        Training samples ``N = alpha D``, ``>= 1``.
    lam : float
        Ridge penalty on ``K`` and ``V``, ``>= 0``.
    opts : MultiheadERMOptions, optional
        Or its fields as keywords (``restarts=...``).

    Returns
    -------
    MultiheadERMResult

    Examples
    --------
    One head on the spiked one-head task (``F = 1``; sizes shared with the tests):

    >>> import jax
    >>> from bayesslr.multihead import MultiheadTask
    >>> from bayesslr.multihead.erm import multihead_erm
    >>> task = MultiheadTask(L=3, F=1, nu=4.0, delta=0.01, D=16, teacher="gaussian")
    >>> fit = multihead_erm(jax.random.key(0), task, 1, "softmax", 256, 0.1, restarts=2,
    ...                     n_test=256)
    >>> fit.params.K.shape, bool(fit.converged), bool(fit.test_error < 0.6)
    ((1, 16), True, True)
    """
    H, sigma, n_train, lam = _check_common(H, sigma, n_train, lam)
    opts = opts if opts is not None else MultiheadERMOptions(**kw)
    if not isinstance(task, MultiheadTask):
        raise ConfigError(f"task={type(task).__name__} is not a MultiheadTask; allowed: "
                          "MultiheadTask(...)")
    out = _erm(key, *_draw(key, task, n_train, opts.n_test), jnp.asarray(lam, jnp.float32),
               jnp.asarray(opts.init_scale, jnp.float32), jnp.asarray(opts.max_iter),
               jnp.asarray(opts.gtol, jnp.float32), task=task, H=H, sigma=sigma,
               restarts=opts.restarts, memory=opts.memory,
               train_bias=_trains_bias(opts.train_bias, sigma))
    p, obj, train, sc, ov, gn, it, ev, f_all = jax.tree_util.tree_map(np.asarray, out)
    return MultiheadERMResult(
        MultiheadParams(*p), float(obj), float(train), float(sc[0]), float(sc[1]),
        float(sc[2]), float(sc[3]), HeadOverlaps(*ov), float(gn), int(it), int(ev),
        bool(gn < opts.gtol and np.isfinite(obj)), f_all, float(sc[4]), float(sc[5]))


# --------------------------------------------------------------------------------------------
# gradient descent with overlap trajectories
# --------------------------------------------------------------------------------------------
class MultiheadGDTrajectory(NamedTuple):
    """Records of :func:`multihead_gd` (docs/multihead.md §6.2), leading axis ``record``.

    Attributes
    ----------
    step : ndarray, shape (R,)
        Step of each record (0 = the start).
    overlaps : HeadOverlaps
        ``key, value`` ``(R, H, F)``, ``key_norm, value_norm`` ``(R, H)``.
    bias : ndarray, shape (R, H)
        Per-head offsets.
    train_loss, objective : ndarray, shape (R,)
        ``1/(2N) sum (y - f)^2`` and ``S / N``.
    test_error, stderr, bayes_gap, bayes_gap_stderr : ndarray, shape (R,)
        As :class:`MultiheadERMResult`, on one fresh test set.
    key_specialisation, value_specialisation : ndarray, shape (R,)
        :func:`specialisation` ``index`` of the keys and of the values at each record.
    params : MultiheadParams
        The final parameters.
    """

    step: np.ndarray
    overlaps: HeadOverlaps
    bias: np.ndarray
    train_loss: np.ndarray
    objective: np.ndarray
    test_error: np.ndarray
    stderr: np.ndarray
    bayes_gap: np.ndarray
    bayes_gap_stderr: np.ndarray
    key_specialisation: np.ndarray
    value_specialisation: np.ndarray
    params: MultiheadParams


@partial(jax.jit, static_argnames=("task", "H", "sigma", "record_every", "n_records",
                                   "train_bias"))
def _gd(key: PRNGKey, teacher: MultiheadTeacher, data: MultiheadData, test: MultiheadData,
        lam: Array, lr: Array, init_scale: Array, *, task: MultiheadTask, H: int, sigma: str,
        record_every: int, n_records: int, train_bias: bool):
    D = task.D
    p0 = _start(algorithm_key(key, "trajectory"), H, D, init_scale)
    grad = jax.grad(lambda p: _objective(p, data, lam, sigma, train_bias))

    def one_step(p, _):
        return jax.tree_util.tree_map(lambda a, g: a - lr * D * g, p, grad(p)), None

    def record(p):
        r = data.y - student_predict(data.X, p.K, p.V, p.bias, sigma)
        return (head_overlaps(p, teacher), p.bias, 0.5 * jnp.mean(r * r),
                _objective(p, data, lam, sigma, train_bias),
                _scores(task, teacher, test, sigma, p))

    def chunk(p, _):
        p, _ = jax.lax.scan(one_step, p, None, length=record_every)
        return p, record(p)

    first = record(p0)
    p, rest = jax.lax.scan(chunk, p0, None, length=n_records)
    recs = jax.tree_util.tree_map(lambda a, b: jnp.concatenate([a[None], b]), first, rest)
    return recs, p, jnp.sum(teacher.K ** 2, -1) / D, jnp.sum(teacher.V ** 2, -1) / D


def multihead_gd(key: PRNGKey, task: MultiheadTask, H: Any, sigma: str, n_train: Any,
                 lam: Any, *, opts: MultiheadGDOptions | None = None,
                 **kw: Any) -> MultiheadGDTrajectory:
    """Full-batch gradient descent at a fixed step from a small random start, with the overlap
    matrices, the test error and the specialisation recorded (docs/multihead.md §6.2).

    Parameters are those of :func:`multihead_erm`; ``opts`` (or its fields as keywords) are
    :class:`MultiheadGDOptions`.

    Returns
    -------
    MultiheadGDTrajectory

    Examples
    --------
    Two ``bayes_softmax`` heads on two directions (docs/multihead.md §6.4): the key
    specialisation falls from its random start to near 0 (both heads on the same mixture),
    then rises to about 1 (one head per direction):

    >>> import jax
    >>> from bayesslr.multihead import MultiheadTask
    >>> from bayesslr.multihead.erm import multihead_gd
    >>> task = MultiheadTask(L=3, F=2, nu=9.0, D=16)
    >>> tr = multihead_gd(jax.random.key(0), task, 2, "bayes_softmax", 1024, 0.01, lr=0.2,
    ...                   steps=600, record_every=10, n_test=1024)
    >>> tr.overlaps.key.shape, int(tr.step[-1])
    ((61, 2, 2), 600)
    >>> [round(float(x), 2) for x in tr.key_specialisation[[0, 5, 20, 60]]]
    [0.26, 0.01, 0.99, 1.0]
    """
    H, sigma, n_train, lam = _check_common(H, sigma, n_train, lam)
    opts = opts if opts is not None else MultiheadGDOptions(**kw)
    if not isinstance(task, MultiheadTask):
        raise ConfigError(f"task={type(task).__name__} is not a MultiheadTask; allowed: "
                          "MultiheadTask(...)")
    n_records = opts.steps // opts.record_every
    recs, p, qk, qv = jax.tree_util.tree_map(np.asarray, _gd(
        key, *_draw(key, task, n_train, opts.n_test), jnp.asarray(lam, jnp.float32),
        jnp.asarray(opts.lr, jnp.float32), jnp.asarray(opts.init_scale, jnp.float32),
        task=task, H=H, sigma=sigma, record_every=opts.record_every,
        n_records=n_records, train_bias=_trains_bias(opts.train_bias, sigma)))
    ov, bias, train, obj, sc = recs
    ov = HeadOverlaps(*ov)
    spec_k = np.array([specialisation(ov.key[i], ov.key_norm[i], qk).index
                       for i in range(n_records + 1)])
    spec_v = np.array([specialisation(ov.value[i], ov.value_norm[i], qv).index
                       for i in range(n_records + 1)])
    return MultiheadGDTrajectory(
        np.arange(0, opts.steps + 1, opts.record_every), ov, bias, train, obj, sc[:, 0],
        sc[:, 1], sc[:, 2], sc[:, 3], spec_k, spec_v, MultiheadParams(*p))


# --------------------------------------------------------------------------------------------
# head pruning
# --------------------------------------------------------------------------------------------
class PruningResult(NamedTuple):
    """Test error against the number of heads kept (docs/multihead.md §6.3).

    Attributes
    ----------
    order : ndarray, shape (H,)
        Heads from the most to the least important by the rule.
    score : ndarray, shape (H,)
        Each head's ranking score (``output``: its mean squared output on the training set;
        ``value_norm``: ``|v_h|^2 / D``).
    kept : ndarray, shape (H + 1,)
        Heads kept, ``0..H``.
    test_error, stderr, bayes_gap, bayes_gap_stderr : ndarray, shape (H + 1,)
        As :class:`MultiheadERMResult`, of the student reduced to its first ``kept`` heads of
        ``order`` (no retraining), all on one fresh test set.
    """

    order: np.ndarray
    score: np.ndarray
    kept: np.ndarray
    test_error: np.ndarray
    stderr: np.ndarray
    bayes_gap: np.ndarray
    bayes_gap_stderr: np.ndarray


def pruned_predict(X: Array, p: MultiheadParams, keep: Array, sigma: str) -> Array:
    """The student with only the heads where ``keep`` (``(H,)`` booleans) is True: a dropped
    head's term is removed, and for ``bayes_softmax`` its weight leaves the shared
    normalisation (a score of ``-inf``), exactly as if the head were deleted; no head kept:
    the predictor 0."""
    r = head_fields(X, p.K, "K")
    if sigma == "bayes_softmax":
        r = jnp.where(keep, r, -jnp.inf)
    w = normalise_weights(r, p.bias, sigma)
    terms = jnp.where(keep & jnp.any(keep), w * head_fields(X, p.V, "V"), 0.0)
    return jnp.sum(terms, axis=(-2, -1))


@partial(jax.jit, static_argnames=("task", "sigma", "rule"))
def _prune(teacher: MultiheadTeacher, data: MultiheadData, test: MultiheadData,
           p: MultiheadParams, *, task: MultiheadTask, sigma: str, rule: str):
    H, D = p.K.shape
    if rule == "output":  # each head's own term sum_l sigma_{l,h} z_{l,h}, full model's weights
        w = normalise_weights(head_fields(data.X, p.K, "K"), p.bias, sigma)
        score = jnp.mean(jnp.sum(w * head_fields(data.X, p.V, "V"), axis=1) ** 2, 0)
    else:
        score = jnp.sum(p.V ** 2, -1) / D
    order = jnp.argsort(-score)
    rank = jnp.argsort(order)
    keeps = rank[None, :] < jnp.arange(H + 1)[:, None]  # (H + 1, H): the first m of order
    bayes = bayes_predict(task, teacher, test.X)
    f = jax.vmap(lambda k: pruned_predict(test.X, p, k, sigma))(keeps)
    return order, score, _errors(f, _signal(teacher, test)[None], bayes[None])


def prune_heads(key: PRNGKey, task: MultiheadTask, params: MultiheadParams, sigma: str,
                n_train: Any, *, rule: str = "output", n_test: Any = 10_000) -> PruningResult:
    """Test error of the trained student against the number of heads kept, the heads ranked by
    ``rule`` (docs/multihead.md §6.3).

    Parameters
    ----------
    key : PRNGKey
        The key the student was trained with: the training data (for the ``output`` rule) and
        the test set are drawn from it as :func:`multihead_erm` draws them.
    task : MultiheadTask
    params : MultiheadParams
        Trained ``(K, V, bias)``.
    sigma : {"softmax", "softmax1", "bayes_softmax"}
    n_train : int
        Training samples the student was trained on.
    rule : {"output", "value_norm"}
        ``output`` (default): a head's mean squared output ``mean_mu (sum_l sigma_{l,h}
        z_{l,h})^2`` on the training set, with the full model's weights; ``value_norm``:
        ``|v_h|^2 / D``.
    n_test : int
        Fresh test samples.

    Returns
    -------
    PruningResult

    Examples
    --------
    The teacher's own heads (the Bayes predictor, docs/multihead.md §3.1): all kept, the gap
    to Bayes is 0; none kept, the zero predictor (error about 1):

    >>> import jax, jax.numpy as jnp
    >>> from bayesslr.multihead import MultiheadTask, sample_multihead
    >>> from bayesslr.multihead.erm import MultiheadParams, prune_heads
    >>> task = MultiheadTask(L=3, F=2, nu=9.0, D=16)
    >>> teacher, _ = sample_multihead(jax.random.key(0), task, 1024)
    >>> p = MultiheadParams(3.0 * teacher.K, teacher.V, jnp.zeros(2))
    >>> pr = prune_heads(jax.random.key(0), task, p, "bayes_softmax", 1024, n_test=1024)
    >>> pr.kept.tolist(), bool(abs(pr.bayes_gap[-1]) < 1e-5), bool(0.8 < pr.test_error[0] < 1.2)
    ([0, 1, 2], True, True)
    """
    sigma = check_choice("sigma", sigma, SIGMAS)
    rule = check_choice("rule", rule, PRUNE_RULES)
    n_train = check_int("n_train", n_train, low=1)
    n_test = check_int("n_test", n_test, low=2)
    K, V = jnp.asarray(params.K), jnp.asarray(params.V)
    bias = jnp.asarray(params.bias)
    if K.ndim != 2 or K.shape[1] != task.D or V.shape != K.shape or bias.shape != K.shape[:1]:
        raise ConfigError(f"params have shapes K {tuple(K.shape)}, V {tuple(V.shape)}, bias "
                          f"{tuple(bias.shape)}; allowed: (H, {task.D}), (H, {task.D}), (H,)")
    order, score, sc = jax.tree_util.tree_map(np.asarray, _prune(
        *_draw(key, task, n_train, n_test), MultiheadParams(K, V, bias), task=task,
        sigma=sigma, rule=rule))
    return PruningResult(order, score, np.arange(K.shape[0] + 1), sc[:, 0], sc[:, 1],
                         sc[:, 2], sc[:, 3])
