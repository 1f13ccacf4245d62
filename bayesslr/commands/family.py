"""The single-run verbs, generated from the registry: one verb per method family.

Each family's verb is built from its :class:`~bayesslr.registry.MethodSpec`: the task flags,
the fixed :class:`~bayesslr.registry.Cell` fields its :class:`~bayesslr.registry.CliFace`
names, one flag per option of its schema (type, range, default and help from the schema), and
``--json``. The verb builds the cells, runs them as a sweep runs them
(:func:`bayesslr.commands.common.run_cells`) and prints the face's presentation. A family
registered by a plugin gets its verb the same way, with no edit here.
"""

from __future__ import annotations

import inspect
import json
from collections.abc import Callable, Mapping
from typing import Any

import typer

from bayesslr.commands.common import (
    JSON_FLAG_HELP,
    cli_task,
    emit,
    parse_float,
    parse_grid,
    run_cells,
)
from bayesslr.core.lam import parse_lam_text
from bayesslr.core.options import Opt
from bayesslr.core.task import VARIANTS, ConfigError, check_int
from bayesslr.registry import Cell, CliFace, MethodSpec

# the task flags every family verb has: (field, flag, default, metavar, help)
TASK_FLAGS: tuple[tuple[str, str, str | None, str, str], ...] = (
    ("variant", "--variant", "spiked", "[spiked|max]", "Task variant: spiked or max."),
    ("L", "--L", "3", "INT|LAW",
     "Sequence length (integer >= 1), or a law '1,2,3' / '1:0.2,3:0.8'."),
    ("L_dist", "--L-dist", None, "LAW",
     "Length law instead of --L: '1,2,3' (uniform) or '1:0.2,3:0.8'."),
    ("nu", "--nu", "2", "FLOAT", "Signal strength nu >= 0 ('inf' allowed for max)."),
    ("delta", "--delta", "0", "FLOAT", "Label-noise variance Delta >= 0."),
)

# the label-noise variance of the built-in sweeps (bayesslr/sweep/presets/*.toml, the paper's
# setting); a verb whose --delta defaults to another value says so in its help
PRESET_DELTA = 0.01

# the fixed Cell fields a face may offer: (flag, metavar, help)
FIELD_FLAGS: dict[str, tuple[str, str, str]] = {
    "activation": ("--activation", "{choices}", "One of: {activations}."),
    "alpha": ("--alpha", "FLOAT", "Sample ratio alpha = N/D > 0."),
    "lam": ("--lam", "FLOAT|MODE", "Ridge penalty lam >= 0 on k and v."),
    "D": ("--D", "INT", "Token dimension D (integer >= 1)."),
    "sqrtND": ("--sqrtND", "FLOAT",
               "Instead of --D: the paper's sizing D = sqrtND / sqrt(alpha)."),
    "seed": ("--seed", "INT", "Seed of teacher, data and algorithm (integer >= 0)."),
}

_KW = inspect.Parameter.KEYWORD_ONLY


def metavar(opt: Opt) -> str:
    """The typed placeholder of an option's flag: ``INT``, ``FLOAT``, ``[a|b]``, ``FLOAT,...``."""
    if opt.kind in ("choice", "choices"):
        words = "|".join(opt.choices)
        one = f"[{words}]" if len(words) <= 30 else "WORD"
        return one if opt.kind == "choice" else f"{one},..."
    if opt.kind == "str":  # free text: a path where the option names one
        return "PATH" if "path" in opt.doc.lower() else "TEXT"
    return {"int": "INT", "real": "FLOAT", "reals": "FLOAT,...", "ints": "INT,...",
            "bool": ""}[opt.kind]


def choice_metavar(words: tuple[str, ...] | list[str]) -> str:
    """``[a|b|c]``, or ``NAME`` where the words would not fit on a help line."""
    text = "|".join(words)
    return f"[{text}]" if len(text) <= 40 else "NAME"


def delta_help(text: str, default: str | None) -> str:
    """``--delta``'s help, which says the presets' Delta where the verb's default differs."""
    if default is None or float(default) == PRESET_DELTA:
        return text
    return f"{text} The paper's presets run Delta = {PRESET_DELTA:g}."


