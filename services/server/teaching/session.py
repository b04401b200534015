"""Per-edge session state: the edge's own student copy, its Distiller, the version and stats.

Versions (docs/protocol.md, "Versions and resync"): WELCOME is version 0 and every UPDATE
makes the next version. An UPDATE is partial (the trainable tensors that changed) when the
key frame's ``base_version`` is the version last sent to this edge, and full otherwise.

The session's :class:`UpdateEncoder` mirrors the weights the edge holds (what it decoded,
bit for bit), and every delta is taken against that mirror. Distillation continues from the
server's own float weights, not from the held ones: with a lossy codec the next delta then
also carries the rounding left out of the last one (error feedback), so the edge stays within
half a quantisation step of the server, small changes are never rounded away for good, and
what the server learns does not depend on the codec (docs/protocol.md, "Held weights").

The model methods run in a distillation worker thread; the session's connection calls them
one at a time, in key-frame order.
"""

from __future__ import annotations

import dataclasses
import time
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any

import numpy as np
import torch
from pydantic import BaseModel

from services.server.metrics.server_metrics import ServerMetrics
from shadowtutor.algorithms.coordinates import coordinates_to_send
from shadowtutor.algorithms.distill import Distiller, DistillResult
from shadowtutor.algorithms.params import AlgorithmParams
from shadowtutor.algorithms.sparse_options import SparseOptions
from shadowtutor.algorithms.update_gate import GateDecision, UpdateGate
from shadowtutor.algorithms.update_policy import UpdatePolicy
from shadowtutor.protocol.agreement import Agreement
from shadowtutor.protocol.codecs import TensorBlob
from shadowtutor.protocol.errors import ErrorCode, ProtocolError
from shadowtutor.protocol.messages import Hello, Labels, SessionMode, Update, Welcome, encode
from shadowtutor.protocol.sparse_delta import is_sparse_codec
from shadowtutor.protocol.weight_sync import UpdateEncoder

# a key frame as it was trained: the frame (BGR), the teacher's labels, its instance boxes
TrainedFrame = tuple[np.ndarray, np.ndarray, np.ndarray | None]


@dataclass
class Traffic:
    """Bytes of every WebSocket message of one connection, the HELLO included."""

    bytes_in: int = 0
    bytes_out: int = 0


@dataclass(kw_only=True)
class SessionStats:
    """Counters of one session for ``/v1/sessions`` and the metrics: key frames labelled and
    trained, updates sent, steps taken. The one place they are counted: the connection, the session
    and the teaching (local or remote) call its ``count_*`` methods, whoever did the work."""

    key_frames: int = 0
    # key frames the teacher labelled
    labelled: int = 0
    # key frames distillation ran on
    distilled: int = 0
    # ERROR messages sent
    errors: int = 0
    # answers that held the training back (UPDATE ``held_back``)
    held_back: int = 0
    steps: int = 0
    teacher_seconds: float = 0.0
    distill_seconds: float = 0.0
    last_metric: float | None = None

    def count_key_frame(self) -> None:
        """A key frame arrived in order."""
        self.key_frames += 1

    def count_error(self) -> None:
        """An ERROR was sent to the edge."""
        self.errors += 1

    def count_labels(self, teacher_seconds: float) -> None:
        """The teacher labelled a key frame in ``teacher_seconds``."""
        self.labelled += 1
        self.teacher_seconds += teacher_seconds

    def count_training(self, steps: int, seconds: float, metric: float) -> None:
        """Distillation ran ``steps`` steps in ``seconds`` on a key frame and scored ``metric``."""
        self.distilled += 1
        self.steps += steps
        self.distill_seconds += seconds
        self.last_metric = metric

    def count_answer(self, answer: Update | Labels) -> None:
        """A key frame answered where the work ran elsewhere: the labelling (and the training, for
        an UPDATE) that ``answer`` reports."""
        self.count_labels(answer.teacher_ms / 1000.0)
        if isinstance(answer, Update):
            self.count_training(answer.steps, answer.distill_ms / 1000.0, answer.metric)


