"""``shadowtutor bench load``: N simulated cameras against one server for M minutes.

The server is either given (``--server URL``) or started here on loopback with the scene's
labels as the teacher (instant), so that the server's work is distillation and the protocol;
``--server-args "--teacher NAME ..."`` gives the local server another teacher instead.
The cameras share one generated scene; each starts at another frame and steps through it.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import re
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

from edge_agent.handshake import SessionTerms
from shadowtutor_lab.stress.load_edge import SimulatedCamera
from shadowtutor_lab.stress.load_memory import MemorySampler

LOG_PROBLEM = re.compile(r"\b(ERROR|CRITICAL)\b|Traceback \(most recent call last\)")
SETTLE_SECONDS = 10.0  # after the cameras close: how long to wait for the server's sessions gauge to reach 0


class LoadError(RuntimeError):
    """The load run could not start (server not ready, refused cameras, bad arguments)."""


@dataclass(frozen=True)
class LoadConfig:
    edges: int
    minutes: float
    rate: float  # key frames per second per edge
    size: tuple[int, int] = (320, 180)
    mode: str = "distill"
    server: str | None = None  # ws(s)/http(s) URL; None: start a local server
    server_pid: int | None = None  # a given server's pid on this machine, for /proc RSS
    server_args: tuple[str, ...] = ()  # extra `shadowtutor serve` flags for the local server
    preset: str = "moving-street"  # a moving camera keeps distillation busy (a fixed one is soon learnt)
    scene_frames: int = 240
    seed: int = 1
    stride: int = 8  # frames between one camera's consecutive key frames (the paper's MIN_STRIDE)
    answer_timeout: float = 60.0
    ready_timeout: float = 180.0
    interval: float = 1.0  # memory sampling
    idle_seconds: float = 3.0  # memory samples before the cameras connect
    max_growth_mib: float | None = None
    cache_dir: Path | None = None
    log_dir: Path | None = None  # the local server's log; None: a temporary directory
    progress: bool = True
    command: str = ""
    edge_prefix: str = "load"
    notes: tuple[str, ...] = ()  # for the report

    def __post_init__(self) -> None:
        for name in ("edges", "minutes", "rate", "scene_frames", "stride", "answer_timeout", "interval"):
            if getattr(self, name) <= 0:
                raise ValueError(f"{name} must be positive, got {getattr(self, name)}")
        if self.mode not in ("distill", "naive"):
            raise ValueError(f"mode must be distill or naive, got {self.mode!r}")
        if self.server is None and self.server_pid is not None:
            raise ValueError("--server-pid only goes with --server (a local server's pid is known)")


@dataclass
class ServerHandle:
    """The server under load: its URLs, what it says about itself, and its process when local."""

    ws_url: str
    metrics_url: str
    readyz: dict[str, Any]
    pid: int | None
    settings: dict[str, Any] | None = None  # the local server's full settings
    serve_args: list[str] = field(default_factory=list)
    log_path: Path | None = None


def http_base(url: str) -> str:
    """``ws(s)://HOST:PORT/...`` or ``http(s)://...`` -> ``http(s)://HOST:PORT``."""
    parts = urlsplit(url)
    scheme = {"ws": "http", "wss": "https"}.get(parts.scheme, parts.scheme)
    if scheme not in ("http", "https") or not parts.hostname:
        raise ValueError(f"server must be a ws://, wss://, http:// or https:// URL with a host, got {url!r}")
    return urlunsplit((scheme, parts.netloc, "", "", ""))


def _get_json(url: str, timeout: float = 5.0) -> dict[str, Any]:
    try:
        with urllib.request.urlopen(url, timeout=timeout) as response:
            return json.loads(response.read())
    except urllib.error.HTTPError as exc:
        raise LoadError(f"{url}: HTTP {exc.code} {exc.read()[:200]!r}") from None
    except (urllib.error.URLError, OSError, ValueError) as exc:
        raise LoadError(f"{url}: {exc}") from None


def local_serve_args(config: LoadConfig, scene_dir: Path, port: int) -> list[str]:
    """The ``shadowtutor serve`` arguments of the local server (extra ``server_args`` last, so they win).

    The teacher is the scene's labels (``--teacher labels --labels-dir SCENE``) unless ``server_args`` names
    another ``--teacher``: then no ``--labels-dir`` is passed (the other backends refuse it), and that
    teacher's own flags (``--weights-path``, ``--onnx-model``...) come from ``server_args``. Raises
    :class:`LoadError` when ``server_args`` are not ``shadowtutor serve`` flags.
    """
    teacher = _given_flags(config.server_args).get("teacher")
    labels = ["--teacher", "labels", "--labels-dir", str(scene_dir)] if teacher in (None, "labels") else []
    return ["serve", "--host", "127.0.0.1", "--port", str(port), "--device", "cpu", "--log-level", "warning",
            *labels, "--max-sessions", str(max(16, config.edges)), *config.server_args]


