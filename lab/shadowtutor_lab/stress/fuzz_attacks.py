"""Named attacks on a local server, run by ``shadowtutor fuzz`` after its cases: what an unauthenticated
peer or an unlucky operator can do, each judged against what docs/security.md promises.

- ``huge_header``: one HTTP request whose header grows to ``header_mib`` MiB; the server must close it
  before 1 MiB and keep ``/healthz`` under a second meanwhile.
- ``pre_hello_flood``: ``flood_connections`` connections each declaring a ``flood_mib`` MiB message
  before HELLO, ``flood_rounds`` times; none may be taken whole, and the server's resident memory
  must end within 100 MB of where it started.
- ``idle_lockout``: ``lockout_loops`` threads reopening idle ``/v1/edge`` sockets, from another
  loopback address and then from the edge's own; after ``lockout_hold_s`` of that, an edge with
  its token must get its WELCOME within 5 s.
- ``tokens_file``: the tokens file replaced by non-UTF-8 bytes and by JSON nested 200,000 deep, each
  followed by SIGHUP: the server must live on, still admit the edge and refuse an unknown one with
  ``unauthorized``, export ``tokens_file_valid 0``, and take the good file back on the next SIGHUP.
- ``bearer_flood``, ``tokens_fifo``, ``metrics_leak``, ``forwarded_for``: authentication under bad
  bearer tokens in bulk, a FIFO in place of the tokens file, what ``/metrics`` shows without a token,
  and a spoofed ``X-Forwarded-For`` (:mod:`shadowtutor_lab.stress.fuzz_auth_attacks`).

Scales: ``short`` (CI: seconds) and ``long`` (the committed results).
"""

from __future__ import annotations

import contextlib
import signal
import threading
import time
import urllib.request
from collections.abc import Callable
from dataclasses import replace

from websockets.exceptions import ConnectionClosed, InvalidHandshake
from websockets.sync.client import connect

from shadowtutor.protocol.messages import Error, Hello, Welcome, decode, encode
from shadowtutor_lab.stress import fuzz_auth_attacks as auth_attacks
from shadowtutor_lab.stress.attack_client import IdleFlood, big_message_before_hello, huge_header
from shadowtutor_lab.stress.attack_target import AttackResult, AttackScale, LocalTarget
from shadowtutor_lab.stress.load_memory import read_rss

MIB = 1 << 20
RSS_SLACK = 100 * 10**6  # bytes the server may keep after a flood
WELCOME_WITHIN = 5.0
ATTACKS = ("huge_header", "pre_hello_flood", "idle_lockout", "tokens_file", "bearer_flood", "tokens_fifo",
           "metrics_leak", "forwarded_for")


SCALES = {
    "short": AttackScale(header_mib=20, flood_connections=10, flood_mib=15, flood_rounds=1, lockout_loops=20,
                         lockout_hold_s=0.5, bearer_clients=10, fifo_s=1.0),
    "long": AttackScale(header_mib=100, flood_connections=40, flood_mib=15, flood_rounds=6, lockout_loops=60,
                        lockout_hold_s=5.0, bearer_clients=40, fifo_s=3.0),
}


def run_attacks(target: LocalTarget, scale: AttackScale, send_signal: Callable[[int], None],
                names: tuple[str, ...] = ATTACKS) -> list[AttackResult]:
    """The attacks ``names`` (default: all) in turn; ``send_signal`` signals the server process."""
    steps: list[tuple[str, Callable[[AttackResult], None]]] = [
        ("huge_header", lambda r: _huge_header(target, scale, r)),
        ("pre_hello_flood", lambda r: _pre_hello_flood(target, scale, r)),
        ("idle_lockout", lambda r: _idle_lockout(target, scale, r)),
        ("tokens_file", lambda r: _tokens_file(target, send_signal, r)),
        ("bearer_flood", lambda r: auth_attacks.bearer_flood(target, scale, r, _welcome_within)),
        ("tokens_fifo", lambda r: auth_attacks.tokens_fifo(target, scale, send_signal, r, _welcome_within,
                                                            _first_answer)),
        ("metrics_leak", lambda r: auth_attacks.metrics_leak(target, r)),
        ("forwarded_for", lambda r: auth_attacks.forwarded_for(target, r)),
    ]
    results = []
    for name, step in steps:
        if name not in names:
            continue
        result = AttackResult(name)
        start = time.monotonic()
        try:
            step(result)
        except Exception as exc:  # an attack that cannot even be played is a failure, not a crash of the run
            result.fail(f"{type(exc).__name__}: {exc}")
        result.seconds = round(time.monotonic() - start, 2)
        results.append(result)
    return results


def _healthz_seconds(base_url: str) -> float:
    start = time.monotonic()
    with urllib.request.urlopen(f"{base_url}/healthz", timeout=10) as response:
        response.read()
    return time.monotonic() - start


def _huge_header(target: LocalTarget, scale: AttackScale, result: AttackResult) -> None:
    host, port = target.host_port
    idle = read_rss(target.pid)
    worst: list[float] = []
    stop = threading.Event()

    def probe() -> None:
        while not stop.is_set():
            worst.append(_healthz_seconds(target.base_url))
            time.sleep(0.05)

    prober = threading.Thread(target=probe, daemon=True)
    prober.start()
    try:
        sent = huge_header(host, port, scale.header_mib * MIB)
    finally:
        stop.set()
        prober.join(15)
    worst.append(_healthz_seconds(target.base_url))
    grown = read_rss(target.pid) - idle
    result.figures.update(header_mib=scale.header_mib, sent_before_close_bytes=sent, rss_growth_bytes=grown,
                          slowest_healthz_s=round(max(worst), 3))
    if sent >= MIB * min(16, scale.header_mib):
        result.fail(f"{sent} bytes of one header were read before the server closed")
    if max(worst) > 1.0:
        result.fail(f"/healthz took {max(worst):.2f} s meanwhile")


