"""Stopping one Ray cluster on this machine and no other (``serve --ray ADDRESS --stop``).

``ray stop`` ends every Ray process of the machine, whichever cluster it belongs to. Every process
a Ray node starts (the GCS, the raylet, the dashboard and runtime-environment agents, the log
monitor) names its cluster's session directory (``<temp dir>/session_<time>_<pid>``) on its command
line, and the workers (the Serve replicas among them) are the raylet's children. So
:func:`stop_cluster` removes the Serve application, reads the session directory from the cluster,
and ends the processes of this machine that name it, with their descendants: SIGTERM first,
SIGKILL for those still running after a grace period. The Ray processes of the cluster's other
machines are stopped on each machine the same way.
"""

from __future__ import annotations

import logging
import os
import re
import signal
import time
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

log = logging.getLogger(__name__)
PROC = Path("/proc")


@dataclass(frozen=True)
class Stopped:
    """What :func:`stop_cluster` ended: the cluster's session directory, the processes that ended
    on SIGTERM and those it had to kill."""

    session_dir: str
    terminated: int
    killed: int


def _command_line(pid: int) -> str:
    try:
        return (
            (PROC / str(pid) / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        )
    except OSError:
        return ""


def _parent(pid: int) -> int | None:
    try:
        stat = (PROC / str(pid) / "stat").read_text()
    except OSError:
        return None
    # the command name (in parentheses) may hold spaces: the fields after its last ")"
    return int(stat.rpartition(")")[2].split()[1])


def _pids() -> list[int]:
    return [int(entry.name) for entry in PROC.iterdir() if entry.name.isdigit()]


def processes_of(session_dir: str) -> set[int]:
    """This machine's processes whose command line names ``session_dir`` (or a path in it), and
    their descendants; never this process."""
    pids = _pids()
    names = re.compile(re.escape(session_dir.rstrip("/")) + r"(/|\s|$)")
    found = {pid for pid in pids if names.search(_command_line(pid))}
    parents = {pid: _parent(pid) for pid in pids}
    grew = True
    while grew:
        children = {pid for pid, parent in parents.items() if parent in found} - found
        found |= children
        grew = bool(children)
    found.discard(os.getpid())
    return found


def _alive(pids: Iterable[int]) -> set[int]:
    alive = set()
    for pid in pids:
        try:
            state = (PROC / str(pid) / "stat").read_text().rpartition(")")[2].split()[0]
        except OSError:
            continue
        # a zombie has ended; its parent has yet to reap it
        if state != "Z":
            alive.add(pid)
    return alive


def end_processes(pids: set[int], grace: float) -> tuple[int, int]:
    """SIGTERM ``pids``, then SIGKILL those still running after ``grace`` seconds; (how many ended
    on SIGTERM, how many were killed)."""
    for pid in pids:
        try:
            os.kill(pid, signal.SIGTERM)
        except ProcessLookupError:
            pass
    deadline = time.monotonic() + grace
    left = _alive(pids)
    while left and time.monotonic() < deadline:
        time.sleep(0.1)
        left = _alive(left)
    for pid in left:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    return len(pids) - len(left), len(left)


def stop_cluster(address: str, grace: float = 10.0) -> Stopped:
    """Remove the Serve application (and Serve) from the Ray cluster at ``address``, then end this
    machine's processes of that cluster (:func:`processes_of` its session directory); ClusterError
    (one line) when the cluster cannot be joined."""
    import ray
    from ray import serve

    from services.ray_serve.app import join

    join(address)
    # the cluster's session directory, which the joined driver reads from the GCS
    node = ray._private.worker._global_node
    assert node is not None, "set by join()"
    session_dir = node.get_session_dir_path()
    serve.shutdown()
    ray.shutdown()
    pids = processes_of(session_dir)
    log.info(
        "stopping %d process(es) of the Ray cluster at %s (%s)", len(pids), address, session_dir
    )
    terminated, killed = end_processes(pids, grace)
    return Stopped(session_dir, terminated, killed)
