"""Named targets of the inference benchmark, for samplers written anywhere (docs/targets.md).

A :class:`Target` is one task of the inference benchmark (docs/inference.md): the SLR posterior
of one data set, as a pure JAX log density of ``theta = {"k": (D,), "v": (D,)}``, with the
teacher, the data, prior draws for starts and the Bayes-optimal reference the draws of any
sampler are scored against (:func:`score_draws`).

* :func:`targets` lists the stored reference tasks by name, as posteriordb names posteriors
  (``<data>-<model>``): ``slr_spiked_L3_nu2_delta0.01-D100_alpha5_seed0``.
* :func:`target` returns one by name, or by its fields for any setting (the reference is then
  the state evolution at ``D -> inf``, solved on demand).
* :func:`score_draws` scores draws ``{"k": (n, D), "v": (n, D)}`` the way every built-in
  algorithm is scored (:mod:`bayesslr.inference.evaluate`): the exact posterior-mean predictor
  of the draws on the stored 4000 test inputs, paired with the reference's predictions on the
  same inputs when they are stored.

The log density is the marginal model's (:func:`bayesslr.bayes.model.marginal_model`, the one
the suite's NUTS samples): the unit-Gaussian priors of ``k`` and ``v`` (normalised) plus
``sum_i log (1/L_i) sum_l exp(a_l(k)) N(y_i; z_l, Delta)``, the hidden location summed out
(docs/inference.md, "The posterior"). The token base measure, free of ``(k, v)``, is left out,
as in the model.
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from bayesslr.bayes.model import LOG_2PI, ModelSpec, log_lik_samples, model_spec
from bayesslr.core.task import (
    ConfigError,
    Data,
    TaskConfig,
    Teacher,
    check_int,
    check_real,
    make_task,
)

N_TEST = 4000
_NAME = re.compile(r"^slr_(?P<variant>spiked|max)_L(?P<L>[^_]+)_nu(?P<nu>[^_]+)_delta"
                   r"(?P<delta>[^-]+)-D(?P<D>\d+)_alpha(?P<alpha>[^_]+)_seed(?P<seed>\d+)$")


def model_name(variant: str, L: str, nu: float, delta: float) -> str:
    """The model part of a target's name, e.g. ``slr_spiked_L3_nu2_delta0.01``."""
    return f"slr_{variant}_L{L}_nu{float(nu):g}_delta{float(delta):g}"


def data_name(D: int, alpha: float, seed: int) -> str:
    """The data part of a target's name, e.g. ``D100_alpha5_seed0``."""
    return f"D{int(D)}_alpha{float(alpha):g}_seed{int(seed)}"


def target_name(variant: str, L: str, nu: float, delta: float, D: int, alpha: float,
                seed: int) -> str:
    """``<model>-<data>``: ``slr_spiked_L3_nu2_delta0.01-D100_alpha5_seed0``."""
    return f"{model_name(variant, L, nu, delta)}-{data_name(D, alpha, seed)}"


def targets() -> list[str]:
    """Names of the stored targets (the reference tasks of docs/inference.md).

    Returns
    -------
    list of str
        One name per stored task, sorted: ``<model>-<data>`` as posteriordb names posteriors.

    Examples
    --------
    >>> import bayesslr as bs
    >>> names = bs.targets()
    >>> "slr_spiked_L3_nu2_delta0.01-D100_alpha5_seed0" in names, len(names)
    (True, 16)
    """
    from bayesslr.inference.reference import load_inference_reference

    ds = load_inference_reference()
    if ds is None:
        return []
    rows = zip(*(ds[c].values for c in ("variant", "L", "nu", "delta", "D", "alpha", "seed")),
               strict=True)
    return sorted(target_name(str(v), str(L), float(nu), float(d), int(D), float(a), int(s))
                  for v, L, nu, d, D, a, s in rows)


# what one stored target's record holds: the task, its size, the reference and its quality
TARGET_FIELDS: tuple[str, ...] = (
    "name", "variant", "L", "nu", "delta", "D", "alpha", "seed", "N", "dim", "n_test",
    "reference", "bayes_error", "bayes_error_stderr", "excess_over_oracle",
    "excess_over_oracle_stderr", "checks_passed", "r_hat_max", "ess_bulk_min", "ess_tail_min",
    "divergences", "grad_evals", "checks")


