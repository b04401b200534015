"""The on-disk format of a benchmark scene, and reading it back.

A scene is a directory::

    DIR/video.mp4          the frames, BGR, MPEG-4 part 2 ('mp4v', written by cv2.VideoWriter), at
    ``fps`` DIR/labels/000000.png  one 8-bit single-channel PNG per frame (lossless); pixel values
    are indices DIR/labels/000001.png  into ``class_names``; ``cv2.imread(p, cv2.IMREAD_UNCHANGED)``
    gives (H, W) uint8 ... DIR/scene.json         the metadata below DIR/instances.json     the
    boxes of each frame's instances (optional: scenes made before it lack it)

``scene.json`` holds one object::

    {"format": "shadowtutor-scene/1",
     "preset": "moving-street",          # the preset it was made with
     "seed": 1, "frames": 120,           # frame count of the video and of labels/
     "width": 640, "height": 360, "fps": 30,
     "class_names": ["person", ..., "background"],   # shadowtutor.classes.LVS_CLASSES
     "camera": "fixed" | "moving" | "egocentric",
     "category": "animals" | "people" | "street",
     "cuts": [240, 480],                 # frames that start a new shot (new background and objects)
     "description": "...",
     "source_frames": 300,               # only in a re-sampled scene: the video's frames
     "source_fps": 30,                   # and frame rate it was re-sampled from
     "backgrounds": "held-out"}          # only when pre-training never saw the backgrounds

A re-sampled scene holds the source frames nearest to the
instants ``k / fps``; ``source_frames`` and ``source_fps`` say what it was re-sampled from.

``instances.json`` holds ``{"format": "shadowtutor-instances/1", "frames": [[[c, x0, y0, x1, y1],
...], ...]}``: per frame, each visible instance's class index and pixel box (``x1``, ``y1``
exclusive).

Label ``i`` is the ground truth of frame ``i``: the class of the top-most object covering a pixel,
``background`` where none does. Labels are never anti-aliased; the video is lossy (the labels are
exact for the frames *before* encoding).

:class:`Scene` reads a scene and can resize on the fly (frames by area interpolation, labels by
nearest neighbour) so a harness can run at a reduced resolution.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass, fields
from pathlib import Path
from typing import Any

import cv2
import numpy as np

SCENE_FORMAT = "shadowtutor-scene/1"
VIDEO_NAME = "video.mp4"
LABELS_DIR = "labels"
META_NAME = "scene.json"
INSTANCES_NAME = "instances.json"
INSTANCES_FORMAT = "shadowtutor-instances/1"
CAMERA_REGIMES = ("fixed", "moving", "egocentric")

# (width, height), as OpenCV takes it
Size = tuple[int, int]


class SceneError(ValueError):
    """A scene directory is missing, incomplete or inconsistent."""


_OPTIONAL_FIELDS = ("source_frames", "source_fps", "backgrounds", "cut_interval")
# the background set pre-training sees; a scene.json names any other
DEFAULT_BACKGROUNDS = "training"


def _number(value: float) -> int | float:
    return int(value) if float(value).is_integer() else value


def label_path(scene_dir: Path, index: int) -> Path:
    return scene_dir / LABELS_DIR / f"{index:06d}.png"


@dataclass(kw_only=True, frozen=True)
class SceneMeta:
    """The contents of ``scene.json``."""

    preset: str
    seed: int
    frames: int
    width: int
    height: int
    fps: float
    class_names: tuple[str, ...]
    camera: str
    category: str
    cuts: tuple[int, ...]
    description: str
    format: str = SCENE_FORMAT
    # a re-sampled scene's source: its frame count and rate
    source_frames: int | None = None
    source_fps: float | None = None
    # a generated scene's background set; written only when another
    backgrounds: str = DEFAULT_BACKGROUNDS
    # frames between cuts (0: none) when not the preset's; written only then
    cut_interval: int | None = None

    def __post_init__(self) -> None:
        if self.format != SCENE_FORMAT:
            raise SceneError(
                f"unknown scene format {self.format!r} (this reader knows {SCENE_FORMAT!r})"
            )
        if self.frames <= 0 or self.width <= 0 or self.height <= 0 or self.fps <= 0:
            raise SceneError(
                f"frames, width, height and fps must be positive, got {self.frames}, {self.width}, "
                f"{self.height}, {self.fps}"
            )
        if self.camera not in CAMERA_REGIMES:
            raise SceneError(f"camera must be one of {CAMERA_REGIMES}, got {self.camera!r}")
        if not 2 <= len(self.class_names) <= 256:
            raise SceneError(
                f"need 2..256 class names for 8-bit labels, got {len(self.class_names)}"
            )
        if any(not 0 < c < self.frames for c in self.cuts):
            raise SceneError(f"cuts {list(self.cuts)} must lie in 1..{self.frames - 1}")
        if self.cut_interval is not None and self.cut_interval < 0:
            raise SceneError(f"cut_interval must be >= 0, got {self.cut_interval}")
        if (self.source_frames is None) != (self.source_fps is None):
            raise SceneError("a re-sampled scene names both source_frames and source_fps")
        if (
            self.source_frames is not None
            and self.source_fps is not None
            and not (self.source_frames >= self.frames and self.source_fps >= self.fps)
        ):
            raise SceneError(
                f"a re-sampled scene ({self.frames} frames at {self.fps:g} fps) needs a source "
                "with "
                f"as many frames and as high a rate, got {self.source_frames} at "
                f"{self.source_fps:g}"
            )

    @property
    def resampled(self) -> bool:
        return self.source_fps is not None

    @property
    def size(self) -> Size:
        return (self.width, self.height)

    def to_json(self) -> str:
        data = asdict(self)
        data["class_names"] = list(self.class_names)
        data["cuts"] = list(self.cuts)
        data["fps"] = _number(self.fps)
        order = [
            "format",
            "preset",
            "seed",
            "frames",
            "width",
            "height",
            "fps",
            "class_names",
            "camera",
            "category",
            "cuts",
            "description",
        ]
        if self.source_fps is not None:
            data["source_fps"] = _number(self.source_fps)
            order += ["source_frames", "source_fps"]
        if self.backgrounds != DEFAULT_BACKGROUNDS:
            order.append("backgrounds")
        if self.cut_interval is not None:
            order.append("cut_interval")
        return json.dumps({k: data[k] for k in order}, indent=2) + "\n"

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> SceneMeta:
        missing = sorted(
            {f.name for f in fields(cls) if f.name not in _OPTIONAL_FIELDS} - data.keys()
        )
        if missing:
            raise SceneError(f"scene.json lacks {missing}")
        try:
            values: dict[str, Any] = dict(
                preset=str(data["preset"]),
                seed=int(data["seed"]),
                frames=int(data["frames"]),
                width=int(data["width"]),
                height=int(data["height"]),
                fps=float(data["fps"]),
                class_names=tuple(str(n) for n in data["class_names"]),
                camera=str(data["camera"]),
                category=str(data["category"]),
                cuts=tuple(int(c) for c in data["cuts"]),
                description=str(data["description"]),
                format=str(data["format"]),
            )
            if "source_frames" in data or "source_fps" in data:
                values["source_frames"] = int(data["source_frames"])
                values["source_fps"] = float(data["source_fps"])
            if "backgrounds" in data:
                values["backgrounds"] = str(data["backgrounds"])
            if "cut_interval" in data:
                values["cut_interval"] = int(data["cut_interval"])
        except (KeyError, TypeError, ValueError) as exc:
            # KeyError: one of source_frames/source_fps alone
            raise SceneError(f"scene.json has a field of the wrong type: {exc}") from exc
        return cls(**values)

    @classmethod
    def read(cls, scene_dir: Path) -> SceneMeta:
        path = scene_dir / META_NAME
        if not path.is_file():
            raise SceneError(f"{scene_dir} is not a scene: {META_NAME} is missing")
        try:
            data = json.loads(path.read_text())
        except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
            raise SceneError(f"cannot read {path}: {exc}") from exc
        if not isinstance(data, dict):
            raise SceneError(f"{path} holds a {type(data).__name__}, not an object")
        return cls.from_dict(data)


def instances_json(frames: list[np.ndarray]) -> str:
    """``instances.json``'s text for per-frame ``(N, 5)`` rows ``class, x0, y0, x1, y1``."""
    return json.dumps(
        {"format": INSTANCES_FORMAT, "frames": [f.tolist() for f in frames]}, separators=(",", ":")
    )


