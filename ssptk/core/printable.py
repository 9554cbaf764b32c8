"""Text from a run directory made safe to print: :func:`printable`.

A run directory is data that may come from anyone, and a terminal obeys the control characters it is
given (``ESC ] 0 ; TITLE BEL`` retitles the window, ``ESC [ 2 J`` clears it, a carriage return overwrites
what was printed); Unicode's format characters reorder what is shown (``U+202E``). Every string read from a
run directory is passed through :func:`printable` before it can reach a terminal, a figure or a report.
Standard library only.
"""
from __future__ import annotations

import unicodedata
from typing import Any

__all__ = ["printable", "printable_json"]

#: Unicode categories that act instead of showing: controls (C0, DEL, C1), format characters (bidi
#: overrides, zero-width ones), line and paragraph separators.
_ACTING = frozenset({"Cc", "Cf", "Zl", "Zp"})


def _escaped(c: str) -> str:
    o = ord(c)
    return f"\\x{o:02x}" if o < 0x100 else f"\\u{o:04x}" if o < 0x10000 else f"\\U{o:08x}"


def printable(text: str, keep: str = "") -> str:
    """``text`` with every character that would act on a terminal or reorder the text written as its Python
    escape (``\\x1b``, ``\\u202e``), except those in ``keep`` (e.g. ``"\\n"`` for a block of lines)."""
    if text.isprintable():
        return text
    return "".join(_escaped(c) if c not in keep and unicodedata.category(c) in _ACTING else c for c in text)


def printable_json(value: Any) -> tuple[Any, bool]:
    """A JSON value with :func:`printable` strings (keys too), and whether any string changed."""
    if isinstance(value, str):
        safe = printable(value)
        return safe, safe != value
    if isinstance(value, list):
        items = [printable_json(v) for v in value]
        return [v for v, _ in items], any(c for _, c in items)
    if isinstance(value, dict):
        changed, out = False, {}
        for k, v in value.items():
            key, c1 = printable_json(k) if isinstance(k, str) else (k, False)
            safe, c2 = printable_json(v)
            out[key] = safe
            changed = changed or c1 or c2
        return out, changed
    return value, False
