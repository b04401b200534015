"""The benchmark's namespaces: requirements, creation, and that nothing outlives a run, however it ends."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time

import pytest

from shadowtutor_lab.netbench import netns as netns_module
from shadowtutor_lab.netbench.netns import (
    NamespaceLink,
    NetnsError,
    check_requirements,
    exec_in,
    list_namespaces,
    owner_pid,
    remove_stale,
    run_command,
    signals_raise_exit,
)


def test_without_root_the_message_says_so(monkeypatch: pytest.MonkeyPatch) -> None:
    # A mock: the test process cannot drop root and regain it; tests/lab/cli/test_bench_network.py
    # runs the real command as an unprivileged user.
    monkeypatch.setattr(netns_module.os, "geteuid", lambda: 1000)
    with pytest.raises(NetnsError, match="needs root"):
        check_requirements()


def test_without_iproute2_the_message_names_the_package(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(netns_module.os, "geteuid", lambda: 0)  # a mock, as above: root is not the point here
    monkeypatch.setattr(netns_module.shutil, "which", lambda tool: None if tool == "tc" else f"/sbin/{tool}")
    with pytest.raises(NetnsError, match="needs tc from iproute2"):
        check_requirements()


def test_owner_pid_reads_only_names_of_this_harness() -> None:
    assert owner_pid("stbench-4242-server") == 4242
    assert owner_pid("stbench-4242-edge", "stbench-") == 4242
    assert owner_pid("other-4242-edge") is None
    assert owner_pid("stbench-x-edge") is None


def test_a_failing_command_is_an_error_with_its_stderr() -> None:
    with pytest.raises(NetnsError, match="failed"):
        run_command(["ip", "link", "show", "no-such-interface-here"])


def _ours() -> list[str]:
    return [n for n in list_namespaces() if owner_pid(n) == os.getpid()]


@pytest.mark.usefixtures("netns")
def test_the_link_joins_two_namespaces_and_is_gone_after_close() -> None:
    with NamespaceLink() as link:
        assert sorted(_ours()) == sorted([link.edge.namespace, link.server.namespace])
        reach = subprocess.run(
            exec_in(link.edge.namespace, [sys.executable, "-c",
                                          "import socket; socket.create_connection(('10.201.0.1', 9), 2)"]),
            capture_output=True, text=True,
        )
        assert "refused" in reach.stderr  # the peer's address answered (with a RST): the link is up
        host = run_command(["ip", "-o", "addr", "show"]).stdout
        assert "10.201.0." not in host  # the addresses exist only inside the namespaces
        tx, rx = link.byte_counters(link.edge)
        assert tx > 0 and rx > 0
    assert _ours() == []


SCRIPT = textwrap.dedent("""
    import signal, subprocess, sys, time
    from shadowtutor_lab.netbench.netns import NamespaceLink, exec_in, signals_raise_exit
    # A foreground run, however pytest was started: a shell's background job inherits SIGINT ignored.
    signal.signal(signal.SIGINT, signal.default_int_handler)
    with signals_raise_exit(), NamespaceLink() as link:
        sleeper = subprocess.Popen(exec_in(link.edge.namespace, ["sleep", "300"]), start_new_session=True)
        print(link.server.namespace, link.edge.namespace, sleeper.pid, flush=True)
        time.sleep(300)
""")


def _start_and_interrupt(signum: int | None) -> tuple[subprocess.Popen[str], list[str], int]:
    child = subprocess.Popen([sys.executable, "-c", SCRIPT], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                             text=True)
    server_ns, edge_ns, sleeper = child.stdout.readline().split()
    assert {server_ns, edge_ns} <= set(list_namespaces())
    if signum is not None:
        child.send_signal(signum)
        child.wait(30)
    return child, [server_ns, edge_ns], int(sleeper)


def _gone(pid: int) -> bool:
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline:
        try:
            os.kill(pid, 0)
            if open(f"/proc/{pid}/stat").read().split()[2] == "Z":
                return True  # killed, not reaped yet
        except (ProcessLookupError, FileNotFoundError):
            return True
        time.sleep(0.05)
    return False


@pytest.mark.usefixtures("netns")
@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "SIGINT"])
def test_an_interrupted_run_leaves_no_namespace_and_no_process(signum: int) -> None:
    child, names, sleeper = _start_and_interrupt(signum)
    assert child.returncode != 0
    assert not set(names) & set(list_namespaces()), child.stderr.read()
    assert _gone(sleeper)


@pytest.mark.usefixtures("netns")
def test_a_killed_runs_namespaces_are_removed_as_stale_by_the_next_run() -> None:
    child, names, sleeper = _start_and_interrupt(None)
    child.kill()  # nothing of the child's can clean up now
    child.wait(10)
    assert set(names) <= set(list_namespaces())
    removed = remove_stale()
    assert set(names) <= set(removed)
    assert not set(names) & set(list_namespaces())
    assert _gone(sleeper)


@pytest.mark.usefixtures("netns")
def test_stale_cleanup_spares_namespaces_of_live_runs() -> None:
    with NamespaceLink() as link:
        assert link.server.namespace not in remove_stale()
        assert link.server.namespace in list_namespaces()


def test_signals_raise_exit_keeps_an_ignored_signal_ignored_and_restores_handlers() -> None:
    before = signal.getsignal(signal.SIGTERM)
    hangup = signal.signal(signal.SIGHUP, signal.SIG_IGN)  # as under nohup
    try:
        with signals_raise_exit():
            assert signal.getsignal(signal.SIGHUP) is signal.SIG_IGN
            with pytest.raises(SystemExit) as raised:
                os.kill(os.getpid(), signal.SIGTERM)
                time.sleep(1)  # the handler runs between bytecodes, before this returns
            assert raised.value.code == 128 + signal.SIGTERM
        assert signal.getsignal(signal.SIGTERM) is before
        assert signal.getsignal(signal.SIGHUP) is signal.SIG_IGN
    finally:
        signal.signal(signal.SIGHUP, hangup)
