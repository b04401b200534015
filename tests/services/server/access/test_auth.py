"""The Authenticator: edge and admin checks against the tokens file, reload on change, a bad file rejected
with the last good tokens kept in force, and a watch that survives any file content and SIGHUP."""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import queue
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from services.server.access.auth import Authenticator
from services.server.access.tokens import (
    MAX_FILE_BYTES,
    ScryptHash,
    TokenFileError,
    TokenTable,
    issue_token,
    read_table,
    revoke,
)
from shadowtutor.protocol.errors import ErrorCode, ProtocolError


@pytest.fixture
def tokens_file(tmp_path: Path) -> Path:
    return tmp_path / "tokens.json"


def refused(auth: Authenticator, edge_id: str, token: str | None) -> str:
    with pytest.raises(ProtocolError) as error:
        auth.check_edge(edge_id, token)
    assert error.value.code is ErrorCode.UNAUTHORIZED
    return error.value.message


def test_off_without_tokens_admits_anyone() -> None:
    auth = Authenticator()
    assert not auth.enabled
    auth.check_edge("anyone", None)
    assert auth.edge_admitted("anyone")


def test_edge_needs_its_own_active_token(tokens_file: Path, caplog: pytest.LogCaptureFixture) -> None:
    token = issue_token(tokens_file, "edges", "cam-1")
    other = issue_token(tokens_file, "edges", "cam-2")
    auth = Authenticator(tokens_file)
    auth.check_edge("cam-1", token)
    auth.check_edge("cam-1", token)  # the second check is served from the verified cache
    with caplog.at_level(logging.WARNING, "services.server.access.auth"):
        messages = [refused(auth, "cam-1", other), refused(auth, "cam-1", None), refused(auth, "cam-3", token),
                    refused(auth, "cam-1", "x" * 600)]
    # the peer learns nothing about why; the log says it (never the token)
    assert set(messages) == {"edge 'cam-1': missing, wrong or revoked token", "edge 'cam-3': missing, wrong or "
                             "revoked token"}
    reasons = caplog.text
    assert "wrong token" in reasons and "no token in HELLO" in reasons and "not in the tokens file" in reasons
    assert "600 characters" in reasons and token not in reasons and other not in reasons


@pytest.mark.parametrize("token", ["\ud800", "t\u00f6ken", "\U0001f600" * 3])
def test_a_token_outside_ascii_is_refused_not_an_error(tokens_file: Path, token: str,
                                                       caplog: pytest.LogCaptureFixture) -> None:
    issue_token(tokens_file, "edges", "cam-1")
    auth = Authenticator(tokens_file)
    with caplog.at_level(logging.WARNING, "services.server.access.auth"):
        for edge_id in ("cam-1", "cam-9"):  # a known edge id, and one the file lacks (the time-burning path)
            refused(auth, edge_id, token)
    assert "characters outside ASCII" in caplog.text


def test_revoke_and_rotation_are_seen_without_restart(tokens_file: Path) -> None:
    old = issue_token(tokens_file, "edges", "cam-1")
    auth = Authenticator(tokens_file)
    auth.check_edge("cam-1", old)
    generation = auth.generation
    new = issue_token(tokens_file, "edges", "cam-1")  # rotation: the new token replaces the old
    auth.check_edge("cam-1", new)
    refused(auth, "cam-1", old)
    assert auth.generation == generation + 1 and auth.edge_admitted("cam-1")
    revoke(tokens_file, "edges", "cam-1")
    refused(auth, "cam-1", new)
    assert not auth.edge_admitted("cam-1") and not auth.edge_admitted("never-listed")


BAD_CONTENTS = {
    "not UTF-8": b"\xff\xfe{}",
    "nested 200,000 deep": b"[" * 200_000 + b"]" * 200_000,
    "half a document": b"{ half a document",
    "an integer past the digit limit": b'{"edges": ' + b"1" * 5000 + b"}",
    "a wrong field": b'{"edges": {"cam-1": {"hash": 5}}}',
}


