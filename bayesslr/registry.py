"""The method registry: every method family and everything the suite knows about it.

This is the single code path shared by the sweep runner (:mod:`bayesslr.sweep`), the single-run
CLI verbs (one per family, generated from its entry: each is a sweep of cells), the report and
the Python API. A method is named ``family`` or ``family:member`` (``theory_bayes``,
``bayes_sampling``; ``erm:softmax``, ``population:bayes``, whose members are activations;
``inference:nuts-random-1e5``, whose members are algorithm-start-budget runs): each family
declares what its members are (:attr:`MethodSpec.member_kind`).

A family is registered once, with :func:`register`, and its :class:`MethodSpec` holds each fact
about it in one place: the option schema (names, types, ranges, defaults;
:mod:`bayesslr.core.options`), the declared outputs with their standard-error names, the cost and
memory models, the plot style, the code version, its CLI face (:class:`CliFace`), the work of
other families it reads (:class:`Prerequisites`) and its report role (:class:`ReportRole`).
:func:`validate_cell` checks a cell against all of it before any work starts; :func:`run_cell`
validates and runs one cell through ``fn(cell, opts)``. :func:`get_method` imports the module
that owns a family on first use.
"""

from __future__ import annotations

import hashlib
import importlib
import json
import math
import os
from collections.abc import Callable, Hashable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from bayesslr.core.activations import ACTIVATIONS
from bayesslr.core.options import Schema
from bayesslr.core.task import (
    VARIANTS,
    ConfigError,
    LengthLaw,
    TaskConfig,
    check_int,
    check_real,
    make_task,
)

Scalar = float | int | bool | str


@dataclass(frozen=True)
class Cell:
    """One point of a sweep: task settings, sample size, regularisation, seed and options.

    Attributes
    ----------
    method : str
        ``family`` or ``family:member`` (:attr:`member`).
    variant, L, nu, delta :
        Task settings (``L`` is a length label: ``"3"`` or ``"1,2,3"``; ``nu`` may be ``inf``).
    alpha : float or None
        Sample ratio ``N/D`` (None for population methods).
    lam : float, str or None
        Ridge penalty: a real, or a word of :data:`bayesslr.core.lam.LAM_MODES`
        (``"validation"``, ``"replica"``, ``"optimal"``) that the family takes.
    D : int or None
        Dimension; derived from ``sqrtND`` when that is given instead.
    sqrtND : float or None
        The paper's sizing ``sqrt(N D)`` (``D = sqrtND / sqrt(alpha)``).
    seed : int
        Seed of teacher, data and algorithm randomness.
    options : dict
        Method options (e.g. ``draws``, ``warmup``, ``chains``, ``init``, ``samples``).

    Examples
    --------
    >>> import bayesslr as bs
    >>> cell = bs.Cell(method="erm:softmax", alpha=4.0, lam=0.1, sqrtND=1000)
    >>> cell.family, cell.activation, cell.dimension(), cell.n_train()
    ('erm', 'softmax', 500, 2000)
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
    def member(self) -> str | None:
        """The part of ``method`` after ``:`` (None if there is none); what it names is the
        family's :attr:`MethodSpec.member_kind` (an activation, or e.g. the inference
        benchmark's ``algorithm-start-budget``)."""
        parts = self.method.split(":", 1)
        return parts[1] if len(parts) == 2 else None

    @property
    def activation(self) -> str | None:
        """:attr:`member` as the families whose members are activations read it
        (``erm:softmax`` -> ``softmax``)."""
        return self.member

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

    def sizes(self) -> tuple[int, int, int]:
        """``(D, N, L_max)``: :meth:`dimension`, :meth:`n_train` and the longest sequence of
        the length law, what the families' memory and cost models are written in."""
        return self.dimension(), self.n_train(), LengthLaw.parse(self.L).L_max

    def task(self, D: int | None = None) -> TaskConfig:
        """The validated :class:`TaskConfig` of this cell (``D`` defaults to :meth:`dimension`)."""
        if D is None:
            D = self.dimension() if (self.D is not None or self.sqrtND is not None) else 1
        return make_task(self.variant, L=self.L, nu=self.nu, delta=self.delta, D=D)

    def key(self) -> str:
        """Stable key of the cell: SHA-1 of its canonical JSON (16 hex digits), the name of
        its results file (``OUT/cells/<key>.nc``) and of its kept draws."""
        return hashlib.sha1(self.to_json().encode()).hexdigest()[:16]

    def to_json(self) -> str:
        d = asdict(self)
        d["options"] = dict(self.options)
        d["nu"] = "inf" if isinstance(self.nu, float) and math.isinf(self.nu) else self.nu
        return json.dumps(d, sort_keys=True)


