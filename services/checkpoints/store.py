"""Where session checkpoints live: a session's state as snapshots and journal entries, the first
one written of each version kept.

:class:`CheckpointStore` is the interface. A session (an edge id and a session id) has a *snapshot*
of its whole state every few versions and a small *journal entry* for each trained version (what the
edge was sent); a snapshot and the entries after it rebuild the newest version.
:meth:`~CheckpointStore.append` stores a journal entry only if no one has stored or claimed that
version yet, and is the claim of a trained version: two replicas that both answered one key frame (a
request sent again while the first replica still ran it) cannot leave the edge holding one answer
and the store another, as the second learns it lost before it answers, and answers with the first's.
:meth:`~CheckpointStore.claim` reserves a version that has no journal entry (a session's first
weights, a resync) for one writer before its answer leaves; :meth:`~CheckpointStore.create` stores a
snapshot afterwards. :meth:`~CheckpointStore.load_chain` returns the newest snapshot and the journal
entries after it (the newest wins, whatever order versions were written in);
:meth:`~CheckpointStore.expire` removes the sessions idle past a time to live.
:class:`DirectoryStore` keeps them in a directory (on shared storage when several processes take
over each other's sessions; creation is a hard link, atomic on local file systems and NFS); an
object store with conditional writes fits the same interface. :func:`open_store` checks that the
store can be written before a server relies on it.
"""

from __future__ import annotations

import hashlib
import logging
import os
import re
import stat
import tempfile
import time
from pathlib import Path
from typing import Protocol

from services.checkpoints.checks import MAX_CHECKPOINT_BYTES

log = logging.getLogger(__name__)
# listings a load tries while newer versions prune the ones it found
LOAD_ROUNDS = 8
# of a session, the latest ones kept (the one before the latest: for a reader mid-switch)
KEEP_VERSIONS = 2
_CHECKPOINT = re.compile(r"[0-9a-f]{32}-\d{12}\.(ckpt|jrnl|claim)")
_EDGE = re.compile(r"[0-9a-f]{32}")


class CheckpointStoreError(RuntimeError):
    """The store cannot be used; the message is one line."""


class CheckpointStore(Protocol):
    """Where session checkpoints live, shared by every process that may take a session over
    (``location`` names it in logs). Writes are whole: a reader sees a version completely or not at
    all."""

    location: str

    def create(self, edge_id: str, session_id: str, version: int, data: bytes) -> bool:
        """Store ``data`` as the snapshot of ``version`` of the session; False (and nothing
        written) when that version has one."""
        ...

    def append(self, edge_id: str, session_id: str, version: int, data: bytes) -> bool:
        """Store ``data`` as the journal entry of ``version`` of the session; False (and nothing
        written) when that version is journaled, claimed or snapshotted already."""
        ...

    def claim(self, edge_id: str, session_id: str, version: int) -> bool:
        """Reserve ``version`` of the session for this writer before its checkpoint is written;
        False when another writer reserved or stored it already (a few bytes: cheap enough for an
        answer to wait on)."""
        ...

    def load(self, edge_id: str, session_id: str) -> bytes | None:
        """The session's newest record (its snapshot where the newest version has one, else its
        journal entry), or None where it has none."""
        ...

    def load_chain(self, edge_id: str, session_id: str, until: int | None = None) -> list[bytes]:
        """The session's newest snapshot (of a version up to ``until``, if given) followed by the
        journal entries of later versions (up to ``until``), oldest first (empty where it has no
        such snapshot)."""
        ...

    def truncate(self, edge_id: str, session_id: str, after: int) -> int:
        """Remove the session's snapshots, entries and claims of versions after ``after`` (versions
        its edge never received); how many went."""
        ...

    def latest(self, edge_id: str, session_id: str) -> int | None:
        """The newest version the session has a snapshot or journal entry of (without reading it),
        or None where it has none."""
        ...

    def forget_others(self, edge_id: str, session_id: str) -> None:
        """Remove the checkpoints of the edge's other (earlier) sessions."""
        ...

    def expire(self, ttl: float) -> int:
        """Remove the checkpoints of sessions idle for more than ``ttl`` seconds (no file of the
        session written since), each session whole; how many files went."""
        ...


