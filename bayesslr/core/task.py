"""The SLR task: validated configuration and the JAX sampler of teacher and data (docs/model.md §1).

Conventions fixed here (and recorded in every dataset through :meth:`TaskConfig.to_dict`):

* tokens ``x_l ~ N(0, I_D)``; ``chi*_l = x_l . k* / sqrt(D)``, ``z*_l = x_l . v* / sqrt(D)``;
* spiked: ``x_{eps*} += sqrt(nu / D) k*`` (equivalently the base measure reweighted by
  ``exp(sqrt(nu) chi*_eps - nu/2)``); max: ``eps* ~ Categorical(softmax(nu chi*))``, argmax for
  ``nu = inf``;
* ``y = z*_{eps*} + sqrt(Delta) xi``;
* variable lengths are padded to ``L_max`` with zero tokens and a boolean ``mask``; every
  estimator treats masked positions as absent;
* the exact location posterior given the teacher is ``softmax(c_nu chi*)`` with
  ``c_nu = sqrt(nu)`` (spiked) and ``nu`` (max).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any, Literal, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from bayesslr.core.jaxconfig import Array, PRNGKey

Variant = Literal["spiked", "max"]
VARIANTS: tuple[str, ...] = ("spiked", "max")


class ConfigError(ValueError):
    """Invalid user input; the message names the parameter, the value and the allowed range.

    Examples
    --------
    >>> import bayesslr as bs
    >>> try:
    ...     bs.make_task("spiked", nu=-1)
    ... except bs.ConfigError as exc:
    ...     print(exc)
    nu=-1 is out of range; allowed: real >= 0
    """


# --------------------------------------------------------------------------------------------
# validation helpers (shared by every layer that takes user input)
# --------------------------------------------------------------------------------------------
def check_real(name: str, value: Any, *, low: float | None = None, high: float | None = None,
               low_open: bool = False, allow_inf: bool = False) -> float:
    """Return ``value`` as a float or raise :class:`ConfigError` naming ``name`` and the range."""
    rng = _range_text(low, high, low_open, allow_inf)
    if isinstance(value, bool):
        raise ConfigError(f"{name}={value!r} is not a number; allowed: {rng}")
    try:
        x = float(value)
    except (TypeError, ValueError):
        raise ConfigError(f"{name}={value!r} is not a number; allowed: {rng}") from None
    if math.isnan(x):
        raise ConfigError(f"{name}=nan is not allowed; allowed: {rng}")
    if math.isinf(x) and not (allow_inf and x > 0):
        raise ConfigError(f"{name}={x} is not allowed; allowed: {rng}")
    if low is not None and (x < low or (low_open and x == low)):
        raise ConfigError(f"{name}={value!r} is out of range; allowed: {rng}")
    if high is not None and x > high:
        raise ConfigError(f"{name}={value!r} is out of range; allowed: {rng}")
    return x


def check_int(name: str, value: Any, *, low: int | None = None, high: int | None = None) -> int:
    """Return ``value`` as an int (integral floats accepted) or raise :class:`ConfigError`."""
    rng = f"integer {'>= ' + str(low) if low is not None else ''}" + (
        f"{' and ' if low is not None else ''}<= {high}" if high is not None else "")
    if isinstance(value, bool):
        raise ConfigError(f"{name}={value!r} is not an integer; allowed: {rng.strip()}")
    if isinstance(value, str):
        try:
            value = float(value) if any(c in value for c in ".eE") else int(value)
        except ValueError:
            raise ConfigError(
                f"{name}={value!r} is not an integer; allowed: {rng.strip()}") from None
    if isinstance(value, float | np.floating):
        if not math.isfinite(value) or value != int(value):
            raise ConfigError(f"{name}={value!r} is not an integer; allowed: {rng.strip()}")
        value = int(value)
    if not isinstance(value, int | np.integer):
        raise ConfigError(f"{name}={value!r} is not an integer; allowed: {rng.strip()}")
    v = int(value)
    if (low is not None and v < low) or (high is not None and v > high):
        raise ConfigError(f"{name}={v} is out of range; allowed: {rng.strip()}")
    return v


def _range_text(low, high, low_open, allow_inf) -> str:
    parts = []
    if low is not None:
        parts.append(f"{'>' if low_open else '>='} {low:g}")
    if high is not None:
        parts.append(f"<= {high:g}")
    text = "real " + " and ".join(parts) if parts else "finite real"
    return text + (" (inf allowed)" if allow_inf else "")


# --------------------------------------------------------------------------------------------
# length law
# --------------------------------------------------------------------------------------------
# how far from 1 the weights of a length law may sum (absorbs the 6 significant digits that
# ``LengthLaw.label`` keeps; anything further off is refused, never renormalised)
PROB_SUM_TOL = 1e-5


@dataclass(frozen=True)
class LengthLaw:
    """Law of the sequence length ``L`` on a finite support.

    Attributes
    ----------
    values : tuple of int
        Support, strictly increasing, each ``>= 1``.
    probs : tuple of float
        Probabilities, positive, summing to one.

    Examples
    --------
    >>> from bayesslr import LengthLaw
    >>> LengthLaw.parse("1,2,3").probs
    (0.3333333333333333, 0.3333333333333333, 0.3333333333333333)
    >>> LengthLaw.parse("1:0.25,3:0.75").label()
    '1:0.25,3:0.75'
    """

    values: tuple[int, ...]
    probs: tuple[float, ...]

    @classmethod
    def fixed(cls, L: Any, *, name: str = "L") -> LengthLaw:
        return cls((check_int(name, L, low=1),), (1.0,))

    @classmethod
    def uniform(cls, values: Sequence[Any], *, name: str = "L_dist") -> LengthLaw:
        vals = [check_int(name, v, low=1) for v in values]
        if not vals:
            raise ConfigError(f"{name}=[] is empty; allowed: a non-empty list of integers >= 1")
        if len(set(vals)) != len(vals):
            raise ConfigError(
                f"{name}={vals} has repeated lengths; allowed: distinct integers >= 1")
        vals = sorted(vals)
        return cls(tuple(vals), tuple([1.0 / len(vals)] * len(vals)))

    @classmethod
    def parse(cls, text: str, *, name: str = "L_dist") -> LengthLaw:
        """Parse ``"3"`` (fixed), ``"1,2,3"`` (uniform) or ``"1:0.2,3:0.8"`` (weighted).

        ``name`` is the parameter named in error messages (``L`` or ``L_dist``). Weights must
        be probabilities: each in ``(0, 1]``, summing to one within :data:`PROB_SUM_TOL`
        (room for the six significant digits of :meth:`label`); they are never renormalised
        silently.
        """
        text = str(text).strip()
        if not text:
            raise ConfigError(f"{name}='' is empty; allowed: '3', '1,2,3' or '1:0.5,3:0.5'")
        items = [t.strip() for t in text.split(",") if t.strip()]
        if all(":" in t for t in items):
            vals, ps = zip(*(t.split(":", 1) for t in items), strict=True)
            vals = [check_int(name, v, low=1) for v in vals]
            ps = [check_real(f"{name} probability", p, low=0.0, low_open=True, high=1.0)
                  for p in ps]
            if len(set(vals)) != len(vals):
                raise ConfigError(f"{name}={text!r} repeats a length; allowed: distinct lengths")
            tot = math.fsum(ps)
            if abs(tot - 1.0) > PROB_SUM_TOL:
                raise ConfigError(f"{name}={text!r} has probabilities summing to {tot:.6g}; "
                                  f"allowed: probabilities summing to 1 (within "
                                  f"{PROB_SUM_TOL:g})")
            order = np.argsort(vals)
            return cls(tuple(int(vals[i]) for i in order), tuple(ps[i] / tot for i in order))
        if any(":" in t for t in items):
            raise ConfigError(f"{name}={text!r} mixes weighted and plain lengths")
        if len(items) == 1:
            return cls.fixed(items[0], name=name)
        return cls.uniform(items, name=name)

    @property
    def L_max(self) -> int:
        return max(self.values)

    @property
    def is_fixed(self) -> bool:
        return len(self.values) == 1

    def label(self) -> str:
        """Compact text form, inverse of :meth:`parse`."""
        if self.is_fixed:
            return str(self.values[0])
        if np.allclose(self.probs, self.probs[0]):
            return ",".join(str(v) for v in self.values)
        return ",".join(f"{v}:{p:.6g}" for v, p in zip(self.values, self.probs, strict=True))


# --------------------------------------------------------------------------------------------
# task configuration
# --------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class TaskConfig:
    """A validated SLR task (docs/model.md §1). Build with :func:`make_task`.

    Attributes
    ----------
    variant : {"spiked", "max"}
        How the hidden token is marked.
    length : LengthLaw
        Law of the sequence length (a single value for fixed ``L``).
    nu : float
        Signal strength, ``>= 0``; ``inf`` allowed for ``max`` only.
    delta : float
        Label-noise variance ``Delta >= 0``.
    D : int
        Token dimension, ``>= 1``.
    orthogonal_v : bool
        Orthogonalise the teacher ``v*`` against ``k*``.

    Examples
    --------
    >>> import bayesslr as bs
    >>> task = bs.make_task("max", L="1,2,3", nu="inf", D=50)
    >>> task.L_max, task.c_nu, task.length.label()
    (3, inf, '1,2,3')
    """

    variant: str
    length: LengthLaw
    nu: float
    delta: float
    D: int
    orthogonal_v: bool = False

    @property
    def L_max(self) -> int:
        return self.length.L_max

    @property
    def c_nu(self) -> float:
        """Inverse temperature of the exact location posterior: ``sqrt(nu)`` or ``nu``."""
        return math.sqrt(self.nu) if self.variant == "spiked" else self.nu

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["length"] = {"values": list(self.length.values), "probs": list(self.length.probs)}
        d["L"] = self.length.label()
        d["nu"] = "inf" if math.isinf(self.nu) else self.nu
        return d


def make_task(variant: str = "spiked", L: Any = 3, nu: Any = 2.0, delta: Any = 0.0,
              D: Any = 100, *, L_dist: Any = None, orthogonal_v: bool = False) -> TaskConfig:
    """Validate user input and build a :class:`TaskConfig`.

    ``L`` is a fixed length; ``L_dist`` (a :class:`LengthLaw`, a list of lengths taken uniform,
    or a string accepted by :meth:`LengthLaw.parse`) replaces it when given.

    Examples
    --------
    >>> import bayesslr as bs
    >>> task = bs.make_task("spiked", L=3, nu=2.0, delta=0.01, D=100)
    >>> task.variant, task.L_max, task.nu, task.delta, task.D
    ('spiked', 3, 2.0, 0.01, 100)
    """
    if variant not in VARIANTS:
        raise ConfigError(f"variant={variant!r} is unknown; allowed: one of {', '.join(VARIANTS)}")
    if L_dist is None:
        length = L if isinstance(L, LengthLaw) else (
            LengthLaw.parse(L, name="L") if isinstance(L, str) else LengthLaw.fixed(L))
    elif isinstance(L_dist, LengthLaw):
        length = L_dist
    elif isinstance(L_dist, str):
        length = LengthLaw.parse(L_dist, name="L_dist")
    else:
        length = LengthLaw.uniform(list(L_dist))
    if isinstance(nu, str) and nu.strip().lower() in {"inf", "infinity", "+inf"}:
        nu = math.inf
    nu_v = check_real("nu", nu, low=0.0, allow_inf=(variant == "max"))
    delta_v = check_real("delta", delta, low=0.0)
    D_v = check_int("D", D, low=1)
    return TaskConfig(variant, length, nu_v, delta_v, D_v, bool(orthogonal_v))


# --------------------------------------------------------------------------------------------
# sampler
# --------------------------------------------------------------------------------------------
class Teacher(NamedTuple):
    """Teacher vectors.

    Attributes
    ----------
    k : Array, shape (D,)
        Key direction ``k*``.
    v : Array, shape (D,)
        Value direction ``v*``.

    Examples
    --------
    >>> import jax, bayesslr as bs
    >>> teacher, _, _ = bs.sample_task(jax.random.key(0), bs.make_task(D=16), 0)
    >>> teacher.k.shape, teacher.v.shape
    ((16,), (16,))
    """

    k: Array
    v: Array


def sample_count(samples: Any) -> int:
    """Rows of a batch of samples, the length of its labels ``y``: the ``n`` of
    :class:`Data`, :class:`bayesslr.multihead.MultiheadData` and
    :class:`bayesslr.population.teacher_channel.ChannelSamples`."""
    return int(samples.y.shape[0])


class Data(NamedTuple):
    """A batch of SLR samples, padded to ``L_max``.

    Attributes
    ----------
    X : Array, shape (n, L_max, D)
        Tokens; padded positions are zero.
    y : Array, shape (n,)
        Labels.
    eps : Array, shape (n,)
        Hidden location (0-based index into the padded axis; -1 where unknown, as for a
        user's own data).
    mask : Array, shape (n, L_max), bool
        True where a token exists.

    Examples
    --------
    >>> import jax, bayesslr as bs
    >>> _, train, _ = bs.sample_task(jax.random.key(0), bs.make_task(L="1,2", D=4), 6)
    >>> train.X.shape, train.y.shape, train.mask.shape
    ((6, 2, 4), (6,), (6, 2))
    """

    X: Array
    y: Array
    eps: Array
    mask: Array

    n = property(sample_count, doc="Number of samples (the length of ``y``).")


def as_data(X: Any, y: Any, mask: Any = None) -> Data:
    """A user's own arrays as :class:`Data`: ``X`` ``(n, L, D)`` tokens (padded positions
    zero), ``y`` ``(n,)`` labels, ``mask`` ``(n, L)`` (default: every token present). The
    hidden locations are unknown (``eps = -1``).

    Examples
    --------
    >>> import numpy as np
    >>> from bayesslr import as_data
    >>> d = as_data(np.zeros((5, 3, 4)), np.zeros(5))
    >>> d.n, d.X.shape, bool(d.mask.all())
    (5, (5, 3, 4), True)
    """
    X = jnp.asarray(X)
    y = jnp.asarray(y)
    if X.ndim != 3:
        raise ConfigError(f"X has shape {tuple(X.shape)}; allowed: (n, L, D) tokens")
    n, L, _ = X.shape
    if y.shape != (n,):
        raise ConfigError(f"y has shape {tuple(y.shape)}; allowed: ({n},), one label per "
                          "sample of X")
    mask = jnp.ones((n, L), bool) if mask is None else jnp.asarray(mask, bool)
    if mask.shape != (n, L):
        raise ConfigError(f"mask has shape {tuple(mask.shape)}; allowed: ({n}, {L})")
    if not bool(jnp.all(jnp.any(mask, axis=-1))):
        raise ConfigError("mask has a sample with no token; allowed: at least one True per row")
    return Data(X * mask[:, :, None], y, jnp.full((n,), -1, jnp.int32), mask)


def sample_teacher(key: PRNGKey, task: TaskConfig) -> Teacher:
    """Draw ``k*, v* ~ N(0, I_D)`` independently (``v*`` optionally orthogonalised to ``k*``)."""
    kk, kv = jax.random.split(key)
    k = jax.random.normal(kk, (task.D,))
    v = jax.random.normal(kv, (task.D,))
    if task.orthogonal_v and task.D > 1:
        v = v - (v @ k) / (k @ k) * k
        v = v * jnp.sqrt(task.D / (v @ v))
    return Teacher(k, v)


def sample_lengths(key: PRNGKey, length: LengthLaw, n: int) -> Array:
    """Draw ``n`` sequence lengths from the law (a constant array when ``L`` is fixed)."""
    if length.is_fixed:
        return jnp.full((n,), length.values[0], dtype=jnp.int32)
    idx = jax.random.choice(key, len(length.values), (n,), p=jnp.asarray(length.probs))
    return jnp.asarray(length.values, dtype=jnp.int32)[idx]


def length_mask(lengths: Array, L_max: int) -> Array:
    """Boolean mask ``(n, L_max)``, True on the first ``lengths[i]`` positions."""
    return jnp.arange(L_max)[None, :] < lengths[:, None]


def location_logits(task: TaskConfig, chi_star: Array, mask: Array) -> Array:
    """Log-weights of the exact location posterior ``c_nu chi*`` (masked entries at -inf).

    For ``nu = inf`` (max variant) the posterior is the argmax: its logits are 0 at the argmax
    and -inf elsewhere.
    """
    if math.isinf(task.nu):
        masked = jnp.where(mask, chi_star, -jnp.inf)
        top = jnp.argmax(masked, axis=-1)
        onehot = jax.nn.one_hot(top, chi_star.shape[-1], dtype=bool)
        return jnp.where(onehot, 0.0, -jnp.inf)
    return jnp.where(mask, task.c_nu * chi_star, -jnp.inf)


def location_posterior(task: TaskConfig, chi_star: Array, mask: Array) -> Array:
    """``P(eps* = l | X) = softmax(c_nu chi*)_l`` over unmasked positions (docs/model.md §1)."""
    return jax.nn.softmax(location_logits(task, chi_star, mask), axis=-1)


def sample_data(key: PRNGKey, task: TaskConfig, teacher: Teacher, n: Any) -> Data:
    """Draw ``n`` samples ``(X, y, eps*)`` from the SLR generative process (docs/model.md §1)."""
    n = check_int("n", n, low=1)
    return _sample_data(key, task, teacher, n)


def _sample_data(key: PRNGKey, task: TaskConfig, teacher: Teacher, n: int) -> Data:
    kL, kx, ke, kn = jax.random.split(key, 4)
    L_max, D = task.L_max, task.D
    lengths = sample_lengths(kL, task.length, n)
    mask = length_mask(lengths, L_max)
    X = jax.random.normal(kx, (n, L_max, D))
    if task.variant == "spiked":
        u = jax.random.uniform(ke, (n,))
        eps = jnp.minimum(jnp.floor(u * lengths).astype(jnp.int32), lengths - 1)
        spike = jnp.sqrt(task.nu / D) * teacher.k
        X = X + jax.nn.one_hot(eps, L_max)[:, :, None] * spike[None, None, :]
    else:
        chi_star = X @ teacher.k / jnp.sqrt(D)
        logits = location_logits(task, chi_star, mask)
        eps = jax.random.categorical(ke, logits, axis=-1).astype(jnp.int32)
    X = X * mask[:, :, None]
    z_star = X @ teacher.v / jnp.sqrt(D)
    y = jnp.take_along_axis(z_star, eps[:, None], axis=1)[:, 0]
    y = y + jnp.sqrt(task.delta) * jax.random.normal(kn, (n,))
    return Data(X, y, eps, mask)


def fields(X: Array, k: Array, v: Array) -> tuple[Array, Array]:
    """``chi = X k / sqrt(D)`` and ``z = X v / sqrt(D)``, each ``(..., n, L)``, in one pass.

    ``k`` and ``v`` are stacked so that, under ``vmap`` over many parameter vectors sharing ``X``,
    XLA sees a single contraction of ``X`` with a ``(batch, 2, D)`` block: the data matrix is
    read once for the whole batch. Spec section 2.
    """
    h = jnp.einsum("...nld,pd->...nlp", X, jnp.stack([k, v])) / math.sqrt(X.shape[-1])
    return h[..., 0], h[..., 1]


def teacher_fields(task: TaskConfig, teacher: Teacher, data: Data) -> tuple[Array, Array]:
    """Teacher fields ``(chi*, z*)``, each ``(n, L_max)``."""
    return fields(data.X, teacher.k, teacher.v)


# --------------------------------------------------------------------------------------------
# the data contract: one seed -> (teacher, train, test) for every method
# --------------------------------------------------------------------------------------------
# algorithm randomness, apart from the data: ``fold_in(key(seed), STREAMS[name])``
STREAMS: dict[str, int] = {"start": 1, "sampler": 1, "trajectory": 2}


def seed_key(seed: int) -> PRNGKey:
    """The key of a seed (every method with the same seed sees the same teacher and data).

    Examples
    --------
    >>> import bayesslr as bs
    >>> task = bs.make_task(D=8)
    >>> a = bs.sample_task(bs.seed_key(3), task, 5)[1]
    >>> b = bs.sample_task(bs.seed_key(3), task, 5)[1]
    >>> bool((a.X == b.X).all())
    True
    """
    return jax.random.key(seed)


def algorithm_key(key: PRNGKey, stream: str) -> PRNGKey:
    """Key of an algorithm's own randomness (starts, sampler, ...), independent of the data.

    ``stream`` is a name of :data:`STREAMS`: ``"start"`` (ERM starts), ``"sampler"`` (MCMC,
    variational inference, message passing starts) and ``"trajectory"`` (GD/Adam starts).
    """
    return jax.random.fold_in(key, STREAMS[stream])


def sample_task(key: PRNGKey, task: TaskConfig, n_train: int,
                n_test: int = 0) -> tuple[Teacher, Data | None, Data | None]:
    """Teacher, training data and fresh test data from one key: the suite's data contract.

    ``key`` is split once into ``(teacher, train, test)`` keys, always the same way, so every
    estimator given the same key sees the same teacher, training set and test set, whatever it
    draws (``n_train = 0`` or ``n_test = 0`` skip that set and leave the others unchanged).

    Examples
    --------
    >>> import jax, bayesslr as bs
    >>> task = bs.make_task("spiked", L=3, nu=2.0, delta=0.01, D=20)
    >>> teacher, train, test = bs.sample_task(jax.random.key(0), task, 40, 100)
    >>> train.X.shape, test.X.shape
    ((40, 3, 20), (100, 3, 20))
    >>> _, only_train, none = bs.sample_task(jax.random.key(0), task, 40)
    >>> bool((only_train.X == train.X).all()), none is None
    (True, True)
    """
    kt, ktr, kte = jax.random.split(key, 3)
    teacher = sample_teacher(kt, task)
    train = sample_data(ktr, task, teacher, n_train) if n_train > 0 else None
    test = sample_data(kte, task, teacher, n_test) if n_test > 0 else None
    return teacher, train, test


def overlaps(k: Array, v: Array, teacher: Teacher) -> dict[str, Array]:
    """The seven overlaps of docs/model.md §3, all divided by ``D`` (leading axes broadcast).

    ``m_k = k.k*``, ``q_k = k.k``, ``m_v = v.v*``, ``q_v = v.v``, ``m_kv = k.v*``,
    ``m_vk = v.k*``, ``q_kv = k.v``.
    """
    D = k.shape[-1]

    def dot(a, b):
        return jnp.sum(a * b, axis=-1) / D

    return {"m_k": dot(k, teacher.k), "q_k": dot(k, k), "m_v": dot(v, teacher.v),
            "q_v": dot(v, v), "m_kv": dot(k, teacher.v), "m_vk": dot(v, teacher.k),
            "q_kv": dot(k, v)}


OVERLAP_NAMES: tuple[str, ...] = ("m_k", "q_k", "m_v", "q_v", "m_kv", "m_vk", "q_kv")
