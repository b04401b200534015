"""Session checkpoints: before the answer in the earliest layout, behind it every version, and a journal
entry per version with a snapshot every few.

Three copies of one session (the same base student, the same key frames, every one trained) take turns
key frame by key frame, so all see the same machine load:

- **before** (the earlier release): the answer waits for the checkpoint: the format-1 record (every
  tensor as float32, the held weights and the values last sent in full, no compression; rebuilt here
  from the same captured state) saved and stored;
- **behind** (now): the answer waits for the capture of the state and the version's claim; a
  :class:`~services.checkpoints.writer.CheckpointWriter` encodes and stores the compact form
  while the next key frames train;
- **journal** (now): the answer waits for the version's journal entry (the UPDATE, sealed and stored);
  every ``every`` versions the state is also captured and a snapshot written behind the answer.

Per update: what the answer waited for after training (ms), the turnaround from key frame to answer
(training included), and the bytes stored.
"""

from __future__ import annotations

import io
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import torch

from services.checkpoints.journal import entry
from services.checkpoints.session import capture, pack
from services.checkpoints.store import DirectoryStore
from services.checkpoints.writer import CheckpointWriter, Written
from services.server.teaching.session import EdgeSession, Traffic
from shadowtutor.algorithms.distill import Distiller
from shadowtutor.algorithms.params import AlgorithmParams
from shadowtutor.classes import LVS_CLASSES, background_index
from shadowtutor.models.student import StudentNet
from shadowtutor.protocol.agreement import Agreement
from shadowtutor.protocol.messages import Hello, encode


def format1(record: dict[str, Any]) -> bytes:
    """The earlier release's checkpoint of a :func:`capture` record: ``torch.save`` of it as it was, every
    tensor float32 and in full, nothing compressed."""
    buffer = io.BytesIO()
    torch.save(
        {
            **record,
            "format": 1,
            "hello": encode(record["hello"]),
            "reply": encode(record["reply"]) if record["reply"] is not None else None,
        },
        buffer,
    )
    return buffer.getvalue()


def _session(
    edge_id: str,
    size: tuple[int, int],
    weight_codec: str,
    delta_codec: str | None,
    params: AlgorithmParams,
) -> EdgeSession:
    torch.manual_seed(0)
    hello = Hello(
        edge_id=edge_id, class_names=list(LVS_CLASSES), frame_width=size[0], frame_height=size[1]
    )
    session = EdgeSession(
        hello=hello,
        agreement=Agreement(frame_codec="raw", weight_codec=weight_codec, delta_codec=delta_codec),
        params=params,
        traffic=Traffic(),
        distiller=Distiller(StudentNet(len(LVS_CLASSES)), params, background_index(LVS_CLASSES)),
    )
    session.welcome()
    return session


def _stats(values: list[float]) -> dict[str, float]:
    ordered = sorted(values)
    return {
        "mean": statistics.fmean(ordered),
        "p50": statistics.median(ordered),
        "p95": ordered[min(len(ordered) - 1, round(0.95 * (len(ordered) - 1)))],
    }


