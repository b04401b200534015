"""A lab script (``lab/scripts/NAME.py``: a file, not a package module) loaded as a module for its tests."""

from __future__ import annotations

import importlib.util
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from types import ModuleType

LAB_SCRIPTS = Path(__file__).resolve().parents[2] / "lab" / "scripts"


@contextmanager
def loaded_script(name: str) -> Iterator[ModuleType]:
    """``lab/scripts/{name}.py`` executed as the module ``name``, registered in ``sys.modules`` while the block
    runs (its dataclasses look their module up there) and removed after it."""
    spec = importlib.util.spec_from_file_location(name, LAB_SCRIPTS / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    try:
        spec.loader.exec_module(module)
        yield module
    finally:
        del sys.modules[name]
