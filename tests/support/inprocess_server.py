"""The real server app (``create_app``) under uvicorn in a thread of the test process.

For end-to-end tests that need to reach inside the server (its session registry, a teacher
object of the test's own) while edges connect over a real socket as real processes.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import uvicorn
from fastapi import FastAPI

from services.server.runtime import ServerRuntime
from tests.support.processes import free_port, wait_http_ok


@contextmanager
def serve_in_thread(app: FastAPI, **config: Any) -> Iterator[str]:
    """Serve ``app`` on 127.0.0.1 until the block ends; yields its base URL once ``/readyz`` answers.

    ``config`` goes to ``uvicorn.Config`` (e.g. ``ws_ping_interval``).
    """
    port = free_port()
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning", **config))
    thread = threading.Thread(target=server.run, name="uvicorn", daemon=True)
    thread.start()
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 30
        while not server.started:
            assert thread.is_alive() and time.monotonic() < deadline, "uvicorn did not start"
            time.sleep(0.05)
        wait_http_ok(f"{base}/readyz", timeout=60)
        yield base
    finally:
        server.should_exit = True
        thread.join(30)


def runtime_of(app: FastAPI) -> ServerRuntime:
    return app.state.runtime


@contextmanager
def serve_as_shadowtutor_serves(settings: Any) -> Iterator[tuple[str, FastAPI]]:
    """``settings``' app under uvicorn with the options ``shadowtutor serve`` gives it (its HTTP parser,
    header limit, WebSocket protocol and access log), on 127.0.0.1; yields the base URL and the app."""
    from services.cli import uvicorn_options
    from services.server.app import create_app
    from services.server.teaching.loading import load_models

    app = create_app(settings, models=load_models(settings))
    options = {key: value for key, value in uvicorn_options(settings).items() if key not in ("log_level", "log_config")}
    with serve_in_thread(app, **options) as base:
        yield base, app
