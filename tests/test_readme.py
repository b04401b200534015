"""The README's opening screen: what the product does, the two commands (set up and run the main
job; set up and run the tests) and the headline figures, each linked to its results page; nothing
in it refers to issues."""

from __future__ import annotations

import re
from pathlib import Path

README = Path(__file__).resolve().parents[1] / "README.md"


def _opening(lines: int = 60) -> str:
    return "\n".join(README.read_text().splitlines()[:lines])


def test_the_opening_screen_holds_the_two_commands_and_the_headline_table() -> None:
    opening = _opening()
    assert "./scripts/bootstrap.sh && .venv/bin/shadowtutor demo" in opening
    assert "./scripts/bootstrap.sh && .venv/bin/python -m pytest" in opening
    table = opening[opening.index("## Headline figures") :]
    for row in ("cameras per GPU", "H.264", "accuracy against"):
        line = next(line for line in table.splitlines() if line.startswith("|") and row in line)
        assert "](docs/results/" in line, row


def test_nothing_in_the_readme_refers_to_issues() -> None:
    assert not re.search(r"\bissues?\b", README.read_text(), re.IGNORECASE)