# ----------------------------------------------------------------------------------------------
# what a family declares: outputs, plot style, resources
# ----------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Output:
    """One output variable of a method family (CF metadata for the dataset).

    Attributes
    ----------
    name : str
        Key in the method's result dict and dataset variable name.
    long_name : str
        CF ``long_name``.
    units : str
        CF ``units`` (``"1"`` for dimensionless numbers, ``""`` for text and flags).
    stderr : str, optional
        Name of the output holding this one's standard error. The suite's one naming: the
        standard error of ``test_error`` is ``stderr``, that of any other output ``X`` is
        ``X_stderr``, and the parts a standard error is made of are ``stderr_<source>``
        (``stderr_test``: the test-set or test-formula Monte Carlo part; ``stderr_channel``:
        the theory's channel Monte Carlo part).
    dim : str, optional
        The output is a list (one value per record, e.g. per iteration or optimiser step):
        in a dataset it is a variable with this extra dimension.
    """

    name: str
    long_name: str
    units: str = "1"
    stderr: str | None = None
    dim: str | None = None


def outputs(*items: Output | tuple) -> tuple[Output, ...]:
    """Build a tuple of :class:`Output` from ``Output`` objects or ``(name, long_name, ...)``."""
    return tuple(o if isinstance(o, Output) else Output(*o) for o in items)


# outputs shared by several families (a family lists the ones it produces, and adds its own)
COMMON: dict[str, Output] = {o.name: o for o in outputs(
    ("test_error", "test excess error (risk minus Delta)", "1", "stderr"),
    ("stderr", "standard error of test_error"),
    ("stderr_test", "part of stderr from the test set (or test formula) Monte Carlo"),
    ("stderr_channel", "part of stderr from the theory's channel Monte Carlo"),
    ("risk", "test risk mean (y - y_hat)^2 with the noisy test labels"),
    ("train_loss", "training loss per sample, 1/(2N) sum (y - f)^2"),
    ("oracle_error", "excess error of the teacher-known Bayes predictor on the same test set",
     "1", "oracle_error_stderr"),
    ("oracle_error_stderr", "standard error of oracle_error"),
    ("excess_over_oracle", "test_error minus oracle_error (paired, same test set)", "1",
     "excess_over_oracle_stderr"),
    ("excess_over_oracle_stderr", "standard error of excess_over_oracle"),
    ("m_k", "overlap k.k*/D"), ("q_k", "self-overlap k.k/D"),
    ("m_v", "overlap v.v*/D"), ("q_v", "self-overlap v.v/D"),
    ("m_kv", "cross overlap k.v*/D"), ("m_vk", "cross overlap v.k*/D"),
    ("q_kv", "cross overlap k.v/D"),
    ("lam", "ridge penalty used"),
    ("r_hat_max", "largest split R-hat over parameters"),
    ("ess_bulk_min", "smallest bulk effective sample size"),
    ("ess_tail_min", "smallest tail effective sample size"),
    ("divergences", "number of divergent transitions"),
    ("nishimori_gap", "max |m - q| of posterior-mean overlaps"),
    ("grad_evals", "gradient evaluations"),
    ("converged", "solver, optimiser or sampler converged (see reason)", ""),
    ("reason", "why converged is what it is", ""),
    ("iterations", "iterations used"),
    ("runtime_s", "wall time of the cell", "s"),
)}


def common(*names: str) -> tuple[Output, ...]:
    """The shared :data:`COMMON` outputs named."""
    return tuple(COMMON[n] for n in names)


