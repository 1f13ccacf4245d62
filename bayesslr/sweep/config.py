"""Sweep configuration: a TOML file (or a built-in preset) -> a validated list of cells.

A sweep is a union of *grid blocks*; each block is the cartesian product of its values. Every
value is checked, and every method name is resolved through :func:`bayesslr.registry.get_method`,
before any work starts (a :class:`~bayesslr.core.task.ConfigError` names the offending entry).

TOML layout (every grid key takes one value or a list; ``[defaults]`` fill what a block omits)::

    name = "quick"
    description = "one line"

    [defaults]
    variant = "spiked"     # "spiked" | "max"                               (docs/model.md §1)
    L = 3                  # fixed length, or a length law "1,2,3" / "1:0.5,3:0.5"
    nu = 2.0               # real >= 0, or "inf" (max variant only)
    delta = 0.01           # label-noise variance, >= 0
    seeds = [0, 1]         # list of integers >= 0; an integer n means 0..n-1

    [options]              # method options, by family ("erm") or by full name ("erm:softmax")
    bayes_sampling = { draws = 300, warmup = 300 }

    [[grid]]
    methods = ["population:bayes", "population:softmax"]
    nu = [0.5, 1, 2, 5]

    [[grid]]
    methods = ["erm:softmax", "theory_erm:softmax"]
    alpha = [1, 2, 5]      # N / D, > 0
    lam = [0.1]            # ridge penalty >= 0, "validation", "replica" or "optimal"
    sqrtND = 1000          # or D = 100 (integer >= 1), not both in one block
    options = { erm = { init = "informed" } }   # block options override the top-level ones

A field a block leaves unset (``alpha`` for population methods, say) is *not applicable* to its
cells: in the dataset their results are broadcast along that dimension
(:mod:`bayesslr.sweep.dataset`).
"""

from __future__ import annotations

import copy
import hashlib
import importlib
import importlib.resources
import itertools
import json
import math
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bayesslr import registry
from bayesslr.core.lam import parse_lam
from bayesslr.core.options import Opt
from bayesslr.core.task import VARIANTS, ConfigError, LengthLaw, check_int, check_real
from bayesslr.registry import Cell, MethodSpec, get_method

# grid fields of a Cell, in dataset order (``method`` first and ``seed`` last are added around)
PARAM_DIMS: tuple[str, ...] = ("variant", "L", "nu", "delta", "alpha", "lam", "D", "sqrtND")
BLOCK_KEYS: tuple[str, ...] = ("name", "methods", *PARAM_DIMS, "seeds", "options",
                               "continuation")
TOP_KEYS: tuple[str, ...] = ("name", "description", "defaults", "options", "grid")
DEFAULT_FIELDS: dict[str, Any] = {"variant": "spiked", "L": "3", "nu": 2.0, "delta": 0.0,
                                  "seeds": [0]}
# most cells a sweep may expand to (counted before the grid is expanded, duplicates included):
# each cell is a file of the results directory and a record in memory; split bigger studies
# into several sweeps (several --out directories)
MAX_CELLS = 100_000
# a sweep file is a few kB; bigger ones are refused before they are read (a million one-cell
# blocks would take minutes and gigabytes to parse before the cell count could refuse them)
MAX_CONFIG_BYTES = 1 << 20
# text that goes into every cell file, config.json and the dataset's attributes
MAX_NAME_CHARS = 200
MAX_DESCRIPTION_CHARS = 2000


# --------------------------------------------------------------------------------------------
# value normalisation (one function per field; each names the field and the allowed range)
# --------------------------------------------------------------------------------------------
def _as_list(where: str, value: Any) -> list[Any]:
    if isinstance(value, list | tuple):
        if not value:
            raise ConfigError(f"{where}=[] is empty; allowed: a value or a non-empty list")
        return list(value)
    if isinstance(value, Mapping):
        raise ConfigError(f"{where}={value!r} is a table; allowed: a value or a list of values")
    return [value]


def _variant(where: str, v: Any) -> str:
    if isinstance(v, str) and v in VARIANTS:  # the one-head variants need no family loaded
        return v
    known = registry.task_variants()
    if not isinstance(v, str) or v not in known:
        raise ConfigError(f"{where}={v!r} is unknown; allowed: one of {', '.join(known)}")
    return v


