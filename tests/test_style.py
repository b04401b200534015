"""The product keeps the style its configuration states: ``ruff check`` (lines of at most 100
characters under ``shadowtutor/``, ``services/`` and ``edge_agent/``, their ``ruff.toml``; 120 in
the lab and the tests) and ``ruff format --check`` on the product."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[1]
RUFF = Path(sys.executable).with_name("ruff")
PRODUCT = ["shadowtutor", "services", "edge_agent", "shadowtutor_cli"]


def ruff(*args: str, cwd: Path = REPO_ROOT) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(RUFF), *args], cwd=cwd, capture_output=True, text=True, timeout=120
    )


def test_ruff_finds_nothing_in_the_repository() -> None:
    result = ruff("check", "--no-cache", ".")
    assert result.returncode == 0, result.stdout + result.stderr


def test_the_product_is_formatted() -> None:
    result = ruff("format", "--check", "--no-cache", *PRODUCT)
    assert result.returncode == 0, result.stdout + result.stderr


def test_a_product_line_over_100_characters_is_refused(tmp_path: Path) -> None:
    # the product's configuration as it stands in the repository, copied: nothing is written there
    (tmp_path / "pyproject.toml").write_text((REPO_ROOT / "pyproject.toml").read_text())
    product = tmp_path / "services"
    product.mkdir()
    (product / "ruff.toml").write_text((REPO_ROOT / "services" / "ruff.toml").read_text())
    module = product / "_style_probe.py"
    module.write_text('LONG = "' + "a" * 100 + '"\n')
    result = ruff("check", "--no-cache", "--select", "E501", str(module), cwd=tmp_path)
    assert result.returncode == 1 and "E501" in result.stdout
