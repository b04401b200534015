"""``shadowtutor demo`` ended by a signal (a timeout, ``docker stop``, a CI runner, a closed terminal) leaves
no server or edge process behind: SIGTERM and SIGHUP stop its children like Ctrl-C, and after a SIGKILL the
kernel ends them (the orphan guard). Real processes; Linux only (/proc, PR_SET_PDEATHSIG)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from shadowtutor_lab.demo.orphan_guard import guarded
from shadowtutor_lab.demo.processes import exit_on_signals
from tests.support.processes import ManagedProcess, shadowtutor_command, start_process

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(not sys.platform.startswith("linux"), reason="needs /proc and PR_SET_PDEATHSIG"),
]


def children(pid: int) -> set[int]:
    found: set[int] = set()
    for task in Path(f"/proc/{pid}/task").glob("*"):
        text = (task / "children").read_text() if (task / "children").exists() else ""
        found.update(int(child) for child in text.split())
    return found


def running(pid: int) -> bool:
    """Alive and not a zombie (a container's init may be slow to reap an orphan that has exited)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


def wait_for(predicate, timeout: float, what: str, demo: ManagedProcess) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, f"{what}; {demo.describe()}"
        time.sleep(0.1)


@pytest.fixture(scope="module")
def scene_cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("demo-scene-cache")


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGKILL])
def test_a_killed_demo_leaves_no_child_behind(tmp_path: Path, scene_cache: Path, signum: int) -> None:
    out = tmp_path / "demo"
    demo = start_process(
        shadowtutor_command("demo", "--out", str(out), "--frames", "160", "--size", "128x72",
                            "--cache-dir", str(scene_cache)),
        name="demo", log_dir=tmp_path,
    )
    with demo:
        # the edge starts once the server is ready: then both children run
        wait_for(lambda: (out / "logs" / "edge-distill.log").exists() and len(children(demo.pid)) == 2, 120,
                 "the demo's server and edge did not start", demo)
        pids = children(demo.pid)
        assert all(running(pid) for pid in pids)
        demo.popen.send_signal(signum)
        assert demo.wait(40) == (-signal.SIGKILL if signum == signal.SIGKILL else 128 + signum), demo.describe()
        wait_for(lambda: not any(running(pid) for pid in pids), 30, f"children {pids} outlived the demo", demo)
    if signum == signal.SIGTERM:
        assert "SIGTERM: stopping the child processes" in demo.logs()


def test_the_guard_ends_a_child_whose_parent_is_killed(tmp_path: Path) -> None:
    """A parent (a shell) SIGKILLed while its guarded child sleeps: the kernel ends the child."""
    script = f"{' '.join(guarded(0, ['sleep', '60']))} & echo $!; wait"  # parent pid is filled in below
    parent = subprocess.Popen(["bash", "-c", script.replace(" 0 -- ", " $$ -- ", 1)], stdout=subprocess.PIPE,
                              text=True)
    child = int(parent.stdout.readline())
    time.sleep(0.5)  # the guard has made its request and exec'd sleep
    assert running(child)
    parent.kill()
    parent.wait(5)
    deadline = time.monotonic() + 10
    while running(child):
        assert time.monotonic() < deadline, "the guarded child outlived its killed parent"
        time.sleep(0.05)


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGHUP])
def test_sigterm_and_sighup_leave_like_ctrl_c(signum: int) -> None:
    before = signal.getsignal(signum)
    with pytest.raises(SystemExit) as leaving, exit_on_signals("test"):
        os.kill(os.getpid(), signum)
        time.sleep(5)  # interrupted by the handler
    assert leaving.value.code == 128 + signum
    assert signal.getsignal(signum) is before  # restored after the block
