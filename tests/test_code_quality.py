"""The product's code-quality floors, checked on every run: every module ranks A on the
maintainability index (``scripts/maintainability.py``, radon's formula), and no class name is
defined twice in the product (``shadowtutor``, ``services``, ``edge_agent``), so that a name
found in a traceback, a log or a review points at one class."""

from __future__ import annotations

import ast
import subprocess
import sys
from collections import defaultdict
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[1]
PRODUCT = ("shadowtutor", "services", "edge_agent", "shadowtutor_cli")


def class_definitions(root: Path, packages: tuple[str, ...]) -> dict[str, list[str]]:
    """Every class name defined in ``packages`` under ``root`` -> where (``path:line``)."""
    found: dict[str, list[str]] = defaultdict(list)
    for package in packages:
        for path in sorted((root / package).rglob("*.py")):
            tree = ast.parse(path.read_text(encoding="utf-8"))
            for node in ast.walk(tree):
                if isinstance(node, ast.ClassDef):
                    found[node.name].append(f"{path.relative_to(root)}:{node.lineno}")
    return found


def test_no_class_name_is_defined_twice_in_the_product() -> None:
    twice = {
        name: places
        for name, places in class_definitions(REPO_ROOT, PRODUCT).items()
        if len(places) > 1
    }
    assert not twice, f"class names defined more than once: {twice}"


def test_the_check_finds_a_class_defined_twice(tmp_path: Path) -> None:
    (tmp_path / "a").mkdir()
    (tmp_path / "a" / "one.py").write_text("class Info:\n    pass\n")
    (tmp_path / "a" / "two.py").write_text("def f():\n    class Info:\n        pass\n")
    assert class_definitions(tmp_path, ("a",))["Info"] == ["a/one.py:1", "a/two.py:2"]


def test_every_product_module_ranks_a_on_maintainability() -> None:
    result = subprocess.run(
        [sys.executable, "scripts/maintainability.py", *PRODUCT],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    below = [line for line in result.stdout.splitlines() if " - B (" in line or " - C (" in line]
    assert result.returncode == 0 and not below, f"modules below A:\n{result.stdout[-2000:]}"
    assert result.stdout.count(" - A (") == sum(
        1 for package in PRODUCT for _ in (REPO_ROOT / package).rglob("*.py")
    )


def test_the_index_ranks_a_dense_module_below_a() -> None:
    sys.path.insert(0, str(REPO_ROOT / "scripts"))
    try:
        import maintainability
    finally:
        sys.path.remove(str(REPO_ROOT / "scripts"))
    dense = "\n".join(
        f"def f{i}(a, b):\n    if a and b or a > b:\n        return a * b + a - b ** 2\n    return -a"
        for i in range(400)
    )
    assert maintainability.rank(maintainability.maintainability(dense)) != "A"
    assert maintainability.rank(maintainability.maintainability('"""A module."""\nX = 1\n')) == "A"
