"""The ridge penalty ``lam``: one typed value, parsed once where a Cell is built.

``lam`` is a real ``>= 0`` or one of the words of :data:`LAM_MODES`:

* ``"validation"``: ERM searches its ``lam_grid`` on held-out training data;
* ``"replica"``: ERM uses the ``lam`` that minimises the replica theory's test error at the
  cell's task and ``alpha`` (read from a ``theory_erm`` point, see the ERM family's
  prerequisites);
* ``"optimal"`` (``"opt"`` accepted): a replica-theory cell solves at its own optimal ``lam``.

Each family says which words it takes. The retired ``"auto"`` (it named two different searches)
and any other spelling (``"Validation"``) are refused with one line.
"""

from __future__ import annotations

from typing import Any

from bayesslr.core.task import ConfigError, check_real

LAM_VALIDATION = "validation"  # ERM: a grid search on held-out training data
LAM_REPLICA = "replica"  # ERM: the replica theory's optimal lam at the cell's task and alpha
LAM_OPTIMAL = "optimal"  # a replica-theory cell: its own optimal lam
# every word of lam (each family takes some of them; all name a tuned penalty)
LAM_MODES: tuple[str, ...] = (LAM_VALIDATION, LAM_REPLICA, LAM_OPTIMAL)
LAM_ALIASES: dict[str, str] = {"opt": "optimal"}

Lam = float | str  # a real >= 0, or one word of LAM_MODES


def lam_allowed(modes: tuple[str, ...] = LAM_MODES) -> str:
    """The allowed values in words (what an error says after ``allowed:``)."""
    return "real >= 0" + "".join(f", '{m}'" for m in modes)


def parse_lam(value: Any, modes: tuple[str, ...] = LAM_MODES) -> Lam:
    """``value`` as a :data:`Lam`: a float ``>= 0`` or one of ``modes`` (exact lower-case word).

    Examples
    --------
    >>> parse_lam("0.1"), parse_lam(1), parse_lam(" replica "), parse_lam("opt")
    (0.1, 1.0, 'replica', 'optimal')
    >>> parse_lam("Validation")
    Traceback (most recent call last):
    ...
    bayesslr.core.task.ConfigError: lam='Validation' is not allowed; allowed: real >= 0, \
'validation', 'replica', 'optimal' (lower case)
    """
    if value is None:
        raise ConfigError(f"lam is not set; allowed: {lam_allowed(modes)}")
    if isinstance(value, str):
        word = LAM_ALIASES.get(value.strip(), value.strip())
        if word in modes:
            return word
        if word.lower() == "auto":
            raise ConfigError(f"lam='auto' is ambiguous (retired); allowed: "
                              f"{lam_allowed(modes)}")
        try:
            value = float(word)
        except ValueError:
            hint = " (lower case)" if word.lower() in modes else ""
            raise ConfigError(f"lam={value!r} is not allowed; allowed: "
                              f"{lam_allowed(modes)}{hint}") from None
    return check_real("lam", value, low=0.0)


def parse_lam_text(text: str) -> Lam:
    """A ``--lam`` flag's text (every word accepted here; the family's check narrows it)."""
    return parse_lam(text)


def is_mode(lam: Any, mode: str) -> bool:
    """``lam`` is the word ``mode`` (a real never is)."""
    return isinstance(lam, str) and LAM_ALIASES.get(lam.strip(), lam.strip()) == mode