def _pre_hello_flood(target: LocalTarget, scale: AttackScale, result: AttackResult) -> None:
    host, port = target.host_port
    idle = read_rss(target.pid)
    rounds = []
    for _ in range(scale.flood_rounds):
        sent: list[int] = []

        def flood(sent: list[int] = sent) -> None:
            with contextlib.suppress(OSError):
                sent.append(big_message_before_hello(host, port, scale.flood_mib * MIB))

        threads = [threading.Thread(target=flood, daemon=True) for _ in range(scale.flood_connections)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(120)
        rounds.append({"taken_whole": sum(s >= scale.flood_mib * MIB for s in sent),
                       "max_sent_bytes": max(sent, default=0), "rss_bytes": read_rss(target.pid)})
    time.sleep(1.0)  # the closes settle
    after = read_rss(target.pid)
    result.figures.update(connections=scale.flood_connections, message_mib=scale.flood_mib, rounds=rounds,
                          rss_idle_bytes=idle, rss_after_bytes=after, rss_growth_bytes=after - idle)
    taken = sum(r["taken_whole"] for r in rounds)
    if taken:
        result.fail(f"{taken} messages of {scale.flood_mib} MiB were read whole before HELLO")
    if after - idle > RSS_SLACK:
        result.fail(f"resident memory grew by {(after - idle) / 1e6:.0f} MB and stayed")


def _welcome_within(target: LocalTarget, seconds: float) -> float | None:
    """Seconds until the edge's WELCOME (retrying refused connections), or None past ``seconds``."""
    start = time.monotonic()
    while time.monotonic() - start < seconds:
        with contextlib.suppress(OSError, InvalidHandshake, ConnectionClosed, TimeoutError):
            with connect(target.ws_url, max_size=None, open_timeout=seconds, close_timeout=1) as ws:
                ws.send(encode(target.hello))
                if isinstance(decode(ws.recv(seconds)), Welcome):
                    return time.monotonic() - start
        time.sleep(0.05)
    return None


def _idle_lockout(target: LocalTarget, scale: AttackScale, result: AttackResult) -> None:
    host, port = target.host_port
    for attacker in ("127.0.0.2", "127.0.0.1"):
        flood = IdleFlood(host, port, scale.lockout_loops, source=attacker).start()
        try:
            deadline = time.monotonic() + 10
            while flood.opened < scale.lockout_loops and flood.refused == 0 and time.monotonic() < deadline:
                time.sleep(0.05)
            time.sleep(scale.lockout_hold_s)
            seconds = _welcome_within(target, WELCOME_WITHIN)
        finally:
            flood.stop()
        key = "other_address" if attacker != "127.0.0.1" else "same_address"
        result.figures[key] = {"loops": scale.lockout_loops, "held_s": scale.lockout_hold_s,
                               "upgrades": flood.opened, "refused": flood.refused,
                               "welcome_after_s": None if seconds is None else round(seconds, 3)}
        if seconds is None:
            result.fail(f"no WELCOME within {WELCOME_WITHIN:g} s while {scale.lockout_loops} loops held idle "
                        f"sockets from {attacker}")


def _tokens_file(target: LocalTarget, send_signal: Callable[[int], None], result: AttackResult) -> None:
    good = target.tokens_file.read_bytes()
    unknown = replace(target.hello, edge_id="fuzz-unknown", token="not-a-token")
    try:
        for label, content in (("not_utf8", b"\xff\xfe{}"), ("nested_200000", b"[" * 200_000 + b"]" * 200_000)):
            target.tokens_file.write_bytes(content)
            send_signal(signal.SIGHUP)
            time.sleep(0.5)
            send_signal(signal.SIGHUP)  # a second one too: the watch must still be there
            time.sleep(0.5)
            admitted = _welcome_within(target, WELCOME_WITHIN) is not None
            refusal = _first_answer(target, unknown)
            valid = _metric(target.base_url, "shadowtutor_server_tokens_file_valid")
            result.figures[label] = {"edge_admitted": admitted, "unknown_edge": refusal, "tokens_file_valid": valid}
            if not admitted:
                result.fail(f"{label}: the edge with a valid token was not admitted")
            if refusal != "unauthorized":
                result.fail(f"{label}: an unknown edge got {refusal!r}, not unauthorized")
            if valid != 0.0:
                result.fail(f"{label}: shadowtutor_server_tokens_file_valid is {valid}, not 0")
    finally:
        target.tokens_file.write_bytes(good)
        send_signal(signal.SIGHUP)
    time.sleep(0.5)
    valid = _metric(target.base_url, "shadowtutor_server_tokens_file_valid")
    result.figures["fixed"] = {"tokens_file_valid": valid}
    if valid != 1.0:
        result.fail(f"the good file was not taken back after SIGHUP (tokens_file_valid {valid})")


def _first_answer(target: LocalTarget, hello: Hello) -> str:
    with connect(target.ws_url, max_size=None, open_timeout=10, close_timeout=1) as ws:
        ws.send(encode(hello))
        message = decode(ws.recv(10))
    return message.code if isinstance(message, Error) else type(message).__name__.upper()


def _metric(base_url: str, name: str) -> float | None:
    with urllib.request.urlopen(f"{base_url}/metrics", timeout=10) as response:
        for line in response.read().decode().splitlines():
            if line.startswith(name + " "):
                return float(line.split()[1])
    return None
