"""The product type-checks: plain ``mypy`` (``[tool.mypy]`` in pyproject.toml, pydantic's plugin on) finds
no error in ``shadowtutor``, ``services`` and ``edge_agent``, and it checks every Python file of the three.

mypy runs in a subprocess from the repository root, with its cache in ``.mypy_cache`` there (shared with
a developer's own ``mypy`` runs: a warm cache takes seconds, a cold one well under a minute).
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[1]
PRODUCT = ("shadowtutor", "services", "edge_agent", "shadowtutor_cli")


def test_mypy_finds_no_error_in_the_product() -> None:
    result = subprocess.run(
        [sys.executable, "-m", "mypy", "--cache-dir", str(REPO_ROOT / ".mypy_cache")],
        cwd=REPO_ROOT, capture_output=True, text=True, timeout=300,
    )
    report = (result.stdout + result.stderr).strip()
    assert result.returncode == 0, f"mypy finds errors in the product:\n{report}"
    checked = re.search(r"no issues found in (\d+) source files?", report)
    assert checked is not None, f"mypy's report names no count of checked files:\n{report}"
    product_files = sum(1 for package in PRODUCT for _ in (REPO_ROOT / package).rglob("*.py"))
    assert int(checked.group(1)) == product_files, (
        f"mypy checked {checked.group(1)} files, the product has {product_files}: [tool.mypy] files must be "
        f"{', '.join(PRODUCT)}, without the lab or the tests"
    )