@pytest.mark.parametrize("content", BAD_CONTENTS.values(), ids=BAD_CONTENTS.keys())
def test_a_bad_file_is_rejected_and_the_last_good_tokens_stay(
    tokens_file: Path, content: bytes, caplog: pytest.LogCaptureFixture
) -> None:
    token = issue_token(tokens_file, "edges", "cam-1")
    revoked_token = issue_token(tokens_file, "edges", "cam-2")
    revoke(tokens_file, "edges", "cam-2")
    auth = Authenticator(tokens_file)
    good = tokens_file.read_text()
    tokens_file.write_bytes(content)
    with caplog.at_level(logging.WARNING, "services.server.access.auth"):
        auth.refresh(force=True)  # never raises
        auth.check_edge("cam-1", token)  # the last good table: cam-1 still admitted
        assert "unauthorized" not in caplog.text
        refused(auth, "cam-2", revoked_token)  # ... and cam-2 still revoked
        refused(auth, "cam-9", token)
        auth.refresh(force=True)
    assert auth.problem and str(tokens_file) in auth.problem and auth.rejected == 2
    assert caplog.text.count("the tokens file is rejected") == 1  # one warning per problem, not one per read
    assert auth.edge_admitted("cam-1") and not auth.edge_admitted("cam-2")
    tokens_file.write_text(good)
    revoke(tokens_file, "edges", "cam-1")
    auth.refresh()
    assert auth.problem is None and not auth.edge_admitted("cam-1")
    refused(auth, "cam-1", token)


def test_a_missing_file_keeps_the_last_good_tokens(tokens_file: Path) -> None:
    token = issue_token(tokens_file, "edges", "cam-1")
    auth = Authenticator(tokens_file)
    tokens_file.unlink()
    auth.check_edge("cam-1", token)
    assert auth.problem and "cannot read" in auth.problem


def test_a_bad_file_at_start_is_an_error(tokens_file: Path) -> None:
    with pytest.raises(TokenFileError, match="cannot read the tokens file"):
        Authenticator(tokens_file)
    tokens_file.write_bytes(b"\xff\xfe{}")
    with pytest.raises(TokenFileError, match=f"{tokens_file}: not UTF-8 text"):
        Authenticator(tokens_file)
    tokens_file.write_text('{"edges": {"cam": {"hash": "x"}}}')
    with pytest.raises(TokenFileError, match="entry 'cam'"):
        Authenticator(tokens_file)
    with pytest.raises(TokenFileError, match="SHADOWTUTOR_TOKENS: not JSON"):
        Authenticator(inline="{")


def test_inline_tokens_and_admins(tokens_file: Path) -> None:
    admin = issue_token(tokens_file, "admins", "ops")
    edge = issue_token(tokens_file, "edges", "cam-1")
    auth = Authenticator(inline=tokens_file.read_text())
    assert auth.enabled and auth.path is None
    auth.check_edge("cam-1", edge)
    assert auth.admin_name(admin) == "ops" and auth.admin_name(admin) == "ops"
    assert auth.admin_name(edge) is None and auth.admin_name("") is None and auth.admin_name(None) is None
    assert Authenticator(inline=TokenTable().to_json()).admin_name(admin) is None


def test_watch_reloads_on_change_and_on_sighup(tokens_file: Path) -> None:
    issue_token(tokens_file, "edges", "cam-1")
    auth = Authenticator(tokens_file)
    reloads: list[int] = []

    async def scenario() -> None:
        watcher = asyncio.create_task(auth.watch(lambda: reloads.append(auth.generation), interval=0.05))
        await asyncio.sleep(0.1)
        assert reloads == []  # nothing changed: no reload
        revoke(tokens_file, "edges", "cam-1")
        await _until(lambda: len(reloads) == 1)
        assert signal.getsignal(signal.SIGHUP) != signal.SIG_DFL  # else the SIGHUP below would end pytest
        os.kill(os.getpid(), signal.SIGHUP)  # this test runs the loop in the main thread: the handler is ours
        await _until(lambda: len(reloads) == 2)
        watcher.cancel()
        await asyncio.wait({watcher})

    asyncio.run(scenario())
    assert reloads == [2, 3] and not auth.edge_admitted("cam-1")
    assert signal.getsignal(signal.SIGHUP) == signal.SIG_DFL  # the watch put the default back


