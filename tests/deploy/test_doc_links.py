"""Links into the deployment guide resolve: every Markdown link of docs/ and README.md that points
into docs/deploy.md or docs/deploy/ (and every link of those pages) names a file that exists and,
with ``#anchor``, a heading of it; every path ``docs/deploy...md#anchor`` written in any tracked
file (alert rules' runbook URLs, comments, tests) and every page named with a quoted heading
after it (a comma or a parenthesis between) likewise."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

from tests.deploy.markdown_docs import anchors, slug
from tests.deploy.prometheus_stack import REPO_ROOT

DOCS = REPO_ROOT / "docs"
LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")
PATH_REF = re.compile(r"docs/deploy(?:/[\w-]+)?\.md(?:#[\w-]+)?")
HEADING_REF = re.compile(r"(docs/deploy(?:/[\w-]+)?\.md)(?:, | \()\"([^\"]+)\"")


def _tracked_text_files() -> list[Path]:
    listed = subprocess.run(["git", "ls-files"], cwd=REPO_ROOT, capture_output=True, text=True, check=False)
    if listed.returncode != 0:
        pytest.skip("not a git checkout")
    paths = [REPO_ROOT / name for name in listed.stdout.split()]
    return [
        p for p in paths if p.suffix in {".md", ".py", ".yml", ".yaml", ".toml", ".sh", ".json", ""} and p.is_file()
    ]


def _resolve(source: Path, target: str) -> str | None:
    """Why the link ``target`` of ``source`` does not resolve, or None when it does."""
    path, _, anchor = target.partition("#")
    file = (source.parent / path).resolve() if path else source
    if not file.exists():
        return f"{source.relative_to(REPO_ROOT)}: {target}: no such file"
    if anchor and file.suffix == ".md" and anchor not in anchors(file):
        return f"{source.relative_to(REPO_ROOT)}: {target}: no heading #{anchor}"
    return None


def _is_deploy_page(path: Path) -> bool:
    return path == DOCS / "deploy.md" or path.parent == DOCS / "deploy"


def test_markdown_links_into_and_within_the_deployment_guide_resolve() -> None:
    pages = [REPO_ROOT / "README.md", *sorted(DOCS.rglob("*.md"))]
    broken, checked = [], 0
    for page in pages:
        for target in LINK.findall(page.read_text()):
            if target.startswith(("http://", "https://", "mailto:")):
                continue
            path = target.partition("#")[0]
            lands = (page.parent / path).resolve() if path else page
            if _is_deploy_page(page) or _is_deploy_page(lands):
                checked += 1
                broken += [why] if (why := _resolve(page, target)) else []
    assert checked > 50 and broken == []


def test_paths_into_the_deployment_guide_resolve_wherever_they_are_written() -> None:
    broken, checked = [], 0
    # this file names a stale path on purpose (test_a_stale_anchor_is_caught)
    for file in [f for f in _tracked_text_files() if f != Path(__file__)]:
        text = file.read_text(errors="replace")
        for reference in PATH_REF.findall(text):
            checked += 1
            broken += [why] if (why := _resolve(REPO_ROOT / "README.md", reference)) else []
        for page, heading in HEADING_REF.findall(text):
            checked += 1
            if not (REPO_ROOT / page).is_file() or slug(heading) not in anchors(REPO_ROOT / page):
                broken.append(f"{file.relative_to(REPO_ROOT)}: {page}, {heading!r}: no such heading")
    assert checked > 20 and broken == []


def test_the_index_is_one_screen_and_lists_every_page() -> None:
    index = (DOCS / "deploy.md").read_text()
    assert len(index.splitlines()) <= 40
    for page in sorted((DOCS / "deploy").glob("*.md")):
        assert f"(deploy/{page.name})" in index, page.name


def test_a_stale_anchor_is_caught() -> None:
    assert _resolve(REPO_ROOT / "README.md", "docs/deploy.md#fleet-metrics") is not None
    assert _resolve(REPO_ROOT / "README.md", "docs/deploy/metrics.md#fleet-metrics") is None