@dataclass(frozen=True)
class PlotStyle:
    """How the report draws a family (one place; the figures read it from the registry).

    Markers are always filled: a hollow grey marker means one thing in every figure, a cell
    whose fit or chains did not converge (:func:`bayesslr.report.figures.style.draw_flagged`).

    Attributes
    ----------
    kind : {"line", "marker"}
        A curve (theory, ``D -> inf``) or markers with error bars (finite-``D`` estimates).
    label : str
        Legend label; ``{member}`` (or ``{activation}``) is replaced by the method's member.
    marker, linestyle : str
        Matplotlib marker and line style.
    color : str, optional
        Fixed colour; ``None`` colours by activation (:data:`ACTIVATION_COLORS`).
    zorder : int
        Drawing order.
    """

    kind: str = "marker"
    label: str = "{family}"
    marker: str = "o"
    linestyle: str = "-"
    color: str | None = None
    zorder: int = 2

    def label_for(self, method: str) -> str:
        family, _, act = method.partition(":")
        return self.label.format(family=family, member=act or family, activation=act or family)

    def color_for(self, method: str) -> str:
        if self.color is not None:
            return self.color
        return ACTIVATION_COLORS.get(method.partition(":")[2], "C4")


# one colour cycle entry per activation, in ACTIVATIONS order; the Bayes predictor black
ACTIVATION_COLORS: dict[str, str] = {**{n: f"C{i}" for i, n in enumerate(ACTIVATIONS)},
                                     "bayes": "k"}


@dataclass(frozen=True)
class Resources:
    """What one cell needs, estimated before anything is allocated.

    Attributes
    ----------
    bytes : float
        Peak memory (data, model state, Monte Carlo batches).
    what : str
        What dominates it, in words (``"training data N x L x D float32"``).
    lower : str
        The options or fields that lower it (named in the refusal message).
    """

    bytes: float
    what: str = ""
    lower: str = ""


@dataclass(frozen=True)
class CliFace:
    """How a family shows as a ``bayesslr`` verb (the flags of its options come from its schema).

    Attributes
    ----------
    verb : tuple of str
        The verb's words (``("sample",)``, ``("theory", "erm")``); empty: the family's name.
    fields : mapping
        The fixed :class:`Cell` fields offered as flags, in order, with their default as text
        (``None``: no default). Known fields: ``activation``, ``alpha``, ``lam``, ``D``,
        ``sqrtND``, ``seed``; the task flags (``--variant --L --L-dist --nu --delta``) are
        always there, their defaults in ``task``.
    task : mapping
        Defaults of the task flags that differ from ``spiked, 3, 2, 0``.
    help : mapping
        Help text of a field or switch, where the generic one does not say enough.
    hide : tuple of str
        Schema options that are not flags (a switch or a field sets them).
    flags : mapping
        Option -> flag where the flag is not ``--option-name`` (kept for compatibility).
    grid : bool
        ``--alpha`` takes a list (``1,2,5`` or ``start:stop:num``): one cell per ``alpha``.
    switches : tuple of (name, default, help[, metavar])
        Flags of the verb that are no option of the family (a bool default makes an on/off
        flag; another takes a value, shown as ``metavar``); ``prepare`` turns them into
        options.
    prepare : callable, optional
        ``prepare(values, options) -> options``: the family's own reading of its switches.
    header : tuple of str
        Fields printed before the outputs (single-cell verbs).
    rename : mapping
        Output -> printed name.
    decode : tuple of str
        Outputs stored as JSON text that are printed as structures.
    present : callable, optional
        ``present(cells, outs, values) -> dict``: the printed object of a multi-cell verb.
    columns : tuple of str
        Columns of the readable table of ``points`` (multi-cell verbs without ``--json``).
    doc : str
        The verb's help (default: the family's description).
    group_help : str
        Help of the verb's first word, for a two-word verb.
    """

    verb: tuple[str, ...] = ()
    fields: Mapping[str, str | None] = field(default_factory=dict)
    task: Mapping[str, str] = field(default_factory=dict)
    help: Mapping[str, str] = field(default_factory=dict)
    hide: tuple[str, ...] = ()
    flags: Mapping[str, str] = field(default_factory=dict)
    grid: bool = False
    switches: tuple[tuple[Any, ...], ...] = ()
    prepare: Callable[[Mapping[str, Any], dict[str, Any]], dict[str, Any]] | None = None
    header: tuple[str, ...] = ("variant", "L", "nu", "delta")
    rename: Mapping[str, str] = field(default_factory=dict)
    decode: tuple[str, ...] = ()
    present: Callable[..., dict[str, Any]] | None = None
    columns: tuple[str, ...] = ()
    doc: str = ""
    group_help: str = ""


