"""The import contracts of ``[tool.importlinter]`` in pyproject.toml hold, and they catch what they forbid.

The real tree must pass ``lint-imports``. A copy of the product's three packages (Python files only)
with one upward import, or one circle between two core packages, must fail, naming the broken contract.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import tomllib

REPO_ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("shadowtutor", "services", "edge_agent", "shadowtutor_cli")
LINT_IMPORTS = Path(sys.executable).with_name("lint-imports")


def contract_names() -> dict[str, str]:
    """The contracts of pyproject.toml, id -> name."""
    config = tomllib.loads((REPO_ROOT / "pyproject.toml").read_text())["tool"]["importlinter"]
    return {contract["id"]: contract["name"] for contract in config["contracts"]}


def lint_imports(root: Path, config: Path) -> subprocess.CompletedProcess[str]:
    """``lint-imports`` on the packages under ``root`` (first on the path, before any installed copy)."""
    return subprocess.run(
        [str(LINT_IMPORTS), "--no-logo", "--no-cache", str(config)], cwd=root, capture_output=True, text=True,
        env={"PYTHONPATH": str(root), "PATH": str(LINT_IMPORTS.parent)}, timeout=120,
    )


def broken(result: subprocess.CompletedProcess[str]) -> set[str]:
    """The names of the contracts ``lint-imports`` reported broken."""
    names = contract_names().values()
    return {name for name in names if f"{name} BROKEN" in " ".join(result.stdout.split())}


@pytest.fixture
def product_copy(tmp_path: Path) -> Path:
    """The product's packages (``.py`` files only) and pyproject.toml, copied under ``tmp_path``."""
    for package in PACKAGES:
        for source in (REPO_ROOT / package).rglob("*.py"):
            target = tmp_path / source.relative_to(REPO_ROOT)
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(source, target)
    shutil.copyfile(REPO_ROOT / "pyproject.toml", tmp_path / "pyproject.toml")
    return tmp_path


def test_the_real_tree_keeps_every_contract() -> None:
    result = lint_imports(REPO_ROOT, REPO_ROOT / "pyproject.toml")
    assert result.returncode == 0, result.stdout + result.stderr


INJECTIONS = [
    pytest.param("shadowtutor/protocol/messages.py", "services.server.app", "product-layers", id="upward"),
    pytest.param("shadowtutor/heap.py", "shadowtutor_cli.tokens", "product-layers", id="core-to-cli"),
    pytest.param("edge_agent/backoff.py", "shadowtutor_cli", "product-layers", id="agent-to-cli"),
    pytest.param("shadowtutor/__main__.py", "shadowtutor_cli", "product-layers", id="entry-to-cli"),
    pytest.param("shadowtutor/models/student.py", "shadowtutor.acceleration.labellers", "core-layers", id="circle"),
    pytest.param("edge_agent/sinks.py", "shadowtutor_lab", "no-lab", id="lab"),
]


@pytest.mark.parametrize(("module", "imported", "contract"), INJECTIONS)
def test_an_injected_import_breaks_its_contract(product_copy: Path, module: str, imported: str, contract: str) -> None:
    """One import added to a copy that keeps every contract: lint-imports fails naming ``contract`` and the
    import (a circle: models -> acceleration, while acceleration imports models)."""
    config = product_copy / "pyproject.toml"
    assert lint_imports(product_copy, config).returncode == 0
    path = product_copy / module
    path.write_text(path.read_text() + f"\nimport {imported}  # noqa\n")
    result = lint_imports(product_copy, config)
    assert result.returncode != 0
    assert contract_names()[contract] in broken(result), result.stdout
    importer = module.removesuffix(".py").replace("/", ".")
    assert f"{importer} -> {imported}" in result.stdout, result.stdout