def _length(where: str, v: Any) -> str:
    if isinstance(v, bool) or not isinstance(v, int | str):
        raise ConfigError(f"{where}={v!r} is not a length; allowed: integer >= 1 or a length "
                          "law such as '1,2,3' or '1:0.5,3:0.5'")
    try:
        law = LengthLaw.fixed(v) if isinstance(v, int) else LengthLaw.parse(v, name="L")
    except ConfigError as exc:
        raise ConfigError(f"{where}: {exc}") from None
    return law.label()


def _nu(where: str, v: Any) -> float:
    if isinstance(v, str) and v.strip().lower() in {"inf", "infinity", "+inf"}:
        return math.inf
    return check_real(where, v, low=0.0)


def _delta(where: str, v: Any) -> float:
    return check_real(where, v, low=0.0)


def _alpha(where: str, v: Any) -> float:
    return check_real(where, v, low=0.0, low_open=True)


def _lam(where: str, v: Any) -> float | str:
    if isinstance(v, str):
        return parse_lam(v)  # one of LAM_MODES (the family checks which it takes) or a real
    return check_real(where, v, low=0.0)


def _D(where: str, v: Any) -> int:
    if isinstance(v, str):
        raise ConfigError(f"{where}={v!r} is not an integer; allowed: integer >= 1")
    return check_int(where, v, low=1)


def _sqrtND(where: str, v: Any) -> float:
    return check_real(where, v, low=0.0, low_open=True)


def _seed(where: str, v: Any) -> int:
    if isinstance(v, str):
        raise ConfigError(f"{where}={v!r} is not an integer; allowed: integer >= 0")
    return check_int(where, v, low=0)


_FIELD_PARSERS = {"variant": _variant, "L": _length, "nu": _nu, "delta": _delta,
                  "alpha": _alpha, "lam": _lam, "D": _D, "sqrtND": _sqrtND}


def _seeds(where: str, v: Any) -> list[int]:
    if isinstance(v, int) and not isinstance(v, bool):
        n = check_int(where, v, low=1, high=MAX_CELLS)
        return list(range(n))
    seeds = [_seed(f"{where}[{i}]", s) for i, s in enumerate(_as_list(where, v))]
    if len(set(seeds)) != len(seeds):
        raise ConfigError(f"{where}={seeds} repeats a seed; allowed: distinct integers >= 0")
    return seeds


def _methods(where: str, v: Any) -> list[str]:
    out = []
    for i, m in enumerate(_as_list(where, v)):
        if not isinstance(m, str):
            raise ConfigError(f"{where}[{i}]={m!r} is not a method name; allowed: strings such "
                              "as 'erm:softmax'")
        out.append(m.strip())
    return out


def _options(where: str, v: Any) -> dict[str, dict[str, Any]]:
    if not isinstance(v, Mapping):
        raise ConfigError(f"{where}={v!r} is not a table; allowed: {{family = {{key = value}}}}")
    out: dict[str, dict[str, Any]] = {}
    for name, opts in v.items():
        if not isinstance(opts, Mapping):
            raise ConfigError(f"{where}.{name}={opts!r} is not a table; allowed: "
                              "{key = value, ...}")
        for k, x in opts.items():
            if isinstance(x, Mapping):
                raise ConfigError(f"{where}.{name}.{k} is a table; allowed: scalars or lists")
        out[str(name)] = dict(opts)
    return out


def resolve_method(method: str) -> MethodSpec:
    """:func:`bayesslr.registry.get_method`, with a family module that fails to import reported
    as a configuration error (one line) instead of a traceback."""
    try:
        return get_method(method)
    except ConfigError:
        raise
    except Exception as exc:  # a family module that cannot be imported
        raise ConfigError(f"method={method!r} cannot be loaded ({type(exc).__name__}: {exc})"
                          ) from None


def available_methods() -> tuple[list[str], dict[str, str]]:
    """Method names of every family that loads here, and ``{family: why}`` for those that do
    not (a family module missing or broken), without raising."""
    names: list[str] = []
    missing: dict[str, str] = {}
    for family, module in sorted(registry.FAMILY_MODULES.items()):
        try:
            importlib.import_module(module)
        except Exception as exc:  # a family module that cannot be imported
            missing[family] = f"{type(exc).__name__}: {exc}"
            continue
        spec = registry.registered(family)
        if spec is None:
            missing[family] = f"{module} does not register {family!r}"
            continue
        names += spec.methods
    return names, missing


