"""Precompute a teacher's labels for every frame of a video (read back by the ``labels``
teacher)."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from shadowtutor.teachers.base import Teacher, TeacherError, check_class_names, label_dtype
from shadowtutor.teachers.class_maps import checked_class_lut
from shadowtutor.teachers.label_store import write_label, write_label_metadata


def _frame_batches(
    capture: Any, batch_size: int, max_frames: int | None
) -> Iterator[list[np.ndarray]]:
    """Frames of an open ``cv2.VideoCapture``, ``batch_size`` at a time, at most ``max_frames``."""
    batch: list[np.ndarray] = []
    count = 0
    while max_frames is None or count < max_frames:
        ok, frame = capture.read()
        if not ok:
            break
        batch.append(frame)
        count += 1
        if len(batch) == batch_size:
            yield batch
            batch = []
    if batch:
        yield batch


def write_teacher_labels(
    teacher: Teacher,
    video_path: str | Path,
    out_dir: str | Path,
    class_names: Sequence[str] | None = None,
    batch_size: int = 1,
    max_frames: int | None = None,
    progress: bool = True,
) -> int:
    """Label each frame of ``video_path`` into ``out_dir`` (format of
    :mod:`shadowtutor.teachers.label_store`); return the number of frames written.

    ``class_names`` (default: the teacher's) is the class list the files use; the teacher's
    labels are mapped onto it by name (:mod:`shadowtutor.teachers.class_maps`). Frames go to
    ``teacher.label_batch`` ``batch_size`` at a time.
    """
    import cv2

    from shadowtutor.progress import progress_bar

    if batch_size < 1:
        raise TeacherError(f"batch_size must be at least 1, got {batch_size}")
    names = teacher.class_names if class_names is None else check_class_names(class_names)
    lut = (
        None
        if names == teacher.class_names
        else checked_class_lut(teacher.class_names, names, teacher.name)
    )
    dtype = label_dtype(len(names))
    video = Path(video_path)
    capture = cv2.VideoCapture(str(video))
    if not capture.isOpened():
        raise TeacherError(f"cannot open video {video}")
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    info = {"teacher": teacher.describe(), "video": str(video)}
    write_label_metadata(out, names, **info)
    total = int(capture.get(cv2.CAP_PROP_FRAME_COUNT)) or None
    if max_frames is not None:
        total = min(total, max_frames) if total else max_frames
    written = 0
    try:
        with progress_bar(
            total=total, unit="frame", desc=f"{teacher.name} labels", disable=not progress
        ) as bar:
            for batch in _frame_batches(capture, batch_size, max_frames):
                indices = list(range(written, written + len(batch)))
                for index, labels in zip(indices, teacher.label_batch(batch, indices), strict=True):
                    write_label(out, index, labels if lut is None else lut[labels].astype(dtype))
                written += len(batch)
                bar.update(len(batch))
    finally:
        capture.release()
    write_label_metadata(out, names, **info, frames=written)
    return written
