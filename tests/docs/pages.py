"""The documentation pages the docs tests read: README.md and docs/**/*.md, and their fenced blocks.

A ``yaml`` block whose first line is ``# <path>.yaml[: comment]`` declares that file: the tests write
it into the page's scratch folder before the blocks after it, as a reader following the page would.
"""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"
DOCS = ROOT / "docs"

FENCE = re.compile(r"^```(\w*)[^\n]*\n(.*?)^```", re.S | re.M)
DECLARED = re.compile(r"#\s*([\w./-]+\.ya?ml)\b")
SHELL = {"bash", "sh", "shell", "console"}


def pages() -> list[Path]:
    return ([README] if README.is_file() else []) + sorted(DOCS.rglob("*.md"))


def rel(page: Path) -> str:
    return page.relative_to(ROOT).as_posix()


def blocks(page: Path) -> list[tuple[str, str]]:
    """``(language, body)`` of every fenced block of ``page``, in order."""
    return FENCE.findall(page.read_text(encoding="utf-8"))


def declared(body: str) -> str | None:
    """The file path a yaml block declares on its first line, or None."""
    first = body.splitlines()[0] if body.strip() else ""
    m = DECLARED.match(first)
    return m.group(1) if m else None


def declared_files(page: Path) -> dict[str, str]:
    return {path: body for lang, body in blocks(page) if lang in ("yaml", "yml") and (path := declared(body))}


def commands(page: Path) -> list[str]:
    """The page's shell commands, continuation lines joined, comments and blank lines dropped."""
    out = []
    for lang, body in blocks(page):
        if lang not in SHELL:
            continue
        for line in re.sub(r"\\\n\s*", " ", body).splitlines():
            line = line.strip()
            if line and not line.startswith("#"):
                out.append(line)
    return out
