"""Fetching one file out of a registry package: kept when its digest matches, refused when it differs."""

from __future__ import annotations

from pathlib import Path

import pytest

from shadowtutor.fetch import FetchError, PackagedFile, _extract, fetch_packaged_file, sha256_of


def test_a_file_already_there_with_the_right_digest_is_kept_without_fetching(tmp_path: Path) -> None:
    out = tmp_path / "clip.avi"
    out.write_bytes(b"frames")
    item = PackagedFile(
        registry="debian",
        package="no-such-package-shadowtutor",
        member="clip.avi",
        sha256=sha256_of(out),
        licence="MIT",
    )
    assert fetch_packaged_file(item, out) == out


def test_a_package_that_cannot_be_fetched_is_a_clear_error_and_leaves_nothing(tmp_path: Path) -> None:
    out = tmp_path / "sub" / "clip.avi"
    item = PackagedFile(
        registry="debian", package="no-such-package-shadowtutor", member="clip.avi", sha256="0" * 64, licence="MIT"
    )
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


def test_files_of_one_package_share_one_download(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The registry client is replaced by a local wheel maker (no registry in a unit test); extraction is real."""
    import hashlib
    import zipfile

    from shadowtutor import fetch

    contents = {"pkg/a.jpg": b"a", "pkg/b.jpg": b"bb", "other/c.jpg": b"ccc"}
    downloads: list[str] = []

    def fake_download(item: PackagedFile, workdir: Path) -> Path:
        downloads.append(item.package)
        wheel = workdir / f"{item.package}-1.0-py3-none-any.whl"
        with zipfile.ZipFile(wheel, "w") as archive:
            for member, data in contents.items():
                archive.writestr(member, data)
        return wheel

    monkeypatch.setattr(fetch, "_download", fake_download)

    def item(package: str, member: str) -> PackagedFile:
        return PackagedFile(
            registry="pypi",
            package=package,
            member=member,
            sha256=hashlib.sha256(contents[member]).hexdigest(),
            licence="MIT",
        )

    wanted = [
        (item("one", "pkg/a.jpg"), tmp_path / "a.jpg"),
        (item("one", "pkg/b.jpg"), tmp_path / "b.jpg"),
        (item("two", "other/c.jpg"), tmp_path / "c.jpg"),
    ]
    assert fetch.fetch_packaged_files(wanted) == [out for _, out in wanted]
    assert sorted(downloads) == ["one", "two"]
    assert [out.read_bytes() for _, out in wanted] == [b"a", b"bb", b"ccc"]
    assert fetch.fetch_packaged_files(wanted) and len(downloads) == 2  # all there: nothing fetched again

    bad = PackagedFile(registry="pypi", package="one", member="pkg/a.jpg", sha256="0" * 64, licence="MIT")
    with pytest.raises(FetchError, match="pkg/a.jpg from one has sha256"):
        fetch.fetch_packaged_files([(bad, tmp_path / "bad.jpg")])
    assert not (tmp_path / "bad.jpg").exists()