class SessionInfo(BaseModel):
    """One connected edge as ``GET /v1/sessions`` shows it (nothing secret: no token)."""

    session_id: str
    edge_id: str
    agent: str
    mode: SessionMode
    # ISO 8601, UTC
    connected_since: str
    frame_width: int
    frame_height: int
    frame_codec: str
    weight_codec: str
    delta_codec: str | None
    # the version last sent to the edge
    version: int
    key_frames: int
    # answers that held the training back, and the gate's downlink bits per second (None: not
    # gated)
    updates_held_back: int
    downlink_bps: float | None
    downlink_budget_bps: float | None
    errors: int
    bytes_in: int
    bytes_out: int
    # mIoU in [0, 1] after the last distillation
    last_metric: float | None
    mean_steps: float | None
    mean_teacher_ms: float | None
    mean_distill_ms: float | None


def _mean(total: float, count: int) -> float | None:
    return total / count if count else None


@dataclass(kw_only=True)
class EdgeSession:
    """One edge's session on the server: its HELLO and what the handshake agreed, its student copy
    (``distiller``, None in naive mode), its version and the encoder that mirrors the weights the
    edge holds. The teaching trains it; the connection sends what it answers. Edge and server
    weights stay identical bit for bit after every update and resync."""

    hello: Hello
    agreement: Agreement
    params: AlgorithmParams
    traffic: Traffic
    # None in naive mode
    distiller: Distiller | None
    # seconds between the edge's TELEMETRY; None: none asked for
    telemetry_interval: float | None = None
    # with a sparse delta codec: the share of coordinates trained and sent, and how often chosen
    # again
    sparse: SparseOptions = field(default_factory=SparseOptions)
    # the server's update policy; the session gates its updates when the policy is gated and the
    # edge's HELLO accepts held-back answers (``gate``), to the HELLO's downlink budget if it names
    # one
    updates: UpdatePolicy = field(default_factory=UpdatePolicy)
    gate: UpdateGate | None = field(init=False, default=None, repr=False, compare=False)
    # mirrors what the edge holds
    encoder: UpdateEncoder = field(init=False, repr=False, compare=False)
    session_id: str = field(default_factory=lambda: uuid.uuid4().hex)
    connected_since: datetime = field(default_factory=lambda: datetime.now(timezone.utc))
    # the version last sent to the edge
    version: int = 0
    # seq of the last key frame received
    last_seq: int | None = None
    # False: what the edge holds is not known here (the update that made ``version`` was lost with
    # the process that sent it, before its checkpoint): the next update carries full weights
    edge_weights_known: bool = True
    stats: SessionStats = field(default_factory=SessionStats)
    # ends the session from outside (a newer connection of the same edge, a revoked token): the
    # connection sends the error as a fatal ERROR and closes
    evict: Callable[[ProtocolError], None] = field(
        default=lambda error: None, repr=False, compare=False
    )

    def __post_init__(self) -> None:
        delta_codec = self.agreement.delta_codec
        self.encoder = UpdateEncoder(self.agreement.weight_codec, delta_codec)
        sparse = delta_codec is not None and is_sparse_codec(delta_codec)
        if (
            sparse
            and self.sparse.trains_a_set
            and self.distiller is not None
            and self.distiller.chooser is None
        ):
            self.distiller.train_sparse(self.sparse)
        if self.distiller is not None and self.updates.gated and self.hello.update_gating:
            budget = self.hello.downlink_budget_bps
            policy = self.updates
            if budget is not None:
                try:
                    policy = dataclasses.replace(policy, downlink_bps=float(budget))
                except ValueError as exc:
                    raise ProtocolError(
                        ErrorCode.BAD_MESSAGE, f"HELLO downlink_budget_bps: {exc}"
                    ) from None
            self.gate = UpdateGate(policy)

    @property
    def mode(self) -> SessionMode:
        return self.hello.mode

    def accept_seq(self, seq: int) -> None:
        """Key frames carry strictly increasing ``seq`` numbers; anything else is a broken
        client."""
        if self.last_seq is not None and seq <= self.last_seq:
            raise ProtocolError(
                ErrorCode.BAD_MESSAGE, f"KEY_FRAME seq {seq} does not follow seq {self.last_seq}"
            )
        self.last_seq = seq
        self.stats.count_key_frame()

    def welcome(self, resumed: bool = False) -> Welcome:
        """WELCOME with the full student weights; without them where the session has no
        distiller, or where it is ``resumed`` (the edge holds this version's weights)."""
        tensors: list[dict[str, Any]] = []
        payload = b""
        if self.distiller is not None and not resumed:
            blob = self.encoder.full(self.distiller.student.state_dict())
            tensors, payload = blob.tensors, blob.payload
        params = self.params.to_dict()
        if self.gate is not None:
            params["update_policy"] = self.gate.policy.to_dict()
        return Welcome(
            session_id=self.session_id,
            version=self.version,
            frame_codec=self.agreement.frame_codec,
            weight_codec=self.agreement.weight_codec,
            params=params,
            class_names=list(self.hello.class_names),
            delta_codec=self.agreement.delta_codec,
            telemetry_interval=self.telemetry_interval,
            student_size=self.student_size(),
            tensors=tensors,
            payload=payload,
            resumed=resumed,
            update_gating=self.gate is not None,
        )

    def student_size(self) -> list[int] | None:
        """``[W, H]`` both copies of the student run at (the distiller's), None: the frame's
        size."""
        size = self.distiller.student_size if self.distiller is not None else None
        return list(size) if size is not None else None

    def trained(
        self,
        seq: int,
        result: DistillResult,
        seconds: float,
        base_version: int,
        teacher_ms: float,
        key_frame: TrainedFrame | None = None,
    ) -> Update:
        """The UPDATE for the key frame ``seq`` once the distiller has been trained on it
        (``result``, in ``seconds``), with the session's statistics counted. A partial update is
        encoded from the result's host copy of the weights, so it never waits on the device (where
        the next batch may be running). A gated session (:attr:`gate`) needs ``key_frame``, the
        frame, labels and boxes the student was trained on: its answer carries the training only
        when the gate says so (else ``held_back``), and its metrics score the weights the edge
        holds before and after it."""
        decision = self._gate(result, base_version, key_frame)
        metric = result.metric if decision is None else decision.metric_after()
        self.stats.count_training(result.steps, seconds, metric)
        update = self._update(
            seq,
            base_version,
            metric=metric,
            initial_metric=result.initial_metric if decision is None else decision.edge_metric,
            steps=result.steps,
            teacher_ms=teacher_ms,
            distill_ms=seconds * 1000.0,
            trained=result.weights,
            held_back=decision is not None and not decision.send,
        )
        if self.gate is not None:
            self.gate.answered(time.monotonic(), len(encode(update)), not update.held_back)
        return update

    def _gate(
        self, result: DistillResult, base_version: int, key_frame: TrainedFrame | None
    ) -> GateDecision | None:
        """The gate's verdict on a partial answer; None where the session is not gated or the
        answer carries full weights."""
        distiller = self._require_distiller()
        if self.gate is None or self._needs_full(base_version):
            return None
        if key_frame is None:
            raise ValueError("a gated session needs the trained key frame")
        prepared = distiller.prepare_on_host(*key_frame)
        return self.gate.decide(
            distiller, prepared, result.weights, self.encoder.held.state, time.monotonic()
        )

    def _needs_full(self, base_version: int) -> bool:
        return base_version != self.version or not self.edge_weights_known

    def resync(self, have_version: int) -> Update:
        """The full weights for an edge that holds ``have_version`` (RESYNC_REQUEST)."""
        metric = self.stats.last_metric if self.stats.last_metric is not None else 0.0
        seq = self.last_seq if self.last_seq is not None else -1
        return self._update(
            seq, have_version, metric=metric, initial_metric=metric, steps=0, force_full=True
        )

    def _update(
        self,
        seq: int,
        base_version: int,
        *,
        metric: float,
        initial_metric: float,
        steps: int,
        teacher_ms: float = 0.0,
        distill_ms: float = 0.0,
        force_full: bool = False,
        trained: Mapping[str, torch.Tensor] | None = None,
        held_back: bool = False,
    ) -> Update:
        """``trained``: the trainable weights as training left them (host copies), which a partial
        update is encoded from; only an update that answers a training is partial. ``held_back``:
        a partial answer without weights (the training waits for a later update)."""
        distiller = self._require_distiller()
        full = force_full or self._needs_full(base_version)
        if held_back and not full:
            self.stats.held_back += 1
            blob = TensorBlob([], b"")
        elif full:
            blob = self.encoder.full(distiller.student.state_dict())
            self.edge_weights_known = True
        else:
            assert trained is not None, (
                "a partial update answers a training, whose result carries the weights"
            )
            keys = distiller.trainable_keys
            coordinates = coordinates_to_send(
                self.encoder, distiller.chooser, self.sparse, trained, keys
            )
            blob = self.encoder.partial(trained, keys, coordinates)
        self.version += 1
        return Update(
            seq=seq,
            base_version=base_version,
            version=self.version,
            metric=float(metric),
            initial_metric=float(initial_metric),
            steps=steps,
            full=full,
            tensors=blob.tensors,
            teacher_ms=teacher_ms,
            distill_ms=distill_ms,
            payload=blob.payload,
            held_back=held_back and not full,
        )

    def _require_distiller(self) -> Distiller:
        if self.distiller is None:
            raise ProtocolError(
                ErrorCode.UNEXPECTED_MESSAGE, "a naive-mode session has no student to update"
            )
        return self.distiller

    def info(self) -> SessionInfo:
        s = self.stats
        return SessionInfo(
            session_id=self.session_id,
            edge_id=self.hello.edge_id,
            agent=self.hello.agent,
            mode=self.mode,
            connected_since=self.connected_since.isoformat(),
            frame_width=self.hello.frame_width,
            frame_height=self.hello.frame_height,
            frame_codec=self.agreement.frame_codec,
            weight_codec=self.agreement.weight_codec,
            delta_codec=self.agreement.delta_codec,
            version=self.version,
            key_frames=s.key_frames,
            updates_held_back=s.held_back,
            downlink_bps=None if self.gate is None else self.gate.downlink_bps(time.monotonic()),
            downlink_budget_bps=None if self.gate is None else self.gate.policy.downlink_bps,
            errors=s.errors,
            bytes_in=self.traffic.bytes_in,
            bytes_out=self.traffic.bytes_out,
            last_metric=s.last_metric,
            mean_steps=_mean(s.steps, s.distilled),
            mean_teacher_ms=_mean(s.teacher_seconds * 1000.0, s.labelled),
            mean_distill_ms=_mean(s.distill_seconds * 1000.0, s.distilled),
        )


