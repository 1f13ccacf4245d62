"""The method registry: one function per method turns one *cell* of settings into scalar results.

This is the single code path shared by the sweep runner (:mod:`bayesslr.sweep`) and the
single-run CLI verbs (``bayesslr population|sample|erm|theory ...``): a CLI verb is a one-cell
sweep. A method is named ``family`` or ``family:activation`` (``erm:softmax``,
``population:bayes``, ``theory_bayes``, ``bayes_sampling``).

A method function has the signature ``fn(cell: Cell) -> dict[str, scalar]``. Keys are taken from
:data:`OUTPUT_VARS` where one fits (so that every method lands in the same dataset variables);
other keys are allowed and are stored too. Every method module registers itself with
:func:`register`; :func:`get_method` imports the module that owns a family on first use.
"""

from __future__ import annotations

import importlib
import json
import math
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass, field
from typing import Any

from bayesslr.task import ConfigError, TaskConfig, make_task

Scalar = float | int | bool | str


@dataclass(frozen=True)
class Cell:
    """One point of a sweep: task settings, sample size, regularisation, seed and options.

    Attributes
    ----------
    method : str
        ``family`` or ``family:activation``.
    variant, L, nu, delta :
        Task settings (``L`` is a length label: ``"3"`` or ``"1,2,3"``; ``nu`` may be ``inf``).
    alpha : float or None
        Sample ratio ``N/D`` (None for population methods).
    lam : float, "auto" or None
        Ridge penalty (``"auto"``: chosen on a validation split).
    D : int or None
        Dimension; derived from ``sqrtND`` when that is given instead.
    sqrtND : float or None
        The paper's sizing ``sqrt(N D)`` (``D = sqrtND / sqrt(alpha)``).
    seed : int
        Seed of teacher, data and algorithm randomness.
    options : dict
        Method options (e.g. ``draws``, ``warmup``, ``chains``, ``init``, ``samples``).
    """

    method: str
    variant: str = "spiked"
    L: str = "3"
    nu: float = 2.0
    delta: float = 0.0
    alpha: float | None = None
    lam: float | str | None = None
    D: int | None = None
    sqrtND: float | None = None
    seed: int = 0
    options: Mapping[str, Any] = field(default_factory=dict)

    @property
    def family(self) -> str:
        return self.method.split(":", 1)[0]

    @property
    def activation(self) -> str | None:
        parts = self.method.split(":", 1)
        return parts[1] if len(parts) == 2 else None

    def dimension(self) -> int:
        """``D``, or ``round(sqrtND / sqrt(alpha))`` under the paper's sizing."""
        if self.D is not None:
            return int(self.D)
        if self.sqrtND is not None and self.alpha is not None:
            return max(1, int(round(self.sqrtND / math.sqrt(self.alpha))))
        raise ConfigError("D is not set; allowed: give D (integer >= 1) or sqrtND with alpha")

    def n_train(self) -> int:
        """``N = round(alpha D)`` (at least 1)."""
        if self.alpha is None:
            raise ConfigError("alpha is not set; allowed: real > 0")
        return max(1, int(round(self.alpha * self.dimension())))

    def task(self, D: int | None = None) -> TaskConfig:
        """The validated :class:`TaskConfig` of this cell (``D`` defaults to :meth:`dimension`)."""
        if D is None:
            D = self.dimension() if (self.D is not None or self.sqrtND is not None) else 1
        return make_task(self.variant, L=self.L, nu=self.nu, delta=self.delta, D=D)

    def to_json(self) -> str:
        d = asdict(self)
        d["options"] = dict(self.options)
        d["nu"] = "inf" if isinstance(self.nu, float) and math.isinf(self.nu) else self.nu
        return json.dumps(d, sort_keys=True)