WATCHING_CHILD = """
import asyncio, signal, sys
from pathlib import Path
from services.server.access.auth import Authenticator

auth = Authenticator(Path(sys.argv[1]))

async def main():
    watch = asyncio.create_task(auth.watch(lambda: print("reloaded", flush=True), interval=3600))
    while signal.getsignal(signal.SIGHUP) == signal.SIG_DFL:  # the watch has not started yet
        await asyncio.sleep(0.01)
    print("watching", flush=True)
    shown = None
    while not watch.done():
        state = (auth.problem is not None, auth.rejected, auth.edge_admitted("cam-1"))
        if state != shown:
            print("state", *state, flush=True)
            shown = state
        await asyncio.sleep(0.02)
    print("the watch ended", flush=True)

asyncio.run(main())
"""


def test_sighup_reloads_or_warns_and_never_ends_the_server(tokens_file: Path, tmp_path: Path) -> None:
    """A bad file, SIGHUP, SIGHUP again, then a good file revoking cam-1 and SIGHUP: the watching process
    (a child, since the signal would end pytest itself) lives on and takes the good file."""
    issue_token(tokens_file, "edges", "cam-1")
    good = tokens_file.read_text()
    child = subprocess.Popen(
        [sys.executable, "-c", WATCHING_CHILD, str(tokens_file)], stdout=subprocess.PIPE, text=True,
        cwd=Path(__file__).resolve().parents[4],
    )
    lines: queue.Queue[str] = queue.Queue()
    threading.Thread(target=lambda: [lines.put(line.strip()) for line in child.stdout], daemon=True).start()

    def expect(wanted: str) -> None:
        seen = []
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            with contextlib.suppress(queue.Empty):
                seen.append(lines.get(timeout=0.1))
                if seen[-1] == wanted:
                    return
        raise AssertionError(f"no {wanted!r} from the watching process; it said {seen}")

    try:
        expect("watching")
        expect("state False 0 True")
        tokens_file.write_bytes(b"\xff\xfe{}")
        child.send_signal(signal.SIGHUP)
        expect("state True 1 True")
        child.send_signal(signal.SIGHUP)
        expect("state True 2 True")
        assert child.poll() is None
        tokens_file.write_text(good)
        revoke(tokens_file, "edges", "cam-1")
        child.send_signal(signal.SIGHUP)
        expect("reloaded")
        expect("state False 2 False")
        assert child.poll() is None
    finally:
        child.kill()
        child.wait()


async def _until(predicate, timeout: float = 5.0) -> None:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while not predicate():
        assert loop.time() < deadline, "timed out"
        await asyncio.sleep(0.02)


def test_the_server_exports_whether_the_tokens_file_is_rejected(settings, tmp_path: Path) -> None:
    from services.server.app import create_app

    tokens_file = tmp_path / "tokens.json"
    issue_token(tokens_file, "edges", "cam-1")
    runtime = create_app(settings.model_copy(update={"tokens_file": tokens_file})).state.runtime

    def valid() -> float:
        return runtime.metrics.registry.get_sample_value("shadowtutor_server_tokens_file_valid")

    assert valid() == 1.0
    tokens_file.write_bytes(b"\xff")
    runtime.auth.refresh()
    assert valid() == 0.0
    issue_token(tokens_file.with_name("other.json"), "edges", "cam-2")
    tokens_file.with_name("other.json").replace(tokens_file)
    runtime.auth.refresh()
    assert valid() == 1.0


