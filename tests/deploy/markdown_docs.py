"""Reading the repository's Markdown pages as GitHub renders them: the anchors of their headings,
and their fenced blocks with the marker comment written just above each."""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

MARKER = re.compile(r"<!--\s*(tested[^>]*?)\s*-->")


def slug(heading: str) -> str:
    """GitHub's anchor of a Markdown heading (its text without the leading ``#``)."""
    text = re.sub(r"[^\w\- ]", "", heading.strip().lower())
    return text.replace(" ", "-")


def anchors(path: Path) -> set[str]:
    """The anchors of every heading of ``path`` outside fenced blocks."""
    found, fenced = set(), False
    for line in path.read_text().splitlines():
        fenced ^= line.startswith("```")
        if line.startswith("#") and not fenced:
            found.add(slug(line.lstrip("#")))
    return found


@dataclass(frozen=True)
class Block:
    """A fenced block: its info string (``bash``), its text, the marker above it (``tested``;
    empty without one) and the line its fence opens on."""

    info: str
    text: str
    marker: str
    line: int


def fenced_blocks(path: Path) -> list[Block]:
    """Every fenced block of ``path``, in order."""
    lines = path.read_text().splitlines()
    blocks, i = [], 0
    while i < len(lines):
        if lines[i].startswith("```"):
            start = i
            i += 1
            while not lines[i].startswith("```"):
                i += 1
            above = lines[start - 1] if start > 0 else ""
            marker = MARKER.fullmatch(above.strip())
            blocks.append(
                Block(
                    lines[start][3:].strip(),
                    "\n".join(lines[start + 1 : i]) + "\n",
                    marker.group(1) if marker else "",
                    start + 1,
                )
            )
        i += 1
    return blocks


def join_continued(text: str) -> str:
    """``text`` with every shell line continued by a trailing ``\\`` joined to the next."""
    return re.sub(r"\\\n\s*", " ", text)