def default_face(spec: MethodSpec) -> CliFace:
    """The verb of a family that declares none: named after it, its needed fields as flags."""
    fields: dict[str, str | None] = {}
    if spec.activations:
        fields["activation"] = spec.activations[0]
    for name in ("alpha", "lam"):
        if name in spec.needs:
            fields[name] = None
    if "D" in spec.needs:
        fields.update(D=None, sqrtND=None)
    fields["seed"] = "0"
    return CliFace(fields=fields, header=("variant", "L", "nu", "delta",
                                          *(f for f in fields if f != "seed"), "seed"))


@dataclass(frozen=True)
class ReportRole:
    """What a family contributes to the report (read by :mod:`bayesslr.report`).

    Attributes
    ----------
    finite_sample : int, optional
        Drawing order of its curves or markers in the error-vs-``alpha`` figures and the
        finite-sample table (lower first); ``None``: the family is not drawn there.
    leaderboard : int, optional
        Its place on the inference leaderboard (budgeted samplers, ERM and GAMP against the
        Bayes-optimal reference); ``None``: not on it.
    figures : mapping
        Figures of its own, ``name -> fn(results) -> matplotlib Figure`` (raise
        :class:`bayesslr.report.figures.NothingToPlot` when the results lack the data),
        written by ``bayesslr report`` beside the standard ones.
    claims : callable, optional
        ``claims(results) -> list of Verdict``: its own verdicts, a section of
        ``verdicts.txt`` headed by the family's name.
    trajectories : bool
        Its cells are optimiser trajectories (``step`` outputs named ``trajectory_<overlap>``)
        drawn in the gradient-dynamics figure and read by its verdict.
    reference : callable, optional
        ``reference(variant, L, nu, delta, D, alpha, seed) -> dict or None``: the stored
        Bayes-optimal reference of a task (``test_error``, ``stderr``, ``source``), nothing
        computed; the leaderboard scores the families without draws of their own against it.
    reference_data : callable, optional
        ``reference_data() -> xarray.Dataset or None``: the stored reference itself (one row
        per task with its checks), the leaderboard's table of references.
    """

    finite_sample: int | None = None
    leaderboard: int | None = None
    figures: Mapping[str, Callable[[Any], Any]] = field(default_factory=dict)
    claims: Callable[[Any], list[Any]] | None = None
    trajectories: bool = False
    reference: Callable[..., Mapping[str, Any] | None] | None = None
    reference_data: Callable[[], Any] | None = None


def trajectory_families() -> tuple[str, ...]:
    """Families whose report role declares ``trajectories``."""
    return tuple(f for f, s in families().items() if s.report.trajectories)


def checkpoint_dirs() -> tuple[Checkpoints, ...]:
    """The :class:`Checkpoints` of every registered family (built-in ones loaded), each
    directory once."""
    seen: dict[str, Checkpoints] = {}
    for spec in families().values():
        if spec.checkpoints is not None:
            seen.setdefault(spec.checkpoints.directory, spec.checkpoints)
    return tuple(seen.values())


def report_order(role: str) -> tuple[str, ...]:
    """Families with a ``role`` (``"finite_sample"`` or ``"leaderboard"``) in their order."""
    ranked = [(getattr(s.report, role), f) for f, s in families().items()
              if getattr(s.report, role) is not None]
    return tuple(f for _, f in sorted(ranked))


Options = Mapping[str, Any]
MethodFn = Callable[[Cell, Options], dict[str, Scalar]]
CostFn = Callable[[Cell, Options], float]
MemoryFn = Callable[[Cell, Options], Resources]
CheckFn = Callable[[Cell, Options], None]
BatchFn = Callable[[list[Cell], list[Options]], list[dict[str, Scalar]]]
BatchKeyFn = Callable[[Cell, Options], Hashable | None]


