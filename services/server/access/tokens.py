"""The tokens file: salted scrypt hashes of each edge's token and of the administrators' tokens.

A JSON document (one file, or the same text in ``SHADOWTUTOR_TOKENS``)::

    {"edges":  {"cam-1": {"hash": "$scrypt$ln=14,r=8,p=1$<salt>$<hash>",
                          "updated": "2025-05-01T10:00:00+00:00"},
                "cam-2": {"revoked": "2025-05-02T09:00:00+00:00"}},
     "admins": {"ops":   {"hash": "$scrypt$ln=14,r=8,p=1$<salt>$<hash>", "updated": "..."}}}

The hash is a PHC string (salt and hash in unpadded base64). ``id``, written by ``shadowtutor token
new``, is :func:`token_id` of the token: a presented token is looked up by its id, so that checking
it costs one scrypt hash whatever the number of entries, and a made-up token none (entries from
before ids existed are checked by their hash alone). An entry without ``hash``, or with ``revoked``,
admits nobody; neither does a name that is not listed. Tokens themselves are never stored:
``shadowtutor token new`` prints a new one once. This module imports only the standard library, so
that the ``token`` command stays quick.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import os
import secrets
import stat
import tempfile
from dataclasses import dataclass, field, replace
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Literal

Kind = Literal["edges", "admins"]
KINDS: tuple[Kind, ...] = ("edges", "admins")
SCHEME = "scrypt"
# 16 MiB and about 50 ms per check on one core
LOG2_N, BLOCK_SIZE, PARALLELISM = 14, 8, 1
SALT_BYTES, HASH_BYTES, TOKEN_BYTES = 16, 32, 32
# longer presented tokens are refused unhashed
MAX_TOKEN_CHARS = 512
# a larger tokens file is refused unread
MAX_FILE_BYTES = 1 << 20
# hex characters of a token id (64 bits of its SHA-256)
ID_CHARS = 16
# a hash asking for more memory than this (1 GiB at r=8) is refused when the file loads
_MAX_LOG2_N = 20
_DUMMY = f"${SCHEME}$ln={LOG2_N},r={BLOCK_SIZE},p={PARALLELISM}$" + "A" * 22 + "$" + "A" * 43


class TokenFileError(ValueError):
    """The tokens file (or ``SHADOWTUTOR_TOKENS``) is missing or malformed; the message says
    where."""


def new_token() -> str:
    """A fresh random token: 256 bits, URL-safe text (43 characters)."""
    return secrets.token_urlsafe(TOKEN_BYTES)


def token_id(token: str) -> str:
    """The id a token is looked up by: the start of its SHA-256 in hex (a 256-bit random token
    cannot be recovered from it, and a made-up token's id matches no entry)."""
    return hashlib.sha256(token.encode()).hexdigest()[:ID_CHARS]


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode().rstrip("=")


def _unb64(text: str) -> bytes:
    return base64.b64decode(text + "=" * (-len(text) % 4), validate=True)


@dataclass(kw_only=True, frozen=True)
class ScryptHash:
    """An scrypt hash of a token in its ``$scrypt$ln=..,r=..,p=..$salt$hash`` text form: its cost
    parameters, salt and digest."""

    log2_n: int
    r: int
    p: int
    salt: bytes
    digest: bytes

    @classmethod
    def parse(cls, encoded: str) -> ScryptHash:
        """Parse ``$scrypt$ln=..,r=..,p=..$salt$hash``; raises ``ValueError`` saying what is
        wrong."""
        parts = encoded.split("$")
        if len(parts) != 5 or parts[0] != "" or parts[1] != SCHEME:
            raise ValueError(f"not a ${SCHEME}$ln=N,r=R,p=P$SALT$HASH string")
        try:
            params = dict(item.split("=", 1) for item in parts[2].split(","))
            log2_n, r, p = int(params["ln"]), int(params["r"]), int(params["p"])
            salt, digest = _unb64(parts[3]), _unb64(parts[4])
        except (KeyError, ValueError) as exc:
            raise ValueError(f"bad scrypt parameters, salt or hash ({exc})") from None
        if (
            not (1 <= log2_n <= _MAX_LOG2_N and 1 <= r <= 32 and 1 <= p <= 16)
            or len(salt) < 8
            or len(digest) < 16
        ):
            raise ValueError(
                f"scrypt parameters out of range (ln={log2_n}, r={r}, p={p}) or salt/hash too short"
            )
        return cls(log2_n=log2_n, r=r, p=p, salt=salt, digest=digest)

    def compute(self, token: str) -> bytes:
        n, r = 1 << self.log2_n, self.r
        return hashlib.scrypt(
            token.encode(),
            salt=self.salt,
            n=n,
            r=r,
            p=self.p,
            maxmem=256 * n * r,
            dklen=len(self.digest),
        )

    def matches(self, token: str) -> bool:
        """Constant-time comparison of the token's hash with the stored one."""
        return hmac.compare_digest(self.compute(token), self.digest)

    def encode(self) -> str:
        params = f"ln={self.log2_n},r={self.r},p={self.p}"
        return f"${SCHEME}${params}${_b64(self.salt)}${_b64(self.digest)}"


def hash_token(token: str) -> str:
    """The PHC string stored for ``token`` (a new random salt each time)."""
    salt = secrets.token_bytes(SALT_BYTES)
    blank = ScryptHash(
        log2_n=LOG2_N, r=BLOCK_SIZE, p=PARALLELISM, salt=salt, digest=b"\0" * HASH_BYTES
    )
    return ScryptHash(
        log2_n=LOG2_N, r=BLOCK_SIZE, p=PARALLELISM, salt=salt, digest=blank.compute(token)
    ).encode()


def burn_time(token: str) -> None:
    """Spend what a real check costs, so that an unknown name answers no faster than a known one."""
    ScryptHash.parse(_DUMMY).matches(token)


@dataclass(kw_only=True, frozen=True)
class Entry:
    """One edge's line of the tokens file: the hash of its token (None once revoked), when it was
    issued or revoked, and the token's id."""

    hash: ScryptHash | None
    updated: str | None = None
    revoked: str | None = None
    # token_id of the token (None: an entry written before ids)
    id: str | None = None

    @property
    def active(self) -> bool:
        return self.hash is not None and self.revoked is None

    def to_json(self) -> dict[str, str]:
        out = {
            "hash": self.hash.encode() if self.hash else None,
            "id": self.id,
            "updated": self.updated,
            "revoked": self.revoked,
        }
        return {key: value for key, value in out.items() if value is not None}


@dataclass(frozen=True)
class TokenTable:
    """The parsed document: entries by kind and name."""

    edges: dict[str, Entry] = field(default_factory=dict)
    admins: dict[str, Entry] = field(default_factory=dict)

    def entries(self, kind: Kind) -> dict[str, Entry]:
        return self.edges if kind == "edges" else self.admins

    def by_id(self, kind: Kind, token: str) -> list[str]:
        """The active names of ``kind`` that ``token`` may be: those whose id is the token's, then
        those without an id (checked by their hash alone); empty for a token no entry can match."""
        wanted = token_id(token)
        active = [(name, entry) for name, entry in self.entries(kind).items() if entry.active]
        return [name for name, entry in active if entry.id == wanted] + [
            name for name, entry in active if entry.id is None
        ]

    def has_legacy(self, kind: Kind) -> bool:
        """Whether some active entry of ``kind`` has no id (its token can only be checked by
        scrypt)."""
        return any(entry.active and entry.id is None for entry in self.entries(kind).values())

    def with_entry(self, kind: Kind, name: str, entry: Entry) -> TokenTable:
        return replace(self, **{kind: {**self.entries(kind), name: entry}})

    @classmethod
    def parse(cls, text: str, origin: str) -> TokenTable:
        try:
            document = json.loads(text) if text.strip() else {}
        except json.JSONDecodeError as exc:
            raise TokenFileError(f"{origin}: not JSON ({exc})") from None
        except RecursionError:
            raise TokenFileError(
                f"{origin}: not a tokens document (JSON nested too deep)"
            ) from None
        except ValueError as exc:
            # e.g. an integer past Python's digit limit
            raise TokenFileError(f"{origin}: not a tokens document ({exc})") from None
        if not isinstance(document, dict):
            raise TokenFileError(
                f"{origin}: the document must be a JSON object with 'edges' and 'admins'"
            )
        unknown = set(document) - set(KINDS)
        if unknown:
            raise TokenFileError(
                f"{origin}: unknown keys {sorted(unknown)}; expected {list(KINDS)}"
            )
        tables = {
            kind: _parse_section(document.get(kind, {}), f"{origin}: {kind}") for kind in KINDS
        }
        return cls(**tables)

    def to_json(self) -> str:
        return (
            json.dumps(
                {
                    kind: {name: entry.to_json() for name, entry in self.entries(kind).items()}
                    for kind in KINDS
                },
                indent=2,
            )
            + "\n"
        )


def _parse_section(section: Any, where: str) -> dict[str, Entry]:
    if not isinstance(section, dict):
        raise TokenFileError(f"{where} must be an object of name -> entry")
    entries = {}
    for name, raw in section.items():
        if not name or not isinstance(raw, dict):
            raise TokenFileError(
                f"{where}: entry {name!r} must be an object with 'hash' or 'revoked'"
            )
        texts = {key: raw.get(key) for key in ("hash", "id", "updated", "revoked")}
        if any(value is not None and not isinstance(value, str) for value in texts.values()):
            raise TokenFileError(
                f"{where}: entry {name!r}: 'hash', 'id', 'updated' and 'revoked' are strings"
            )
        if texts["id"] is not None and not _is_id(texts["id"]):
            raise TokenFileError(
                f"{where}: entry {name!r}: 'id' must be {ID_CHARS} lower-case hex characters"
            )
        try:
            parsed = ScryptHash.parse(texts["hash"]) if texts["hash"] is not None else None
        except ValueError as exc:
            raise TokenFileError(f"{where}: entry {name!r}: {exc}") from None
        entries[name] = Entry(
            hash=parsed, updated=texts["updated"], revoked=texts["revoked"], id=texts["id"]
        )
    return entries


def _is_id(text: str) -> bool:
    return len(text) == ID_CHARS and all(c in "0123456789abcdef" for c in text)


def read_table(path: Path) -> TokenTable:
    """The table in ``path``; any unreadable or malformed content raises :class:`TokenFileError`
    naming ``path``.

    Only a regular file of at most :data:`MAX_FILE_BYTES` is read (a FIFO, device or directory is
    refused without waiting for a writer); a symbolic link to one is followed."""
    try:
        text = _read_regular(path).decode("utf-8")
    except OSError as exc:
        raise TokenFileError(f"cannot read the tokens file {path}: {exc.strerror or exc}") from None
    except UnicodeDecodeError as exc:
        raise TokenFileError(f"{path}: not UTF-8 text (byte {exc.start}: {exc.reason})") from None
    return TokenTable.parse(text, str(path))


def _read_regular(path: Path) -> bytes:
    """The bytes of ``path`` if it is a regular file within the size bound; TokenFileError
    otherwise."""
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise TokenFileError(f"the tokens file {path} is not a regular file")
        if st.st_size > MAX_FILE_BYTES:
            raise TokenFileError(
                f"the tokens file {path} has {st.st_size} bytes (at most {MAX_FILE_BYTES})"
            )
        with os.fdopen(fd, "rb", closefd=False) as stream:
            data = stream.read(MAX_FILE_BYTES + 1)
    finally:
        os.close(fd)
    if len(data) > MAX_FILE_BYTES:
        raise TokenFileError(
            f"the tokens file {path} grew past {MAX_FILE_BYTES} bytes while it was read"
        )
    return data


def write_table(path: Path, table: TokenTable) -> None:
    """Replace the file atomically (a server reloading it never sees half), readable by its owner
    only."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        with os.fdopen(fd, "w") as out:
            out.write(table.to_json())
        os.chmod(tmp, 0o600)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def _now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


def issue_token(path: Path, kind: Kind, name: str) -> str:
    """A new token for ``name``: its hash replaces any earlier one in ``path`` (created if
    absent)."""
    check_name(name)
    table = read_table(path) if path.exists() else TokenTable()
    token = new_token()
    entry = Entry(hash=ScryptHash.parse(hash_token(token)), updated=_now(), id=token_id(token))
    write_table(path, table.with_entry(kind, name, entry))
    return token


def revoke(path: Path, kind: Kind, name: str) -> None:
    """Mark ``name`` revoked (its hash is dropped); a server watching ``path`` refuses it from then
    on."""
    table = read_table(path)
    entry = table.entries(kind).get(name)
    if entry is None:
        raise TokenFileError(f"{path}: no {kind[:-1]} named {name!r} to revoke")
    write_table(
        path, table.with_entry(kind, name, Entry(hash=None, updated=entry.updated, revoked=_now()))
    )


def check_name(name: str) -> None:
    """The HELLO's rule for edge ids (and the same for administrator names)."""
    if not name or len(name) > 128 or not name.isprintable():
        raise ValueError(f"a name must be 1 to 128 printable characters, got {name!r}")
