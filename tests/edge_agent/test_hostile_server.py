"""The real edge agent (its own process) against a hostile server: an 8 kB UPDATE that decompresses to
256 MiB and names a tensor the edge does not hold is refused before it takes memory, the agent asks for a
resync and goes on.

The hostile server is the stand-in (tests/support/stand_in_server.py), which speaks the protocol as the
real server does, answering the first key frame with the bomb instead of its update: what a man in the
middle of a link without TLS could send.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest
import torch
from websockets.asyncio.server import ServerConnection

from shadowtutor.protocol.codecs import TensorBlob
from shadowtutor.protocol.messages import KeyFrame, Message, ResyncRequest, Update
from shadowtutor.protocol.sparse_delta import CoordinateSet, is_sparse_codec
from tests.edge_agent.test_sources import write_video
from tests.support.processes import shadowtutor_command, start_process
from tests.support.stand_in_server import StandInServer, StandInSession
from tests.support.update_bombs import dense_bomb, sparse_bomb

RSS_LIMIT = 1.5 * 1024**3


class BombingServer(StandInServer):
    """Answers the first key frame with ``bomb`` (descriptors, payload) as an incremental UPDATE; then
    behaves. Counts what the edge sends after the bomb."""

    def __init__(self, bomb: tuple[list[dict[str, Any]], bytes]) -> None:
        super().__init__()
        self.bomb: tuple[list[dict[str, Any]], bytes] | None = bomb
        self.resyncs_after_bomb = 0
        self.key_frames_after_resync = 0

    async def _answer(self, ws: ServerConnection, session: StandInSession, message: Message) -> None:
        if isinstance(message, KeyFrame) and self.bomb is not None:
            tensors, payload = self.bomb
            self.bomb = None
            await self._send(ws, session, Update(
                seq=message.seq, base_version=session.version, version=session.version + 1, metric=0.9,
                initial_metric=0.5, steps=1, full=False, tensors=tensors, payload=payload,
            ))
            return
        if self.bomb is None:
            if isinstance(message, ResyncRequest):
                self.resyncs_after_bomb += 1
            elif isinstance(message, KeyFrame) and self.resyncs_after_bomb:
                self.key_frames_after_resync += 1
        await super()._answer(ws, session, message)

    def _blob(self, session: StandInSession, full: bool) -> TensorBlob:
        """As the stand-in's, with a coordinate set over every trainable value for a sparse codec."""
        if full or not is_sparse_codec(session.encoder.delta_codec or ""):
            return super()._blob(session, full)
        everything = {key: torch.ones_like(session.state[key], dtype=torch.bool) for key in self.trainable}
        blob = session.encoder.partial(session.state, self.trainable, CoordinateSet.from_masks(1, everything))
        session.state = {k: v.clone() for k, v in session.encoder.held.state.items()}
        return blob


def peak_rss(pid: int) -> int:
    """The process's peak resident memory so far (VmHWM), in bytes."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) * 1024
    raise AssertionError(f"no VmHWM for process {pid}")


@pytest.mark.slow
@pytest.mark.parametrize(("codec", "bomb"), [("q4sparse+zstd", sparse_bomb), ("q8delta+zstd", dense_bomb)])
def test_the_agent_refuses_a_decompression_bomb_asks_for_a_resync_and_goes_on(
    codec: str, bomb: Any, tmp_path: Path
) -> None:
    server = BombingServer(bomb()).start()
    video = write_video(tmp_path / "clip.mp4", 400)
    process = start_process(
        shadowtutor_command("edge", "--server", server.url, "--source", str(video), "--output-dir",
                            str(tmp_path / "out"), "--no-save-labels", "--metrics-port", "0", "--max-fps", "30",
                            "--backend", "torch", "--weight-codecs", f"{codec},f32+zstd"),
        name="edge", log_dir=tmp_path,
    )
    try:
        deadline = time.monotonic() + 120
        while server.key_frames_after_resync < 2:
            assert process.alive() and time.monotonic() < deadline, process.describe()
            time.sleep(0.1)
        peak = peak_rss(process.popen.pid)
        assert process.alive(), process.describe()
    finally:
        process.stop()
        server.kill()
    assert server.sessions[0].encoder.delta_codec == codec
    assert len(server.sessions) == 1 and server.resyncs_after_bomb >= 1
    assert peak < RSS_LIMIT, f"peak RSS {peak / 1024**3:.2f} GiB"
    assert "evil.weight" in (tmp_path / "edge.log").read_text()
