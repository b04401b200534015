"""The checkpoint cost measurement: real distillation, real checkpoints written and sized."""

from __future__ import annotations

from pathlib import Path

import pytest

from services.server.session_checkpoint import header
from shadowtutor.stress.checkpoint_cost import measure


def test_it_times_and_sizes_the_checkpoints_it_writes(tmp_path: Path) -> None:
    result = measure(updates=2, size=(64, 48), store_dir=tmp_path)
    (written,) = tmp_path.iterdir()
    assert header(written.read_bytes())["version"] == 2  # the last of the two updates
    assert result["mean_bytes"] == pytest.approx(written.stat().st_size, rel=0.05)
    assert result["mean_bytes"] > 4 * 5 * result["trainable_parameters"] > 0  # weights, Adam x2, held, sent
    assert 0 < result["mean_ms"] and result["mean_ms"] <= result["p95_ms"] * 2


def test_no_updates_is_refused() -> None:
    with pytest.raises(ValueError, match="updates"):
        measure(updates=0)
