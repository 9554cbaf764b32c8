"""The type of each run option's value, as :data:`ssptk.core.options.OPTIONS` declares it.

The CLI's argparse converts every value by the option's type; the Python API (``ssptk.run(lr=...)``, the
magics' keyword arguments) is given whatever the caller passes. :func:`typed` holds both to the same table,
so ``ssptk.run(lr="nan")`` gets the CLI's one-line :class:`~ssptk.core.errors.UsageError` (not a
``TypeError`` from deep inside), ``out=123`` is refused, and ``stall_timeout=True`` is not one second.
Imports nothing above core.
"""
from __future__ import annotations

import numbers
import os
from typing import Any, Protocol

from ssptk.core.delays import Jitter
from ssptk.core.errors import UsageError
from ssptk.core.network import Network

__all__ = ["integer", "typed"]


class OptionLike(Protocol):
    """What :func:`typed` reads of an :class:`ssptk.core.options.Option`."""

    @property
    def name(self) -> str: ...

    @property
    def type(self) -> Any: ...

    @property
    def flag(self) -> bool: ...

    @property
    def repeat(self) -> bool: ...

    @property
    def metavar(self) -> str | None: ...


def _flag(name: str) -> str:
    return "--" + name.replace("_", "-")


def _is_bool(value: Any) -> bool:
    """A Python or NumPy boolean."""
    return isinstance(value, bool) or getattr(getattr(value, "dtype", None), "kind", "") == "b"


def integer(name: str, value: Any) -> int:
    """``value`` as an int (``"3"`` and ``3.0`` too, as the CLI would read them); booleans and fractions are
    refused."""
    if _is_bool(value):
        raise UsageError(f"{_flag(name)} must be an integer, got {value!r}")
    try:
        number = int(value)
        exact = isinstance(value, (numbers.Integral, str)) or float(number) == float(value)
    except (TypeError, ValueError, OverflowError):
        exact = False
    if not exact or isinstance(value, (bytes, bytearray)):
        raise UsageError(f"{_flag(name)} must be an integer, got {value!r}")
    return number


def _number(name: str, value: Any, what: str = "a number") -> float:
    """``value`` as a float: a real number, or a string the CLI would read as one (``"nan"`` too: the range
    checks that follow say what is wrong with it, in the CLI's words)."""
    if _is_bool(value):
        raise UsageError(f"{_flag(name)} must be {what}, got {value!r}")
    if isinstance(value, numbers.Real):
        return float(value)
    if isinstance(value, str):
        try:
            return float(value)
        except ValueError:
            pass
    raise UsageError(f"{_flag(name)} must be {what}, got {value!r}")


def _text(name: str, value: Any) -> str:
    """``value`` as a string; a path object (``--out``, a model file) is taken as its path."""
    if isinstance(value, os.PathLike):
        value = os.fspath(value)
    if isinstance(value, str):
        return value
    raise UsageError(f"{_flag(name)} must be a string, got {value!r}")


def _switch(name: str, value: Any) -> bool:
    if _is_bool(value):
        return bool(value)
    raise UsageError(f"{_flag(name)} is a switch: give True or False, not {value!r}")


def typed(option: OptionLike, value: Any) -> Any:
    """``value`` of ``option`` converted to the option's type (what argparse would have made of it), or
    :class:`UsageError` naming the option. ``None`` stays ``None`` (the option's default); repeatable
    options (``straggler``) are parsed by :func:`ssptk.core.delays.parse_stragglers`, the jitter by
    :func:`ssptk.core.delays.parse_jitter` (a ``Jitter`` or a ``Network`` is taken as its spec)."""
    if value is None or option.repeat:
        return value
    if option.flag:
        return _switch(option.name, value)
    if option.type is int:
        return integer(option.name, value)
    if option.type is float:
        return _number(option.name, value, "a number of seconds" if option.metavar == "SECONDS" else "a number")
    if isinstance(value, Jitter):  # its spec, every digit kept
        return f"exp:{value.a!r}" if value.kind == "exp" else f"{value.kind}:{value.a!r}:{value.b!r}"
    if isinstance(value, Network):
        return str(value)
    return _text(option.name, value) if option.type is str else value
