"""Helpers that run inside a namespace (``python -m shadowtutor_lab.netbench.probe ...``), and their callers.

- ``sink --host H --port P`` and ``check --host H --port P --bytes N [--rounds R]``: timed transfers
  over the shaped link (N bytes up, then N bytes down, R times on one connection), which
  :func:`measure_link` runs to show that the link really has the rate it was given; ``check``
  prints the best round of each direction, ``{"up_mbps": .., "down_mbps": ..}``. The best, not the
  mean: on a busy machine a round whose process was not scheduled measures the CPU, not the link,
  while no round can beat the shaper.
- ``get URL``: an HTTP GET whose body goes to stdout; :func:`http_get` uses it to reach the
  server's REST port from inside the server's namespace, over that namespace's loopback.

The module uses only the standard library, so that each call starts in a few tens of ms.
"""

from __future__ import annotations

import argparse
import json
import socket
import struct
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Sequence
from dataclasses import dataclass

from shadowtutor_lab.netbench.netns import NetnsError, exec_in

HEADER = struct.Struct("!Q")
CHUNK = 64 * 1024
PROBE_PORT = 9470


def _recv_exact(conn: socket.socket, size: int) -> bytes:
    parts, left = [], size
    while left:
        data = conn.recv(min(CHUNK, left))
        if not data:
            raise ConnectionError(f"the peer closed with {left} of {size} bytes outstanding")
        parts.append(data)
        left -= len(data)
    return b"".join(parts)


def _send_zeros(conn: socket.socket, size: int) -> None:
    block = bytes(CHUNK)
    while size:
        n = min(CHUNK, size)
        conn.sendall(block[:n])
        size -= n


def sink(host: str, port: int, timeout: float = 60.0) -> None:
    """Serve one check: per round receive N bytes, acknowledge, send N bytes back; N = 0 ends it."""
    with socket.create_server((host, port)) as server:
        server.settimeout(timeout)
        conn, _ = server.accept()
        with conn:
            conn.settimeout(timeout)
            while (size := HEADER.unpack(_recv_exact(conn, HEADER.size))[0]) > 0:
                _recv_exact(conn, size)
                conn.sendall(HEADER.pack(size))
                _send_zeros(conn, size)


def check(host: str, port: int, size: int, rounds: int = 1, connect_timeout: float = 10.0) -> dict[str, float]:
    """Upload ``size`` bytes, then download as many, ``rounds`` times; the best goodput of each direction in Mbps."""
    if size <= 0 or rounds <= 0:
        raise ValueError(f"check needs a positive size and number of rounds, got {size} and {rounds}")
    deadline = time.monotonic() + connect_timeout
    while True:  # the sink may still be starting
        try:
            conn = socket.create_connection((host, port), timeout=5.0)
            break
        except OSError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.05)
    up, down = 0.0, 0.0
    with conn:
        conn.settimeout(60.0)
        for _ in range(rounds):
            started = time.perf_counter()
            conn.sendall(HEADER.pack(size))
            _send_zeros(conn, size)
            _recv_exact(conn, HEADER.size)
            uploaded = time.perf_counter()
            _recv_exact(conn, size)
            downloaded = time.perf_counter()
            up = max(up, size * 8 / 1e6 / (uploaded - started))
            down = max(down, size * 8 / 1e6 / (downloaded - uploaded))
        conn.sendall(HEADER.pack(0))
    return {"up_mbps": up, "down_mbps": down}


def get(url: str, timeout: float) -> bytes:
    with urllib.request.urlopen(url, timeout=timeout) as response:
        return response.read()


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m shadowtutor_lab.netbench.probe")
    commands = parser.add_subparsers(dest="command", required=True)
    for name in ("sink", "check"):
        p = commands.add_parser(name)
        p.add_argument("--host", required=True)
        p.add_argument("--port", type=int, default=PROBE_PORT)
        if name == "check":
            p.add_argument("--bytes", type=int, required=True)
            p.add_argument("--rounds", type=int, default=1)
    p = commands.add_parser("get")
    p.add_argument("url")
    p.add_argument("--timeout", type=float, default=5.0)
    args = parser.parse_args(argv)
    try:
        if args.command == "sink":
            sink(args.host, args.port)
        elif args.command == "check":
            print(json.dumps(check(args.host, args.port, args.bytes, args.rounds)))
        else:
            sys.stdout.buffer.write(get(args.url, args.timeout))
    except (OSError, urllib.error.URLError, ConnectionError, ValueError) as exc:
        print(f"probe {args.command}: {exc}", file=sys.stderr)
        return 1
    return 0


# -- the harness's side -----------------------------------------------------------------------


def probe_command(*args: str) -> list[str]:
    return [sys.executable, "-m", "shadowtutor_lab.netbench.probe", *args]


@dataclass(frozen=True)
class LinkCheck:
    """Goodput measured over the shaped link (TCP payload: a little under the shaped rate)."""

    mbps: float  # the rate it was shaped to
    bytes: int  # transferred each way per round
    rounds: int  # the figures are each direction's best round
    up_mbps: float  # edge -> server
    down_mbps: float  # server -> edge

    def to_dict(self) -> dict[str, float]:
        return {"mbps": self.mbps, "bytes": self.bytes, "rounds": self.rounds, "up_mbps": self.up_mbps,
                "down_mbps": self.down_mbps}


def measure_link(
    server_ns: str, server_addr: str, edge_ns: str, mbps: float, seconds: float = 1.0, rounds: int = 3,
    timeout: float = 60.0,
) -> LinkCheck:
    """Time ``rounds`` transfers of about ``seconds`` at ``mbps`` each way between the two namespaces.

    Each direction's best round is kept (see the module's docstring).
    """
    size = max(64 * 1024, int(mbps * 1e6 / 8 * seconds))
    sink_process = subprocess.Popen(
        exec_in(server_ns, probe_command("sink", "--host", server_addr)),
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
    )
    try:
        done = subprocess.run(
            exec_in(edge_ns, probe_command("check", "--host", server_addr, "--bytes", str(size),
                                           "--rounds", str(rounds))),
            capture_output=True, text=True, timeout=timeout,
        )
        if done.returncode != 0:
            raise NetnsError(f"link check at {mbps:g} Mbps failed: {done.stderr.strip()}")
        result = json.loads(done.stdout)
    finally:
        try:
            sink_process.wait(5.0)
        except subprocess.TimeoutExpired:
            sink_process.kill()
            sink_process.wait()
    return LinkCheck(mbps, size, rounds, float(result["up_mbps"]), float(result["down_mbps"]))


def http_get(namespace: str, url: str, timeout: float = 5.0) -> bytes | None:
    """The body of ``url`` fetched from inside ``namespace``; None when it does not answer 200."""
    try:
        done = subprocess.run(
            exec_in(namespace, probe_command("get", url, "--timeout", str(timeout))),
            capture_output=True, timeout=timeout + 10,
        )
    except subprocess.TimeoutExpired:
        return None
    return done.stdout if done.returncode == 0 else None


if __name__ == "__main__":
    sys.exit(main())
