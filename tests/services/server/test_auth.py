"""The Authenticator: edge and admin checks against the tokens file, reload on change, fail closed."""

from __future__ import annotations

import asyncio
import logging
import os
import signal
from pathlib import Path

import pytest

from services.server.auth import Authenticator
from services.server.tokens import TokenFileError, TokenTable, issue_token, revoke
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
    with caplog.at_level(logging.WARNING, "services.server.auth"):
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
    with caplog.at_level(logging.WARNING, "services.server.auth"):
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


def test_a_broken_file_refuses_everyone_until_fixed(tokens_file: Path, caplog: pytest.LogCaptureFixture) -> None:
    token = issue_token(tokens_file, "edges", "cam-1")
    auth = Authenticator(tokens_file)
    good = tokens_file.read_text()
    tokens_file.write_text("{ half a document")
    with caplog.at_level(logging.ERROR, "services.server.auth"):
        refused(auth, "cam-1", token)
    assert "every new edge is refused" in caplog.text and auth.problem and "not JSON" in auth.problem
    assert auth.edge_admitted("cam-1")  # open sessions are left alone while there is nothing to go by
    tokens_file.write_text(good)
    auth.check_edge("cam-1", token)
    tokens_file.unlink()
    refused(auth, "cam-1", token)
    assert "cannot read" in auth.problem


def test_a_bad_file_at_start_is_an_error(tokens_file: Path) -> None:
    with pytest.raises(TokenFileError, match="cannot read the tokens file"):
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


async def _until(predicate, timeout: float = 5.0) -> None:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while not predicate():
        assert loop.time() < deadline, "timed out"
        await asyncio.sleep(0.02)
