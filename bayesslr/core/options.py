"""Option schemas: each option declared once (type, default, range, meaning), checked one way.

Every user-facing option of the suite (a method family's cell options, the fields of the option
dataclasses such as :class:`bayesslr.erm.protocol.ERMOptions`) is an :class:`Opt`. The same
:meth:`Opt.parse` validates a value wherever it comes from (a TOML sweep, a CLI flag, a Python
call), so the error a user sees names the option and its allowed range in one wording:
``draws=-5 is out of range; allowed: integer >= 2``.

Two ways to declare options, one way to check them:

* a :class:`Schema` (an ordered tuple of :class:`Opt`) for a method family's cell options;
  :meth:`Schema.validate` refuses unknown names (listing the allowed ones), parses every value
  and fills the defaults;
* an option dataclass whose fields are declared with :func:`option`; inheriting from
  :class:`Validated` checks every such field in ``__post_init__`` through the same
  :meth:`Opt.parse`, and :func:`schema_of` turns the class into a :class:`Schema` (so a family
  whose options are a dataclass's fields declares nothing twice).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from bayesslr.core.task import ConfigError, check_int, check_real

KINDS: tuple[str, ...] = ("int", "real", "bool", "choice", "str", "reals", "ints", "choices")
TRUE_WORDS = frozenset({"true", "1", "yes", "on"})
FALSE_WORDS = frozenset({"false", "0", "no", "off"})


@dataclass(frozen=True)
class Opt:
    """One option: name, default, type and allowed range.

    Attributes
    ----------
    name : str
        Option name (a cell option key, a dataclass field, a CLI flag without dashes).
    default : Any
        Default value (already in canonical form).
    kind : str
        ``int``, ``real``, ``bool``, ``choice`` (one of ``choices``), ``str``, ``reals`` /
        ``ints`` (a list, or a comma-separated string), ``choices`` (a list of distinct
        ``choices``, or a comma-separated string; the first one is the main one).
    low, high : float, optional
        Inclusive bounds of numbers (``low_open`` / ``high_open``: that bound excluded).
    allow_inf : bool
        ``inf`` accepted for reals.
    choices : tuple of str
        Allowed words of ``choice`` / ``choices``.
    nullable : bool
        ``None`` (or an empty string) accepted and kept as ``None``.
    max_len : int
        Longest list accepted by the list kinds.
    doc : str
        One line: what the option does.
    high_open : bool
        ``high`` excluded (reals).
    """

    name: str
    default: Any
    kind: str
    low: float | None = None
    high: float | None = None
    low_open: bool = False
    allow_inf: bool = False
    choices: tuple[str, ...] = ()
    nullable: bool = False
    max_len: int = 1000
    doc: str = ""
    high_open: bool = False

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise ValueError(f"option {self.name!r}: kind {self.kind!r} is not one of {KINDS}")

    # ---- text ----------------------------------------------------------------------------
    def _bounds(self, integer: bool) -> str:
        parts = []
        if self.low is not None:
            parts.append(f">= {int(self.low)}" if integer
                         else f"{'>' if self.low_open else '>='} {self.low:g}")
        if self.high is not None:
            parts.append(f"<= {int(self.high)}" if integer
                         else f"{'<' if self.high_open else '<='} {self.high:g}")
        return " and ".join(parts)

    def allowed(self) -> str:
        """The allowed values in words (what an error message says after ``allowed:``)."""
        if self.kind in ("int", "ints"):
            bounds = self._bounds(True)
            text = f"integer {bounds}" if bounds else "integer"
        elif self.kind in ("real", "reals"):
            bounds = self._bounds(False)
            text = (f"real {bounds}" if bounds else "finite real") + (
                " (inf allowed)" if self.allow_inf else "")
        else:
            text = {"bool": "true or false", "str": "text",
                    "choice": "one of " + ", ".join(self.choices),
                    "choices": f"one or more distinct of {', '.join(self.choices)} "
                               "(comma-separated)"}[self.kind]
        if self.kind in ("reals", "ints"):
            word = "integer" if self.kind == "ints" else "real"
            bounds = self._bounds(self.kind == "ints")
            each = f", each {bounds}" if bounds else ""
            text = (f"a list of {word}s{each} (comma-separated or a list, at most "
                    f"{self.max_len})")
        return text + (", or none" if self.nullable else "")

    def _bad(self, value: Any, what: str = "is not allowed") -> ConfigError:
        return ConfigError(f"{self.name}={value!r} {what}; allowed: {self.allowed()}")

    # ---- parsing -------------------------------------------------------------------------
    def parse(self, value: Any) -> Any:
        """Return ``value`` in canonical form or raise :class:`ConfigError` naming the option."""
        if value is None or (self.nullable and isinstance(value, str) and not value.strip()):
            if self.nullable:
                return None
            raise self._bad(value, "is not set")
        one = {"int": self._int, "real": self._real, "bool": self._bool,
               "choice": self._choice, "str": self._str}
        if self.kind in one:
            return one[self.kind](value)
        items = self._items(value)
        if self.kind == "reals":
            return tuple(self._real(v) for v in items)
        if self.kind == "ints":
            return tuple(self._int(v) for v in items)
        out = tuple(str(v).strip() for v in items)  # choices
        if any(v not in self.choices for v in out) or len(set(out)) != len(out):
            raise self._bad(value)
        return out

    def _choice(self, value: Any) -> str:
        text = str(value).strip() if isinstance(value, str) else value
        if text not in self.choices:
            raise self._bad(value, "is unknown")
        return text

    def _str(self, value: Any) -> str:
        if not isinstance(value, str):
            raise self._bad(value, "is not text")
        return value

    def _items(self, value: Any) -> list[Any]:
        if isinstance(value, str):
            items = [t.strip() for t in value.split(",") if t.strip()]
        elif isinstance(value, Sequence | np.ndarray) and not isinstance(value, str):
            items = list(value)
        else:
            items = [value]
        if not items:
            raise self._bad(value, "is empty")
        if len(items) > self.max_len:
            raise self._bad(f"<{len(items)} values>", "is too long")
        return items

    def _int(self, value: Any) -> int:
        try:
            return check_int(self.name, value,
                             low=None if self.low is None else int(math.ceil(self.low)),
                             high=None if self.high is None else int(math.floor(self.high)))
        except ConfigError:
            integral = (_is_number(value) and math.isfinite(float(value))
                        and float(value) == int(float(value)))
            raise self._bad(value, "is out of range" if integral
                            else "is not an integer") from None

    def _real(self, value: Any) -> float:
        if self.allow_inf and isinstance(value, str) and value.strip().lower() in {
                "inf", "+inf", "infinity"}:
            return math.inf
        try:
            x = check_real(self.name, value, low=self.low, high=self.high,
                           low_open=self.low_open, allow_inf=self.allow_inf)
        except ConfigError:
            raise self._bad(value, "is out of range" if _is_number(value)
                            else "is not a number") from None
        if self.high_open and self.high is not None and x >= self.high:
            raise self._bad(value, "is out of range")
        return x

    def _bool(self, value: Any) -> bool:
        if isinstance(value, bool | np.bool_):
            return bool(value)
        if isinstance(value, int | np.integer) and not isinstance(value, bool) and value in (0, 1):
            return bool(value)
        if isinstance(value, str):
            t = value.strip().lower()
            if t in TRUE_WORDS:
                return True
            if t in FALSE_WORDS:
                return False
        raise self._bad(value, "is not a boolean")


def _is_number(value: Any) -> bool:
    if isinstance(value, bool):
        return False
    try:
        float(value)
    except (TypeError, ValueError, OverflowError):
        return False
    return True


@dataclass(frozen=True)
class Schema:
    """The options of one method family (or one option dataclass), in declaration order.

    Attributes
    ----------
    owner : str
        Who takes these options (a family name), for error messages.
    opts : tuple of Opt
        The options.
    """

    owner: str
    opts: tuple[Opt, ...] = ()

    def __post_init__(self) -> None:
        names = [o.name for o in self.opts]
        dup = sorted({n for n in names if names.count(n) > 1})
        if dup:
            raise ValueError(f"schema {self.owner!r} declares {dup} twice")

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(o.name for o in self.opts)

    def __getitem__(self, name: str) -> Opt:
        for o in self.opts:
            if o.name == name:
                return o
        raise KeyError(name)

    def __contains__(self, name: object) -> bool:
        return any(o.name == name for o in self.opts)

    def defaults(self) -> dict[str, Any]:
        return {o.name: o.default for o in self.opts}

    def validate(self, options: Mapping[str, Any] | None) -> dict[str, Any]:
        """Check ``options`` (unknown names refused) and return every option, defaults filled."""
        options = dict(options or {})
        unknown = sorted(set(options) - set(self.names))
        if unknown:
            raise ConfigError(f"options {unknown} are unknown to {self.owner}; allowed: "
                              + (", ".join(self.names) or "none"))
        return {o.name: (o.parse(options[o.name]) if o.name in options else o.default)
                for o in self.opts}

    def __add__(self, other: Schema | Iterable[Opt]) -> Schema:
        extra = other.opts if isinstance(other, Schema) else tuple(other)
        return Schema(self.owner, self.opts + tuple(extra))

    def without(self, *names: str) -> Schema:
        return Schema(self.owner, tuple(o for o in self.opts if o.name not in names))

    def renamed(self, owner: str) -> Schema:
        return Schema(owner, self.opts)

    def table(self) -> list[dict[str, str]]:
        """Rows ``name, default, allowed, doc`` (for the docs and ``bayesslr methods``)."""
        return [{"name": o.name, "default": format_default(o.default), "allowed": o.allowed(),
                 "doc": o.doc} for o in self.opts]


def format_default(v: Any) -> str:
    """An option's default as the docs and ``--help`` print it: tuples comma-joined, floats
    ``%g`` (``inf``), ``None`` as ``none``, booleans lower case.

    >>> format_default((0.1, 1.0)), format_default(None), format_default(True)
    ('0.1,1', 'none', 'true')
    """
    if isinstance(v, tuple):
        return ",".join(format_default(x) for x in v)
    if isinstance(v, float):
        return "inf" if math.isinf(v) else f"{v:g}"
    if v is None:
        return "none"
    return str(v).lower() if isinstance(v, bool) else str(v)


# ------------------------------------------------------------------------------------------
# option dataclasses
# ------------------------------------------------------------------------------------------
_META = "bayesslr_opt"


def option(default: Any, *, kind: str | None = None, low: float | None = None,
           high: float | None = None, low_open: bool = False, high_open: bool = False,
           allow_inf: bool = False, choices: Sequence[str] = (), nullable: bool = False,
           max_len: int = 1000, doc: str = "") -> Any:
    """A dataclass field declared as an option (see :class:`Opt`; ``kind`` is inferred from the
    default when omitted: bool, int, float, a tuple of floats, or a word among ``choices``)."""
    if kind is None:
        if isinstance(default, bool):
            kind = "bool"
        elif isinstance(default, int):
            kind = "int"
        elif isinstance(default, float):
            kind = "real"
        elif isinstance(default, tuple):
            kind = "ints" if default and all(isinstance(x, int) for x in default) else "reals"
        elif choices:
            kind = "choice"
        else:
            kind = "str"
    meta = {"kind": kind, "low": low, "high": high, "low_open": low_open,
            "high_open": high_open, "allow_inf": allow_inf, "choices": tuple(choices),
            "nullable": nullable, "max_len": max_len, "doc": doc}
    return field(default=default, metadata={_META: meta})


def schema_of(cls: type, owner: str | None = None, *, exclude: Iterable[str] = ()) -> Schema:
    """The :class:`Schema` of an option dataclass (its fields declared with :func:`option`)."""
    skip = set(exclude)
    opts = []
    for f in dataclasses.fields(cls):
        meta = f.metadata.get(_META)
        if meta is None or f.name in skip:
            continue
        opts.append(Opt(f.name, f.default, **meta))
    return Schema(owner or cls.__name__, tuple(opts))


class Validated:
    """Mixin for frozen option dataclasses: ``__post_init__`` parses every :func:`option`
    field through :meth:`Opt.parse` and stores the canonical value."""

    def __post_init__(self) -> None:
        for f in dataclasses.fields(self):  # type: ignore[arg-type]
            meta = f.metadata.get(_META)
            if meta is None:
                continue
            value = Opt(f.name, f.default, **meta).parse(getattr(self, f.name))
            object.__setattr__(self, f.name, value)

    @classmethod
    def from_options(cls, options: Mapping[str, Any]):
        """Build from a mapping, keeping only this class's fields (others are the caller's)."""
        names = {f.name for f in dataclasses.fields(cls)}  # type: ignore[arg-type]
        return cls(**{k: v for k, v in options.items() if k in names})