# --------------------------------------------------------------------------------------------
# the validated sweep
# --------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class SweepConfig:
    """A validated sweep.

    Attributes
    ----------
    name : str
        Sweep name (preset name or file stem unless given).
    description : str
        One line.
    blocks : tuple of dict
        Normalised grid blocks (every field a list of canonical values).
    options : dict
        Top-level method options, ``{family or method: {key: value}}``.
    cells : tuple of Cell
        Every cell, in a deterministic order, duplicates removed.
    """

    name: str
    description: str
    blocks: tuple[dict[str, Any], ...]
    options: dict[str, dict[str, Any]]
    cells: tuple[Cell, ...]

    def to_dict(self) -> dict[str, Any]:
        """The canonical (normalised) form; equal dicts mean the same computation."""
        return {"name": self.name, "description": self.description,
                "options": self.options, "grid": [_jsonable_block(b) for b in self.blocks]}

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), sort_keys=True, allow_nan=False)

    def digest(self) -> str:
        """SHA-1 of the set of cells: equal digests mean the same computation, whatever the
        block names, their order or the way the grid is split into blocks."""
        keys = sorted(cell_key(c) for c in self.cells)
        return hashlib.sha1("\n".join(keys).encode()).hexdigest()

    @property
    def methods(self) -> list[str]:
        """Method names in order of first appearance."""
        return list(dict.fromkeys(c.method for c in self.cells))

    @property
    def dims(self) -> list[str]:
        """Swept parameter fields that at least one cell sets."""
        return [d for d in PARAM_DIMS if any(getattr(c, d) is not None for c in self.cells)]


def _jsonable_block(block: Mapping[str, Any]) -> dict[str, Any]:
    out = dict(block)
    if "nu" in out:
        out["nu"] = ["inf" if math.isinf(x) else x for x in out["nu"]]
    return out


def cell_key(cell: Cell) -> str:
    """Stable file key of a cell (:meth:`bayesslr.registry.Cell.key`)."""
    return cell.key()


def _merge_options(*layers: Mapping[str, Mapping[str, Any]], method: str) -> dict[str, Any]:
    family = method.split(":", 1)[0]
    out: dict[str, Any] = {}
    for layer in layers:
        out.update(layer.get(family, {}))
    for layer in layers:
        if method != family:
            out.update(layer.get(method, {}))
    return out


def parse_config(raw: Mapping[str, Any], *, name: str = "sweep") -> SweepConfig:
    """Validate a parsed TOML document and expand it into cells.

    Raises
    ------
    ConfigError
        Unknown keys, wrong types, out-of-range values, empty lists or grids, unknown methods,
        a method missing a field it needs, or a cell whose task is invalid (e.g. ``nu = inf``
        with the spiked variant).
    """
    sweep_name, description, defaults, options, grid = _top_level(raw, name)
    blocks: list[dict[str, Any]] = []
    cells: dict[str, Cell] = {}
    n_cells = 0
    for i, raw_block in enumerate(grid):
        where = f"grid[{i}]"
        block = _block(where, raw_block, defaults)
        blocks.append(block)
        n_cells += _block_size(where, block, n_cells)
        for cell in _expand(block, options, block.get("options", {})):
            cells.setdefault(cell_key(cell), cell)
    for m in dict.fromkeys(c.method for c in cells.values()):
        resolve_method(m)
    for cell in cells.values():
        check_sweep_cell(cell)
    return SweepConfig(sweep_name, description, tuple(blocks), options, tuple(cells.values()))


def _top_level(raw: Any, name: str) -> tuple[str, str, Mapping[str, Any],
                                             dict[str, dict[str, Any]], list[Mapping]]:
    """The document's name, description, defaults, options and grid, each checked."""
    if not isinstance(raw, Mapping):
        raise ConfigError("config is not a TOML table")
    for k in raw:
        if k not in TOP_KEYS:
            raise ConfigError(f"config key {k!r} is unknown; allowed: {', '.join(TOP_KEYS)}")
    sweep_name = raw.get("name", name)
    description = raw.get("description", "")
    if not isinstance(sweep_name, str) or not sweep_name.strip():
        raise ConfigError(f"name={_short(sweep_name)} is not a name; allowed: a non-empty "
                          "string")
    if not isinstance(description, str):
        raise ConfigError(f"description={_short(description)} is not a string")
    check_text("name", sweep_name, MAX_NAME_CHARS)
    check_text("description", description, MAX_DESCRIPTION_CHARS, multiline=True)
    defaults = raw.get("defaults", {})
    if not isinstance(defaults, Mapping):
        raise ConfigError(f"defaults={defaults!r} is not a table")
    allowed_defaults = [k for k in BLOCK_KEYS if k not in {"name", "options"}]
    for k in defaults:
        if k not in allowed_defaults:
            raise ConfigError(f"defaults.{k} is unknown; allowed: {', '.join(allowed_defaults)}")
    options = _options("options", raw.get("options", {}))
    grid = raw.get("grid")
    if grid is None or (isinstance(grid, list) and not grid):
        raise ConfigError("grid is empty; allowed: one or more [[grid]] blocks with methods")
    if isinstance(grid, list) and len(grid) > MAX_CELLS:  # every block is one cell or more
        raise ConfigError(f"grid has {len(grid)} blocks; allowed: at most {MAX_CELLS} cells per "
                          "sweep (split it into several sweeps)")
    if not isinstance(grid, list) or not all(isinstance(b, Mapping) for b in grid):
        raise ConfigError("grid is not a list of tables; allowed: [[grid]] blocks")
    return sweep_name.strip(), description, defaults, options, grid


