"""Algorithm 4: the edge's asynchronous client loop, independent of any transport.

The edge agent drives it with a WebSocket transport; the evaluation harness with a
simulated link. With ``wait_timeout=None`` it is the paper's loop exactly: a key frame
every ``stride`` frames, inference never waits for the network except at MIN_STRIDE
frames after a key frame, where it waits for the pending update.

Extension for unreliable networks (only with a finite ``wait_timeout``): if the wait at
MIN_STRIDE times out, inference goes on with the weights it has, the outstanding update
is still applied when it lands, and the next key frame is sent only after it resolved.
A failed update (the link was down) leaves weights and stride as they are.

With the source's frame rate (``fps``) and clock pacing (docs/design/clock.md), the stride's
bounds are seconds of the source (:meth:`AlgorithmParams.stride_bounds`), and a scene cut
(:mod:`shadowtutor.algorithms.scene_cut`) calls a key frame as soon as MIN_STRIDE frames have
passed since the last one and its update has landed; without ``fps`` the loop is the paper's.

With a ``gate`` (e.g. a byte budget, :class:`~shadowtutor.algorithms.link_budget.KeyFrameBudget`),
a key frame the stride asks for goes out only once the gate allows it; until then every frame
asks again, so the gate can only lower the key-frame rate.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any, Generic, Protocol, TypeVar

import numpy as np

from shadowtutor.algorithms.params import AlgorithmParams
from shadowtutor.algorithms.scene_cut import CutDetector
from shadowtutor.algorithms.stride import next_stride
from shadowtutor.algorithms.threshold import StrideThreshold

Payload = TypeVar("Payload")
# a payload a runtime takes in
PayloadIn = TypeVar("PayloadIn", contravariant=True)


@dataclass(kw_only=True, frozen=True)
class UpdateOutcome(Generic[Payload]):
    """What the server answers to one key frame: the student's metric and the weight update."""

    # after distillation
    metric: float
    payload: Payload
    steps: int = 0
    # before distillation: the score of the student the edge ran
    initial_metric: float | None = None


class PendingUpdate(Protocol[Payload]):
    """An update the edge is waiting for: ready or not, and its payload once it came."""

    def done(self) -> bool:
        """Non-blocking poll: has the answer (or a failure) arrived?"""

    def wait(self, timeout: float | None) -> bool:
        """Block until done or ``timeout`` seconds passed; True when done."""

    def result(self) -> UpdateOutcome[Payload] | None:
        """The answer once done; None when the key frame was lost (link down, server error)."""


class KeyFrameTransport(Protocol[Payload]):
    """How the client loop sends a key frame and gets back a pending update (the edge agent's
    transport, or a simulated link in the lab)."""

    def submit(self, frame_index: int, frame: np.ndarray) -> PendingUpdate[Payload]:
        """Send a key frame without blocking; the answer arrives later."""


class KeyFrameGate(Protocol):
    """What may hold a key frame back beyond the stride (e.g. a byte budget)."""

    def allows(self, frame_index: int) -> bool:
        """Whether the key frame the stride asks for at ``frame_index`` may go out now."""

    def key_frame(self, frame_index: int) -> None:
        """A key frame goes out at ``frame_index``."""


class LoopStudent(Protocol[PayloadIn]):
    """The student the client loop runs on every frame and updates with the server's payloads
    (the agent's ``VersionedStudent``, the lab's in-process students)."""

    def infer(self, frame: np.ndarray) -> np.ndarray:
        """Per-pixel class labels ``(H, W)`` for one BGR frame."""

    def apply(self, payload: PayloadIn) -> None:
        """Install a weight update from the server."""


@dataclass(kw_only=True, frozen=True)
class FrameResult:
    """What the loop did with one frame: its labels, whether it was a key frame, and the update
    installed before it, if any."""

    index: int
    labels: np.ndarray
    is_key_frame: bool
    # stride in force after this frame
    stride: int
    # metric of the update applied after this frame, if any
    applied_metric: float | None
    # time blocked on the network after this frame
    waited_seconds: float
    # This frame settled its key frame's wait at MIN_STRIDE: it waited there (waited_seconds long),
    # or the update came in time and was applied before (0 s). Once per key frame whose update
    # resolves.
    wait_settled: bool = False
    # the student's inference on this frame (the paper's T_SI)
    inference_seconds: float = 0.0
    # a scene cut was seen at this frame
    cut: bool = False