def target_records() -> list[dict]:
    """One record per stored target (:data:`TARGET_FIELDS`), sorted by name, read from the
    stored reference (no data is drawn): the task, its size (``N`` training samples, ``dim``
    parameters), the reference's kind (``nuts_long``: long NUTS chains from the teacher on this
    very data set) and quality (its R-hat, ESS and divergences, and whether they passed the
    reference's checks, :data:`bayesslr.core.thresholds.CONVERGENCE` ``"reference"``).

    Examples
    --------
    >>> from bayesslr.posteriors.target import target_records
    >>> rec = target_records()[0]
    >>> rec["name"], rec["reference"], rec["dim"]
    ('slr_spiked_L3_nu2_delta0.0001-D100_alpha1.2_seed0', 'nuts_long', 200)
    """
    from bayesslr.inference.reference import load_inference_reference

    ds = load_inference_reference()
    if ds is None:
        return []
    rows = []
    for i in range(ds.sizes["task"]):
        r = ds.isel(task=i)
        D = int(r["D"])
        rec = {"name": target_name(str(r["variant"].values), str(r["L"].values),
                                   float(r["nu"]), float(r["delta"]), D, float(r["alpha"]),
                                   int(r["seed"])),
               "variant": str(r["variant"].values), "L": str(r["L"].values),
               "nu": float(r["nu"]), "delta": float(r["delta"]), "D": D,
               "alpha": float(r["alpha"]), "seed": int(r["seed"]), "N": int(r["N"]),
               "dim": 2 * D, "n_test": int(r["n_test"]), "reference": "nuts_long",
               "bayes_error": float(r["test_error"]), "bayes_error_stderr": float(r["stderr"]),
               "excess_over_oracle": float(r["excess_over_oracle"]),
               "excess_over_oracle_stderr": float(r["excess_over_oracle_stderr"]),
               "checks_passed": bool(r["checks_passed"]), "r_hat_max": float(r["r_hat_max"]),
               "ess_bulk_min": float(r["ess_bulk_min"]),
               "ess_tail_min": float(r["ess_tail_min"]),
               "divergences": int(r["divergences"]), "grad_evals": int(r["grad_evals"]),
               "checks": str(r["checks"].values)}
        rows.append(rec)
    return sorted(rows, key=lambda rec: rec["name"])


def parse_name(name: str) -> dict[str, Any]:
    """The fields of a target name (inverse of :func:`target_name`)."""
    m = _NAME.match(str(name))
    if m is None:
        raise ConfigError(f"target name {name!r} is malformed; allowed: "
                          "slr_<variant>_L<L>_nu<nu>_delta<delta>-D<D>_alpha<alpha>_seed<seed>, "
                          "e.g. slr_spiked_L3_nu2_delta0.01-D100_alpha5_seed0 "
                          "(bayesslr.targets() lists the stored ones)")
    g = m.groupdict()

    def num(x: str) -> float:  # posteriordb's file names cannot hold dots: 0p01 is 0.01
        try:
            return float(x.replace("p", "."))
        except ValueError:
            raise ConfigError(f"target name {name!r} has the number {x!r}; allowed: a decimal "
                              "number (0.01 or 0p01)") from None

    return {"variant": g["variant"], "L": g["L"].replace("p", "."), "nu": num(g["nu"]),
            "delta": num(g["delta"]), "D": int(g["D"]), "alpha": num(g["alpha"]),
            "seed": int(g["seed"])}


def posteriordb_name(name: str) -> str:
    """The name in a posteriordb export: dots written ``p`` (posteriordb strips everything
    after the first dot of a file name), e.g. ``slr_spiked_L3_nu2_delta0p01-D100_alpha5_seed0``;
    :func:`target` accepts both forms."""
    return str(name).replace(".", "p")


def _check_theta(theta: Any, D: int, *, batch: bool, name: str) -> tuple[Any, Any]:
    if not isinstance(theta, dict) or set(theta) != {"k", "v"}:
        got = sorted(theta) if isinstance(theta, dict) else type(theta).__name__
        raise ConfigError(f"{name} must be a dict with keys 'k' and 'v' (got {got}); allowed: "
                          f"{{'k': {'(n, D)' if batch else '(D,)'}, 'v': ...}} with D={D}")
    k, v = theta["k"], theta["v"]
    ks, vs = np.shape(k), np.shape(v)
    if ks != vs or not ks or ks[-1] != D or (batch and len(ks) not in (2, 3)) or (
            not batch and len(ks) != 1):
        want = "(n, D) or (chains, n, D)" if batch else "(D,) (a batch: jax.vmap)"
        raise ConfigError(f"{name}['k'], {name}['v'] have shapes {ks}, {vs}; allowed: equal "
                          f"shapes {want} with D={D}")
    return k, v