def _parse_serve(flags: Sequence[str]) -> argparse.Namespace:
    """``shadowtutor serve``'s ``flags`` parsed (what follows ``serve``), or :class:`LoadError` naming the bad one."""
    from services.cli import DEST_PREFIX
    from services.server.settings import ServerSettings
    from shadowtutor.config.settings_flags import add_settings_flags

    parser = argparse.ArgumentParser(prog="shadowtutor serve", exit_on_error=False, add_help=False)
    add_settings_flags(parser, ServerSettings, DEST_PREFIX)
    try:
        args, unknown = parser.parse_known_args(list(flags))
    except argparse.ArgumentError as exc:
        raise LoadError(f"bad server arguments {' '.join(flags)!r}: {exc}") from None
    if unknown:
        raise LoadError(f"bad server arguments {' '.join(flags)!r}: not 'shadowtutor serve' flags: "
                        f"{' '.join(unknown)}")
    return args


def _given_flags(server_args: Sequence[str]) -> dict[str, Any]:
    """The settings that the extra ``serve`` flags ``server_args`` give, by field name."""
    from services.cli import DEST_PREFIX
    from shadowtutor.config.settings_flags import given_flags

    return given_flags(_parse_serve(server_args), DEST_PREFIX)


def serve_settings(serve_args: Sequence[str]) -> dict[str, Any]:
    """The settings ``shadowtutor serve ARGS`` runs with (flags over ``SHADOWTUTOR_*``), checked before starting."""
    from services.cli import settings_from_args
    from shadowtutor.config.settings_flags import flat_values

    settings = flat_values(settings_from_args(_parse_serve(serve_args[1:])))
    for secret in ("tokens",):  # never written to a report
        settings[secret] = None if settings.get(secret) is None else "(set)"
    return settings


@contextmanager
def server_under_load(config: LoadConfig, scene_dir: Path, log_dir: Path) -> Iterator[ServerHandle]:
    """The given server, or a local one started for the run and stopped after it."""
    from shadowtutor_lab.demo.processes import (
        ProcessFailed,
        free_port,
        half_cores_env,
        shadowtutor_command,
        start_process,
        wait_http_ok,
    )

    if config.server is not None:
        from edge_agent.settings import normalise_server_url

        base = http_base(config.server)
        yield ServerHandle(normalise_server_url(config.server), f"{base}/metrics",
                           _get_json(f"{base}/readyz"), config.server_pid)
        return
    port = free_port()
    serve_args = local_serve_args(config, scene_dir, port)
    settings = serve_settings(serve_args)
    base = f"http://127.0.0.1:{port}"
    with start_process(shadowtutor_command(*serve_args), name="server", log_dir=log_dir,
                       env=half_cores_env()) as process:
        try:
            readyz = json.loads(wait_http_ok(f"{base}/readyz", timeout=config.ready_timeout, process=process))
        except ProcessFailed as exc:
            raise LoadError(str(exc)) from None
        yield ServerHandle(f"ws://127.0.0.1:{port}/v1/edge", f"{base}/metrics", readyz, process.pid, settings,
                           serve_args, process.log_path)


def log_problems(path: Path | None, limit: int = 20, pattern: re.Pattern[str] = LOG_PROBLEM) -> list[str]:
    """Lines of the server's log that ``pattern`` finds (default: at ERROR or CRITICAL, and tracebacks), the
    first ``limit``."""
    if path is None or not path.exists():
        return []
    lines = [line.strip() for line in path.read_text(errors="replace").splitlines() if pattern.search(line)]
    return lines[:limit] + ([f"... and {len(lines) - limit} more"] if len(lines) > limit else [])


def load_frames(config: LoadConfig) -> tuple[Path, list[Any]]:
    from shadowtutor.scene_store import Scene
    from shadowtutor_lab.scenes.cache import cached_scene

    scene_dir = cached_scene(config.preset, config.scene_frames, config.seed, config.size, 30.0, config.cache_dir,
                             progress=config.progress)
    return scene_dir, list(Scene.open(scene_dir).frames())


