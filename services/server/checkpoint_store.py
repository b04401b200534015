"""Where session checkpoints live: every version of a session's state, the first one written of each
kept.

:class:`CheckpointStore` is the interface. A session (an edge id and a session id) has one
checkpoint per version; :meth:`~CheckpointStore.create` stores a version only if no one has
stored it yet (first writer wins), so two replicas that both answered one key frame (a request
sent again while the first replica still ran it) cannot leave the edge holding one answer and the
store another: the second learns it lost and answers with the first's. :meth:`~CheckpointStore.load`
returns a session's latest version. :class:`DirectoryStore` keeps them in a directory (on shared
storage when several processes take over each other's sessions; creation is a hard link, atomic
on local file systems and NFS); an object store with conditional writes fits the same interface.
:func:`open_store` checks that the store can be written before a server relies on it.
"""

from __future__ import annotations

import hashlib
import logging
import os
import re
import stat
import tempfile
from pathlib import Path
from typing import Protocol

from services.server.checkpoint_checks import MAX_CHECKPOINT_BYTES

log = logging.getLogger(__name__)
# listings a load tries while newer versions prune the ones it found
LOAD_ROUNDS = 8
# of a session, the latest ones kept (the one before the latest: for a reader mid-switch)
KEEP_VERSIONS = 2


class CheckpointStoreError(RuntimeError):
    """The store cannot be used; the message is one line."""


class CheckpointStore(Protocol):
    location: str

    def create(self, edge_id: str, session_id: str, version: int, data: bytes) -> bool:
        """Store ``data`` as ``version`` of the session; False (and nothing written) when that
        version exists."""
        ...

    def load(self, edge_id: str, session_id: str) -> bytes | None:
        """The session's latest checkpoint, or None where it has none."""
        ...

    def forget_others(self, edge_id: str, session_id: str) -> None:
        """Remove the checkpoints of the edge's other (earlier) sessions."""
        ...


def _name(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()[:32]


class DirectoryStore:
    """``DIR/<edge hash>/<session hash>-<version>.ckpt`` (hashes: any id is a safe name); each
    written to a temporary file and linked into place, which fails when the version exists.

    Only regular files named exactly so count: anything else in the directory (other names,
    symbolic links, directories, FIFOs) is ignored, and a checkpoint larger than ``max_bytes`` is
    passed over with a warning, never read."""

    def __init__(self, directory: Path, max_bytes: int = MAX_CHECKPOINT_BYTES) -> None:
        self.directory = Path(directory)
        self.location = str(self.directory)
        self.max_bytes = max_bytes

    def _versions(self, edge_id: str, session_id: str) -> list[tuple[int, Path]]:
        """The session's checkpoints by version: regular files named ``<session hash>-<12
        digits>.ckpt``."""
        pattern = re.compile(re.escape(_name(session_id)) + r"-(\d{12})\.ckpt")
        found = []
        try:
            with os.scandir(self.directory / _name(edge_id)) as entries:
                for entry in entries:
                    match = pattern.fullmatch(entry.name)
                    if match and entry.is_file(follow_symlinks=False):
                        found.append((int(match.group(1)), Path(entry.path)))
        except (FileNotFoundError, NotADirectoryError):
            return []
        return sorted(found)

    def create(self, edge_id: str, session_id: str, version: int, data: bytes) -> bool:
        folder = self.directory / _name(edge_id)
        folder.mkdir(parents=True, exist_ok=True)
        fd, temporary = tempfile.mkstemp(dir=folder, prefix=".partial-")
        try:
            with os.fdopen(fd, "wb") as out:
                out.write(data)
            try:
                os.link(temporary, folder / f"{_name(session_id)}-{version:012d}.ckpt")
            except FileExistsError:
                return False
        finally:
            Path(temporary).unlink(missing_ok=True)
        for _, old in self._versions(edge_id, session_id)[:-KEEP_VERSIONS]:
            old.unlink(missing_ok=True)
        return True

    def load(self, edge_id: str, session_id: str) -> bytes | None:
        # a version pruned by a newer version's writer meanwhile: list again (the newer one is
        # there); a few rounds at most, as each needs another writer to have stored a version
        # meanwhile
        for _ in range(LOAD_ROUNDS):
            versions = self._versions(edge_id, session_id)
            if not versions:
                return None
            try:
                return self._read(versions[-1][1])
            except FileNotFoundError:
                continue
        return None

    def _read(self, path: Path) -> bytes | None:
        """The bytes of ``path`` if it is still a regular file of at most ``max_bytes`` (a link is
        not followed); None, with a warning, for one that is not."""
        flags = (
            os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0)
        )
        try:
            fd = os.open(path, flags)
        except FileNotFoundError:
            raise
        # a link put there since the listing (ELOOP), a directory...
        except OSError as exc:
            log.warning("checkpoint %s passed over: %s", path, exc.strerror or exc)
            return None
        with os.fdopen(fd, "rb") as stream:
            st = os.fstat(stream.fileno())
            if not stat.S_ISREG(st.st_mode) or st.st_size > self.max_bytes:
                log.warning(
                    "checkpoint %s passed over: not a regular file of at most %d bytes",
                    path,
                    self.max_bytes,
                )
                return None
            return stream.read(self.max_bytes + 1)

    def forget_others(self, edge_id: str, session_id: str) -> None:
        keep = _name(session_id) + "-"
        for path in (self.directory / _name(edge_id)).glob("*.ckpt"):
            if not path.name.startswith(keep) and not path.is_dir():
                path.unlink(missing_ok=True)

    def check(self) -> None:
        """Raise :class:`CheckpointStoreError` unless a checkpoint can be written and read back
        here."""
        try:
            self.directory.mkdir(parents=True, exist_ok=True)
            probe = f".probe-{os.getpid()}"
            self.create(probe, probe, 0, b"ok")
            if self.load(probe, probe) != b"ok":
                raise OSError("a probe written there does not read back")
            for path in (self.directory / _name(probe)).iterdir():
                path.unlink()
            (self.directory / _name(probe)).rmdir()
        except OSError as exc:
            raise CheckpointStoreError(
                f"the checkpoint store {self.location!r} cannot be used: {exc.strerror or exc}"
            ) from None


def open_store(location: str) -> DirectoryStore:
    """The store at ``location`` (a directory path or ``file://`` URL), checked to be writable;
    :class:`CheckpointStoreError` otherwise."""
    if "://" in location:
        scheme, _, path = location.partition("://")
        if scheme != "file":
            raise CheckpointStoreError(
                f"no checkpoint store for {scheme}:// (a directory path or file:// URL; an object "
                "store "
                "fits services.server.checkpoint_store.CheckpointStore)"
            )
        location = path
    store = DirectoryStore(Path(location))
    store.check()
    return store