def _block(where: str, raw_block: Mapping[str, Any], defaults: Mapping[str, Any]
           ) -> dict[str, Any]:
    """One ``[[grid]]`` block normalised: every field a list of canonical values."""
    for k in raw_block:
        if k not in BLOCK_KEYS:
            raise ConfigError(f"{where}.{k} is unknown; allowed: {', '.join(BLOCK_KEYS)}")
    merged = {**DEFAULT_FIELDS, **defaults, **raw_block}
    if "methods" not in merged:
        raise ConfigError(f"{where}.methods is missing; allowed: a list of method names")
    for a, b in (("D", "sqrtND"), ("sqrtND", "D")):  # a block's sizing replaces the default
        if a in raw_block and b not in raw_block:
            merged.pop(b, None)
    if "D" in merged and "sqrtND" in merged:
        raise ConfigError(f"{where} sets both D and sqrtND; allowed: one of them")
    block: dict[str, Any] = {"methods": _methods(f"{where}.methods", merged["methods"])}
    for field, parse in _FIELD_PARSERS.items():
        if field in merged:
            block[field] = list(dict.fromkeys(
                parse(f"{where}.{field}", v)
                for v in _as_list(f"{where}.{field}", merged[field])))
    block["seeds"] = _seeds(f"{where}.seeds", merged["seeds"])
    block_opts = _options(f"{where}.options", raw_block.get("options", {}))
    if block_opts:
        block["options"] = block_opts
    if raw_block.get("name") is not None:
        block["name"] = check_text(f"{where}.name", str(raw_block["name"]), MAX_NAME_CHARS)
    if "continuation" in merged:
        block["continuation"] = Opt("continuation", False, "bool").parse(merged["continuation"])
    return block


def _short(value: Any, n: int = 60) -> str:
    """``repr(value)``, cut to ``n`` characters (an error line stays one short line)."""
    text = repr(value)
    return text if len(text) <= n else text[:n] + "...'"


def check_text(where: str, text: str, max_chars: int, *, multiline: bool = False) -> str:
    """``text`` unchanged, or ConfigError when it is longer than ``max_chars`` or holds a
    control character (NUL included: a netCDF attribute cannot hold it) or an unpaired
    surrogate; ``multiline`` allows tabs and line breaks."""
    if len(text) > max_chars:
        raise ConfigError(f"{where} is {len(text)} characters long; allowed: at most "
                          f"{max_chars}")
    for i, ch in enumerate(text):
        o = ord(ch)
        if ((o < 32 and not (multiline and ch in "\t\n\r")) or 0x7F <= o < 0xA0
                or 0xD800 <= o < 0xE000):
            raise ConfigError(f"{where}={_short(text)} holds the character U+{o:04X} at "
                              f"position {i}; allowed: printable text"
                              + ("" if multiline else " on one line"))
    return text


def _block_size(where: str, block: Mapping[str, Any], before: int) -> int:
    """Cells of a block (the product of its list lengths), refused (ConfigError) when the
    sweep would exceed :data:`MAX_CELLS`; nothing is expanded yet."""
    lists = {"methods": block["methods"], **{f: block[f] for f in PARAM_DIMS if f in block},
             "seeds": block["seeds"]}
    n = math.prod(len(v) for v in lists.values())
    if before + n > MAX_CELLS:
        shape = " x ".join(f"{len(v)} {k}" for k, v in lists.items() if len(v) > 1)
        raise ConfigError(f"{where} expands to {n} cells ({shape or '1'}), {before + n} in the "
                          f"sweep so far; allowed: at most {MAX_CELLS} cells per sweep (split "
                          "it into several sweeps)")
    return n


