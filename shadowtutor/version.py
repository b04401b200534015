"""The installed package's version, for ``*_build_info`` metrics, the API title and HELLO's
``agent``."""

from __future__ import annotations

from importlib.metadata import PackageNotFoundError, version


def package_version() -> str:
    """The ``shadowtutor`` distribution's version; ``unknown`` when run from a tree that is not
    installed."""
    try:
        return version("shadowtutor")
    except PackageNotFoundError:
        return "unknown"