def read_instances(path: Path, frames: int) -> list[np.ndarray]:
    """Per-frame ``(N, 5)`` int64 rows of an ``instances.json`` written for ``frames`` frames."""
    try:
        data = json.loads(path.read_text())
        if data.get("format") != INSTANCES_FORMAT or len(data["frames"]) != frames:
            raise SceneError(f"{path}: not {INSTANCES_FORMAT} with {frames} frames")
        return [np.array(rows, np.int64).reshape(-1, 5) for rows in data["frames"]]
    except (
        OSError,
        UnicodeDecodeError,
        json.JSONDecodeError,
        AttributeError,
        KeyError,
        TypeError,
        ValueError,
    ) as exc:
        raise SceneError(f"cannot read {path}: {exc}") from exc


def _check_size(size: Size | None) -> None:
    if size is not None and (len(size) != 2 or min(size) <= 0):
        raise ValueError(f"size must be (width, height) with positive values, got {size}")


class Scene:
    """A scene directory opened for reading; see the module docstring for the format."""

    def __init__(self, directory: Path, meta: SceneMeta) -> None:
        self.directory = directory
        self.meta = meta
        self._instances: list[np.ndarray] | None = None

    @classmethod
    def open(cls, directory: str | Path) -> Scene:
        """Open and check a scene: metadata, label count, and the video's size and frame count."""
        directory = Path(directory)
        if not directory.is_dir():
            raise SceneError(f"scene directory not found: {directory}")
        meta = SceneMeta.read(directory)
        labels = sorted((directory / LABELS_DIR).glob("*.png"))
        if len(labels) != meta.frames or not label_path(directory, meta.frames - 1).is_file():
            raise SceneError(
                f"{directory}: scene.json says {meta.frames} frames but {LABELS_DIR}/ holds "
                f"{len(labels)} label files (expected 000000.png .. {meta.frames - 1:06d}.png)"
            )
        video = directory / VIDEO_NAME
        cap = cv2.VideoCapture(str(video))
        try:
            if not video.is_file() or not cap.isOpened():
                raise SceneError(f"{directory}: cannot open {VIDEO_NAME}")
            count = int(cap.get(cv2.CAP_PROP_FRAME_COUNT))
            size = (int(cap.get(cv2.CAP_PROP_FRAME_WIDTH)), int(cap.get(cv2.CAP_PROP_FRAME_HEIGHT)))
        finally:
            cap.release()
        if count != meta.frames:
            raise SceneError(
                f"{directory}: {VIDEO_NAME} has {count} frames, scene.json says {meta.frames}"
            )
        if size != meta.size:
            raise SceneError(
                f"{directory}: {VIDEO_NAME} is {size[0]}x{size[1]}, scene.json says "
                f"{meta.width}x{meta.height}"
            )
        return cls(directory, meta)

    def __len__(self) -> int:
        return self.meta.frames

    def frames(self, size: Size | None = None) -> Iterator[np.ndarray]:
        """The video's BGR uint8 frames in order, resized (area interpolation) when ``size`` is
        given."""
        _check_size(size)
        cap = cv2.VideoCapture(str(self.directory / VIDEO_NAME))
        try:
            for index in range(self.meta.frames):
                ok, frame = cap.read()
                if not ok:
                    raise SceneError(
                        f"{self.directory}: {VIDEO_NAME} ended after {index} frames, scene.json "
                        f"says {self.meta.frames}"
                    )
                if size is not None and (frame.shape[1], frame.shape[0]) != tuple(size):
                    frame = cv2.resize(frame, tuple(size), interpolation=cv2.INTER_AREA)
                yield frame
        finally:
            cap.release()

    def label(self, index: int, size: Size | None = None) -> np.ndarray:
        """Label map of frame ``index``: uint8 (H, W) class indices, resized by nearest
        neighbour."""
        _check_size(size)
        if not 0 <= index < self.meta.frames:
            raise IndexError(f"frame {index} out of range for a scene of {self.meta.frames} frames")
        path = label_path(self.directory, index)
        label = cv2.imread(str(path), cv2.IMREAD_UNCHANGED)
        if label is None:
            raise SceneError(f"cannot read label {path}")
        expected = (self.meta.height, self.meta.width)
        if label.dtype != np.uint8 or label.shape != expected:
            raise SceneError(
                f"label {path} is {label.dtype} {label.shape}, expected uint8 {expected}"
            )
        if int(label.max()) >= len(self.meta.class_names):
            raise SceneError(
                f"label {path} holds class {int(label.max())}, but the scene has only "
                f"{len(self.meta.class_names)} classes"
            )
        if size is not None and (label.shape[1], label.shape[0]) != tuple(size):
            label = cv2.resize(label, tuple(size), interpolation=cv2.INTER_NEAREST)
        return label

    @property
    def has_instances(self) -> bool:
        return (self.directory / INSTANCES_NAME).is_file()

    def boxes(self, index: int, size: Size | None = None) -> np.ndarray:
        """Frame ``index``'s instance boxes ``(N, 4)`` float32 ``x0, y0, x1, y1``, scaled to
        ``size``."""
        _check_size(size)
        if not 0 <= index < self.meta.frames:
            raise IndexError(f"frame {index} out of range for a scene of {self.meta.frames} frames")
        if self._instances is None:
            if not self.has_instances:
                raise SceneError(
                    f"{self.directory} has no {INSTANCES_NAME} (a scene made before it existed)"
                )
            self._instances = read_instances(self.directory / INSTANCES_NAME, self.meta.frames)
        boxes = self._instances[index][:, 1:].astype(np.float32)
        if size is not None:
            boxes *= np.array(
                [size[0] / self.meta.width, size[1] / self.meta.height] * 2, np.float32
            )
        return boxes

    def labels(self, size: Size | None = None) -> Iterator[np.ndarray]:
        for index in range(self.meta.frames):
            yield self.label(index, size)


@contextmanager
def scene_written_into(directory: Path) -> Iterator[Path]:
    """A fresh folder beside ``directory`` to write a scene into; when the block ends, the scene is
    checked (:meth:`Scene.open`) and moved into place, replacing what was there. On any error
    (Ctrl-C included) the partial folder is removed and ``directory`` is left as it was."""
    directory.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{directory.name}.partial-", dir=directory.parent))
    try:
        yield tmp
        Scene.open(tmp)
        if directory.exists():
            shutil.rmtree(directory)
        os.rename(tmp, directory)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
