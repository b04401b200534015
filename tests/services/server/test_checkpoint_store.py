"""The directory checkpoint store: atomic replace, any edge id as a key, one clear error when unusable."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from services.server.checkpoint_store import CheckpointStoreError, DirectoryStore, open_store


def test_saves_replace_and_load_back_under_any_edge_id(tmp_path: Path) -> None:
    store = open_store(str(tmp_path / "sessions"))
    assert store.load("cam/../1") is None
    store.save("cam/../1", b"one")
    store.save("cam/../1", b"two")
    store.save("cam 2 \u00e9", b"three")
    assert (store.load("cam/../1"), store.load("cam 2 \u00e9")) == (b"two", b"three")
    assert sorted(p.suffix for p in (tmp_path / "sessions").iterdir()) == [".ckpt", ".ckpt"]  # no partial files


def test_file_urls_name_a_directory(tmp_path: Path) -> None:
    assert open_store(f"file://{tmp_path}/s").directory == tmp_path / "s"


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
