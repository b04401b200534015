"""Two Linux network namespaces joined by a veth pair: the link of ``shadowtutor bench network``.

The server side holds ``10.201.0.1/30`` and the edge side ``10.201.0.2/30``; the veth pair is
created inside the namespaces, so neither the interfaces nor the addresses ever exist in the
host's own namespace. Namespaces are named ``<prefix><pid>-server`` / ``-edge`` (default prefix
``stbench-``): one left behind by a run that was killed (its pid gone) is found and removed by
:func:`remove_stale`. :class:`NamespaceLink` removes its namespaces when closed, at interpreter
exit, and (inside :func:`signals_raise_exit`) when the process gets SIGTERM or SIGHUP.
"""

from __future__ import annotations

import atexit
import contextlib
import json
import os
import shlex
import shutil
import signal
import subprocess
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from types import FrameType, TracebackType

PREFIX = "stbench-"
SERVER_ADDR = "10.201.0.1"
EDGE_ADDR = "10.201.0.2"
PREFIX_LEN = 30
SERVER_IF = "st-server"
EDGE_IF = "st-edge"
COMMAND_TIMEOUT = 30.0


class NetnsError(RuntimeError):
    """The machine cannot make the link (no root, no iproute2) or an ``ip``/``tc`` command failed."""


def check_requirements() -> None:
    """Raise :class:`NetnsError` saying what is missing: root, ``ip`` or ``tc``."""
    if os.geteuid() != 0:
        raise NetnsError(
            "the network benchmark needs root (CAP_NET_ADMIN) to create network namespaces and shape "
            "them with tc; run it as root (e.g. `sudo .venv/bin/shadowtutor bench network ...`)"
        )
    missing = [tool for tool in ("ip", "tc") if shutil.which(tool) is None]
    if missing:
        raise NetnsError(
            f"the network benchmark needs {' and '.join(missing)} from iproute2 "
            "(Debian/Ubuntu: apt-get install iproute2)"
        )


def run_command(args: Sequence[str], check: bool = True) -> subprocess.CompletedProcess[str]:
    """Run an ``ip``/``tc`` command; a failure (with ``check``) is a :class:`NetnsError` with its stderr."""
    try:
        done = subprocess.run(list(args), capture_output=True, text=True, timeout=COMMAND_TIMEOUT)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise NetnsError(f"`{shlex.join(args)}` could not run: {exc}") from exc
    if check and done.returncode != 0:
        raise NetnsError(f"`{shlex.join(args)}` failed ({done.returncode}): {done.stderr.strip()}")
    return done


def list_namespaces() -> list[str]:
    """Names of the named network namespaces (``ip netns list``)."""
    out = run_command(["ip", "netns", "list"]).stdout
    return [line.split()[0] for line in out.splitlines() if line.strip()]


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def owner_pid(name: str, prefix: str = PREFIX) -> int | None:
    """The pid in ``<prefix><pid>-<role>``, or None for a name of another shape."""
    if not name.startswith(prefix):
        return None
    head = name[len(prefix):].split("-", 1)[0]
    return int(head) if head.isdigit() else None


def delete_namespace(name: str) -> None:
    """Kill what still runs inside ``name`` (only this harness starts processes there), then delete it."""
    pids = run_command(["ip", "netns", "pids", name], check=False).stdout.split()
    for pid in pids:
        with contextlib.suppress(ProcessLookupError, ValueError):
            os.kill(int(pid), signal.SIGKILL)
    run_command(["ip", "netns", "del", name], check=False)
    if name in list_namespaces():
        raise NetnsError(f"network namespace {name} could not be deleted")


def remove_stale(prefix: str = PREFIX) -> list[str]:
    """Delete this harness's namespaces whose owning process is gone; returns their names."""
    stale = [
        name for name in list_namespaces()
        if (pid := owner_pid(name, prefix)) is not None and not _pid_alive(pid)
    ]
    for name in stale:
        delete_namespace(name)
    return stale


def exec_in(namespace: str, args: Sequence[str]) -> list[str]:
    """``args`` run inside ``namespace`` (``ip netns exec`` execs it: the pid is the command's own)."""
    return ["ip", "netns", "exec", namespace, *args]


@dataclass(frozen=True)
class Side:
    namespace: str
    interface: str
    address: str


class NamespaceLink:
    """The two namespaces and their veth pair; a context manager that deletes them on exit."""

    def __init__(self, prefix: str = PREFIX) -> None:
        token = f"{prefix}{os.getpid()}"
        self.server = Side(f"{token}-server", SERVER_IF, SERVER_ADDR)
        self.edge = Side(f"{token}-edge", EDGE_IF, EDGE_ADDR)
        self._closed = True

    @property
    def sides(self) -> tuple[Side, Side]:
        return (self.server, self.edge)

    def open(self) -> NamespaceLink:
        """Create both namespaces, the veth pair between them, addresses and loopbacks."""
        for side in self.sides:  # a pid reused from a crashed run: its leftovers go first
            if side.namespace in list_namespaces():
                delete_namespace(side.namespace)
        self._closed = False
        atexit.register(self.close)
        try:
            for side in self.sides:
                run_command(["ip", "netns", "add", side.namespace])
            run_command([
                "ip", "link", "add", self.server.interface, "netns", self.server.namespace, "type", "veth",
                "peer", "name", self.edge.interface, "netns", self.edge.namespace,
            ])
            for side in self.sides:
                ns = ["ip", "-n", side.namespace]
                run_command([*ns, "addr", "add", f"{side.address}/{PREFIX_LEN}", "dev", side.interface])
                run_command([*ns, "link", "set", side.interface, "up"])
                run_command([*ns, "link", "set", "lo", "up"])
        except BaseException:
            self.close()
            raise
        return self

    def close(self) -> None:
        """Delete both namespaces (and with them the veth pair and anything still running there)."""
        if self._closed:
            return
        self._closed = True
        atexit.unregister(self.close)
        errors = []
        for side in self.sides:
            if side.namespace in list_namespaces():
                try:
                    delete_namespace(side.namespace)
                except NetnsError as exc:
                    errors.append(str(exc))
        if errors:
            raise NetnsError("; ".join(errors))

    def byte_counters(self, side: Side) -> tuple[int, int]:
        """(transmitted, received) bytes of ``side``'s veth end: whole frames, TCP/IP headers included."""
        out = run_command(["ip", "-n", side.namespace, "-s", "-j", "link", "show", side.interface]).stdout
        stats = json.loads(out)[0]["stats64"]
        return int(stats["tx"]["bytes"]), int(stats["rx"]["bytes"])

    def __enter__(self) -> NamespaceLink:
        return self.open()

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()


@contextlib.contextmanager
def signals_raise_exit() -> Iterator[None]:
    """While inside, SIGTERM and SIGHUP raise ``SystemExit(128 + signum)``, so ``finally`` blocks clean up.

    (SIGINT already raises ``KeyboardInterrupt``.) A signal the process was started ignoring stays
    ignored, as Python leaves SIGINT: ``nohup`` (SIGHUP) and a shell's background jobs (SIGINT) ask
    for that. The previous handlers come back on exit.
    """

    def handler(signum: int, _frame: FrameType | None) -> None:
        raise SystemExit(128 + signum)

    previous = {signum: signal.signal(signum, handler) for signum in (signal.SIGTERM, signal.SIGHUP)
                if signal.getsignal(signum) is not signal.SIG_IGN}
    try:
        yield
    finally:
        for signum, old in previous.items():
            signal.signal(signum, old)