@dataclass(frozen=True)
class Prerequisites:
    """Work of another family that a family's cells read (ERM's ``lam='replica'`` reads the
    ``theory_erm`` point at its task and ``alpha``).

    Attributes
    ----------
    what : str
        What the cells need, in words (``"replica lam"``; the cost estimate's label).
    pending : callable
        ``pending(cells) -> {key: cell}``: the cells of other families these cells need and
        that are not yet available (cached answers left out), keyed so that work several
        cells share is counted once.
    waits_on : callable, optional
        ``waits_on(cell) -> key or None``: the one piece of that work a cell would solve, or
        wait for while another process solves it (ERM: the replica continuation path, solved
        once under a lock); ``None`` when it needs none or the answer is cached.
        :func:`spread_units` uses it to start different pieces on different workers first.
    """

    what: str
    pending: Callable[[Sequence[Cell]], Mapping[Hashable, Cell]]
    waits_on: Callable[[Cell], Hashable | None] | None = None


@dataclass(frozen=True)
class Checkpoints:
    """Resumable state a family keeps beyond its cell files (the replica theory's
    continuation paths, point by point).

    ``bayesslr run --out OUT`` keeps it in ``OUT/<directory>`` (a directory of the run, never
    a link) by setting the environment variable ``env`` while it runs, unless the user set it;
    the family's code reads the variable.

    Attributes
    ----------
    directory : str
        Its directory under the results directory.
    env : str
        The environment variable that tells the family's code where.
    """

    directory: str
    env: str


@dataclass(frozen=True)
class Recompute:
    """A rule of a family by which a stored cell of its current code version is recomputed
    when a sweep resumes (a flaw found after the cells were written, in cells whose other
    numbers are bit for bit those of the current code).

    Attributes
    ----------
    test : callable
        ``test(cell, outputs) -> bool`` on a stored finished cell: whether the rule applies.
    what : str
        What the cells are, in words (``"theory"``: the resume says ``3 theory cells ...``).
    why : str
        What is wrong with them, one phrase (the resume's line).
    """

    test: Callable[[Cell, Mapping[str, Any]], bool]
    what: str
    why: str


def _no_cost(cell: Cell, opts: Options) -> float:
    return 1.0


def _no_memory(cell: Cell, opts: Options) -> Resources:
    return Resources(0.0)


@dataclass(frozen=True)
class MethodSpec:
    """A registered method family: everything the suite knows about it, in one place.

    Attributes
    ----------
    family : str
        Family name (prefix of the method name).
    fn : callable
        ``fn(cell, opts) -> dict`` of scalar outputs; ``opts`` are the cell's options
        validated by ``schema`` with the defaults filled in.
    activations : tuple of str
        Allowed ``:member`` suffixes (empty: the family takes none); activations unless
        ``member_kind`` says otherwise.
    member_kind : str
        What the members are: ``"activation"``, or the family's own word.
    needs : tuple of str
        Cell fields that must be set (``"D"`` is satisfied by ``sqrtND`` too).
    description : str
        One line for listings and docs.
    schema : Schema
        The family's cell options (names, types, ranges, defaults).
    outputs : tuple of Output
        Declared output variables (others a method returns are stored too).
    cost : callable
        ``cost(cell, opts)`` -> modelled core-seconds (``bayesslr run --dry-run``).
    memory : callable
        ``memory(cell, opts)`` -> :class:`Resources`, checked against the machine before
        the cell (or the sweep) starts.
    check : callable, optional
        Further validation of a cell (values that depend on several fields).
    plot : PlotStyle
        How the report draws the family.
    version : str
        Version of the family's numerical code: a stored cell computed by another version is
        reported (and recomputed by default) when a sweep resumes.
    dims : tuple of str
        Cell fields that index the family's results in a dataset (the others do not apply).
    batch, batch_key : callable, optional
        Cells whose ``batch_key`` is equal (and not ``None``) may run as one unit of work,
        ``batch(cells, opts) -> outputs`` (a continuation path solved once for all its
        ``alpha``, cells sharing their data fitted together). The contract: a batch returns
        for each cell exactly what the cell returns alone, so a cell's stored result never
        depends on the sweep it was part of.
    cli : CliFace, optional
        Its verb (:func:`default_face` when not given).
    prerequisites : Prerequisites, optional
        Work of other families its cells read: the cost estimate counts it once.
    report : ReportRole
        Its place in the report.
    checkpoints : Checkpoints, optional
        Resumable state of its own, kept in the results directory by ``bayesslr run``.
    recompute : Recompute, optional
        A rule by which stored cells of its current version are still recomputed.
    variants : tuple of str
        The task variants its cells take (default: the one-head ones of
        :data:`bayesslr.core.task.VARIANTS`). A variant of its own (``"multihead"``) is the
        family's to validate, in ``check``: :meth:`Cell.task` builds one-head tasks only.
    """

    family: str
    fn: MethodFn
    activations: tuple[str, ...] = ()
    member_kind: str = "activation"
    needs: tuple[str, ...] = ()
    description: str = ""
    schema: Schema = Schema("")
    outputs: tuple[Output, ...] = ()
    cost: CostFn = _no_cost
    memory: MemoryFn = _no_memory
    check: CheckFn | None = None
    plot: PlotStyle = PlotStyle()
    version: str = "1"
    dims: tuple[str, ...] = ("variant", "L", "nu", "delta", "alpha", "lam", "D", "sqrtND")
    batch: BatchFn | None = None
    batch_key: BatchKeyFn | None = None
    cli: CliFace | None = None
    prerequisites: Prerequisites | None = None
    report: ReportRole = ReportRole()
    checkpoints: Checkpoints | None = None
    recompute: Recompute | None = None
    variants: tuple[str, ...] = VARIANTS

    @property
    def face(self) -> CliFace:
        """Its CLI face (declared, or :func:`default_face`)."""
        return self.cli if self.cli is not None else default_face(self)

    @property
    def methods(self) -> list[str]:
        """Every method name of the family."""
        return ([f"{self.family}:{a}" for a in self.activations] if self.activations
                else [self.family])

    def output(self, name: str) -> Output | None:
        for o in self.outputs:
            if o.name == name:
                return o
        return COMMON.get(name)