def compare(
    updates: int = 30,
    size: tuple[int, int] = (320, 180),
    weight_codec: str = "f16+zstd",
    delta_codec: str | None = "q8delta+zstd",
    store_dir: Path | None = None,
    max_updates: int | None = None,
    every: int = 16,
) -> dict[str, Any]:
    """``updates`` key frames (random frames and labels, all of Algorithm 1's steps taken: ``max_updates``,
    default the paper's) through both copies in turns; per mode the answer's wait, the turnaround and the
    bytes per update, and their ratios."""
    if updates < 1:
        raise ValueError(f"updates must be >= 1, got {updates}")
    rng = np.random.default_rng(0)
    width, height = size
    params = AlgorithmParams(
        threshold=0.99, **({} if max_updates is None else {"max_updates": max_updates})
    )
    modes = ("before", "behind", "journal")
    sessions = {mode: _session(mode, size, weight_codec, delta_codec, params) for mode in modes}
    before = sessions["before"]
    waits: dict[str, list[float]] = {mode: [] for mode in modes}
    turnarounds: dict[str, list[float]] = {mode: [] for mode in modes}
    sizes: dict[str, list[int]] = {mode: [] for mode in modes}
    written: list[Written] = []
    snapshots: list[Written] = []
    # the version of the journal session's last snapshot (its WELCOME's is not counted)
    last_snapshot = 0
    with tempfile.TemporaryDirectory() as temporary:
        store = DirectoryStore(store_dir or Path(temporary))
        writer = CheckpointWriter(store).start()

        def write_behind(
            mode: str, session: EdgeSession, record: dict[str, Any], done: Callable[[Written], None]
        ) -> None:
            writer.submit(mode, session.session_id, session.version, lambda: pack(record), done)

        for seq in range(updates):
            frame = rng.integers(0, 256, (height, width, 3), dtype=np.uint8)
            labels = rng.integers(0, len(LVS_CLASSES), (height, width), dtype=np.uint8)
            for mode, session in sessions.items():
                start = time.perf_counter()
                result = session.distiller.train(frame, labels)
                update = session.trained(
                    seq, result, time.perf_counter() - start, session.version, 0.0
                )
                trained = time.perf_counter()
                if mode == "journal":
                    due = session.version - last_snapshot >= every
                    record = capture(session, update, seq, result) if due else None
                    data = entry(session, update, seq)
                    if not store.append(mode, session.session_id, session.version, data):
                        raise RuntimeError(f"version {session.version} was journaled twice")
                    sizes[mode].append(len(data))
                    if record is not None:
                        last_snapshot = session.version
                        write_behind(mode, session, record, snapshots.append)
                elif mode == "before":
                    data = format1(capture(session, update, seq, result))
                    if not store.create(mode, session.session_id, session.version, data):
                        raise RuntimeError(f"version {session.version} was checkpointed twice")
                    sizes[mode].append(len(data))
                else:
                    record = capture(session, update, seq, result)
                    if not store.claim(mode, session.session_id, session.version):
                        raise RuntimeError(f"version {session.version} was claimed twice")
                    write_behind(mode, session, record, written.append)
                answered = time.perf_counter()
                waits[mode].append((answered - trained) * 1000.0)
                turnarounds[mode].append((answered - start) * 1000.0)
        if not writer.close(timeout=120.0):
            raise RuntimeError("the checkpoint writer did not finish")
    sizes["behind"] = [w.size for w in written]
    sizes["journal"] += [w.size for w in snapshots]
    result = {
        "updates": updates,
        "size": f"{width}x{height}",
        "max_updates": params.max_updates,
        "weight_codec": weight_codec,
        "delta_codec": delta_codec,
        "trainable_parameters": sum(
            before.distiller.student.state_dict()[k].numel()
            for k in before.distiller.trainable_keys
        ),
        "every": every,
        "snapshots": len(snapshots),
        "journal_entry_bytes": _stats([float(n) for n in sizes["journal"][:updates]]),
        "written_behind": len(written),
        "write_behind_ms": _stats([w.seconds * 1000.0 for w in written]),
        "modes": {
            mode: {
                "answer_wait_ms": _stats(waits[mode]),
                "turnaround_ms": _stats(turnarounds[mode]),
                "bytes_per_update": sum(sizes[mode]) / updates,
            }
            for mode in waits
        },
    }
    measured = result["modes"]
    result["ratios"] = {
        f"{mode}_{name}": value
        for mode in ("behind", "journal")
        for name, value in (
            (
                "bytes_per_update",
                measured[mode]["bytes_per_update"] / measured["before"]["bytes_per_update"],
            ),
            (
                "turnaround_mean",
                measured[mode]["turnaround_ms"]["mean"]
                / measured["before"]["turnaround_ms"]["mean"],
            ),
            (
                "turnaround_p50",
                measured[mode]["turnaround_ms"]["p50"] / measured["before"]["turnaround_ms"]["p50"],
            ),
        )
    }
    return result
