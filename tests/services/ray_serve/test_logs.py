"""logs.configure: the ``services`` loggers write timestamped lines to stderr once, at the level set,
and not again through the root logger (whose handler in a Ray worker has no time)."""

from __future__ import annotations

import logging
import re

import pytest

from services.ray_serve import logs


@pytest.fixture
def restore():
    logger = logging.getLogger(logs.LOGGER)
    handlers, level, propagate = list(logger.handlers), logger.level, logger.propagate
    yield
    logger.handlers[:], logger.propagate = handlers, propagate
    logger.setLevel(level)


def test_lines_carry_a_timestamp_level_and_name_once(restore, capsys: pytest.CaptureFixture[str]) -> None:
    logs.configure("info")
    logs.configure("info")
    logging.getLogger("services.ray_serve.client").info("the session of edge 'cam' was rebuilt")
    logging.getLogger("services.ray_serve.client").debug("not at info")
    lines = capsys.readouterr().err.splitlines()
    assert len(lines) == 1, lines
    assert re.match(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3} INFO services\.ray_serve\.client: the session", lines[0])
