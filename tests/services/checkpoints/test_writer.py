"""Checkpoints written behind the answers: at once for the caller, the newest of a session, the previous one
kept when a write fails, and sessions idle past the time to live swept from the store (a real directory)."""

from __future__ import annotations

import hashlib
import os
import threading
import time
from pathlib import Path

from services.checkpoints.store import DirectoryStore
from services.checkpoints.writer import CheckpointWriter, Written


def _blocked(release: threading.Event, data: bytes) -> bytes:
    release.wait(10)
    return data


def test_submit_returns_before_the_checkpoint_is_written(tmp_path: Path) -> None:
    store, release = DirectoryStore(tmp_path), threading.Event()
    writer = CheckpointWriter(store).start()
    results: list[Written] = []
    start = time.monotonic()
    writer.submit("cam", "s", 1, lambda: _blocked(release, b"one"), results.append)
    assert time.monotonic() - start < 1.0 and store.load("cam", "s") is None
    assert not writer.flush(timeout=0.2)
    release.set()
    assert writer.close()
    assert (
        store.load("cam", "s") == b"one" and results and results[0].stored and results[0].size == 3
    )


def test_the_newest_version_of_a_session_wins_over_one_still_waiting(tmp_path: Path) -> None:
    store, release = DirectoryStore(tmp_path), threading.Event()
    writer = CheckpointWriter(store).start()
    encoded: list[int] = []
    writer.submit("cam", "busy", 1, lambda: _blocked(release, b"busy"))
    time.sleep(0.1)
    for version in (1, 2, 3):
        writer.submit("cam", "s", version, lambda v=version: encoded.append(v) or str(v).encode())
    writer.submit(
        "cam", "s", 2, lambda: encoded.append(-2) or b"late"
    )  # older than the one waiting
    release.set()
    assert writer.close()
    assert encoded == [3] and store.load("cam", "s") == b"3"


def test_a_failed_write_leaves_the_previous_checkpoint(tmp_path: Path) -> None:
    store = DirectoryStore(tmp_path)
    writer = CheckpointWriter(store).start()
    writer.submit("cam", "s", 1, lambda: b"first")
    assert writer.flush(5)

    def broken() -> bytes:
        raise RuntimeError("the process died mid-encode")

    writer.submit("cam", "s", 2, broken)
    writer.submit("cam", "other", 1, lambda: b"other")
    assert writer.close()
    assert store.load("cam", "s") == b"first" and store.load("cam", "other") == b"other"


def test_a_write_cut_short_leaves_the_previous_checkpoint(tmp_path: Path) -> None:
    """A process killed mid-write leaves its temporary file, never a checkpoint: readers see the previous."""
    store = DirectoryStore(tmp_path)
    assert store.create("cam", "s", 1, b"first")
    folder = next(tmp_path.iterdir())
    (folder / ".partial-killed").write_bytes(b"half of version 2")
    assert store.load("cam", "s") == b"first"


def test_sessions_idle_past_the_ttl_are_swept_and_nothing_else(tmp_path: Path) -> None:
    store = DirectoryStore(tmp_path)
    for edge in ("gone", "live"):
        assert store.create(edge, "s", 1, edge.encode())
    assert store.claim("gone", "s", 2)
    gone = tmp_path / hashlib.sha256(b"gone").hexdigest()[:32]
    (gone / ".partial-killed").write_bytes(b"half")
    an_hour_ago = time.time() - 3600
    for path in gone.iterdir():
        os.utime(path, (an_hour_ago, an_hour_ago))
    (tmp_path / "notes.txt").write_text("someone else's")
    os.utime(tmp_path / "notes.txt", (an_hour_ago, an_hour_ago))
    writer = CheckpointWriter(store, ttl=600.0, sweep_seconds=0.05).start()
    deadline = time.monotonic() + 10
    while gone.exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    writer.close()
    assert not gone.exists() and store.load("gone", "s") is None
    assert store.load("live", "s") == b"live" and (tmp_path / "notes.txt").exists()


def test_a_version_is_claimed_by_one_writer_only(tmp_path: Path) -> None:
    store = DirectoryStore(tmp_path)
    assert store.claim("cam", "s", 1) and not store.claim("cam", "s", 1)
    assert store.create("cam", "s", 1, b"one") and not store.create("cam", "s", 1, b"again")
    assert (
        store.claim("cam", "s", 2)
        and store.create("cam", "s", 2, b"two")
        and store.create("cam", "s", 3, b"3")
    )
    assert not store.claim("cam", "s", 3)  # stored without a claim: taken all the same
    assert store.load("cam", "s") == b"3"
    names = sorted(p.name.rpartition("-")[2] for p in next(tmp_path.iterdir()).iterdir())
    assert names == [
        "000000000002.ckpt",
        "000000000002.claim",
        "000000000003.ckpt",
    ]  # older ones pruned


def test_a_new_ttl_takes_effect_at_a_sweep_due_within_the_new_period(tmp_path: Path) -> None:
    store = DirectoryStore(tmp_path)
    assert store.create("cam", "s", 1, b"one")
    a_minute_ago = time.time() - 60
    for path in tmp_path.rglob("*.ckpt"):
        os.utime(path, (a_minute_ago, a_minute_ago))
    writer = CheckpointWriter(store, ttl=3600.0, sweep_seconds=300.0).start()
    time.sleep(0.2)  # the first sweep ran (at start), the next one is 300 s away
    assert store.load("cam", "s") == b"one"
    writer.retain(30.0, 0.1)
    deadline = time.monotonic() + 5
    while store.load("cam", "s") is not None and time.monotonic() < deadline:
        time.sleep(0.05)
    writer.close()
    assert store.load("cam", "s") is None and time.monotonic() < deadline
