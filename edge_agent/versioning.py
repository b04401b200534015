"""Which weights the edge holds: the version rules of the protocol (semantics items 3, 4 and 8).

:class:`VersionedStudent` is the client loop's ``LoopStudent``. Every change to the
model happens on the inference thread: updates that answer a key frame through the client
loop's ``apply``, and full weights that arrive on their own (WELCOME, a resync answer)
through :meth:`stage` (network thread) and :meth:`sync` (inference thread, before each frame).
The weights it holds follow the protocol's rule (:class:`HeldWeights`): full weights replace
them, a partial update overwrites what it names, a delta update adds to it; only the tensors
that changed are handed to the runtime.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import torch

from edge_agent.runtime import StudentRuntime
from shadowtutor.models.checkpoint import student_layout
from shadowtutor.protocol.codecs import TensorBlob
from shadowtutor.protocol.errors import ProtocolError
from shadowtutor.protocol.weight_sync import HeldWeights

log = logging.getLogger(__name__)


@dataclass(kw_only=True, frozen=True)
class WeightUpdate:
    """Weights from the server, decoded. ``origin`` is ``welcome``, ``update``, ``held_back`` (an
    answer that holds the server's training back: no tensors, only the next version) or ``resync``.

    ``tensors``: full weights, decoded. ``blob``: a partial update, ``(codec, blob)``, still
    encoded (``tensors`` is then empty): it decodes only against the weights held when it is
    installed, which bound what it may name and the memory it may take.
    """

    session_id: str
    version: int
    base_version: int
    full: bool
    tensors: dict[str, torch.Tensor]
    origin: str
    seq: int | None = None
    metric: float | None = None
    blob: tuple[str, TensorBlob] | None = None


@dataclass(kw_only=True, frozen=True)
class AppliedVersion:
    """One installed version, in the order they were installed."""

    session_id: str
    version: int
    full: bool
    origin: str
    # the frame after which it was installed (0 for weights installed before the first)
    frame_index: int

    def to_dict(self) -> dict[str, object]:
        return {
            "session_id": self.session_id,
            "version": self.version,
            "full": self.full,
            "origin": self.origin,
            "frame_index": self.frame_index,
        }


class VersionedStudent:
    """The student plus the (session, version) it holds; applies only what fits (else asks for a
    resync).

    ``request_resync(have_version, reason)`` is called (on the inference thread) when an
    incremental update names a base the edge does not hold, or does not fit the held weights; the
    update is then dropped. :attr:`full_layout` is what full weights must hold: every tensor of
    the student for ``class_names``, with its shape.
    """

    def __init__(
        self,
        runtime: StudentRuntime,
        class_names: tuple[str, ...],
        request_resync: Callable[[int, str], None],
    ) -> None:
        self.runtime = runtime
        self.class_names = class_names
        self.request_resync = request_resync
        self.session_id: str | None = None
        self.version = -1
        # bit-identical to the server's mirror of this edge
        self.held = HeldWeights()
        self.full_layout = student_layout(len(class_names))
        self.history: list[AppliedVersion] = []
        self.rejected = 0
        # set by the agent before each frame, for the history
        self.frame_index = 0
        self._staged: WeightUpdate | None = None
        self._lock = threading.Lock()

    def start_with(self, tensors: dict[str, torch.Tensor]) -> None:
        """Full weights of the edge's own (packaged or saved) to label with until a server's arrive.

        They belong to no session (version -1): no server is told of them, and the first
        WELCOME replaces them.
        """
        self.runtime.load(tensors, self.class_names)
        self.held.replace(tensors)

    def stage(self, update: WeightUpdate) -> None:
        """Queue full weights for the next :meth:`sync` (any thread); a newer staging replaces an
        older one."""
        if not update.full:
            raise ValueError(
                "only full weights can be staged; incremental updates go through apply()"
            )
        with self._lock:
            self._staged = update

    def sync(self) -> WeightUpdate | None:
        """Install staged full weights, if any (inference thread); returns what was installed."""
        with self._lock:
            staged, self._staged = self._staged, None
        if staged is not None:
            self._install(staged)
        return staged

    def infer(self, frame: np.ndarray) -> np.ndarray:
        return self.runtime.infer(frame)

    def apply(self, payload: WeightUpdate) -> None:
        """Install an update if it is full or based on the held (session, version); else request a
        resync."""
        if payload.full or (
            payload.session_id == self.session_id and payload.base_version == self.version
        ):
            try:
                self._install(payload)
                return
            except ProtocolError as exc:
                # names tensors the edge does not hold: get the server's full weights
                reason = (
                    f"update {payload.base_version}->{payload.version} does not fit the held "
                    f"weights: {exc}"
                )
        else:
            reason = (
                f"update {payload.base_version}->{payload.version} of session {payload.session_id} "
                f"does not apply to version {self.version} of session {self.session_id}"
            )
        self.rejected += 1
        log.warning("not applying: %s; asking for a resync", reason)
        self.request_resync(self.version, reason)

    def _install(self, update: WeightUpdate) -> None:
        if update.full:
            self.runtime.load(update.tensors, self.class_names)
            self.held.replace(update.tensors)
        else:
            if update.blob is None:
                raise ValueError("a partial update without its blob")
            codec, blob = update.blob
            changed = self.held.apply_blob(blob.tensors, blob.payload, codec)
            if changed:
                self.runtime.update(changed)
        self.session_id = update.session_id
        self.version = update.version
        self.history.append(
            AppliedVersion(
                session_id=update.session_id,
                version=update.version,
                full=update.full,
                origin=update.origin,
                frame_index=self.frame_index,
            )
        )

    @property
    def updates_applied(self) -> int:
        """Installed updates that changed weights, other than WELCOME weights."""
        return sum(1 for entry in self.history if entry.origin not in ("welcome", "held_back"))
