"""The install-cost script times both codecs on the packaged student and reports int4 updates smaller than
int8 ones."""

from __future__ import annotations

import json
import sys

import pytest

from tests.support.lab_scripts import loaded_script


def test_both_codecs_are_timed_and_the_int4_update_is_the_smaller(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    with loaded_script("update_install_cost") as script:
        monkeypatch.setattr(sys, "argv", ["update_install_cost.py", "--updates", "2"])
        script.main()
    report = json.loads(capsys.readouterr().out)
    assert report["values"] == 103465 and report["updates"] == 2
    q8, q4 = report["q8delta+zstd"], report["q4sparse+zstd"]
    assert q8["median_ms"] > 0 and q4["median_ms"] > 0
    assert 0 < q4["mean_bytes"] < q8["mean_bytes"]
