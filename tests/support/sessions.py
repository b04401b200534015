"""Train a session's student on one key frame in the calling thread, for tests of what a session
does with a training (its versions, deltas and checkpoints) apart from the teaching pipeline
(``services.server.teaching.local.LocalTeaching``, which trains through the distillation engine)."""

from __future__ import annotations

import time

import numpy as np

from services.server.teaching.session import EdgeSession
from shadowtutor.protocol.messages import Update


def distill(
    session: EdgeSession,
    seq: int,
    frame: np.ndarray,
    labels: np.ndarray,
    *,
    base_version: int,
    teacher_ms: float,
    boxes: np.ndarray | None = None,
) -> Update:
    """Algorithm 1 on ``session``'s student, then the session's UPDATE for the key frame ``seq``."""
    if session.distiller is None:
        raise ValueError("a naive-mode session has no student to train")
    start = time.perf_counter()
    result = session.distiller.train(frame, labels, boxes)
    return session.trained(
        seq, result, time.perf_counter() - start, base_version, teacher_ms, key_frame=(frame, labels, boxes)
    )
