"""The server under fuzzing: a given URL, or a ``shadowtutor serve`` process started on loopback.

The local server serves a small generated scene with its labels as the teacher (instant), so
the fuzzer's CPU goes to the protocol and to a little distillation. It requires tokens, as a
deployed server does: the fuzzer issues one for the edge id of every case and one for the
canary, so that authentication is fuzzed too. Its log is scanned after the run for tracebacks
and unhandled exceptions (:func:`log_problems`).
"""

from __future__ import annotations

import json
import re
import ssl
import urllib.error
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

# Not load_run's default (any ERROR line): fuzz cases make the server log names such as "not ERROR".
LOG_PROBLEM = re.compile(
    r"Traceback \(most recent call last\)|internal error|\bException\b|exception was never retrieved|"
    r"--- Logging error ---|Fatal Python error|Segmentation fault"
)
LOCAL_MAX_MESSAGE_BYTES = 2**20  # small, so that oversize cases stay cheap
LOCAL_HELLO_TIMEOUT = 3.0
LOCAL_EDGE_ID = "fuzz-edge"  # every case's edge id against the local server (its token is issued for it)
LOCAL_CANARY_ID = "fuzz-canary"


@dataclass
class ServerUnderTest:
    ws_url: str
    base_url: str  # http(s)://host:port
    readyz: dict[str, Any]
    version: str
    local: bool
    serve_args: list[str] = field(default_factory=list)
    log_path: Path | None = None
    process: Any = None  # a ManagedProcess when local
    tokens: dict[str, str] = field(default_factory=dict)  # edge id -> token the fuzzer issued (local server)
    tokens_file: Path | None = None  # the local server's

    def exit_code(self) -> int | None:
        return None if self.process is None else self.process.returncode


def get_json(url: str, timeout: float, ssl_context: ssl.SSLContext | None) -> dict[str, Any]:
    try:
        with urllib.request.urlopen(url, timeout=timeout, context=ssl_context) as response:
            return json.loads(response.read())
    except urllib.error.HTTPError as exc:
        body = exc.read()
        try:
            return json.loads(body)
        except ValueError:
            raise RuntimeError(f"{url}: HTTP {exc.code} {body[:200]!r}") from None
    except (urllib.error.URLError, OSError, ValueError) as exc:
        raise RuntimeError(f"{url}: {exc}") from None


def remote_server(url: str, ssl_context: ssl.SSLContext | None) -> ServerUnderTest:
    from edge_agent.settings import normalise_server_url
    from shadowtutor_lab.stress.load_run import http_base

    ws_url = normalise_server_url(url)
    base = http_base(ws_url)
    readyz = get_json(f"{base}/readyz", 10, ssl_context)
    return ServerUnderTest(ws_url, base, readyz, server_version(base, ssl_context), local=False)


def server_version(base: str, ssl_context: ssl.SSLContext | None) -> str:
    """The server's package version from its OpenAPI schema, else its build info on /metrics (a server
    with tokens serves no schema), else ``unknown``."""
    try:
        return str(get_json(f"{base}/openapi.json", 10, ssl_context)["info"]["version"])
    except (RuntimeError, KeyError, TypeError):
        pass
    try:
        with urllib.request.urlopen(f"{base}/metrics", timeout=10, context=ssl_context) as response:
            found = re.search(r'shadowtutor_server_build_info\{[^}]*version="([^"]+)"', response.read().decode())
    except (urllib.error.URLError, OSError):
        found = None
    return found.group(1) if found else "unknown"


def local_serve_args(scene_dir: Path, port: int, tokens_file: Path, protect_metrics: bool = False) -> list[str]:
    """The local server's arguments; /metrics open (without per-edge series) unless ``protect_metrics``; no
    practical resync limit (each case's probe is a resync)."""
    return ["serve", "--host", "127.0.0.1", "--port", str(port), "--device", "cpu", "--log-level", "info",
            "--teacher", "labels", "--labels-dir", str(scene_dir), "--max-updates", "2", "--distill-workers", "1",
            "--max-message-bytes", str(LOCAL_MAX_MESSAGE_BYTES), "--hello-timeout", str(LOCAL_HELLO_TIMEOUT),
            "--tokens-file", str(tokens_file), "--protect-metrics", str(protect_metrics).lower(),
            # every case ends with a resync probe, and all share one edge id: its resync budget is opened
            "--resync-rate", "1000", "--resync-burst", "1000"]


def issue_local_tokens(tokens_file: Path) -> dict[str, str]:
    """A fresh tokens file with a token for the cases' edge id and one for the canary's."""
    from services.server.access.tokens import issue_token

    tokens_file.unlink(missing_ok=True)
    return {edge_id: issue_token(tokens_file, "edges", edge_id) for edge_id in (LOCAL_EDGE_ID, LOCAL_CANARY_ID)}


@contextmanager
def local_server(scene_dir: Path, log_dir: Path, ready_timeout: float = 180.0,
                 protect_metrics: bool = False) -> Iterator[ServerUnderTest]:
    """``shadowtutor serve`` on a free loopback port, one thread for torch, tokens required; stopped on exit."""
    from importlib.metadata import version

    from shadowtutor_lab.demo.processes import free_port, shadowtutor_command, start_process, wait_http_ok

    port = free_port()
    tokens_file = log_dir / "fuzz-tokens.json"
    tokens = issue_local_tokens(tokens_file)
    args = local_serve_args(scene_dir, port, tokens_file, protect_metrics)
    base = f"http://127.0.0.1:{port}"
    with start_process(shadowtutor_command(*args), name="fuzz-server", log_dir=log_dir,
                       env={"OMP_NUM_THREADS": "1"}) as process:
        readyz = json.loads(wait_http_ok(f"{base}/readyz", timeout=ready_timeout, process=process))
        yield ServerUnderTest(f"ws://127.0.0.1:{port}/v1/edge", base, readyz, version("shadowtutor"), local=True,
                              serve_args=args[1:], log_path=process.log_path, process=process, tokens=tokens,
                              tokens_file=tokens_file)


def scene_frames(scene_dir: Path) -> tuple[np.ndarray, ...]:
    from shadowtutor.scene_store import Scene

    return tuple(Scene.open(scene_dir).frames())


def synthetic_frames(width: int, height: int, count: int, seed: int) -> tuple[np.ndarray, ...]:
    """Textured frames with a moving bright box, for a server whose scene the fuzzer does not have."""
    rng = np.random.default_rng(seed)
    background = rng.integers(40, 200, (height, width, 3), dtype=np.uint8)
    frames = []
    for i in range(count):
        frame = background.copy()
        x = (3 * i) % max(1, width - width // 4)
        frame[height // 4 : height // 2, x : x + width // 4] = (230, 220, 250)
        frames.append(frame)
    return tuple(frames)


def sessions_open(base_url: str, ssl_context: ssl.SSLContext | None, timeout: float = 5.0) -> float | None:
    """The server's ``shadowtutor_server_sessions`` gauge, or None if /metrics cannot be read."""
    try:
        with urllib.request.urlopen(f"{base_url}/metrics", timeout=timeout, context=ssl_context) as response:
            text = response.read().decode()
    except (urllib.error.URLError, OSError):
        return None
    for line in text.splitlines():
        if line.startswith("shadowtutor_server_sessions "):
            return float(line.split()[1])
    return None
