"""Reading Prometheus text exposition in tests, and ``promtool check metrics`` where installed."""

from __future__ import annotations

import shutil
import subprocess

import pytest
from prometheus_client.parser import text_string_to_metric_families


def sample_value(text: str, name: str, **labels: str) -> float:
    """The value of the sample ``name{labels}`` (exact label set) in an exposition; KeyError if absent."""
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name == name and sample.labels == labels:
                return sample.value
    raise KeyError(f"no sample {name}{labels} in the exposition")


def promtool_check(text: str) -> str:
    """Run ``promtool check metrics`` on ``text``; skip the test where promtool is not installed."""
    promtool = shutil.which("promtool")
    if promtool is None:
        pytest.skip("promtool is not installed (Debian package 'prometheus')")
    result = subprocess.run(
        [promtool, "check", "metrics"], input=text, capture_output=True, text=True, timeout=60, check=False
    )
    assert result.returncode == 0, f"promtool check metrics failed:\n{result.stdout}{result.stderr}"
    return result.stdout + result.stderr
