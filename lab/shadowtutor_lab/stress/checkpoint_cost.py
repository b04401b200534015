"""What a session checkpoint costs per update, alone: the time to take it (``snapshot``) and write it
to a directory store, and its size, for a session of the default student after real distillation."""

from __future__ import annotations

import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch

from services.checkpoints.session import snapshot
from services.checkpoints.store import DirectoryStore
from services.server.teaching.session import EdgeSession, Traffic
from shadowtutor.algorithms.distill import Distiller
from shadowtutor.algorithms.params import AlgorithmParams
from shadowtutor.classes import LVS_CLASSES, background_index
from shadowtutor.models.student import StudentNet
from shadowtutor.protocol.agreement import Agreement
from shadowtutor.protocol.messages import Hello


def measure(updates: int = 20, size: tuple[int, int] = (320, 180), weight_codec: str = "f16+zstd",
            delta_codec: str | None = "q8delta+zstd", store_dir: Path | None = None) -> dict[str, Any]:
    """``updates`` key frames (random frames and labels, every one trained) of one session, each followed by
    a checkpoint as a teaching replica writes it; the checkpoints' mean and p95 milliseconds and bytes."""
    if updates < 1:
        raise ValueError(f"updates must be >= 1, got {updates}")
    torch.manual_seed(0)
    rng = np.random.default_rng(0)
    width, height = size
    params = AlgorithmParams(threshold=0.99, max_updates=2)
    hello = Hello(edge_id="cost", class_names=list(LVS_CLASSES), frame_width=width, frame_height=height)
    session = EdgeSession(
        hello=hello,
        agreement=Agreement(frame_codec="raw", weight_codec=weight_codec, delta_codec=delta_codec),
        params=params,
        traffic=Traffic(),
        distiller=Distiller(StudentNet(len(LVS_CLASSES)), params, background_index(LVS_CLASSES)),
    )
    session.welcome()
    seconds, sizes = [], []
    with tempfile.TemporaryDirectory() as temporary:
        store = DirectoryStore(store_dir or Path(temporary))
        for seq in range(updates):
            frame = rng.integers(0, 256, (height, width, 3), dtype=np.uint8)
            labels = rng.integers(0, len(LVS_CLASSES), (height, width), dtype=np.uint8)
            result = session.distiller.train(frame, labels)
            update = session.trained(seq, result, 0.0, session.version, 0.0)
            start = time.perf_counter()
            data = snapshot(session, update, seq)
            if not store.create(hello.edge_id, session.session_id, session.version, data):
                raise RuntimeError(f"version {session.version} was checkpointed twice")
            seconds.append(time.perf_counter() - start)
            sizes.append(len(data))
    ms = sorted(s * 1000.0 for s in seconds)
    return {"updates": updates, "size": f"{width}x{height}", "weight_codec": weight_codec,
            "delta_codec": delta_codec, "mean_ms": statistics.fmean(ms),
            "p95_ms": ms[min(len(ms) - 1, round(0.95 * (len(ms) - 1)))], "mean_bytes": statistics.fmean(sizes),
            "trainable_parameters": sum(session.distiller.student.state_dict()[k].numel()
                                        for k in session.distiller.trainable_keys)}
