"""The checkpoint cost measurement: real distillation, real checkpoints written and sized."""

from __future__ import annotations

from pathlib import Path

import pytest

from services.checkpoints.session import header
from shadowtutor_lab.stress.checkpoint_compare import compare
from shadowtutor_lab.stress.checkpoint_cost import measure


def test_it_times_and_sizes_the_checkpoints_it_writes(tmp_path: Path) -> None:
    result = measure(updates=2, size=(64, 48), store_dir=tmp_path)
    written = sorted(p for p in tmp_path.rglob("*.ckpt"))
    assert [header(p.read_bytes())["version"] for p in written] == [1, 2]  # one per update
    assert result["mean_bytes"] == pytest.approx(sum(p.stat().st_size for p in written) / 2, rel=0.01)
    # weights, Adam's two moments and the held weights, compressed; the values last sent equal the weights
    assert 4 * 2 * result["trainable_parameters"] < result["mean_bytes"] < 4 * 5 * result["trainable_parameters"]
    assert 0 < result["mean_ms"] and result["mean_ms"] <= result["p95_ms"] * 2


def test_no_updates_is_refused() -> None:
    with pytest.raises(ValueError, match="updates"):
        measure(updates=0)


def test_the_comparison_measures_the_three_modes_on_the_same_key_frames() -> None:
    result = compare(updates=4, size=(64, 48), max_updates=1, every=2)
    before, behind, journal = (result["modes"][mode] for mode in ("before", "behind", "journal"))
    assert result["written_behind"] == 4 and result["snapshots"] == 2  # versions 2 and 4
    # the earlier layout: five float32 copies of the trainable parameters
    assert before["bytes_per_update"] > 4 * 5 * result["trainable_parameters"] > behind["bytes_per_update"] > 0
    # two snapshots and four entries over four updates: about half of a snapshot per update, and more
    assert behind["bytes_per_update"] / 2 < journal["bytes_per_update"] < behind["bytes_per_update"]
    assert result["ratios"]["behind_bytes_per_update"] == behind["bytes_per_update"] / before["bytes_per_update"]
    assert result["ratios"]["journal_bytes_per_update"] == journal["bytes_per_update"] / before["bytes_per_update"]
    assert all(m["turnaround_ms"]["mean"] >= m["answer_wait_ms"]["mean"] > 0 for m in (before, behind, journal))
