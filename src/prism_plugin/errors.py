"""User-facing errors: one line that names the file, field or argument and the fix."""

from __future__ import annotations

import difflib
import os
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


def _shown(ch: str) -> bool:
    """Whether ``ch`` may reach an output as it is: not a control character (ESC, BEL, NUL, CR, LF, tab, ...), not a
    format character (the bidi overrides U+202A-U+202E and isolates U+2066-U+2069, zero-width marks), not a line or
    paragraph separator nor an unassigned or surrogate code point (Python's ``str.isprintable``; space is kept)."""
    return ch.isprintable()


def printable(text: str) -> str:
    """``text`` with control characters (``\\r``, ESC, NUL, tab, newline, the bidi overrides, ...) written as
    escapes (``\\x1b``, ``\\u202e``): a message, console line, table cell or report quoting a key, value or name can
    neither break the one-line output nor drive the terminal nor reorder the text around it. Idempotent; anything
    that is not a ``str`` is written as ``str(text)`` first."""
    text = text if isinstance(text, str) else str(text)
    if all(_shown(ch) for ch in text):
        return text
    return "".join(ch if _shown(ch) else ascii(ch)[1:-1] for ch in text)


def unprintable(text: str) -> str | None:
    """The first character of ``text`` that :func:`printable` would escape, written as its escape (``\\x1b``), or
    ``None`` when there is none."""
    bad = next((ch for ch in str(text) if not _shown(ch)), None)
    return None if bad is None else ascii(bad)[1:-1]


def plain_name(value: object, what: str | None = None) -> str:
    """The one rule for a name that is written to an output (console lines, ``runs.csv``, ``summary.json``, the
    report and its tables and figures): it never carries a control or bidi character there.

    With ``what`` (the argument or key the user typed it as, e.g. ``"--model-args name"``), such a name is refused:
    a :class:`PrismError` of one line that names ``what`` and the character. Without ``what`` (a name that comes from
    data: a class folder's or a results table's), it is escaped with :func:`printable` instead. A name without such
    characters comes back as it is.
    """
    text = value if isinstance(value, str) else str(value)
    bad = unprintable(text)
    if bad is None:
        return text
    if what is None:
        return printable(text)
    shown = repr(text)
    shown = shown if len(shown) <= 60 else shown[:57] + "..."
    raise PrismError(f"{what} {shown}: contains the control character {bad}; a name is written to the console, "
                     "runs.csv and the report, so give plain printable text (no escape sequences, tabs, newlines or "
                     "bidi controls)")


# --------------------------------------------------------------------------- exit statuses
# One contract for every prism-run command (docs/exit-codes.md); prism_plugin.cli maps exceptions to them.
#: the command did what it was asked
EXIT_OK = 0
#: the command ran and a check it was asked to make failed: a `diff --fail-on/--tol` regression gate, a corrupt
#: entry found by `cache verify`. Never a crash, never bad input
EXIT_GATE = 1
#: bad input or refused: an argument, task file, input file or results folder is wrong (a PrismError), another
#: prism-run is writing the results folder, the file system refused a write (full, read-only, quota)
EXIT_BAD_INPUT = 2
#: a bug in prism-plugin or in a plugin (an exception that is not bad input); sysexits' EX_SOFTWARE
EXIT_INTERNAL = 70
#: interrupted by Ctrl-C (128 + SIGINT); finished runs are kept
EXIT_INTERRUPTED = 130
#: stopped by SIGTERM (128 + SIGTERM); finished runs are kept
EXIT_TERMINATED = 143


def plain_names(table):
    """A table read back (a ``pandas.DataFrame`` of runs) with every text cell that holds a control or bidi
    character escaped by :func:`plain_name`: names from data reach no console line, table, report or figure with
    one. Cells without such characters (every cell of a table prism-run wrote) are left as they are."""
    import pandas as pd

    for col in table.columns:
        if not (table[col].dtype == object or pd.api.types.is_string_dtype(table[col].dtype)):
            continue
        dirty = table[col].map(lambda v: isinstance(v, str) and not v.isprintable()).astype(bool)
        if dirty.any():
            table.loc[dirty, col] = table.loc[dirty, col].map(plain_name)
    return table


def positive_int_env(name: str, default: int, expected: str) -> int:
    """``$name`` as a whole number >= 1, ``default`` when unset or blank; anything else is one line naming the
    variable and its value, then ``expected`` (what it takes and the fix)."""
    raw = os.environ.get(name, "").strip()
    if not raw:
        return int(default)
    try:
        value = int(raw)
    except ValueError:
        value = 0
    if value < 1:
        raise PrismError(f"${name}={raw[:40]!r}: {expected}")
    return value