_REGISTRY: dict[str, MethodSpec] = {}

# family -> module that registers it (imported lazily, so the registry never imports upwards
# at import time)
FAMILY_MODULES: dict[str, str] = {
    "population": "bayesslr.population.method",
    "erm": "bayesslr.erm.method",
    "gd": "bayesslr.erm.method",
    "bayes_sampling": "bayesslr.bayes.method",
    "theory_erm": "bayesslr.theory.method",
    "theory_bayes": "bayesslr.theory.method",
    "amp": "bayesslr.amp.method",
    "inference": "bayesslr.inference.method",
    "multihead": "bayesslr.multihead.method",
    "multihead_gd": "bayesslr.multihead.gd_method",
}


def register(family: str, *, schema: Schema | None = None, activations: tuple[str, ...] = (),
             member_kind: str = "activation", needs: tuple[str, ...] = (),
             description: str = "",
             outputs: tuple[Output, ...] = (), cost: CostFn | None = None,
             memory: MemoryFn | None = None, check: CheckFn | None = None,
             plot: PlotStyle | None = None, version: str = "1",
             dims: tuple[str, ...] | None = None, batch: BatchFn | None = None,
             batch_key: BatchKeyFn | None = None, cli: CliFace | None = None,
             prerequisites: Prerequisites | None = None,
             report: ReportRole | None = None, checkpoints: Checkpoints | None = None,
             recompute: Recompute | None = None,
             variants: tuple[str, ...] | None = None) -> Callable[[MethodFn], MethodFn]:
    """Decorator registering ``fn(cell, opts)`` as the method family ``family``."""
    if (batch is None) != (batch_key is None):
        raise ValueError(f"family {family!r}: give both batch and batch_key, or neither")

    def deco(fn: MethodFn) -> MethodFn:
        kw: dict[str, Any] = {}
        if dims is not None:
            kw["dims"] = tuple(dims)
        if variants is not None:
            kw["variants"] = tuple(variants)
        _REGISTRY[family] = MethodSpec(
            family, fn, tuple(activations), str(member_kind), tuple(needs), description,
            schema.renamed(family) if schema is not None else Schema(family),
            tuple(outputs), cost or _no_cost, memory or _no_memory, check,
            plot or PlotStyle(), str(version), batch=batch, batch_key=batch_key, cli=cli,
            prerequisites=prerequisites, report=report or ReportRole(),
            checkpoints=checkpoints, recompute=recompute, **kw)
        return fn

    return deco


def _load(family: str) -> None:
    if family not in _REGISTRY and family in FAMILY_MODULES:
        importlib.import_module(FAMILY_MODULES[family])


