"""The lab's command modules: one list for ``python -m shadowtutor_lab``, the same as its entry points."""

from __future__ import annotations

from pathlib import Path

import tomllib

from shadowtutor_cli import PLUGIN_GROUP
from shadowtutor_lab.cli import COMMAND_MODULES

LAB_PYPROJECT = Path(__file__).resolve().parents[3] / "lab" / "pyproject.toml"


def test_the_module_list_is_the_entry_points_in_their_order() -> None:
    declared = tomllib.loads(LAB_PYPROJECT.read_text())["project"]["entry-points"][PLUGIN_GROUP]
    assert COMMAND_MODULES == tuple(declared[name] for name in sorted(declared))
