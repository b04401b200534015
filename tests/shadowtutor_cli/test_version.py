"""``shadowtutor --version``: the installed distribution's version on stdout, exit status 0, no
command required."""

from __future__ import annotations

import subprocess
import sys

from shadowtutor.version import package_version


def test_version_prints_the_installed_version_and_exits_zero() -> None:
    result = subprocess.run([sys.executable, "-m", "shadowtutor", "--version"], capture_output=True,
                            text=True, timeout=120, check=False)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == f"shadowtutor {package_version()}"
    assert package_version() != "unknown"
