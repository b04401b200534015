from __future__ import annotations

import pytest

from shadowtutor.config.rates import format_rate, parse_rate


@pytest.mark.parametrize(("text", "bps"), [
    ("300kbps", 3e5), ("1.5Mbps", 1.5e6), ("80 Mbit/s", 8e7), ("2Gbps", 2e9), ("900bps", 900.0),
    ("1.5mb/s", 1.5e6),
])
def test_parse_rate(text: str, bps: float) -> None:
    assert parse_rate(text) == pytest.approx(bps)


@pytest.mark.parametrize("text", ["300", "fast", "-3kbps", "0kbps", "3kB"])
def test_parse_rate_refuses_what_is_not_a_bit_rate(text: str) -> None:
    with pytest.raises(ValueError, match="bit rate"):
        parse_rate(text)


def test_format_rate() -> None:
    assert format_rate(3e5) == "300 kbit/s"
    assert format_rate(8e7) == "80 Mbit/s"
    assert format_rate(12) == "12 bit/s"