# CF-style metadata of the standard output variables: name -> (long_name, units)
OUTPUT_VARS: dict[str, tuple[str, str]] = {
    "test_error": ("test excess error (risk minus Delta) on fresh data", "1"),
    "stderr": ("standard error of test_error", "1"),
    "risk": ("test risk (excess + Delta)", "1"),
    "train_loss": ("training loss per sample, 1/(2N) sum (y - f)^2", "1"),
    "oracle_error": ("excess error of the teacher-known Bayes predictor on the same test set", "1"),
    "m_k": ("overlap k.k*/D", "1"),
    "q_k": ("self-overlap k.k/D", "1"),
    "m_v": ("overlap v.v*/D", "1"),
    "q_v": ("self-overlap v.v/D", "1"),
    "m_kv": ("cross overlap k.v*/D", "1"),
    "m_vk": ("cross overlap v.k*/D", "1"),
    "q_kv": ("cross overlap k.v/D", "1"),
    "lam": ("ridge penalty used", "1"),
    "r_hat_max": ("largest split R-hat over parameters", "1"),
    "ess_bulk_min": ("smallest bulk effective sample size", "1"),
    "ess_tail_min": ("smallest tail effective sample size", "1"),
    "divergences": ("number of divergent transitions", "1"),
    "nishimori_gap": ("max |m - q| of posterior-mean overlaps", "1"),
    "grad_evals": ("gradient evaluations", "1"),
    "converged": ("solver or optimiser converged", "1"),
    "iterations": ("iterations used", "1"),
    "runtime_s": ("wall time of the cell", "s"),
}

MethodFn = Callable[[Cell], dict[str, Scalar]]


@dataclass(frozen=True)
class MethodSpec:
    """A registered method family.

    Attributes
    ----------
    family : str
        Family name (prefix of the method name).
    fn : callable
        ``fn(cell) -> dict`` of scalar outputs.
    activations : tuple of str
        Allowed ``:activation`` suffixes (empty: the family takes none).
    needs : tuple of str
        Cell fields that must be set (e.g. ``("alpha", "D")``).
    description : str
        One line for ``bayesslr presets`` and docs.
    """

    family: str
    fn: MethodFn
    activations: tuple[str, ...]
    needs: tuple[str, ...]
    description: str


_REGISTRY: dict[str, MethodSpec] = {}

# family -> module that registers it (imported lazily, so the registry never imports upwards
# at import time)
FAMILY_MODULES: dict[str, str] = {
    "population": "bayesslr.population",
    "erm": "bayesslr.erm.method",
    "bayes_sampling": "bayesslr.bayes.method",
    "theory_erm": "bayesslr.theory.method",
    "theory_bayes": "bayesslr.theory.method",
}


def register(family: str, *, activations: tuple[str, ...] = (), needs: tuple[str, ...] = (),
             description: str = "") -> Callable[[MethodFn], MethodFn]:
    """Decorator registering ``fn`` as the method family ``family``."""

    def deco(fn: MethodFn) -> MethodFn:
        _REGISTRY[family] = MethodSpec(family, fn, tuple(activations), tuple(needs), description)
        return fn

    return deco


def _load(family: str) -> None:
    if family not in _REGISTRY and family in FAMILY_MODULES:
        importlib.import_module(FAMILY_MODULES[family])


def get_method(method: str) -> MethodSpec:
    """Resolve ``family[:activation]`` to its :class:`MethodSpec`, validating the suffix."""
    family, _, act = method.partition(":")
    _load(family)
    if family not in _REGISTRY:
        raise ConfigError(
            f"method={method!r} is unknown; allowed families: {', '.join(sorted(FAMILY_MODULES))}"
        )
    spec = _REGISTRY[family]
    if spec.activations and act not in spec.activations:
        raise ConfigError(
            f"method={method!r} needs an activation; allowed: "
            + ", ".join(f"{family}:{a}" for a in spec.activations)
        )
    if not spec.activations and act:
        raise ConfigError(f"method={method!r}: family {family!r} takes no ':activation' suffix")
    return spec


def known_methods() -> list[str]:
    """Every valid method name."""
    out = []
    for family in sorted(FAMILY_MODULES):
        _load(family)
        spec = _REGISTRY[family]
        out += [f"{family}:{a}" for a in spec.activations] if spec.activations else [family]
    return out


def run_cell(cell: Cell) -> dict[str, Scalar]:
    """Run one cell through its registered method (validation happens inside the method)."""
    spec = get_method(cell.method)
    missing = [n for n in spec.needs if getattr(cell, n) is None]
    if missing:
        raise ConfigError(f"method {cell.method!r} needs {', '.join(missing)}; none given")
    return spec.fn(cell)