def get_method(method: str) -> MethodSpec:
    """Resolve ``family[:member]`` to its :class:`MethodSpec`, validating the suffix."""
    if not isinstance(method, str):
        raise ConfigError(f"method={method!r} is not a method name; allowed: text such as "
                          "'erm:softmax'")
    family, _, act = method.partition(":")
    _load(family)
    if family not in _REGISTRY:
        known = sorted(set(FAMILY_MODULES) | set(_REGISTRY))
        raise ConfigError(f"method={method!r} is unknown; allowed families: {', '.join(known)}")
    spec = _REGISTRY[family]
    if spec.activations and act not in spec.activations:
        kind = spec.member_kind
        raise ConfigError(f"method={method!r} needs {'an' if kind[0] in 'aeiou' else 'a'} "
                          f"{kind}; allowed: " + ", ".join(spec.methods))
    if not spec.activations and act:
        raise ConfigError(f"method={method!r}: family {family!r} takes no ':activation' suffix")
    return spec


def task_variants() -> tuple[str, ...]:
    """Every task variant some family takes: the one-head ones first, then the families' own
    (``"multihead"``), in order of registration (the built-in families are loaded)."""
    out = list(VARIANTS)
    for spec in families().values():
        out += [v for v in spec.variants if v not in out]
    return tuple(out)


def registered(family: str) -> MethodSpec | None:
    """The family's spec if its module has registered it (nothing is imported)."""
    return _REGISTRY.get(family)


def families() -> dict[str, MethodSpec]:
    """Every registered family (the built-in ones are loaded first).

    Examples
    --------
    >>> import bayesslr as bs
    >>> spec = bs.families()["bayes_sampling"]
    >>> spec.schema["draws"].default, spec.schema["draws"].allowed()
    (500, 'integer >= 2 and <= 10000000')
    """
    for family in FAMILY_MODULES:
        _load(family)
    return dict(sorted(_REGISTRY.items()))


# ----------------------------------------------------------------------------------------------
# validation before any work, and the one code path of a cell
# ----------------------------------------------------------------------------------------------
def memory_limit() -> float:
    """Bytes one cell may use: ``$BAYESSLR_MEMORY_LIMIT`` (bytes, or with a ``K/M/G`` suffix),
    else 80% of the machine's physical memory."""
    env = os.environ.get("BAYESSLR_MEMORY_LIMIT", "").strip()
    if env:
        mult = {"K": 2**10, "M": 2**20, "G": 2**30, "T": 2**40}.get(env[-1].upper(), 1)
        try:
            return float(env[:-1] if mult > 1 else env) * mult
        except ValueError:
            raise ConfigError(f"BAYESSLR_MEMORY_LIMIT={env!r} is not a size; allowed: bytes "
                              "or a number with K, M, G or T") from None
    try:
        return 0.8 * os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):  # not POSIX: no check
        return math.inf


def _gb(x: float) -> str:
    return f"{x / 2**30:.3g} GB"


def validate_cell(cell: Cell) -> dict[str, Any]:
    """Check a cell before any work and return its validated options (defaults filled).

    Method known, needed fields present, task valid, options known and in range, the family's
    own checks, and the memory the cell would need against :func:`memory_limit`. Raises
    :class:`ConfigError` with one line naming the problem; allocates nothing.
    """
    spec = get_method(cell.method)
    for need in spec.needs:
        if need == "D" and (cell.D is not None or cell.sqrtND is not None):
            continue
        if getattr(cell, need, None) is None:
            raise ConfigError(f"method {cell.method!r} needs {need}; none given")
    if cell.sqrtND is not None and cell.alpha is None:
        raise ConfigError(f"method {cell.method!r}: sqrtND needs alpha (D = sqrtND / "
                          "sqrt(alpha))")
    check_int("seed", cell.seed, low=0, high=2**32 - 1)
    if cell.alpha is not None:
        check_real("alpha", cell.alpha, low=0.0, low_open=True, high=1e6)
    if cell.D is not None:
        check_int("D", cell.D, low=1)
    if cell.sqrtND is not None:
        check_real("sqrtND", cell.sqrtND, low=1.0)
    if cell.variant not in spec.variants:
        raise ConfigError(f"variant={cell.variant!r} is not a task of method {cell.method!r}; "
                          f"allowed: one of {', '.join(spec.variants)}")
    if cell.variant in VARIANTS:  # a family's own variant is validated by its check
        cell.task(D=cell.dimension() if (cell.D is not None or cell.sqrtND is not None) else 1)
    opts = spec.schema.validate(cell.options)
    if spec.check is not None:
        spec.check(cell, opts)
    need = spec.memory(cell, opts)
    limit = memory_limit()
    if need.bytes > limit:
        raise ConfigError(
            f"method {cell.method!r} needs about {_gb(need.bytes)} ({need.what}); the limit is "
            f"{_gb(limit)} (80% of this machine's memory, or BAYESSLR_MEMORY_LIMIT); lower "
            f"{need.lower or 'the sizes'}")
    return opts


