"""The photographs: the training ones ship inside scikit-image and load without a network; the held-out
ones come out of a Debian package at setup."""

from __future__ import annotations

import socket
from pathlib import Path

import cv2
import numpy as np
import pytest

from shadowtutor.fetch import FetchError
from shadowtutor_lab.scenes.photos import HELD_OUT_PHOTOS, PHOTOS, PhotoError, load_photo, random_crop


@pytest.mark.parametrize("name", sorted(PHOTOS))
def test_each_photo_is_bundled_and_loads_offline(name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    import skimage.data

    assert list(Path(skimage.data.__file__).parent.glob(f"{name}.*")), f"{name} is not inside the wheel"

    def no_network(*args: object, **kwargs: object) -> None:
        raise OSError("the network is off in this test")

    monkeypatch.setattr(socket.socket, "connect", no_network)
    photo = load_photo.__wrapped__(name)  # bypass the cache: really load it now
    assert photo.dtype == np.uint8 and photo.ndim == 3 and photo.shape[2] == 3 and min(photo.shape[:2]) >= 256
    assert not photo.flags.writeable  # the cache is shared


def test_colour_photos_come_back_as_bgr() -> None:
    import skimage.data

    np.testing.assert_array_equal(load_photo("coffee")[:, :, ::-1], skimage.data.coffee())


def test_unknown_photo() -> None:
    with pytest.raises(PhotoError, match="unknown photo 'eagle'"):
        load_photo("eagle")


def test_random_crop_has_the_asked_size_and_is_deterministic() -> None:
    a = random_crop(np.random.default_rng(3), "rocket", (50, 20), region=(0.0, 0.0, 0.5, 0.5))
    b = random_crop(np.random.default_rng(3), "rocket", (50, 20), region=(0.0, 0.0, 0.5, 0.5))
    assert a.shape == (20, 50, 3) and a.dtype == np.uint8
    np.testing.assert_array_equal(a, b)


def test_held_out_photos_are_apart_from_the_training_photos_and_name_their_package() -> None:
    assert not set(HELD_OUT_PHOTOS) & set(PHOTOS)
    for photo in HELD_OUT_PHOTOS.values():
        assert photo.file.registry == "debian" and photo.file.licence and len(photo.file.sha256) == 64
        assert photo.description


def test_an_unfetched_held_out_photo_says_what_to_do(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SHADOWTUTOR_ASSETS_DIR", str(tmp_path))
    with pytest.raises(FetchError, match="shadowtutor scenes fetch-photos"):
        load_photo.__wrapped__("leuven-a")


def test_held_out_photos_load_as_bgr(held_out_photos: dict[str, Path]) -> None:
    for name, path in held_out_photos.items():
        photo = load_photo.__wrapped__(name)
        assert photo.dtype == np.uint8 and photo.shape[2] == 3 and min(photo.shape[:2]) >= 256
        np.testing.assert_array_equal(photo, cv2.imread(str(path)))
        assert not photo.flags.writeable
