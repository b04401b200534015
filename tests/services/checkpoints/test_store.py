"""The directory checkpoint store: one checkpoint per session version, first writer wins, latest read back,
old versions and earlier sessions pruned, any id as a key, one clear error when unusable."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from services.checkpoints.store import CheckpointStoreError, DirectoryStore, _name, open_store


def _files(root: Path) -> list[Path]:
    return sorted(p for p in root.rglob("*") if p.is_file())


def test_the_first_writer_of_a_version_wins_and_the_latest_reads_back(tmp_path: Path) -> None:
    store = open_store(str(tmp_path / "sessions"))
    assert store.load("cam/../1", "s1") is None
    assert store.create("cam/../1", "s1", 0, b"v0")
    assert store.create("cam/../1", "s1", 1, b"v1")
    assert not store.create("cam/../1", "s1", 1, b"v1 again")  # a second answer to the same key frame
    assert store.load("cam/../1", "s1") == b"v1"
    assert store.create("cam/../1", "s1", 2, b"v2") and store.create("cam/../1", "s1", 3, b"v3")
    assert len(_files(tmp_path / "sessions")) == 2  # the two latest versions; no temporary files left
    assert store.create("cam \u00e9", "s1", 0, b"other edge") and store.load("cam \u00e9", "s1") == b"other edge"


def test_a_new_session_of_an_edge_forgets_the_earlier_ones(tmp_path: Path) -> None:
    store = DirectoryStore(tmp_path)
    store.create("cam", "old", 5, b"old")
    store.create("cam", "new", 0, b"new")
    store.forget_others("cam", "new")
    assert (store.load("cam", "old"), store.load("cam", "new")) == (None, b"new")


def test_file_urls_name_a_directory(tmp_path: Path) -> None:
    store = open_store(f"file://{tmp_path}/s")
    assert store.directory == tmp_path / "s" and _files(tmp_path / "s") == []  # the probe is gone


@pytest.mark.skipif(os.geteuid() == 0, reason="root writes into read-only directories")
def test_an_unwritable_store_is_one_clear_error(tmp_path: Path) -> None:
    locked = tmp_path / "locked"
    locked.mkdir(mode=0o500)
    with pytest.raises(CheckpointStoreError, match=r"^the checkpoint store '.*locked' cannot be used: "):
        open_store(str(locked))


def test_a_store_under_a_file_is_one_clear_error(tmp_path: Path) -> None:
    (tmp_path / "file").write_text("")
    with pytest.raises(CheckpointStoreError, match=r"cannot be used: "):
        DirectoryStore(tmp_path / "file" / "sessions").check()


def test_an_unknown_scheme_is_refused() -> None:
    with pytest.raises(CheckpointStoreError, match="no checkpoint store for s3://"):
        open_store("s3://bucket/sessions")


def _slot(store: DirectoryStore, edge_id: str, session_id: str) -> tuple[Path, str]:
    """The edge's folder and the session's file prefix in ``store`` (as the store names them)."""
    store.create(edge_id, session_id, 0, b"v0")
    (only,) = (store.directory / _name(edge_id)).iterdir()
    return only.parent, _name(session_id)


def test_stray_files_links_and_folders_are_ignored(tmp_path: Path) -> None:
    store = open_store(str(tmp_path / "sessions"))
    folder, prefix = _slot(store, "cam-1", "s1")
    elsewhere = tmp_path / "elsewhere.ckpt"
    elsewhere.write_bytes(b"not the store's")
    (folder / f"{prefix}-abc.ckpt").write_bytes(b"stray")
    (folder / f"{prefix}-000000000009.ckpt.bak").write_bytes(b"stray")
    (folder / f"{prefix}-000000000007.ckpt").symlink_to(elsewhere)
    # dangling
    (folder / f"{prefix}-000000000008.ckpt").symlink_to(tmp_path / "missing")
    (folder / f"{prefix}-000000000006.ckpt").mkdir()
    os.mkfifo(folder / f"{prefix}-000000000005.ckpt")
    assert store.load("cam-1", "s1") == b"v0"
    store.create("cam-1", "s1", 1, b"v1")
    store.forget_others("cam-1", "s2")
    assert elsewhere.read_bytes() == b"not the store's"


def test_a_checkpoint_over_the_size_bound_is_passed_over_unread(tmp_path: Path) -> None:
    store = DirectoryStore(tmp_path / "sessions", max_bytes=16)
    assert store.create("cam-1", "s1", 0, b"x" * 17)
    assert store.load("cam-1", "s1") is None


def test_journal_entries_follow_the_newest_snapshot_and_go_with_older_ones(tmp_path: Path) -> None:
    store = DirectoryStore(tmp_path)
    assert store.load_chain("cam", "s1") == []
    assert store.create("cam", "s1", 0, b"s0")
    for version in (1, 2, 3):
        assert store.append("cam", "s1", version, b"j%d" % version)
    # the first writer of a version wins; a version claimed or snapshotted takes no entry
    assert not store.append("cam", "s1", 3, b"j3 again")
    assert store.claim("cam", "s1", 4) and not store.append("cam", "s1", 4, b"j4")
    assert not store.claim("cam", "s1", 3)
    assert store.load_chain("cam", "s1") == [b"s0", b"j1", b"j2", b"j3"]
    assert (store.latest("cam", "s1"), store.load("cam", "s1")) == (3, b"j3")
    # a snapshot of a journaled version (written behind its answer) starts the chain there
    assert store.create("cam", "s1", 3, b"s3") and store.append("cam", "s1", 5, b"j5")
    assert store.load_chain("cam", "s1") == [b"s3", b"j5"]
    assert store.load("cam", "s1") == b"j5"
    assert store.create("cam", "s1", 5, b"s5")
    assert store.load("cam", "s1") == b"s5"  # a version's snapshot before its entry
    # kept: the snapshots 3 and 5 and what follows 3; gone: snapshot 0, entries 1-3, claim 4 is after 3
    names = sorted(p.name.rpartition("-")[2] for p in _files(tmp_path))
    assert names == ["000000000003.ckpt", "000000000004.claim", "000000000005.ckpt", "000000000005.jrnl"]
    store.forget_others("cam", "s2")
    assert _files(tmp_path) == []


def test_expiry_removes_journal_entries_too(tmp_path: Path) -> None:
    store = DirectoryStore(tmp_path)
    store.create("cam", "s1", 0, b"s0")
    store.append("cam", "s1", 1, b"j1")
    for path in _files(tmp_path):
        os.utime(path, (1, 1))
    assert store.expire(60.0) == 2 and _files(tmp_path) == []


def test_a_chain_can_end_at_a_version_and_versions_after_one_can_go(tmp_path: Path) -> None:
    store = DirectoryStore(tmp_path)
    store.create("cam", "s1", 0, b"s0")
    for version in (1, 2, 3):
        store.append("cam", "s1", version, b"j%d" % version)
    store.create("cam", "s1", 3, b"s3")
    assert store.load_chain("cam", "s1", until=2) == [b"s0", b"j1", b"j2"]
    assert store.load_chain("cam", "s1", until=3) == [b"s3"]
    assert store.truncate("cam", "s1", after=1) == 3  # entries 2 and 3, snapshot 3
    assert store.load_chain("cam", "s1") == [b"s0", b"j1"] and store.latest("cam", "s1") == 1


def _age(paths: list[Path], seconds: float) -> None:
    for path in paths:
        then = path.stat().st_mtime - seconds
        os.utime(path, (then, then))


def test_expiry_keeps_a_session_whose_journal_is_younger_than_the_ttl_whole(tmp_path: Path) -> None:
    # a key frame every 10 s, a snapshot every 16 versions: the snapshot outlives a 40 s TTL
    store = DirectoryStore(tmp_path)
    store.create("cam", "live", 0, b"s0")
    _age(_files(tmp_path), 100.0)
    store.append("cam", "live", 1, b"j1")
    store.claim("cam", "live", 2)
    _age([p for p in _files(tmp_path) if p.suffix != ".ckpt"], 30.0)
    assert store.expire(40.0) == 0
    assert store.load_chain("cam", "live") == [b"s0", b"j1"] and len(_files(tmp_path)) == 3


def test_expiry_removes_an_idle_session_whole_its_snapshot_last(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = DirectoryStore(tmp_path)
    store.create("cam", "idle", 0, b"s0")
    store.append("cam", "idle", 1, b"j1")
    store.claim("cam", "idle", 2)
    store.create("cam", "live", 0, b"other")
    (tmp_path / _name("cam") / ".partial-dead").write_bytes(b"half")
    (tmp_path / _name("cam") / ".partial-writing").write_bytes(b"half")
    _age([p for p in _files(tmp_path) if not p.name.startswith((_name("live"), ".partial-writing"))], 100.0)
    unlinked: list[str] = []
    unlink = os.unlink

    def recording(path: str) -> None:
        unlinked.append(Path(path).suffix or Path(path).name)
        unlink(path)

    monkeypatch.setattr(os, "unlink", recording)
    assert store.expire(40.0) == 4
    idle = [suffix for suffix in unlinked if suffix.startswith(".") and suffix[1:] in ("ckpt", "jrnl", "claim")]
    assert sorted(idle[:2]) == [".claim", ".jrnl"] and idle[2:] == [".ckpt"]
    assert store.load_chain("cam", "idle") == [] and store.load("cam", "live") == b"other"
    assert sorted(p.name for p in _files(tmp_path)) == sorted(
        [f"{_name('live')}-000000000000.ckpt", ".partial-writing"]
    )