def _option_help(opt: Opt) -> str:
    from bayesslr.core.options import format_default

    doc = f"{opt.doc[:1].upper()}{opt.doc[1:]}" if opt.doc else opt.name
    return f"{doc} (default {format_default(opt.default)}; allowed: {opt.allowed()})."


def option_flag(opt: Opt, flag: str | None = None) -> str:
    """The flag of an option: ``--name-with-dashes`` (``--name/--no-name`` for a boolean)."""
    flag = flag or "--" + opt.name.replace("_", "-")
    return f"{flag}/--no-{flag[2:]}" if opt.kind == "bool" else flag


def _param(name: str, default: Any, flags: str, meta: str, help_: str, *,
           is_bool: bool = False, show_default: bool = True) -> inspect.Parameter:
    info = typer.Option(default, *flags.split(" "), metavar=meta if not is_bool else "",
                        help=help_, show_default=show_default)
    return inspect.Parameter(name, _KW, default=info, annotation=bool if is_bool else str)


def verb_parameters(spec: MethodSpec, face: CliFace) -> list[inspect.Parameter]:
    """The parameters of a family's verb, in order: task, fields, switches, options, --json."""
    params = []
    for name, flag, default, meta, help_ in TASK_FLAGS:
        default = face.task.get(name, default)
        help_ = face.help.get(name, help_)
        if name == "delta":
            help_ = delta_help(help_, default)
        if name == "variant":  # the family's own tasks (multihead: one variant of its own)
            meta = choice_metavar(spec.variants)
            help_ = face.help.get(name, f"Task variant: {' or '.join(spec.variants)}.")
        params.append(_param(name, default, flag, meta, help_,
                             show_default=default is not None))
    for name, default in face.fields.items():
        flag, meta, help_ = FIELD_FLAGS[name]
        if name == "alpha" and face.grid:
            meta, help_ = "GRID", "alpha > 0: '5', '1,2,5,20' or start:stop:num."
        acts = ", ".join(spec.activations) if len(spec.activations) <= 8 else (
            f"{', '.join(spec.activations[:3])}, ... ({len(spec.activations)} in all: "
            f"'bayesslr methods {spec.family}')")
        help_ = face.help.get(name, help_).format(activations=acts)
        meta = meta.format(choices=choice_metavar(spec.activations))
        params.append(_param(name, default, flag, meta, help_, show_default=default is not None))
    for name, default, help_, *meta in face.switches:
        if isinstance(default, bool):
            params.append(_param(name, default, f"--{name}/--no-{name}", "", help_,
                                 is_bool=True))
        else:
            params.append(_param(name, default, f"--{name.replace('_', '-')}",
                                 meta[0] if meta else "TEXT", help_))
    for opt in spec.schema.opts:
        if opt.name in face.hide:
            continue
        flag = option_flag(opt, face.flags.get(opt.name))
        params.append(_param(f"opt_{opt.name}", None, flag, metavar(opt), _option_help(opt),
                             is_bool=opt.kind == "bool", show_default=False))
    params.append(_param("as_json", False, "--json", "", JSON_FLAG_HELP,
                         is_bool=True, show_default=False))
    return params


def _option_value(opt: Opt, value: Any) -> Any:
    if opt.kind == "reals" and isinstance(value, str) and ":" in value:
        return tuple(parse_grid(opt.name, value, low=opt.low, low_open=opt.low_open))
    return value


