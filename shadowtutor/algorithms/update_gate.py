"""Whether a key frame's answer carries the server's training to the edge (an
:class:`~shadowtutor.algorithms.update_policy.UpdatePolicy`).

The server trains on every key frame. An :class:`UpdateGate` keeps the session's last
``policy.window`` key frames (at the student's size, with the teacher's labels) and, once a key
frame is trained, scores on them both the trained student and the weights the edge holds (the
server mirrors them bit for bit for its delta codec), each with the edge's arithmetic (the
student's plain forward pass). It says *send* when the trained student is better by at least
``min_gain`` on average, when ``max_interval`` key frames went unanswered by an update and the
trained student is better at all, or when training that is still unsent would otherwise be lost
(``must_send``: a sparse session about to choose another coordinate set); a downlink budget holds
updates back (but never lost training) while its window is full. Unsent training is not lost:
each delta is taken against the edge's weights, so the next update carries it.

Whatever it decides, the answer carries the score of the weights the edge holds after it: the
metric Algorithm 2 adapts the stride with.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Mapping
from dataclasses import dataclass

import torch
from torch.func import functional_call

from shadowtutor.algorithms.distill import Distiller, HostKeyFrame
from shadowtutor.algorithms.metrics import miou
from shadowtutor.algorithms.update_policy import UpdatePolicy

# sent updates whose mean size is the expected cost of the next one
COST_WINDOW = 8


@dataclass(frozen=True)
class GateDecision:
    """One key frame's verdict. ``reason``: ``gain``, ``interval``, ``must_send`` (sent),
    ``budget``, ``no_gain`` (held back). ``gain``: mean mIoU of the trained student over the held
    weights on the recent key frames; ``edge_metric`` / ``server_metric``: their scores on the
    newest key frame."""

    send: bool
    reason: str
    gain: float
    edge_metric: float
    server_metric: float

    def metric_after(self) -> float:
        """The score, on the newest key frame, of what the edge holds once it applied the
        answer."""
        return self.server_metric if self.send else self.edge_metric


def score(
    distiller: Distiller, state: Mapping[str, torch.Tensor], key_frames: list[HostKeyFrame]
) -> list[float]:
    """mIoU of ``distiller``'s student with the weights ``state`` (by state-dict key; keys left out
    keep the student's own) on each of ``key_frames``; leaves the student's weights as they are."""
    device = distiller.device
    weights = {key: value.to(device) for key, value in state.items()}
    scores = []
    with torch.no_grad():
        for key_frame in key_frames:
            prepared = distiller.upload(key_frame)
            logits = functional_call(distiller.student, weights, (prepared.x,))
            pred = logits.argmax(1)[0]
            scores.append(miou(pred, prepared.target, distiller.student.num_classes))
    return scores


class UpdateGate:
    """The gate of one session; its :meth:`decide` and :meth:`answered` are called once per key
    frame, in order, from one thread at a time. ``now`` arguments are seconds on any clock that
    only moves forward (stream time in the lab, the monotonic clock in the server)."""

    def __init__(self, policy: UpdatePolicy) -> None:
        if not policy.gated:
            raise ValueError("an update gate needs a gated policy")
        self.policy = policy
        self.recent: deque[HostKeyFrame] = deque(maxlen=policy.window)
        # key frames answered since the last update that carried weights
        self.since_sent = 0
        self._answers: deque[tuple[float, int]] = deque()
        self._update_bytes: deque[int] = deque(maxlen=COST_WINDOW)

    def decide(
        self,
        distiller: Distiller,
        key_frame: HostKeyFrame,
        trained: Mapping[str, torch.Tensor],
        held: Mapping[str, torch.Tensor],
        now: float,
    ) -> GateDecision:
        """The verdict for ``key_frame`` (the newest, now trained on ``distiller``): ``trained``
        the trained weights (a subset of keys: the rest are the student's own), ``held`` every
        weight the edge holds. A sparse distiller that chooses another coordinate set at its next
        training must send (the edge could never get the unsent training on this one)."""
        chooser = distiller.chooser
        must_send = (
            chooser is not None
            and chooser.masks is not None
            and chooser.trained_on_set >= chooser.options.every
        )
        self.recent.append(key_frame)
        frames = list(self.recent)
        server = score(distiller, trained, frames)
        edge = score(distiller, held, frames)
        gain = sum(s - e for s, e in zip(server, edge, strict=True)) / len(frames)
        policy = self.policy
        if must_send:
            reason = "must_send"
        elif not self._budget_allows(now):
            reason = "budget"
        elif gain >= policy.min_gain and gain > 0.0:
            reason = "gain"
        elif self.since_sent + 1 >= policy.max_interval and gain > 0.0:
            reason = "interval"
        else:
            reason = "no_gain"
        send = reason in ("must_send", "gain", "interval")
        return GateDecision(send, reason, gain, edge[-1], server[-1])

    def answered(self, now: float, message_bytes: int, sent: bool) -> None:
        """The answer to the key frame just decided went out: ``message_bytes`` long, carrying the
        training (``sent``) or not."""
        self._answers.append((now, message_bytes))
        start = now - self.policy.budget_seconds
        while self._answers and self._answers[0][0] <= start:
            self._answers.popleft()
        if sent:
            self.since_sent = 0
            self._update_bytes.append(message_bytes)
        else:
            self.since_sent += 1

    def downlink_bps(self, now: float) -> float:
        """Bits per second answered over the budget's window ending at ``now`` (any thread may
        ask)."""
        return 8.0 * self._window_bytes(now) / self.policy.budget_seconds

    def _budget_allows(self, now: float) -> bool:
        rate = self.policy.downlink_bps
        if rate is None or not self._update_bytes:
            return True
        expected = sum(self._update_bytes) / len(self._update_bytes)
        return self._window_bytes(now) + expected <= rate / 8.0 * self.policy.budget_seconds

    def _window_bytes(self, now: float) -> int:
        start = now - self.policy.budget_seconds
        # a copy taken at once: another thread may be appending
        return sum(size for at, size in tuple(self._answers) if at > start)