class ClientLoop(Generic[Payload]):
    """The paper's Algorithm 4 on the edge: labels every frame with the student, sends the frame the
    stride makes a key frame (if ``gate`` allows), installs each update when it is ready or waits at
    most ``wait_timeout`` for it at MIN_STRIDE, and sets the next stride from the update's metric
    (Algorithm 2). ``fps``: the source's frame rate (None: unknown, the paper's loop)."""

    def __init__(
        self,
        params: AlgorithmParams,
        runtime: LoopStudent[Payload],
        transport: KeyFrameTransport[Payload],
        *,
        wait_timeout: float | None = None,
        gate: KeyFrameGate | None = None,
        fps: float | None = None,
    ) -> None:
        self.params = params
        self.runtime = runtime
        self.transport = transport
        self.wait_timeout = wait_timeout
        self.gate = gate
        self.fps = fps
        self.bounds = params.stride_bounds(fps)
        self.cuts = self._cut_detector(params)
        # a cut was seen since the last key frame
        self.cut_pending = False
        self.stride = self.bounds[0]
        # the THRESHOLD the stride is scaled against
        self.threshold = StrideThreshold(params)
        # the first frame is a key frame
        self.step = self.stride
        self.updated = True
        self.pending: PendingUpdate[Payload] | None = None
        self.frame_index = 0

    def process(self, frame: np.ndarray) -> FrameResult:
        """Label one frame, sending it as a key frame and applying updates as the loop says."""
        index = self.frame_index
        self.frame_index += 1
        cut = self.cuts is not None and self.cuts.is_cut(frame)
        self.cut_pending = self.cut_pending or cut
        due = self.step >= self.stride or (self.cut_pending and self.step >= self.params.min_stride)
        is_key = due and self.updated
        if is_key and self.gate is not None:
            is_key = self.gate.allows(index)
            if is_key:
                self.gate.key_frame(index)
        if is_key:
            self.pending = self.transport.submit(index, frame)
            self.step = 0
            self.updated = False
            self.cut_pending = False
        start = time.perf_counter()
        labels = self.runtime.infer(frame)
        inference = time.perf_counter() - start
        self.step += 1
        waited = 0.0
        settled = False
        applied_metric = None
        if not self.updated and self.pending is not None:
            if self.step == self.params.min_stride:
                settled = True
                start = time.perf_counter()
                self.pending.wait(self.wait_timeout)
                waited = time.perf_counter() - start
            if self.pending.done():
                settled = settled or self.step < self.params.min_stride
                applied_metric = self._resolve(self.pending)
                self.updated = True
                self.pending = None
        return FrameResult(
            index=index,
            labels=labels,
            is_key_frame=is_key,
            stride=self.stride,
            applied_metric=applied_metric,
            waited_seconds=waited,
            wait_settled=settled,
            inference_seconds=inference,
            cut=cut,
        )

    def _resolve(self, pending: PendingUpdate[Payload]) -> float | None:
        outcome = pending.result()
        if outcome is None:
            return None
        self.runtime.apply(outcome.payload)
        self.stride = next_stride(
            self.stride,
            self._stride_metric(outcome),
            self.params,
            self.threshold.current,
            self.bounds,
        )
        self.threshold.observe(outcome.metric)
        return outcome.metric

    def _stride_metric(self, outcome: UpdateOutcome[Payload]) -> float:
        if self.params.stride_metric == "before" and outcome.initial_metric is not None:
            return outcome.initial_metric
        return outcome.metric

    def retune(self, params: AlgorithmParams) -> None:
        """Go on under new parameters (a new session's); the stride is kept within their bounds, and
        the auto THRESHOLD measures the new session's key frames afresh."""
        self.params = params
        self.threshold = StrideThreshold(params)
        self.bounds = params.stride_bounds(self.fps)
        if self.cuts is None or self.cuts.threshold != params.cut_threshold:
            self.cuts = self._cut_detector(params)
        self.stride = min(max(self.stride, self.bounds[0]), self.bounds[1])

    def _cut_detector(self, params: AlgorithmParams) -> CutDetector | None:
        """A detector when the source's rate is known and the parameters pace on the clock."""
        if self.fps is None or not params.detects_cuts:
            return None
        return CutDetector(params.cut_threshold)

    def result_is_pending(self) -> bool:
        return not self.updated

    def state(self) -> dict[str, Any]:
        return {
            "stride": self.stride,
            "step": self.step,
            "updated": self.updated,
            "frames": self.frame_index,
            "threshold": self.threshold.current,
        }
