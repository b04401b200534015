"""The named attacks: they pass against ``shadowtutor serve`` (tests/lab/cli/test_fuzz.py runs them
there) and must fail against a server without the bounds. Here: plain uvicorn (httptools, no header limit,
WebSocket messages up to 16 MiB from the first one) serving a small app in this process."""

from __future__ import annotations

import os
from pathlib import Path

from fastapi import FastAPI, WebSocket

from shadowtutor.protocol.messages import Hello
from shadowtutor_lab.stress.fuzz_attacks import AttackScale, LocalTarget, run_attacks
from tests.support.inprocess_server import serve_in_thread

SMALL = AttackScale(header_mib=20, flood_connections=8, flood_mib=15, flood_rounds=1, lockout_loops=4,
                    lockout_hold_s=0.5, bearer_clients=4, fifo_s=1.0)


def unbounded_app() -> FastAPI:
    app = FastAPI()

    @app.get("/healthz")
    @app.get("/readyz")
    @app.get("/v1/sessions")
    async def ok() -> dict[str, str]:
        return {"status": "ok"}

    @app.websocket("/v1/edge")
    async def edge(websocket: WebSocket) -> None:
        await websocket.accept()
        await websocket.receive()  # whatever comes first, read whole

    return app


def test_the_header_and_flood_attacks_catch_a_server_without_bounds(tmp_path: Path) -> None:
    with serve_in_thread(unbounded_app(), http="httptools") as base:
        target = LocalTarget(base, base.replace("http", "ws") + "/v1/edge", os.getpid(), tmp_path / "tokens.json",
                             Hello(edge_id="e", class_names=["a"], frame_width=8, frame_height=8))
        header, flood = run_attacks(target, SMALL, lambda signum: None, names=("huge_header", "pre_hello_flood"))
    assert not header.passed and "bytes of one header were read" in header.failures[0]
    assert header.figures["sent_before_close_bytes"] == 20 * 2**20
    assert not flood.passed and "messages of 15 MiB were read whole before HELLO" in flood.failures[0]


def test_the_authentication_attacks_catch_a_server_without_bounds(tmp_path: Path) -> None:
    """Anyone's bearer token admitted, no WELCOME, and every idle socket kept whatever its claimed address."""
    with serve_in_thread(unbounded_app(), http="httptools") as base:
        target = LocalTarget(base, base.replace("http", "ws") + "/v1/edge", os.getpid(), tmp_path / "tokens.json",
                             Hello(edge_id="e", class_names=["a"], frame_width=8, frame_height=8))
        flood, spoofed = run_attacks(target, SMALL, lambda signum: None, names=("bearer_flood", "forwarded_for"))
    assert not flood.passed and any("made-up bearer tokens were admitted" in f for f in flood.failures)
    assert not spoofed.passed and spoofed.figures["still_open"] == 12
