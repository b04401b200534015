"""``shadowtutor token new|revoke|list``: the token printed once on stdout, only its hash on disk."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from services.server.access.tokens import read_table
from shadowtutor_cli import main


def test_new_revoke_list(tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "tokens.json"
    assert main(["token", "new", "--edge-id", "cam-1", "--tokens-file", str(path)]) == 0
    out, err = capsys.readouterr()
    token = out.strip()
    assert len(token) == 43 and out == token + "\n"  # stdout is the token alone: $(shadowtutor token new ...)
    assert "not shown again" in err and token not in path.read_text()
    assert read_table(path).edges["cam-1"].hash.matches(token)

    monkeypatch.setenv("SHADOWTUTOR_TOKENS_FILE", str(path))  # the server's variable works here too
    assert main(["token", "new", "--admin", "ops"]) == 0
    admin = capsys.readouterr().out.strip()
    assert main(["token", "revoke", "--edge-id", "cam-1"]) == 0
    assert main(["token", "list"]) == 0
    listing = capsys.readouterr().out.splitlines()
    assert [line.split("\t")[:2] for line in listing] == [["edge", "cam-1"], ["admin", "ops"]]
    assert listing[0].split("\t")[2].startswith("revoked ") and listing[1].split("\t")[2] == "active"
    assert token not in "".join(listing) and admin not in "".join(listing)
    assert "hash" not in json.loads(path.read_text())["edges"]["cam-1"]


def test_errors_are_clear(tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("SHADOWTUTOR_TOKENS_FILE", raising=False)
    assert main(["token", "new", "--edge-id", "cam-1"]) == 2
    assert "no tokens file: pass --tokens-file or set SHADOWTUTOR_TOKENS_FILE" in capsys.readouterr().err
    assert main(["token", "revoke", "--edge-id", "cam-1", "--tokens-file", str(tmp_path / "none.json")]) == 2
    assert "cannot read the tokens file" in capsys.readouterr().err
    with pytest.raises(SystemExit):  # exactly one of --edge-id and --admin
        main(["token", "new", "--edge-id", "a", "--admin", "b", "--tokens-file", "x"])
