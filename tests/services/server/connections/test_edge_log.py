"""Edge text in log lines: escaped, cut, and bounded per connection (on a fake clock)."""

from __future__ import annotations

import logging

import pytest

from services.server.connections.edge_log import EdgeLog, edge_text


def test_edge_text_cannot_end_a_line_and_is_cut() -> None:
    assert edge_text("ok\nINFO forged\r\x1b[31m\u2028") == "ok\\nINFO forged\\r\\x1b[31m\\u2028"
    assert edge_text("x" * 500, limit=10) == "x" * 10 + "... (490 more characters)"
    assert edge_text("plain text, quotes ' and \" kept") == "plain text, quotes ' and \" kept"


def test_lines_over_the_budget_are_dropped_then_summed_up(caplog: pytest.LogCaptureFixture) -> None:
    now = [0.0]
    drops: list[int] = []
    edge_log = EdgeLog(logging.getLogger("edge-log-test"), 3, lambda: "edge 'cam-1'", lambda: drops.append(1),
                       clock=lambda: now[0])
    with caplog.at_level(logging.INFO, logger="edge-log-test"):
        written = [edge_log.warning("%s says %s", "edge 'cam-1'", f"line {n}\nforged") for n in range(10)]
        assert written == [True] * 3 + [False] * 7 and len(drops) == 7
        now[0] += 20.0  # one line's worth again (3 a minute)
        assert edge_log.info("%s: %d", "later", 5)
        edge_log.warning("dropped")
        edge_log.close()
    messages = [r.getMessage() for r in caplog.records]
    assert messages[:3] == [f"edge 'cam-1' says line {n}\\nforged" for n in range(3)]
    assert messages[3:] == ["edge 'cam-1': suppressed 7 log lines (over 3 a minute)", "later: 5",
                            "edge 'cam-1': suppressed 1 log lines (over 3 a minute)"]