class SessionRegistry:
    """The connected edges, at most one session per edge id; refuses a session past
    ``max_sessions``.

    A new session of an edge id that already has one replaces it (the old one is evicted with
    ``session_replaced``): a device that reconnects after a network cut is admitted at once even
    while the server has not yet noticed that its old connection is dead.
    """

    def __init__(self, max_sessions: int, metrics: ServerMetrics) -> None:
        self.max_sessions = max_sessions
        self.metrics = metrics
        self._sessions: dict[str, EdgeSession] = {}

    def reserve(self, edge_id: str) -> None:
        """Raise SERVER_BUSY when no slot is free (checked before the student is copied); a session
        of the same edge id counts as free, since the new one replaces it."""
        taken = sum(s.hello.edge_id != edge_id for s in self._sessions.values())
        if taken >= self.max_sessions:
            raise ProtocolError(
                ErrorCode.SERVER_BUSY,
                f"the server serves at most {self.max_sessions} sessions; try again later",
            )

    def add(self, session: EdgeSession) -> None:
        """Register ``session``; an earlier session of its edge id is removed and evicted."""
        edge_id = session.hello.edge_id
        self.reserve(edge_id)
        replaced = [s for s in self._sessions.values() if s.hello.edge_id == edge_id]
        for old in replaced:
            del self._sessions[old.session_id]
            old.evict(
                ProtocolError(
                    ErrorCode.SESSION_REPLACED,
                    f"a newer connection of edge {edge_id!r} replaced this session (session "
                    f"{session.session_id})",
                )
            )
        self._sessions[session.session_id] = session
        self.metrics.sessions.set(len(self._sessions))

    def remove(self, session: EdgeSession) -> None:
        self._sessions.pop(session.session_id, None)
        self.metrics.sessions.set(len(self._sessions))

    def __len__(self) -> int:
        return len(self._sessions)

    def all(self) -> list[EdgeSession]:
        return list(self._sessions.values())