def _expand(block: Mapping[str, Any], options: Mapping[str, Any],
            block_opts: Mapping[str, Any]) -> list[Cell]:
    fields = [f for f in PARAM_DIMS if f in block]
    out = []
    for method in block["methods"]:
        opts = _merge_options(options, block_opts, method=method)
        if block.get("continuation") and "path" not in opts:
            if "path" not in resolve_method(method).schema:
                raise ConfigError(f"continuation=true: method {method!r} has no continuation "
                                  "path; allowed for the theory families")
            opts["path"] = sorted(block.get("alpha", ()))
        opts = canonical_options(method, opts)
        for values in itertools.product(*(block[f] for f in fields), block["seeds"]):
            kw = dict(zip(fields, values[:-1], strict=True))
            out.append(Cell(method=method, seed=values[-1], options=copy.deepcopy(opts), **kw))
    return out


def canonical_options(method: str, opts: Mapping[str, Any]) -> dict[str, Any]:
    """The options given, each in its canonical form (``samples = 2e4`` and ``"20000"`` are
    the same cell), defaults not filled in: a cell's key names what the user chose."""
    schema = resolve_method(method).schema
    unknown = sorted(set(opts) - set(schema.names))
    if unknown:  # check_sweep_cell words the error; keep the raw values until then
        return dict(opts)
    return {k: schema[k].parse(v) for k, v in opts.items()}


def check_sweep_cell(cell: Cell) -> None:
    """Check a cell before any work (:func:`bayesslr.registry.validate_cell`: method, needed
    fields, task, options, the family's own checks, memory), naming the method on failure."""
    resolve_method(cell.method)
    try:
        registry.validate_cell(cell)
    except ConfigError as exc:
        raise ConfigError(f"method {cell.method!r}: {exc}") from None


def load_config(path: str | Path) -> SweepConfig:
    """Read and validate a TOML sweep file."""
    p = Path(path)
    try:
        size = p.stat().st_size
        if size > MAX_CONFIG_BYTES:
            raise ConfigError(f"config={str(p)!r} is {size} bytes; allowed: a sweep file of at "
                              f"most {MAX_CONFIG_BYTES} bytes (lists of values, not one block "
                              "per cell)")
        data = p.read_bytes()
    except OSError as exc:
        raise ConfigError(f"config={str(p)!r} cannot be read ({exc.strerror or exc})") from None
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ConfigError(f"config={str(p)!r} is not UTF-8 text (byte {exc.start}: "
                          f"{data[exc.start:exc.start + 1]!r}); allowed: a UTF-8 TOML file"
                          ) from None
    try:
        raw = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"config={str(p)!r} is not valid TOML ({exc})") from None
    return parse_config(raw, name=p.stem)


def preset_names() -> list[str]:
    """Names of the built-in presets."""
    root = importlib.resources.files("bayesslr.sweep") / "presets"
    return sorted(f.name[:-5] for f in root.iterdir() if f.name.endswith(".toml"))


def preset_text(name: str) -> str:
    """TOML text of a built-in preset."""
    names = preset_names()
    if name not in names:
        raise ConfigError(f"preset={name!r} is unknown; allowed: {', '.join(names)}")
    return (importlib.resources.files("bayesslr.sweep") / "presets" / f"{name}.toml").read_text(
        encoding="utf-8")


def preset_raw(name: str) -> dict[str, Any]:
    """Parsed (unvalidated) TOML of a built-in preset."""
    return tomllib.loads(preset_text(name))


def load_preset(name: str) -> SweepConfig:
    """Read and validate a built-in preset."""
    return parse_config(preset_raw(name), name=name)


def format_value(value: Any) -> str:
    """Short text of a grid value (``inf`` and ``auto`` kept as words)."""
    if isinstance(value, float):
        return "inf" if math.isinf(value) else f"{value:g}"
    return str(value)


def describe_sweep(cfg: SweepConfig) -> dict[str, Any]:
    """Cell counts by method and the values of each swept field (for ``--dry-run``)."""
    by_method: dict[str, int] = {}
    for c in cfg.cells:
        by_method[c.method] = by_method.get(c.method, 0) + 1
    values: dict[str, list[str]] = {}
    for d in (*cfg.dims, "seed"):
        vals = list(dict.fromkeys(getattr(c, d) for c in cfg.cells if getattr(c, d) is not None))
        values[d] = [format_value(v) for v in vals]
    return {"cells": len(cfg.cells), "by_method": by_method, "values": values}
