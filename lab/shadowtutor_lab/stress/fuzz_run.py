"""A fuzz run: cases one after another against a live server for a budget, with health checks, then
(on a local server, when asked) the named attacks of :mod:`~shadowtutor_lab.stress.fuzz_attacks`.

After every case ``GET /healthz`` must answer; a canary session does key-frame round trips
all along (:mod:`~shadowtutor_lab.stress.fuzz_health`). A local server must also let every
session go at the end (sessions gauge back to 0), exit cleanly on SIGTERM and leave no
traceback or unhandled exception in its log. Everything that breaks a rule is a violation.
"""

from __future__ import annotations

import os
import signal
import ssl
import sys
import tempfile
import time
from collections import Counter, defaultdict
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, TextIO

from shadowtutor.protocol.messages import Hello
from shadowtutor_lab.stress.fuzz_attacks import SCALES, AttackResult, LocalTarget, run_attacks
from shadowtutor_lab.stress.fuzz_cases import CATEGORIES, Target, make_case
from shadowtutor_lab.stress.fuzz_client import run_case
from shadowtutor_lab.stress.fuzz_health import Canary, check_health
from shadowtutor_lab.stress.fuzz_judge import outcome, violations
from shadowtutor_lab.stress.fuzz_server import (
    LOCAL_CANARY_ID,
    LOCAL_EDGE_ID,
    LOCAL_MAX_MESSAGE_BYTES,
    LOG_PROBLEM,
    ServerUnderTest,
    local_server,
    remote_server,
    scene_frames,
    sessions_open,
    synthetic_frames,
)
from shadowtutor_lab.stress.load_run import log_problems

HEALTH_TIMEOUT = 5.0
SETTLE_SECONDS = 15.0  # after the run: how long a local server may take to drop its sessions
MAX_HEALTH_FAILURES = 3  # consecutive: the server is down, the run stops


@dataclass(frozen=True)
class FuzzConfig:
    seconds: float | None = 60.0  # budget in time; None: only ``cases`` bounds the run
    cases: int | None = None  # budget in cases; None: only ``seconds``
    seed: int = 1
    server: str | None = None  # ws(s)/http(s) URL; None: start a local server
    token: str | None = None  # sent in every HELLO (the fuzz cases' edge id is then ``edge_id``)
    edge_id: str | None = None
    canary_token: str | None = None
    canary_edge_id: str | None = None
    ca_file: Path | None = None  # wss:// against a private CA
    max_message_bytes: int | None = None  # the server's limit (local: set by the fuzzer; given: default 16 MiB)
    frame_size: tuple[int, int] = (64, 48)
    timeout: float = 20.0  # per case: an answer or a close must come within it
    canary_interval: float = 2.0
    categories: tuple[str, ...] = tuple(CATEGORIES)
    preset: str = "fixed-people"
    scene_frames: int = 24
    cache_dir: Path | None = None
    log_dir: Path | None = None  # the local server's log; None: a temporary directory
    progress: bool = True
    command: str = ""
    attacks: str = "off"  # named attacks after the cases (shadowtutor_lab.stress.fuzz_attacks): off, short or long

    def __post_init__(self) -> None:
        if self.seconds is None and self.cases is None:
            raise ValueError("give a budget: seconds, cases or both")
        if (self.seconds is not None and self.seconds <= 0) or (self.cases is not None and self.cases <= 0):
            raise ValueError("the budget must be positive")
        if not (self.timeout > 0 and self.canary_interval > 0):
            raise ValueError(f"timeout and canary_interval must be positive: {self.timeout}, {self.canary_interval}")
        unknown = sorted(set(self.categories) - set(CATEGORIES))
        if unknown or not self.categories:
            raise ValueError(f"unknown categories {unknown}; choose from {list(CATEGORIES)}")
        if self.token is not None and self.edge_id is None:
            raise ValueError("a token belongs to an edge id: give edge_id with token")
        if self.canary_token is not None and self.canary_edge_id is None:
            raise ValueError("a canary token belongs to an edge id: give canary_edge_id with canary_token")
        if self.attacks not in ("off", *SCALES):
            raise ValueError(f"attacks must be off or one of {list(SCALES)}, got {self.attacks!r}")
        if self.attacks != "off" and self.server is not None:
            raise ValueError("the attacks need the local server (its process, tokens file and loopback): "
                             "leave out --server or give --attacks off")

    @property
    def canary_enabled(self) -> bool:
        """Without its own credentials under tokens, the canary would be replaced by every case."""
        return self.token is None or self.canary_token is not None


