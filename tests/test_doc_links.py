"""Every relative link in the hand-written documents (the README, docs/, the design records and the
results' READMEs) names a file or folder that exists. Reports that benchmarks write are left out:
they may link plots that are not committed."""

from __future__ import annotations

import re
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[1]
LINK = re.compile(r"\]\(([^)\s]+)\)")


def _documents() -> list[Path]:
    docs = REPO_ROOT / "docs"
    return [
        REPO_ROOT / "README.md",
        *sorted(docs.glob("*.md")),
        *sorted((docs / "design").glob("*.md")),
        *sorted(docs.glob("results/**/README.md")),
    ]


def broken_links(document: Path) -> list[str]:
    """The relative link targets of ``document`` (anchors aside) that name nothing on disk."""
    broken = []
    for target in LINK.findall(document.read_text()):
        if re.match(r"^(https?:|mailto:|#)", target):
            continue
        path = target.split("#", 1)[0]
        if path and not (document.parent / path).exists():
            broken.append(target)
    return broken


def test_relative_links_resolve() -> None:
    found = {
        str(doc.relative_to(REPO_ROOT)): broken
        for doc in _documents()
        if (broken := broken_links(doc))
    }
    assert not found, found


def test_a_missing_target_is_found(tmp_path: Path) -> None:
    (tmp_path / "here.md").write_text("x")
    doc = tmp_path / "doc.md"
    doc.write_text("[a](here.md) [b](gone.md#part) [c](https://example.org) [d](#local)")
    assert broken_links(doc) == ["gone.md#part"]
