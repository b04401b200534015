"""Any footage (a video file, a camera, an RTSP or GStreamer source) as a scene labelled by a teacher, cached.

:func:`footage_scene` reads up to ``frames`` frames of a source through the edge agent's
:class:`~edge_agent.sources.VideoSource` (so whatever ``shadowtutor edge --source`` reads), resized
to the asked size, and writes them as a scene (format of :mod:`shadowtutor.scene_store`): the frames
re-encoded as ``video.mp4``, and as labels the teacher's output on the re-encoded frames (what the
harness and an edge read). The scene lives in the scene cache under the *content hash* of the
frames read (SHA-256 of their size and pixels) and of the teacher's ``describe()``, so the same
pixels labelled by the same teacher are labelled once, whichever file name or camera they came
from; the teacher's progress is a tqdm bar. Labels use the student's classes
(:data:`~shadowtutor.classes.LVS_CLASSES`), the teacher's mapped onto them by name.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import cv2

from shadowtutor.classes import LVS_CLASSES
from shadowtutor.scene_store import (
    LABELS_DIR,
    META_NAME,
    VIDEO_NAME,
    Scene,
    SceneError,
    SceneMeta,
    Size,
    scene_written_into,
)
from shadowtutor_lab.scenes.cache import default_cache_dir

FOOTAGE_PRESET_PREFIX = "footage:"
TEACHER_FILE = "teacher.json"
SOURCE_FILE = "source.json"
_HASH_VERSION = b"shadowtutor-footage/1"
LIVE_RETRIES = 3  # reopen attempts of a live source that stops delivering frames


@dataclass(frozen=True)
class Footage:
    """A labelled scene made of footage: its directory, where it came from, and whether the cache held it."""

    directory: Path
    source: str
    content_sha256: str  # of the frames read, before encoding
    native_size: Size  # the source's own frame size
    cached: bool  # the labels were in the cache already


def scaled_to_width(size: Size, max_width: int | None) -> Size:
    """``size`` scaled down to ``max_width`` pixels wide (aspect kept, even height); unchanged when narrower."""
    width, height = size
    if max_width is None or width <= max_width:
        return width, height
    return max_width, max(2, round(height * max_width / width / 2) * 2)


def _read_into(source: str, video: Path, frames: int | None, size: Size | None,
               max_width: int | None, accept_short: bool = False) -> tuple[int, Size, Size, float, str]:
    """Write up to ``frames`` frames of ``source`` into ``video``; return (count, native size, size, fps, sha256).

    A file that fails before its end (and before ``frames``) is a :class:`SceneError` unless
    ``accept_short``; one that simply ends sooner gives the frames it has."""
    from edge_agent.sources import VideoSource

    digest = hashlib.sha256(_HASH_VERSION)
    writer = None
    count = 0
    with VideoSource(source, retries=LIVE_RETRIES) as stream:
        if stream.spec.live and frames is None:
            raise SceneError(f"{source!r} is a live {stream.spec.kind} source: say how many frames to read")
        fps = stream.fps
        native: Size | None = None
        try:
            for frame in stream:
                if native is None:
                    native = (frame.shape[1], frame.shape[0])
                    size = size or scaled_to_width(native, max_width)
                    digest.update(f"{size[0]}x{size[1]}".encode())
                    writer = cv2.VideoWriter(str(video), cv2.VideoWriter_fourcc(*"mp4v"), fps, size)
                    if not writer.isOpened():
                        raise RuntimeError("OpenCV cannot open an 'mp4v' video writer")
                if (frame.shape[1], frame.shape[0]) != size:
                    frame = cv2.resize(frame, size, interpolation=cv2.INTER_AREA)
                digest.update(frame.tobytes())
                writer.write(frame)
                count += 1
                if frames is not None and count >= frames:
                    break
        finally:
            if writer is not None:
                writer.release()
    if count == 0 or native is None or size is None:
        raise SceneError(f"{source!r} gave no frames")
    if stream.stopped_early is not None and not accept_short and (frames is None or count < frames):
        raise SceneError(f"{source!r} could not be read past frame {count} ({frames or 'all'} asked): the file is "
                         f"damaged there; pass --accept-short to use the {count} frames read")
    return count, native, size, fps, digest.hexdigest()


def footage_scene(source: str, frames: int | None = None, size: Size | None = None, max_width: int | None = None,
                  teacher: str = "mediapipe", teacher_options: dict[str, Any] | None = None,
                  camera: str = "fixed", cache_dir: str | Path | None = None, progress: bool = True,
                  reuse: bool = True, accept_short: bool = False) -> Footage:
    """The first ``frames`` frames of ``source`` (all of a file when None; a live source needs a count) at
    ``size`` (default: the source's own, scaled down to ``max_width`` when given) as a scene labelled by
    ``teacher``, from the cache when it holds these pixels labelled by this teacher (``reuse`` False:
    labelled again and the cache entry replaced).

    Raises :class:`~edge_agent.sources.SourceError` when the source cannot be opened or read,
    :class:`SceneError` when it gives no frames, or when a file fails before its end and before
    ``frames`` (unless ``accept_short``: then the frames read), :class:`~shadowtutor.teachers.TeacherError` for an
    unknown teacher or bad options.
    """
    from shadowtutor.teachers import build_teacher, write_teacher_labels

    labeller = build_teacher(teacher, **(teacher_options or {}))
    described = json.dumps(labeller.describe(), indent=2, sort_keys=True) + "\n"
    root = (Path(cache_dir) if cache_dir is not None else default_cache_dir()) / "footage"
    root.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix=".read-", dir=root))
    try:
        count, native, size, fps, content = _read_into(source, work / VIDEO_NAME, frames, size, max_width,
                                                           accept_short)
        teacher_hash = hashlib.sha256(described.encode()).hexdigest()[:12]
        directory = root / f"{content[:24]}_{teacher}-{teacher_hash}"
        try:
            if reuse and (directory / TEACHER_FILE).read_text() == described and len(Scene.open(directory)) == count:
                return Footage(directory, source, content, native, cached=True)
        except (OSError, SceneError):
            pass
        meta = SceneMeta(preset=FOOTAGE_PRESET_PREFIX + Path(source).name, seed=0, frames=count, width=size[0],
                         height=size[1], fps=fps, class_names=LVS_CLASSES, camera=camera, category="footage",
                         cuts=(), description=f"{source}, first {count} frames at {size[0]}x{size[1]}; "
                                              f"labels by the {teacher} teacher")
        with scene_written_into(directory) as tmp:
            os.replace(work / VIDEO_NAME, tmp / VIDEO_NAME)
            write_teacher_labels(labeller, tmp / VIDEO_NAME, tmp / LABELS_DIR, LVS_CLASSES, progress=progress)
            (tmp / META_NAME).write_text(meta.to_json())
            (tmp / TEACHER_FILE).write_text(described)
            (tmp / SOURCE_FILE).write_text(json.dumps({"source": source, "content_sha256": content,
                                                       "native_size": list(native)}, indent=2) + "\n")
        return Footage(directory, source, content, native, cached=False)
    finally:
        shutil.rmtree(work, ignore_errors=True)