def build_cells(spec: MethodSpec, face: CliFace, values: Mapping[str, Any]) -> list[Cell]:
    """The cells a verb's flag values describe (every value checked, one line on error)."""
    fields = face.fields
    method = spec.family
    if "activation" in fields:
        act = values["activation"]
        if act not in spec.activations:
            raise ConfigError(f"activation={act!r} is unknown; allowed: one of "
                              f"{', '.join(spec.activations)}")
        method = f"{spec.family}:{act}"
    D = check_int("D", values["D"], low=1) if values.get("D") is not None else None
    if "D" in fields and "sqrtND" in fields and (D is None) == (values["sqrtND"] is None):
        raise ConfigError("give exactly one of --D (integer >= 1) and --sqrtND (real >= 1)")
    variant = values["variant"]
    if variant not in spec.variants:
        raise ConfigError(f"variant={variant!r} is not a task of method {method!r}; allowed: "
                          f"one of {', '.join(spec.variants)}")
    # the length, nu and Delta are parsed as a one-head task's (a family of its own variant,
    # multihead, checks the rest in its registry entry)
    task = cli_task(variant if variant in VARIANTS else VARIANTS[0], values["L"],
                    values["L_dist"], values["nu"], values["delta"], D=D or 1)
    sqrtND = (parse_float("sqrtND", values["sqrtND"], low=1.0)
              if values.get("sqrtND") is not None else None)
    if values.get("alpha") is None:
        alphas: list[float | None] = [None]
    elif face.grid:
        alphas = list(parse_grid("alpha", values["alpha"], low=0.0, low_open=True))
    else:
        alphas = [parse_float("alpha", values["alpha"], low=0.0, low_open=True)]
    lam = parse_lam_text(values["lam"]) if values.get("lam") is not None else None
    seed = check_int("seed", values.get("seed", "0"), low=0)
    options = {o.name: _option_value(o, values[f"opt_{o.name}"]) for o in spec.schema.opts
               if values.get(f"opt_{o.name}") is not None}
    if face.prepare is not None:
        options = face.prepare({**values, "alphas": alphas}, options)
    return [Cell(method=method, variant=values["variant"], L=task.length.label(), nu=task.nu,
                 delta=task.delta, alpha=a, lam=lam, D=D, sqrtND=sqrtND, seed=seed,
                 options=options) for a in alphas]


def present(face: CliFace, cells: list[Cell], outs: list[dict[str, Any]],
            values: Mapping[str, Any]) -> dict[str, Any]:
    """The printed object of a verb: the face's own, or header fields then the outputs."""
    if face.present is not None:
        return face.present(cells, outs, values)
    cell, out = cells[0], dict(outs[0])
    for key in face.decode:
        if key in out:
            out[key] = json.loads(out[key])
    fields = {"variant": cell.variant, "L": cell.L, "nu": cell.nu, "delta": cell.delta,
              "alpha": cell.alpha, "D": cell.D if cell.D is not None else cell.dimension()
              if cell.sqrtND is not None else None, "sqrtND": cell.sqrtND, "lam": cell.lam,
              "seed": cell.seed, "activation": cell.member}
    head = {k: fields[k] for k in face.header}
    return {**head, **{face.rename.get(k, k): v for k, v in out.items()}}


def make_verb(spec: MethodSpec) -> Callable[..., None]:
    """The typer callback of a family's verb (its signature generated from the registry)."""
    face = spec.face

    def verb(**values: Any) -> None:
        cells = build_cells(spec, face, values)
        outs = run_cells(cells)
        title = " ".join(face.verb or (spec.family,))
        if cells[0].member and "activation" in face.fields and not face.grid:
            title = f"{title} {cells[0].member}"
        emit(present(face, cells, outs, values), values["as_json"], title=title,
             columns=face.columns)

    verb.__signature__ = inspect.Signature(verb_parameters(spec, face))  # type: ignore[attr-defined]
    doc = face.doc or spec.description
    verb.__doc__ = doc[:1].upper() + doc[1:].rstrip(".") + "."
    verb.__name__ = spec.family
    return verb


def add_family_verbs(app: typer.Typer, specs: Mapping[str, MethodSpec]) -> None:
    """Add every family's verb to ``app`` (two-word verbs as sub-commands of their group)."""
    groups: dict[str, typer.Typer] = {}
    for spec in specs.values():
        words = spec.face.verb or (spec.family,)
        if len(words) == 1:
            app.command(words[0])(make_verb(spec))
            continue
        group = groups.get(words[0])
        if group is None:
            group = groups[words[0]] = typer.Typer(name=words[0], no_args_is_help=True,
                                                   help=spec.face.group_help,
                                                   rich_markup_mode=None)
            app.add_typer(group, name=words[0])
        group.command(words[1])(make_verb(spec))