def _progress(config: LoadConfig, cameras: Sequence[SimulatedCamera], sampler: MemorySampler, start: float,
              duration: float, threads: Sequence[threading.Thread]) -> None:
    """A bar over the run's seconds with key frames sent/answered, server RSS and sessions; returns at the end."""
    from shadowtutor.progress import progress_bar

    with progress_bar(total=round(duration), unit="s", desc="load", disable=not config.progress) as bar:
        while any(t.is_alive() for t in threads):
            time.sleep(1.0)
            bar.update(min(round(duration), max(0, round(time.monotonic() - start))) - bar.n)
            records = [r for c in cameras for r in c.result.records]
            sample = sampler.latest
            rss = None if sample is None else (sample.rss_bytes or sample.metrics_rss_bytes)
            bar.set_postfix(sent=len(records), answered=sum(r.turnaround is not None for r in records),
                            rss_mib="-" if rss is None else f"{rss / 2**20:.0f}",
                            sessions="-" if sample is None else sample.sessions, refresh=False)


def run_load(config: LoadConfig) -> dict[str, Any]:
    """Run the load: :func:`~shadowtutor_lab.stress.load_results.summarise`'s results plus the run's facts."""
    import tempfile

    from shadowtutor_lab.evaluation.machine import machine_info
    from shadowtutor_lab.stress.load_results import summarise

    started_at = datetime.now(timezone.utc).isoformat(timespec="seconds")
    load_before = os.getloadavg()
    scene_dir, frames = load_frames(config)
    with tempfile.TemporaryDirectory(prefix="shadowtutor-load-") as tmp, \
            server_under_load(config, scene_dir, config.log_dir or Path(tmp)) as server:
        class_names = server.readyz.get("class_names")
        if not server.readyz.get("ready") or not class_names:
            raise LoadError(f"the server is not ready: {server.readyz}")
        sampler = MemorySampler(server.pid, server.metrics_url, config.interval)
        sampler.start()
        cameras = [
            SimulatedCamera(i, server.ws_url, f"{config.edge_prefix}-{i:03d}", class_names, frames, config.mode,
                            config.stride, config.answer_timeout)
            for i in range(config.edges)
        ]
        try:
            time.sleep(config.idle_seconds)
            connect_at = time.monotonic()
            for camera in cameras:
                camera.start()
            for camera in cameras:
                camera.wait_welcome(config.ready_timeout)
        except Exception:
            for camera in cameras:
                camera.close()
            sampler.stop()
            raise
        start = time.monotonic()  # the load's time zero: every camera is welcomed
        duration = config.minutes * 60.0
        stop = threading.Event()
        threads = [
            threading.Thread(target=camera.run, name=f"camera-{camera.index}", daemon=True,
                             args=(start, start + duration, config.rate, camera.index / config.edges / config.rate,
                                   stop))
            for camera in cameras
        ]
        for thread in threads:
            thread.start()
        try:
            _progress(config, cameras, sampler, start, duration, threads)
        finally:
            stop.set()
            for thread in threads:
                thread.join()
        _settle(sampler, time.monotonic() + SETTLE_SECONDS)
        sampler.stop()
        problems_in_log = log_problems(server.log_path)
    samples = [dataclasses.replace(s, t=round(s.t - start, 3)) for s in sampler.samples]
    results = summarise([c.result for c in cameras], samples, duration, connect_at - start, problems_in_log,
                        config.max_growth_mib)
    return {
        "command": config.command,
        "started_at": started_at,
        "config": asdict(config),
        "scene": {"preset": config.preset, "frames": len(frames), "seed": config.seed, "size": list(config.size)},
        "server": {"url": server.ws_url, "local": config.server is None, "readyz": server.readyz,
                   "settings": server.settings, "serve_args": server.serve_args[1:],
                   "session_terms": _terms(cameras[0].session), "sampling_failures": sampler.failures},
        "machine": {**machine_info(), "load_average_before": list(load_before),
                    "load_average_after": list(os.getloadavg())},
        **results,
    }


def _settle(sampler: MemorySampler, deadline: float) -> None:
    """Let the sampler watch the server drop the closed sessions (gauge 0), for at most until ``deadline``."""
    time.sleep(sampler.interval)
    while time.monotonic() < deadline:
        sample = sampler.latest
        if sample is None or not sample.sessions:
            break
        time.sleep(sampler.interval)
    time.sleep(sampler.interval)  # one more sample after the sessions are gone


def _terms(info: SessionTerms | None) -> dict[str, Any] | None:
    """What the server agreed with the first camera: codecs and the algorithm's parameters."""
    if info is None:
        return None
    return {"frame_codec": info.frame_codec, "weight_codec": info.weight_codec, "delta_codec": info.delta_codec,
            "params": info.params.to_dict()}
