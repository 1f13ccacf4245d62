"""How to install an optional extra, as this installation would: an editable source checkout
(``pyproject.toml`` beside the package) installs from ``.``, an installed wheel by name."""

from __future__ import annotations

from pathlib import Path


def source_checkout() -> Path | None:
    """The root of the source checkout this ``bayesslr`` is imported from, or None when it is
    an installed package."""
    root = Path(__file__).resolve().parents[2]
    return root if (root / "pyproject.toml").exists() else None


def install_hint(extra: str) -> str:
    """The command that installs the optional extra ``extra`` here: ``pip install -e
    '.[extra]'`` (run in the checkout) for a source checkout, ``pip install
    'bayesslr[extra]'`` otherwise.

    Examples
    --------
    >>> "[blackjax]'" in install_hint("blackjax")
    True
    """
    if source_checkout() is not None:
        return f"pip install -e '.[{extra}]' (in the source checkout)"
    return f"pip install 'bayesslr[{extra}]'"