def test_a_bearer_costs_one_scrypt_hash_at_most_and_a_made_up_one_none(
    tokens_file: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Tokens are found by their id: the cost of a check does not grow with the number of admins."""
    admins = [issue_token(tokens_file, "admins", f"ops-{n}") for n in range(5)]
    edge = issue_token(tokens_file, "edges", "cam-1")
    auth = Authenticator(tokens_file)
    hashes: list[str] = []
    compute = ScryptHash.compute
    monkeypatch.setattr(ScryptHash, "compute", lambda self, token: hashes.append(token) or compute(self, token))
    assert auth.admin_name("made-up-" + "x" * 35) is None and auth.admin_name(edge) is None
    refused(auth, "cam-1", "made-up-" + "x" * 35)
    refused(auth, "cam-9", edge)
    assert hashes == []
    assert auth.admin_name(admins[3]) == "ops-3" and len(hashes) == 1


def test_admins_without_a_token_id_are_still_checked(tokens_file: Path) -> None:
    """A tokens file written before ids: each entry is checked by its hash (and the server says what it costs)."""
    admin = issue_token(tokens_file, "admins", "ops")
    document = json.loads(tokens_file.read_text())
    del document["admins"]["ops"]["id"]
    tokens_file.write_text(json.dumps(document))
    auth = Authenticator(tokens_file)
    assert auth.admin_name(admin) == "ops" and auth.admin_name("made-up") is None


def _replace_by_fifo(path: Path) -> None:
    fifo = path.with_name("fifo")
    os.mkfifo(fifo)
    fifo.replace(path)


def _finishes(fn, timeout: float) -> bool:
    """Whether ``fn()`` returns within ``timeout`` s (run in a daemon thread, left behind if it hangs)."""
    done = threading.Event()
    threading.Thread(target=lambda: (fn(), done.set()), daemon=True).start()
    return done.wait(timeout)


def test_a_fifo_in_place_of_the_file_wedges_neither_checks_nor_revocation(tokens_file: Path) -> None:
    token = issue_token(tokens_file, "edges", "cam-1")
    other = issue_token(tokens_file, "edges", "cam-2")
    good = tokens_file.read_text()
    auth = Authenticator(tokens_file)
    _replace_by_fifo(tokens_file)
    try:
        assert _finishes(lambda: auth.check_edge("cam-1", token), 2.0), "a check hangs on the FIFO"
        assert _finishes(lambda: auth.refresh(force=True), 2.0)
        assert auth.problem and "not a regular file" in auth.problem
    finally:
        # a reader blocked in open() (the old behaviour) is let go
        with contextlib.suppress(OSError):
            os.close(os.open(tokens_file, os.O_WRONLY | os.O_NONBLOCK))
    tokens_file.unlink()
    tokens_file.write_text(good)
    start = time.monotonic()
    auth.check_edge("cam-2", other)
    assert time.monotonic() - start < 2.0 and auth.problem is None
    revoke(tokens_file, "edges", "cam-2")
    refused(auth, "cam-2", other)
    assert not auth.edge_admitted("cam-2") and auth.edge_admitted("cam-1")


def test_a_read_that_stalls_is_abandoned_after_the_timeout(
    tokens_file: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A read that never returns (a stalled file system; simulated: no such mount here) is waited on for
    READ_TIMEOUT only; the last good tokens stay and a check answers."""
    token = issue_token(tokens_file, "edges", "cam-1")
    auth = Authenticator(tokens_file)
    release = threading.Event()
    monkeypatch.setattr("services.server.access.auth.read_table", lambda path: release.wait(30) and TokenTable())
    monkeypatch.setattr("services.server.access.auth.READ_TIMEOUT", 0.2)
    tokens_file.write_text(tokens_file.read_text() + " ")
    try:
        start = time.monotonic()
        auth.check_edge("cam-1", token)
        # the stalled read is still pending: no second one starts
        auth.check_edge("cam-1", token)
        assert time.monotonic() - start < 1.0
        assert auth.problem and "took over" in auth.problem
    finally:
        release.set()


def test_an_oversized_or_special_file_is_refused_unread(tokens_file: Path, tmp_path: Path) -> None:
    tokens_file.write_bytes(b" " * (MAX_FILE_BYTES + 1))
    with pytest.raises(TokenFileError, match="bytes \\(at most"):
        read_table(tokens_file)
    with pytest.raises(TokenFileError, match="not a regular file"):
        read_table(tmp_path)
