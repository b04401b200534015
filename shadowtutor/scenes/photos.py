"""The real photographs the scenes are built from: those scikit-image ships inside its wheel.

Some of ``skimage.data``'s images are fetched with pooch on first use; only images that load
without a network are listed here (a test checks that each one does).
"""

from __future__ import annotations

from functools import cache

import cv2
import numpy as np

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

Region = tuple[float, float, float, float]  # x0, y0, x1, y1 as fractions of a photo
FULL_PHOTO: Region = (0.0, 0.0, 1.0, 1.0)


class PhotoError(RuntimeError):
    """A photograph could not be loaded from scikit-image's bundled data."""


@cache
def load_photo(name: str) -> np.ndarray:
    """The photograph ``name`` as a BGR uint8 (H, W, 3) array (grey images are replicated)."""
    if name not in PHOTOS:
        raise PhotoError(f"unknown photo {name!r}; known: {sorted(PHOTOS)}")
    import skimage.data

    try:
        image = np.asarray(getattr(skimage.data, name)())
    except Exception as exc:  # pooch-backed images raise ModuleNotFoundError or network errors
        raise PhotoError(f"scikit-image cannot load {name!r} offline: {exc}") from exc
    if image.dtype != np.uint8:
        raise PhotoError(f"photo {name!r} is {image.dtype}, expected uint8")
    if image.ndim == 2:
        bgr = np.ascontiguousarray(np.repeat(image[:, :, None], 3, axis=2))
    else:
        bgr = cv2.cvtColor(image[:, :, :3], cv2.COLOR_RGB2BGR)
    bgr.setflags(write=False)  # cached and shared: nobody may paint on it
    return bgr


def random_crop(rng: np.random.Generator, name: str, size: tuple[int, int],
                region: Region = FULL_PHOTO, coverage: tuple[float, float] = (0.4, 1.0)) -> np.ndarray:
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
    crop = photo[int(cy):int(cy + crop_h), int(cx):int(cx + crop_w)]
    grow = size[0] > crop.shape[1]
    return cv2.resize(crop, size, interpolation=cv2.INTER_CUBIC if grow else cv2.INTER_AREA)