class _Tally:
    """Per-category counts, outcomes and violations."""

    def __init__(self) -> None:
        self.cases: Counter[str] = Counter()
        self.outcomes: dict[str, Counter[str]] = defaultdict(Counter)
        self.variants: dict[str, set[str]] = defaultdict(set)
        self.seconds: Counter[str] = Counter()
        self.violations: list[dict[str, Any]] = []

    def add(self, category: str, variant: str, result: str, seconds: float) -> None:
        self.cases[category] += 1
        self.outcomes[category][result] += 1
        self.variants[category].add(variant)
        self.seconds[category] += seconds

    def violation(self, what: str, **where: Any) -> None:
        self.violations.append({**where, "what": what})

    def categories(self) -> dict[str, dict[str, Any]]:
        counts = Counter(v.get("category") for v in self.violations)
        return {name: {"cases": self.cases[name], "variants": len(self.variants[name]),
                       "outcomes": dict(self.outcomes[name].most_common()), "violations": counts[name],
                       "mean_seconds": round(self.seconds[name] / self.cases[name], 3) if self.cases[name] else None}
                for name in self.cases}


def _ssl_context(config: FuzzConfig) -> ssl.SSLContext | None:
    if config.ca_file is None:
        return None
    return ssl.create_default_context(cafile=str(config.ca_file))


@contextmanager
def _server(config: FuzzConfig, log_dir: Path,
            context: ssl.SSLContext | None) -> Iterator[tuple[ServerUnderTest, Target]]:
    width, height = config.frame_size
    if config.server is not None:
        server = remote_server(config.server, context)
        if not server.readyz.get("ready"):
            raise RuntimeError(f"the server is not ready: {server.readyz}")
        frames = synthetic_frames(width, height, 8, config.seed)
        yield server, _target(config, server, frames, config.max_message_bytes or 16 * 2**20)
        return
    from shadowtutor_lab.scenes.cache import cached_scene

    scene = cached_scene(config.preset, config.scene_frames, config.seed, (width, height), 30.0, config.cache_dir,
                         progress=False)
    with local_server(scene, log_dir) as server:
        yield server, _target(config, server, scene_frames(scene), LOCAL_MAX_MESSAGE_BYTES)


def _target(config: FuzzConfig, server: ServerUnderTest, frames: tuple[Any, ...], max_bytes: int) -> Target:
    """What every case's edge sends; against the local server, as the edge the fuzzer issued a token for."""
    width, height = config.frame_size
    token, edge_id = config.token, config.edge_id
    if server.local:
        token, edge_id = server.tokens[LOCAL_EDGE_ID], LOCAL_EDGE_ID
    return Target(tuple(server.readyz["class_names"]), width, height, frames, max_bytes, token, edge_id)


def run_fuzz(config: FuzzConfig, out: TextIO = sys.stderr) -> dict[str, Any]:
    """Run the cases within the budget; the results (see :mod:`~shadowtutor_lab.stress.fuzz_report`)."""
    from shadowtutor_lab.evaluation.machine import machine_info

    started_at = datetime.now(timezone.utc).isoformat(timespec="seconds")
    context = _ssl_context(config)
    tally = _Tally()
    with tempfile.TemporaryDirectory(prefix="shadowtutor-fuzz-") as tmp:
        with _server(config, config.log_dir or Path(tmp), context) as (server, target):
            start = time.monotonic()
            canary = _canary(config, server, target, context)
            index = _play(config, server, target, tally, context, start, out)
            canary_report = canary.stop() if canary is not None else None
            _after_run(config, server, tally, context)
            attacks = _attacks(config, server, target)
            for attack in attacks:
                for failure in attack.failures:
                    tally.violation(f"attack {attack.name}: {failure}", category=None)
            duration = time.monotonic() - start
        if server.local:  # stopped now: its exit and its whole log
            if server.exit_code() not in (0, -signal.SIGTERM):  # uvicorn re-raises SIGTERM after a clean shutdown
                tally.violation(f"the local server exited with {server.exit_code()} on SIGTERM", category=None)
            for line in log_problems(server.log_path, pattern=LOG_PROBLEM):
                tally.violation(f"server log: {line}", category=None)
    for failure in canary_report.failures if canary_report is not None else []:
        tally.violation(failure, category=None)
    return {
        "command": config.command,
        "started_at": started_at,
        "seconds": round(duration, 1),
        "seed": config.seed,
        "cases": index,
        "config": {**asdict(config), "categories": list(config.categories),
                   **{key: "(set)" for key in ("token", "canary_token") if getattr(config, key) is not None}},
        "machine": {**machine_info(), "load_average_after": list(os.getloadavg())},
        "server": {"url": server.ws_url, "local": server.local, "version": server.version,
                   "readyz": server.readyz, "serve_args": server.serve_args,
                   "max_message_bytes": target.max_message_bytes},
        "canary": None if canary_report is None else asdict(canary_report),
        "categories": tally.categories(),
        "attacks": {"scale": config.attacks, "results": [attack.to_dict() for attack in attacks]},
        "violations": tally.violations,
        "passed": not tally.violations,
    }


