"""The tokens file: scrypt hashes (PHC strings), parsing with clear errors, issuing and revoking."""

from __future__ import annotations

import json
import stat
from pathlib import Path

import pytest

from services.server.access.tokens import (
    ScryptHash,
    TokenFileError,
    TokenTable,
    hash_token,
    issue_token,
    read_table,
    revoke,
)


def test_hash_is_salted_scrypt_and_verifies_only_its_token() -> None:
    first, second = hash_token("s3cret"), hash_token("s3cret")
    assert first.startswith("$scrypt$ln=14,r=8,p=1$") and first != second  # a new salt each time
    parsed = ScryptHash.parse(first)
    assert parsed.matches("s3cret") and not parsed.matches("s3cret ") and not parsed.matches("")
    assert ScryptHash.parse(parsed.encode()) == parsed


@pytest.mark.parametrize(
    ("encoded", "message"),
    [
        ("plain-text-token", "not a $scrypt$"),
        ("$bcrypt$ln=14,r=8,p=1$AAAAAAAAAAAAAAAAAAAAAA$" + "A" * 43, "not a $scrypt$"),
        ("$scrypt$ln=14,r=8$AAAAAAAAAAAAAAAAAAAAAA$" + "A" * 43, "bad scrypt parameters"),
        ("$scrypt$ln=14,r=8,p=1$not*base64$" + "A" * 43, "bad scrypt parameters"),
        ("$scrypt$ln=30,r=8,p=1$AAAAAAAAAAAAAAAAAAAAAA$" + "A" * 43, "out of range"),
        ("$scrypt$ln=14,r=8,p=1$AAAA$" + "A" * 43, "too short"),
    ],
)
def test_bad_hash_strings_say_what_is_wrong(encoded: str, message: str) -> None:
    with pytest.raises(ValueError, match=message.replace("$", r"\$")):
        ScryptHash.parse(encoded)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("{", "not JSON"),
        ("[]", "must be a JSON object"),
        ('{"edge": {}}', "unknown keys ['edge']"),
        ('{"edges": []}', "edges must be an object"),
        ('{"edges": {"cam": "hash"}}', "entry 'cam' must be an object"),
        ('{"edges": {"cam": {"hash": 5}}}', "are strings"),
        ('{"admins": {"ops": {"hash": "nope"}}}', "admins: entry 'ops': not a $scrypt$"),
    ],
)
def test_bad_documents_name_the_place(text: str, message: str) -> None:
    with pytest.raises(TokenFileError, match="^tokens.json: .*" + message.replace("$", r"\$").replace("[", r"\[")):
        TokenTable.parse(text, "tokens.json")


def test_issue_then_revoke(tmp_path: Path) -> None:
    path = tmp_path / "secrets" / "tokens.json"
    token = issue_token(path, "edges", "cam-1")
    admin = issue_token(path, "admins", "ops")
    assert stat.S_IMODE(path.stat().st_mode) == 0o600 and token not in path.read_text()
    table = read_table(path)
    assert table.edges["cam-1"].active and table.edges["cam-1"].hash.matches(token)
    assert table.admins["ops"].hash.matches(admin) and not table.admins["ops"].hash.matches(token)

    renewed = issue_token(path, "edges", "cam-1")  # a new token replaces the old one
    entry = read_table(path).edges["cam-1"]
    assert entry.hash.matches(renewed) and not entry.hash.matches(token)

    revoke(path, "edges", "cam-1")
    document = json.loads(path.read_text())
    assert "hash" not in document["edges"]["cam-1"] and document["edges"]["cam-1"]["revoked"]
    assert not read_table(path).edges["cam-1"].active and read_table(path).admins["ops"].active
    with pytest.raises(TokenFileError, match="no edge named 'cam-9' to revoke"):
        revoke(path, "edges", "cam-9")
    assert sorted(p.name for p in path.parent.iterdir()) == ["tokens.json"]  # no temporary files left


def test_names_follow_the_hello_rules(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="1 to 128 printable characters"):
        issue_token(tmp_path / "t.json", "edges", "cam\n1")
    with pytest.raises(TokenFileError, match="cannot read the tokens file"):
        read_table(tmp_path / "missing.json")