def _name(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()[:32]


class DirectoryStore:
    """``DIR/<edge hash>/<session hash>-<version>.ckpt`` (snapshots) and ``.jrnl`` (journal
    entries; hashes: any id is a safe name); each written to a temporary file and linked into
    place, which fails when that name exists.

    Only regular files named exactly so count: anything else in the directory (other names,
    symbolic links, directories, FIFOs) is ignored, and a checkpoint larger than ``max_bytes`` is
    passed over with a warning, never read."""

    def __init__(self, directory: Path, max_bytes: int = MAX_CHECKPOINT_BYTES) -> None:
        self.directory = Path(directory)
        self.location = str(self.directory)
        self.max_bytes = max_bytes

    def _versions(
        self, edge_id: str, session_id: str, kind: str = "ckpt"
    ) -> list[tuple[int, Path]]:
        """The session's checkpoints (``kind`` "claim": reservations) by version: regular files
        named ``<session hash>-<12 digits>.<kind>``."""
        pattern = re.compile(re.escape(_name(session_id)) + r"-(\d{12})\." + kind)
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

    def _link(self, edge_id: str, name: str, data: bytes) -> bool:
        """Write ``data`` to a temporary file in the edge's folder and link it into place as
        ``name``; False (and nothing left behind) when ``name`` exists."""
        folder = self.directory / _name(edge_id)
        for attempt in range(2):
            folder.mkdir(parents=True, exist_ok=True)
            try:
                fd, temporary = tempfile.mkstemp(dir=folder, prefix=".partial-")
                break
            except FileNotFoundError:
                # removed meanwhile by expire(), as the edge had been idle
                if attempt:
                    raise
        try:
            with os.fdopen(fd, "wb") as out:
                out.write(data)
            try:
                os.link(temporary, folder / name)
            except FileExistsError:
                return False
        finally:
            Path(temporary).unlink(missing_ok=True)
        return True

    def _exists(self, edge_id: str, session_id: str, version: int, *kinds: str) -> bool:
        folder = self.directory / _name(edge_id)
        return any((folder / f"{_name(session_id)}-{version:012d}.{k}").exists() for k in kinds)

    def claim(self, edge_id: str, session_id: str, version: int) -> bool:
        if self._exists(edge_id, session_id, version, "ckpt", "jrnl"):
            return False
        return self._link(edge_id, f"{_name(session_id)}-{version:012d}.claim", b"")

    def append(self, edge_id: str, session_id: str, version: int, data: bytes) -> bool:
        if self._exists(edge_id, session_id, version, "ckpt", "claim"):
            return False
        return self._link(edge_id, f"{_name(session_id)}-{version:012d}.jrnl", data)

    def create(self, edge_id: str, session_id: str, version: int, data: bytes) -> bool:
        if not self._link(edge_id, f"{_name(session_id)}-{version:012d}.ckpt", data):
            return False
        versions = self._versions(edge_id, session_id)
        for _, old in versions[:-KEEP_VERSIONS]:
            old.unlink(missing_ok=True)
        # the chain of the oldest snapshot kept (for a reader mid-switch) starts after it
        oldest_kept = versions[-KEEP_VERSIONS:][0][0]
        for kind in ("jrnl", "claim"):
            for version_of, old in self._versions(edge_id, session_id, kind):
                if version_of < oldest_kept or (kind == "jrnl" and version_of == oldest_kept):
                    old.unlink(missing_ok=True)
        return True

    def latest(self, edge_id: str, session_id: str) -> int | None:
        versions = self._versions(edge_id, session_id) + self._versions(edge_id, session_id, "jrnl")
        return max(versions)[0] if versions else None

    def load(self, edge_id: str, session_id: str) -> bytes | None:
        # a version pruned by a newer version's writer meanwhile: list again (the newer one is
        # there); a few rounds at most, as each needs another writer to have stored a version
        # meanwhile
        for _ in range(LOAD_ROUNDS):
            snapshots = self._versions(edge_id, session_id)
            entries = self._versions(edge_id, session_id, "jrnl")
            newest = max([*snapshots, *entries], default=None, key=lambda found: found[0])
            if newest is None:
                return None
            path = snapshots[-1][1] if snapshots and snapshots[-1][0] == newest[0] else newest[1]
            try:
                return self._read(path)
            except FileNotFoundError:
                continue
        return None

    def load_chain(self, edge_id: str, session_id: str, until: int | None = None) -> list[bytes]:
        last = until if until is not None else float("inf")
        for _ in range(LOAD_ROUNDS):
            snapshots = [found for found in self._versions(edge_id, session_id) if found[0] <= last]
            if not snapshots:
                return []
            base, path = snapshots[-1]
            later = [p for v, p in self._versions(edge_id, session_id, "jrnl") if base < v <= last]
            try:
                chain = [self._read(p) for p in (path, *later)]
            except FileNotFoundError:
                continue
            # a record passed over (not a regular file, too large) ends the chain before it
            if None in chain:
                chain = chain[: chain.index(None)]
            return [data for data in chain if data is not None]
        return []

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
        except OSError as exc:
            # a link put there since the listing (ELOOP), a directory...
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

    def truncate(self, edge_id: str, session_id: str, after: int) -> int:
        removed = 0
        for kind in ("ckpt", "jrnl", "claim"):
            for version, path in self._versions(edge_id, session_id, kind):
                if version > after:
                    path.unlink(missing_ok=True)
                    removed += 1
        return removed

    def forget_others(self, edge_id: str, session_id: str) -> None:
        keep = _name(session_id) + "-"
        folder = self.directory / _name(edge_id)
        for path in [*folder.glob("*.ckpt"), *folder.glob("*.jrnl"), *folder.glob("*.claim")]:
            if not path.name.startswith(keep) and not path.is_dir():
                path.unlink(missing_ok=True)

    def expire(self, ttl: float) -> int:
        """Remove the sessions last active more than ``ttl`` seconds ago, whole: a session's last
        activity is the newest write among its snapshots, journal entries and claims, so a session
        with any file younger than ``ttl`` keeps every file (its newest snapshot included), and one
        that goes loses its journal entries and claims before its snapshots (a reader never finds
        entries without the snapshot they follow). Parts of checkpoints whose writer died go by
        their own age, and the edges' folders left empty go too; how many files went. Only this
        store's names count: nothing else in the directory is touched, and no link is followed."""
        cutoff, removed = time.time() - ttl, 0
        try:
            with os.scandir(self.directory) as top:
                folders = [
                    entry.path
                    for entry in top
                    if _EDGE.fullmatch(entry.name) and entry.is_dir(follow_symlinks=False)
                ]
        except FileNotFoundError:
            return 0
        for folder in folders:
            for path in self._idle_files(folder, cutoff):
                try:
                    os.unlink(path)
                    removed += 1
                except FileNotFoundError:
                    pass
            try:
                os.rmdir(folder)
            except OSError:
                # not empty: a session still in use, or a file of someone else's
                pass
        return removed

    @staticmethod
    def _idle_files(folder: str, cutoff: float) -> list[str]:
        """The files of ``folder`` (one edge's) that :meth:`expire` removes at ``cutoff`` (a
        time): every file of each session whose newest file is older, its snapshots last, and the
        parts of checkpoints older than it."""
        sessions: dict[str, list[tuple[float, str, str]]] = {}
        partial: list[str] = []
        try:
            with os.scandir(folder) as entries:
                for entry in entries:
                    checkpoint = _CHECKPOINT.fullmatch(entry.name)
                    if not (checkpoint or entry.name.startswith(".partial-")):
                        continue
                    if not entry.is_file(follow_symlinks=False):
                        continue
                    try:
                        written = entry.stat(follow_symlinks=False).st_mtime
                    except FileNotFoundError:
                        continue
                    if checkpoint is None:
                        if written < cutoff:
                            partial.append(entry.path)
                        continue
                    files = sessions.setdefault(entry.name.partition("-")[0], [])
                    files.append((written, checkpoint.group(1), entry.path))
        except (FileNotFoundError, NotADirectoryError):
            return []
        idle = partial
        for files in sessions.values():
            if max(written for written, _, _ in files) >= cutoff:
                continue
            # journal entries and claims first, the snapshots they follow last
            idle.extend(path for _, kind, path in sorted(files, key=lambda f: f[1] == "ckpt"))
        return idle

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
                "fits services.checkpoints.store.CheckpointStore)"
            )
        location = path
    store = DirectoryStore(Path(location))
    store.check()
    return store