def run_cell(cell: Cell) -> dict[str, Scalar]:
    """Validate ``cell`` (:func:`validate_cell`) and run it through its registered method.

    Examples
    --------
    >>> import bayesslr as bs
    >>> out = bs.run_cell(bs.Cell(method="population:linear", variant="spiked", L="2", nu=5.0,
    ...                           options={"samples": 20_000}))
    >>> round(out["test_error"], 2)
    0.22
    >>> bs.run_cell(bs.Cell(method="population:linear", options={"sampels": 5}))
    ... # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    bayesslr.core.task.ConfigError: options ['sampels'] are unknown to population; allowed: ...
    """
    opts = validate_cell(cell)
    return get_method(cell.method).fn(cell, opts)


def units(cells: Sequence[Cell]) -> list[list[Cell]]:
    """Group cells into units of work (see :attr:`MethodSpec.batch`), in order of first
    appearance; a cell of a family without batching is a unit on its own."""
    groups: dict[Hashable, list[Cell]] = {}
    for i, cell in enumerate(cells):
        spec = get_method(cell.method)
        key = None
        if spec.batch_key is not None:
            key = spec.batch_key(cell, spec.schema.validate(cell.options))
        groups.setdefault((cell.method, key) if key is not None else ("cell", i), []).append(cell)
    return list(groups.values())


def spread_units(groups: Sequence[list[Cell]]) -> list[list[Cell]]:
    """Units in the order several workers should start them: the first unit waiting on each
    piece of shared work (:attr:`Prerequisites.waits_on`) first, in order of appearance, then
    every other unit in its order.

    Cells that share a piece of work solve it once, under a lock: a second worker that picks
    a unit of the same piece waits, idle, until the first has solved it (a replica path of the
    paper preset: half an hour). Started first, the pieces run side by side, and the units
    that follow find them solved. Units waiting on nothing keep their place.
    """
    firsts: list[int] = []
    seen: set[Hashable] = set()
    for i, unit in enumerate(groups):
        key = _waits_on(unit)
        if key is not None and key not in seen:
            seen.add(key)
            firsts.append(i)
    if len(firsts) < 2:
        return list(groups)
    first = set(firsts)
    # the pieces start where the first of them stood; everything before it keeps its place
    head = [g for i, g in enumerate(groups) if i < firsts[0]]
    rest = [g for i, g in enumerate(groups) if i >= firsts[0] and i not in first]
    return head + [groups[i] for i in firsts] + rest


def _waits_on(unit: Sequence[Cell]) -> Hashable | None:
    """The piece of shared work the first cell of ``unit`` that needs one waits on."""
    for cell in unit:
        need = get_method(cell.method).prerequisites
        if need is not None and need.waits_on is not None:
            key = need.waits_on(cell)
            if key is not None:
                return (cell.method, key)
    return None


def run_unit(cells: Sequence[Cell]) -> list[dict[str, Scalar]]:
    """Run one unit of :func:`units`: its family's batch function, or the single cell."""
    opts = [validate_cell(c) for c in cells]
    spec = get_method(cells[0].method)
    if len(cells) == 1 or spec.batch is None:
        return [spec.fn(c, o) for c, o in zip(cells, opts, strict=True)]
    out = spec.batch(list(cells), opts)
    if len(out) != len(cells):
        raise RuntimeError(f"family {spec.family!r}: batch returned {len(out)} results for "
                           f"{len(cells)} cells")
    return out
