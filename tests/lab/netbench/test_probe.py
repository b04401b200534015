"""The in-namespace helpers, run here on loopback: the timed transfer and the HTTP GET."""

from __future__ import annotations

import http.server
import threading
import time
import types
from collections.abc import Iterator

import pytest

from shadowtutor_lab.demo.processes import free_port
from shadowtutor_lab.netbench import probe


def test_check_times_an_upload_and_a_download_of_the_same_size() -> None:
    port = free_port()
    sink = threading.Thread(target=probe.sink, args=("127.0.0.1", port, 10.0), daemon=True)
    sink.start()
    result = probe.check("127.0.0.1", port, 3_000_000)
    sink.join(10)
    assert not sink.is_alive()
    assert result["up_mbps"] > 0 and result["down_mbps"] > 0


def test_check_reports_the_best_round_of_each_direction(monkeypatch: pytest.MonkeyPatch) -> None:
    port = free_port()
    sink = threading.Thread(target=probe.sink, args=("127.0.0.1", port, 10.0), daemon=True)
    sink.start()
    # The probe's timer (three readings per round) makes the second round's upload 4x faster than the
    # others and its download 2x slower.
    ticks = iter([0.0, 4.0, 6.0,  10.0, 11.0, 15.0,  20.0, 24.0, 26.0])
    clock = types.SimpleNamespace(monotonic=time.monotonic, sleep=time.sleep, perf_counter=lambda: next(ticks))
    monkeypatch.setattr(probe, "time", clock)
    result = probe.check("127.0.0.1", port, 1_000_000, rounds=3)
    sink.join(10)
    assert not sink.is_alive()  # the end marker closed the sink after the third round
    assert result == {"up_mbps": pytest.approx(8.0), "down_mbps": pytest.approx(4.0)}


@pytest.mark.parametrize(("size", "rounds"), [(0, 1), (1000, 0)])
def test_check_refuses_an_empty_transfer(size: int, rounds: int) -> None:
    with pytest.raises(ValueError, match="positive"):
        probe.check("127.0.0.1", free_port(), size, rounds=rounds)


def test_check_fails_when_nothing_listens() -> None:
    with pytest.raises(OSError):
        probe.check("127.0.0.1", free_port(), 1000, connect_timeout=0.3)


@pytest.fixture
def http_port() -> Iterator[int]:
    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802 (the stdlib's name)
            body = b"ready" if self.path == "/readyz" else b""
            self.send_response(200 if body else 503)
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: object) -> None:
            pass

    server = http.server.HTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield server.server_address[1]
    server.shutdown()
    server.server_close()


def test_get_prints_the_body_and_fails_on_an_error_status(http_port: int, capsysbinary: pytest.CaptureFixture) -> None:
    assert probe.main(["get", f"http://127.0.0.1:{http_port}/readyz"]) == 0
    assert capsysbinary.readouterr().out == b"ready"
    assert probe.main(["get", f"http://127.0.0.1:{http_port}/other"]) == 1
    assert b"503" in capsysbinary.readouterr().err