@functools.partial(jax.jit, static_argnames=("variant",))
def _log_density(k, v, X, y, mask, nu, delta, *, variant: str):
    D = X.shape[-1]
    log_prior = -0.5 * (jnp.sum(k * k) + jnp.sum(v * v)) - D * LOG_2PI
    ll = log_lik_samples(ModelSpec(variant, nu, delta), k, v, X, y, mask)
    return log_prior + jnp.sum(ll)


@dataclass(frozen=True, eq=False)
class Target:
    """One posterior of the inference benchmark (built by :func:`target`).

    Attributes
    ----------
    name : str
        ``<model>-<data>``, e.g. ``slr_spiked_L3_nu2_delta0.01-D100_alpha5_seed0``.
    task : TaskConfig
    alpha : float
    seed : int
        The data seed (``seed_key(seed)``: teacher, training and test sets).
    n_test : int
        Test inputs the draws are scored on (the reference's 4000 for a paired comparison).
    D : int
        Token dimension; ``theta = {"k": (D,), "v": (D,)}``.
    dim : int
        Number of parameters, ``2 D``.
    data : dict of numpy.ndarray
        Training data: ``X (N, L_max, D)`` float32, ``y (N,)``, ``mask (N, L_max)`` bool.
    teacher : dict of numpy.ndarray
        The planted ``{"k": (D,), "v": (D,)}``: an exact draw from this posterior.
    test : Data
        The test set draws are scored on.

    Examples
    --------
    See :func:`target`.
    """

    name: str
    task: TaskConfig
    alpha: float
    seed: int
    n_test: int
    data: dict[str, np.ndarray]
    teacher: dict[str, np.ndarray]
    test: Data
    stored: bool

    @property
    def D(self) -> int:
        return int(self.task.D)

    @property
    def dim(self) -> int:
        return 2 * int(self.task.D)

    @property
    def N(self) -> int:
        return int(self.data["y"].shape[0])

    @property
    def spec(self) -> ModelSpec:
        return model_spec(self.task)

    def log_density(self, theta: dict[str, Any]) -> jax.Array:
        """Log posterior density (up to the evidence) at ``theta = {"k": (D,), "v": (D,)}``.

        Pure JAX: jit, grad and vmap apply. Equal to minus the potential of the suite's NUTS
        (:func:`bayesslr.bayes.model.marginal_model`).
        """
        k, v = _check_theta(theta, self.D, batch=False, name="theta")
        d = self.data
        return _log_density(k, v, d["X"], d["y"], d["mask"], self.task.nu, self.task.delta,
                            variant=self.task.variant)

    def init(self, key: jax.Array, n: int) -> dict[str, jax.Array]:
        """``n`` independent prior draws ``{"k": (n, D), "v": (n, D)}`` (random starts)."""
        from bayesslr.registry import memory_limit

        n = check_int("n", n, low=1, high=max(1, int(memory_limit() // (8 * self.D))))
        kk, kv = jax.random.split(key)
        return {"k": jax.random.normal(kk, (n, self.D)), "v": jax.random.normal(kv, (n, self.D))}

    @functools.cached_property
    def reference(self) -> dict[str, Any]:
        """The reference figures of this target.

        ``bayes_error`` (± ``bayes_error_stderr``): the Bayes-optimal test error, from the
        stored long NUTS runs started at the teacher (``source = "nuts_long"``) or, for a task
        not stored, the state evolution (``"state_evolution"``); ``oracle_error`` (the teacher
        known, same test set); ``state_evolution`` (± ``state_evolution_stderr``): the
        Bayes-optimal error as ``D -> inf`` at this ``alpha``; ``checks_passed`` (the stored
        reference's R-hat and ESS checks; None for the state evolution).
        """
        from bayesslr.core.metrics import test_errors
        from bayesslr.inference import reference as ref

        task, L = self.task, self.task.length.label()
        look = ref.lookup(task, self.alpha, self.seed, self.n_test)
        se = ref.theory_reference(task.variant, L, float(task.nu), float(task.delta),
                                  float(self.alpha))
        tk = Teacher(jnp.asarray(self.teacher["k"]), jnp.asarray(self.teacher["v"]))
        orc = test_errors(task, tk, self.test, np.zeros(self.n_test))
        return {"bayes_error": float(look["test_error"]),
                "bayes_error_stderr": float(look["stderr"]),
                "source": look["source"],
                "checks_passed": look.get("checks_passed"),
                "oracle_error": float(orc.oracle_error),
                "oracle_error_stderr": float(orc.oracle_error_stderr),
                "state_evolution": float(se["test_error"]),
                "state_evolution_stderr": float(se["stderr"]),
                "hard_phase": bool(se["hard_phase"]),
                "paired": look.get("y_hat") is not None}

    def stored_reference(self) -> dict[str, Any] | None:
        """This target's entry in the stored Bayes-optimal reference
        (``bayesslr.inference.reference.lookup``: test error, its standard error, source,
        checks, and the reference's predictions ``y_hat`` where stored), or None."""
        from bayesslr.inference import reference as ref

        return ref.lookup(self.task, self.alpha, self.seed, self.n_test)

    def __repr__(self) -> str:
        return (f"Target({self.name!r}, D={self.D}, N={self.N}, n_test={self.n_test}, "
                f"stored={self.stored})")


def target(name: str | None = None, *, variant: str = "spiked", L: Any = 3, nu: float = 2.0,
           delta: float = 0.01, D: int = 100, alpha: float = 2.0, seed: int = 0,
           n_test: int = N_TEST) -> Target:
    """A target by name (:func:`targets`), or by its fields for any setting.

    Parameters
    ----------
    name : str, optional
        ``slr_<variant>_L<L>_nu<nu>_delta<delta>-D<D>_alpha<alpha>_seed<seed>``; any setting
        is accepted (only the stored ones have a finite-``D`` reference; others are scored
        against the state evolution, unpaired).
    variant, L, nu, delta, D, alpha, seed : optional
        The fields, used when ``name`` is None. ``N = round(alpha D)`` training samples.
    n_test : int
        Test inputs (keep the default 4000 for a paired comparison with a stored reference).

    Returns
    -------
    Target

    Examples
    --------
    >>> import jax, bayesslr as bs
    >>> t = bs.target("slr_spiked_L3_nu2_delta0.01-D50_alpha5_seed0")
    >>> t.D, t.dim, t.data["X"].shape
    (50, 100, (250, 3, 50))
    >>> round(t.reference["bayes_error"], 4), t.reference["source"]
    (0.3629, 'nuts_long')
    >>> lp = jax.jit(t.log_density)
    >>> g = jax.grad(t.log_density)(t.teacher)
    >>> bool(lp(t.teacher) > jax.vmap(t.log_density)(t.init(jax.random.key(1), 4)).max())
    True
    """
    if name is not None:
        f = parse_name(name)
        variant, L, nu, delta, D, alpha, seed = (f[k] for k in (
            "variant", "L", "nu", "delta", "D", "alpha", "seed"))
    from bayesslr.inference.evaluate import task_data

    D = check_int("D", D, low=1, high=MAX_D)
    task = make_task(variant, L=L, nu=nu, delta=delta, D=D)
    model_spec(task)  # refuses Delta = 0 and nu = inf (no density to sample) in one line
    alpha = check_real("alpha", alpha, low=0.0, low_open=True, high=1e6)
    seed = check_int("seed", seed, low=0, high=2**32 - 1)  # seed_key's range, as in a cell
    n_test = check_int("n_test", n_test, low=2, high=MAX_N_TEST)
    N = max(1, int(round(alpha * task.D)))
    _check_memory(task, N, n_test)  # before anything is allocated, as the CLI checks cells
    td = task_data(task, seed, N, n_test)
    L_label = task.length.label()
    nm = target_name(task.variant, L_label, task.nu, task.delta, task.D, alpha, seed)
    data = {"X": np.asarray(td.train.X, np.float32), "y": np.asarray(td.train.y, np.float32),
            "mask": np.asarray(td.train.mask, bool)}
    teacher = {"k": np.asarray(td.teacher.k, np.float32),
               "v": np.asarray(td.teacher.v, np.float32)}
    return Target(nm, task, alpha, seed, n_test, data, teacher, td.test,
                  nm in set(targets()) and n_test == N_TEST)


MAX_D = 10**6  # the largest dimension (a target's data also has to fit in memory)
MAX_N_TEST = 10**8  # the largest test set (it also has to fit in memory)
MAX_DRAW_ABS = 1e6  # draws farther out than this overflow the predictor's softmax


def _check_memory(task: TaskConfig, N: int, n_test: int) -> None:
    """ConfigError when the target's data, ``(N + n_test) x L x D`` float32 with the
    working copies of their sampling (about 3 times that), would not fit in
    :func:`bayesslr.registry.memory_limit` (what ``bayesslr run`` checks for every cell)."""
    from bayesslr.registry import memory_limit

    need = 12.0 * (N + n_test) * task.L_max * task.D
    limit = memory_limit()
    if need > limit:
        raise ConfigError(
            f"D={task.D}, alpha, n_test={n_test} need about {need / 2**30:.3g} GB for the "
            f"target's data ((N={N} + n_test) x L={task.L_max} x D float32); allowed: at most "
            f"{limit / 2**30:.3g} GB (80% of this machine's memory, or "
            "BAYESSLR_MEMORY_LIMIT): lower D, alpha or n_test")


def _by_name(name: str) -> Target:
    return target(name)


def score_draws(target: Target | str, draws: dict[str, Any], *, chunk: int = 128
                ) -> dict[str, Any]:
    """Score posterior draws made anywhere against the target's Bayes-optimal reference.

    The draws' exact posterior-mean predictor (one softmax over draws and locations,
    docs/inference.md) is evaluated on the target's test inputs, the way every built-in
    algorithm of the inference benchmark is scored.

    Parameters
    ----------
    target : Target or str
        A :class:`Target` or its name.
    draws : dict
        ``{"k": (n, D), "v": (n, D)}`` (or ``(chains, n, D)``, pooled), from any sampler.

    Returns
    -------
    dict
        ``test_error`` (± ``stderr``), ``reference_error`` (± ``reference_error_stderr``),
        ``excess_over_reference`` (± ``excess_over_reference_stderr``, paired on the same test
        inputs when the reference's predictions are stored: ``reference_paired``),
        ``reaches_reference`` (excess at most 3 of its standard errors), ``disagreement``
        (mean squared difference of the predictions from the reference's; NaN unpaired),
        ``excess_over_oracle`` (±), the overlaps of the draws' mean with the teacher, and
        ``draws``.

    Examples
    --------
    >>> import jax, bayesslr as bs
    >>> t = bs.target("slr_spiked_L3_nu2_delta0.01-D50_alpha5_seed0")
    >>> s = bs.score_draws(t, t.init(jax.random.key(0), 100))   # prior draws: far off
    >>> s["reaches_reference"], s["excess_over_reference"] > 0.3
    (False, True)
    >>> near = {k: t.teacher[k] + 0.05 * t.init(jax.random.key(1), 100)[k] for k in "kv"}
    >>> s = bs.score_draws(t, near)   # draws around the teacher
    >>> abs(s["excess_over_reference"]) < 0.03
    True
    """
    from bayesslr.inference.evaluate import score_draws_on_data as _score

    if isinstance(target, str):
        target = _by_name(target)
    if not isinstance(target, Target):
        raise ConfigError(f"target must be a Target or a target name (got "
                          f"{type(target).__name__}); allowed: bayesslr.target(name)")
    chunk = check_int("chunk", chunk, low=1, high=10**6)
    k, v = _check_theta(draws, target.D, batch=True, name="draws")
    k = np.asarray(k, np.float32).reshape(-1, target.D)
    v = np.asarray(v, np.float32).reshape(-1, target.D)
    if k.shape[0] == 0:
        raise ConfigError(f"draws hold 0 draws (shape {np.shape(draws['k'])}); allowed: at "
                          "least 1 draw, (n, D) or (chains, n, D) with n >= 1")
    if not (np.isfinite(k).all() and np.isfinite(v).all()):
        raise ConfigError("draws hold non-finite values; allowed: finite k and v")
    big = float(max(np.abs(k).max(), np.abs(v).max()))
    if big > MAX_DRAW_ABS:
        raise ConfigError(f"draws hold a value of size {big:.3g}; allowed: |k|, |v| <= "
                          f"{MAX_DRAW_ABS:g} (larger ones overflow the predictor)")
    from bayesslr.core.task import seed_key
    from bayesslr.inference.evaluate import TaskData

    look = target.stored_reference()
    teacher = Teacher(jnp.asarray(target.teacher["k"]), jnp.asarray(target.teacher["v"]))
    td = TaskData(seed_key(target.seed), teacher, None, target.test)
    out, y_hat = _score(target.task, target.spec, td, k, v, look, chunk=chunk)
    if not np.isfinite(out["test_error"]):
        raise ConfigError(f"draws give non-finite predictions ({int(np.sum(~np.isfinite(y_hat)))}"
                          f" of {np.size(y_hat)}); allowed: draws whose predictor is finite "
                          "(|k|, |v| of the posterior's size)")
    e, se = out["excess_over_reference"], out["excess_over_reference_stderr"]
    out["reaches_reference"] = bool(np.isfinite(e) and e <= 3.0 * se)
    y_ref = None if look is None else look.get("y_hat")
    out["disagreement"] = (float(np.mean((np.asarray(y_hat) - np.asarray(y_ref)) ** 2))
                           if y_ref is not None and np.shape(y_ref) == np.shape(y_hat)
                           else float("nan"))
    out["draws"] = int(k.shape[0])
    out["target"] = target.name
    return {key: (float(val) if isinstance(val, np.floating) else val)
            for key, val in out.items()}
