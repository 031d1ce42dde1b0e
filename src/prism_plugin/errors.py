"""User-facing errors: one line that names the file, field or argument and the fix."""

from __future__ import annotations

import difflib
from typing import Iterable


class PrismError(Exception):
    """An error caused by the user's input; the CLI prints it as one line, no traceback."""


class UnknownNameError(PrismError, KeyError):
    """A task, adapter or plugin name that is not registered."""

    def __init__(self, kind: str, name: str, known: Iterable[str], hint: str = ""):
        known = sorted(set(known))
        close = difflib.get_close_matches(name, known, n=3, cutoff=0.5)
        msg = f"unknown {kind} {name!r}"
        if close:
            msg += "; did you mean " + ", ".join(repr(c) for c in close) + "?"
        if known:
            shown = ", ".join(known[:15]) + (f", ... ({len(known)} in all)" if len(known) > 15 else "")
            msg += f" (available: {shown}" + (f"; {hint})" if hint else ")")
        elif hint:
            msg += f" ({hint})"
        super().__init__(msg)
        self.name = name

    def __str__(self) -> str:  # KeyError would repr() the message
        return self.args[0]


def suggest(name: str, known: Iterable[str]) -> str:
    """``"; did you mean 'x'?"`` or an empty string."""
    close = difflib.get_close_matches(name, sorted(set(known)), n=3, cutoff=0.6)
    return ("; did you mean " + ", ".join(repr(c) for c in close) + "?") if close else ""


def printable(text: str) -> str:
    """``text`` with control characters (``\\r``, ESC, NUL, ...) written as escapes: a message quoting a
    key or value from a file can neither break the one-line output nor drive the terminal."""
    return "".join(ch if ch.isprintable() else ascii(ch)[1:-1] for ch in text)
