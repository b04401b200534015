"""Child processes of the demo and the end-to-end tests: a free loopback port, start, wait until ready, stop, logs.

Typical use::

    port = free_port()
    with start_process(shadowtutor_command("serve", "--port", str(port), ...), name="server",
                       log_dir=tmp_path) as server:
        wait_http_ok(f"http://127.0.0.1:{port}/readyz", process=server)
        ...
    assert server.returncode == 0, server.logs()

Output (stdout and stderr together) goes to ``<log_dir>/<name>.log`` rather than a pipe, so
a chatty process never blocks on a full pipe and the log survives for the failure message.
``wait_http_ok`` and ``follow_agent`` raise :class:`ProcessFailed`.

No child outlives its parent: each runs under :mod:`shadowtutor_lab.demo.orphan_guard` (the kernel
sends it SIGTERM when the parent dies, SIGKILL included), and :func:`exit_on_signals` turns
SIGTERM and SIGHUP into the same orderly exit as Ctrl-C, which stops the children.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from types import FrameType, TracebackType

from shadowtutor.progress import progress_bar
from shadowtutor_lab.demo.orphan_guard import guarded

LOOPBACK = "127.0.0.1"


class ProcessFailed(RuntimeError):
    """A child process died or never became ready; the message carries its log's tail."""


def free_port(host: str = LOOPBACK) -> int:
    """A TCP port that nothing listens on right now (the OS picks it)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        return int(sock.getsockname()[1])


def shadowtutor_command(*args: str) -> list[str]:
    """``shadowtutor ARGS`` run by this interpreter (no dependence on the console script being on PATH)."""
    return [sys.executable, "-m", "shadowtutor", *args]


class ManagedProcess:
    """A started child process with its log file; a context manager that stops it on exit."""

    def __init__(self, name: str, popen: subprocess.Popen[bytes], log_path: Path) -> None:
        self.name = name
        self.popen = popen
        self.log_path = log_path

    @property
    def pid(self) -> int:
        return self.popen.pid

    @property
    def returncode(self) -> int | None:
        return self.popen.poll()

    def alive(self) -> bool:
        return self.popen.poll() is None

    def logs(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""

    def signal(self, signum: int) -> None:
        if self.alive():
            self.popen.send_signal(signum)

    def wait(self, timeout: float) -> int:
        """The exit code; raises ``subprocess.TimeoutExpired`` if it is still running after ``timeout``."""
        return self.popen.wait(timeout)

    def stop(self, timeout: float = 20.0) -> int:
        """SIGTERM, then SIGKILL if it has not exited within ``timeout`` seconds; returns the exit code."""
        if self.alive():
            self.popen.send_signal(signal.SIGTERM)
            try:
                return self.popen.wait(timeout)
            except subprocess.TimeoutExpired:
                self.popen.kill()
        return self.popen.wait(timeout)

    def describe(self) -> str:
        """Name, state and the log's tail, for assertion messages."""
        state = "running" if self.alive() else f"exited with {self.returncode}"
        tail = "\n".join(self.logs().splitlines()[-40:])
        return f"process {self.name!r} (pid {self.pid}) {state}; log {self.log_path}:\n{tail}"

    def __enter__(self) -> ManagedProcess:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()


def start_process(
    args: Sequence[str],
    *,
    name: str,
    log_dir: Path,
    env: Mapping[str, str] | None = None,
    cwd: Path | None = None,
) -> ManagedProcess:
    """Start ``args`` with this environment plus ``env``, its output into ``log_dir/name.log``.

    The child gets its own session, so a Ctrl-C in the terminal running the tests does not
    reach it; :meth:`ManagedProcess.stop` (or leaving the ``with`` block) ends it, and so does
    the end of the thread that called this (on Linux: the parent's death, see orphan_guard).
    """
    log_dir.mkdir(parents=True, exist_ok=True)
    log_path = log_dir / f"{name}.log"
    full_env = {**os.environ, "PYTHONUNBUFFERED": "1", **(env or {})}
    with open(log_path, "wb") as log:
        popen = subprocess.Popen(
            guarded(os.getpid(), list(args)), stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
            env=full_env, cwd=cwd, start_new_session=True,
        )
    return ManagedProcess(name, popen, log_path)


@contextlib.contextmanager
def exit_on_signals(name: str, signums: Sequence[int] = (signal.SIGTERM, signal.SIGHUP)) -> Iterator[None]:
    """Within the block, SIGTERM and SIGHUP end the program like Ctrl-C: ``SystemExit(128 + signum)`` is
    raised in the main thread, so ``finally`` blocks and ``with`` blocks stop the children. A second
    signal kills at once (the default action); the children then end through the orphan guard."""

    def leave(signum: int, _frame: FrameType | None) -> None:
        for other in signums:
            signal.signal(other, signal.SIG_DFL)
        print(f"{name}: {signal.Signals(signum).name}: stopping the child processes", file=sys.stderr)
        raise SystemExit(128 + signum)

    previous = {signum: signal.signal(signum, leave) for signum in signums}
    try:
        yield
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)


def wait_http_ok(url: str, *, timeout: float = 60.0, process: ManagedProcess | None = None) -> bytes:
    """Poll ``url`` until it answers 200 and return the body; fail early (with the log) if ``process`` dies."""
    deadline = time.monotonic() + timeout
    last = "no answer yet"
    while time.monotonic() < deadline:
        if process is not None and not process.alive():
            raise ProcessFailed(f"{url} never became ready: {process.describe()}")
        try:
            with urllib.request.urlopen(url, timeout=2) as response:
                return response.read()
        except urllib.error.HTTPError as exc:
            last = f"HTTP {exc.code}: {exc.read()[:200]!r}"
        except (urllib.error.URLError, ConnectionError, TimeoutError) as exc:
            last = str(exc)
        time.sleep(0.1)
    where = f"\n{process.describe()}" if process is not None else ""
    raise ProcessFailed(f"{url} not ready after {timeout:.0f} s (last: {last}){where}")


def half_cores_env() -> dict[str, str]:
    """Server and agent share one machine: half the cores each, no thread oversubscription."""
    return {"OMP_NUM_THREADS": str(max(1, (os.cpu_count() or 2) // 2))}


def follow_agent(agent: ManagedProcess, labels_dir: Path, total: int, label: str, timeout: float) -> None:
    """Show a progress bar from the label maps an edge agent writes until it exits; fail if it fails."""
    deadline = time.monotonic() + timeout
    with progress_bar(total=total, desc=label, unit="frame") as bar:
        while agent.alive():
            if time.monotonic() > deadline:
                agent.stop()
                raise ProcessFailed(f"{label} did not finish within {timeout:.0f} s: {agent.describe()}")
            done = sum(1 for _ in labels_dir.glob("*.png")) if labels_dir.is_dir() else 0
            bar.update(done - bar.n)
            time.sleep(0.3)
        bar.update(total - bar.n)
    if agent.returncode != 0:
        raise ProcessFailed(f"{label} failed: {agent.describe()}")
