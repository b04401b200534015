"""``netns``: skip (with the reason) where this machine cannot make the benchmark's namespaces and shape them."""

from __future__ import annotations

import functools

import pytest

from shadowtutor_lab.netbench.netns import NamespaceLink, NetnsError, check_requirements
from shadowtutor_lab.netbench.shaping import LinkShape, apply_shape


@functools.cache
def _unavailable() -> str | None:
    """Why namespaces and tc shaping cannot be used here, or None when they can (tried once)."""
    try:
        check_requirements()
        with NamespaceLink() as link:
            apply_shape(link, LinkShape(10.0))
    except NetnsError as exc:
        return str(exc)
    return None


@pytest.fixture
def netns() -> None:
    reason = _unavailable()
    if reason is not None:
        pytest.skip(f"needs root, iproute2 and tc with network namespaces: {reason}")