def _attacks(config: FuzzConfig, server: ServerUnderTest, target: Target) -> list[AttackResult]:
    """The named attacks on the local server (none when ``config.attacks`` is off)."""
    if config.attacks == "off" or not server.local or server.tokens_file is None:
        return []
    hello = Hello(edge_id=LOCAL_EDGE_ID, class_names=list(target.class_names), frame_width=target.width,
                  frame_height=target.height, token=server.tokens[LOCAL_EDGE_ID], agent="shadowtutor-fuzz")
    local = LocalTarget(server.base_url, server.ws_url, server.process.pid, server.tokens_file, hello)
    return run_attacks(local, SCALES[config.attacks], server.process.signal)


def _canary(config: FuzzConfig, server: ServerUnderTest, target: Target,
            context: ssl.SSLContext | None) -> Canary | None:
    if not config.canary_enabled:
        return None
    token, edge_id = config.canary_token, config.canary_edge_id or f"fuzz-canary-{os.getpid()}"
    if server.local:
        token, edge_id = server.tokens[LOCAL_CANARY_ID], LOCAL_CANARY_ID
    canary_target = Target(target.class_names, target.width, target.height, target.frames,
                           target.max_message_bytes, token)
    canary = Canary(server.ws_url, canary_target, edge_id,
                    interval=config.canary_interval, timeout=config.timeout, ssl_context=context)
    canary.start()
    return canary


def _play(config: FuzzConfig, server: ServerUnderTest, target: Target, tally: _Tally,
          context: ssl.SSLContext | None, start: float, out: TextIO) -> int:
    """The case loop; returns the number of cases run."""
    index, health_failures, last_progress = 0, 0, start
    while (config.cases is None or index < config.cases) and (
            config.seconds is None or time.monotonic() - start < config.seconds):
        case = make_case(config.seed, index, target, config.categories)
        seen = run_case(case, target, server.ws_url, timeout=config.timeout, ssl_context=context)
        result = outcome(seen)
        tally.add(case.category, case.variant, result, seen.seconds)
        where = {"case": index, "category": case.category, "variant": case.variant, "outcome": result}
        for what in violations(case, seen, config.timeout):
            tally.violation(what, **where)
        health = check_health(server.base_url, HEALTH_TIMEOUT, context)
        health_failures = health_failures + 1 if health else 0
        if health:
            tally.violation(f"server down after the case: {health}", **where)
        index += 1
        if health_failures >= MAX_HEALTH_FAILURES:
            print(f"fuzz: the server is down ({health}); stopping", file=out)
            break
        if config.progress and time.monotonic() - last_progress >= 10:
            last_progress = time.monotonic()
            print(f"fuzz: {index} cases in {last_progress - start:.0f} s, {len(tally.violations)} violations",
                  file=out, flush=True)
    return index


def _after_run(config: FuzzConfig, server: ServerUnderTest, tally: _Tally, context: ssl.SSLContext | None) -> None:
    """A last health check; a local server must be down to zero sessions soon after the last one closed."""
    health = check_health(server.base_url, HEALTH_TIMEOUT, context)
    if health:
        tally.violation(f"server down at the end: {health}", category=None)
    if not server.local:
        return
    deadline = time.monotonic() + SETTLE_SECONDS
    while (open_now := sessions_open(server.base_url, context)) not in (0.0, None) and time.monotonic() < deadline:
        time.sleep(0.5)
    if open_now != 0.0:
        tally.violation(f"{open_now} sessions still open {SETTLE_SECONDS:g} s after the last case", category=None)
