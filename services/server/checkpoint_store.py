"""Where session checkpoints live: a key (the edge id) to the bytes of its latest checkpoint.

:class:`CheckpointStore` is the interface; :class:`DirectoryStore` keeps one file per edge in a
directory (on shared storage when several processes take over each other's sessions). An object
store fits the same interface (``save`` a whole object, ``load`` it or None). :func:`open_store`
checks that the store can be written before a server relies on it.
"""

from __future__ import annotations

import hashlib
import os
import tempfile
from pathlib import Path
from typing import Protocol


class CheckpointStoreError(RuntimeError):
    """The store cannot be used; the message is one line."""


class CheckpointStore(Protocol):
    """Whole-object writes and reads; a ``save`` replaces the key's checkpoint atomically (a reader sees
    the old bytes or the new ones, never a mix)."""

    location: str

    def save(self, key: str, data: bytes) -> None: ...

    def load(self, key: str) -> bytes | None:
        """The key's latest checkpoint, or None where there is none."""
        ...


class DirectoryStore:
    """One file per key under ``directory`` (named by the key's hash: any edge id is a safe name);
    written to a temporary file and renamed into place."""

    def __init__(self, directory: Path) -> None:
        self.directory = Path(directory)
        self.location = str(self.directory)

    def _path(self, key: str) -> Path:
        return self.directory / f"{hashlib.sha256(key.encode()).hexdigest()[:40]}.ckpt"

    def save(self, key: str, data: bytes) -> None:
        fd, temporary = tempfile.mkstemp(dir=self.directory, prefix=".partial-")
        try:
            with os.fdopen(fd, "wb") as out:
                out.write(data)
            os.replace(temporary, self._path(key))
        except BaseException:
            Path(temporary).unlink(missing_ok=True)
            raise

    def load(self, key: str) -> bytes | None:
        try:
            return self._path(key).read_bytes()
        except FileNotFoundError:
            return None

    def check(self) -> None:
        """Raise :class:`CheckpointStoreError` unless a checkpoint can be written and read back here."""
        try:
            self.directory.mkdir(parents=True, exist_ok=True)
            self.save(".probe", b"ok")
            if self.load(".probe") != b"ok":
                raise OSError("a probe written there does not read back")
            self._path(".probe").unlink()
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
                f"no checkpoint store for {scheme}:// (a directory path or file:// URL; an object store "
                "fits services.server.checkpoint_store.CheckpointStore)"
            )
        location = path
    store = DirectoryStore(Path(location))
    store.check()
    return store
