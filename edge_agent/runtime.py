"""The student on the edge: inference and weight installation through a backend, nothing about versions.

Backends (``--backend``, :mod:`shadowtutor.models.backends`): ``onnx-trt`` and ``onnx-cuda`` run
the student's ONNX graph on the GPU (a Jetson) through ONNX Runtime's TensorRT or CUDA provider,
``cuda`` runs :class:`StudentNet` on the GPU in PyTorch; ``reference``, ``torch`` (the faster
rewritten graph) and ``onnx`` (the same graph in ONNX Runtime) run on the CPU (see
:mod:`shadowtutor.models.inference`); ``auto`` picks the fastest this machine runs, and falls back
to the next when one fails to start. All give the same labels up to float rounding.

With change-based inference (``--change-based``) a CPU backend is wrapped by the change-based
student (:mod:`shadowtutor.acceleration.change_based`); ``auto`` then picks ``onnx`` when it is
installed (the fastest full-frame fallback), else ``torch``.

With a :class:`~shadowtutor.acceleration.regions.labeller.FlowPathConfig` (``--flow-path``)
frames are labelled region by region, each region segmented by the student or warped from
its key by optical flow (seed 004 / DVSNet). Any change of weights (WELCOME, resync, update)
makes every region key stale, so no label made by an older student is warped further. Key
frames and Algorithm 2 are untouched: the key frame goes to the server as captured, and the
score the stride follows is the server's, on the student's whole-frame segmentation.

With a Ray cluster address (``--cluster``) the regions go to worker devices instead
(:mod:`shadowtutor.acceleration.regions.cluster`, seed 004): every weight change is sent to
every worker, and their keys made by the old student are dropped.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import TYPE_CHECKING

import numpy as np
import torch

from shadowtutor.acceleration.change_based.backend import ChangeBasedBackend, ChangeBasedOptions
from shadowtutor.acceleration.change_based.runner import ChangeStats
from shadowtutor.acceleration.regions.labeller import FlowPathConfig, FrameRegions, RegionLabeller
from shadowtutor.models.backends import BackendUnavailableError, resolve_backend
from shadowtutor.models.checkpoint import student_from_state_dict
from shadowtutor.models.inference import InferenceBackend, build_inference_backend, check_frame
from shadowtutor.models.scale import infer_scaled

if TYPE_CHECKING:
    from shadowtutor.acceleration.regions.cluster import ClusterMaster

# A cluster worker segments its region alone: 96 pixels of context cost 2.6 mIoU points against the
# whole frame (docs/results/regions/bench.md), against 8.9 with 32.
CLUSTER_MARGIN = 96
log = logging.getLogger(__name__)


class StudentRuntime:
    """The edge's student; empty until :meth:`load` gets full weights (the server's WELCOME)."""

    def __init__(
        self, backend: str = "auto", *, change_based: ChangeBasedOptions | None = None,
        flow_path: FlowPathConfig | None = None, cluster: str | None = None,
    ) -> None:
        # a named backend this machine lacks fails here, at start
        self.candidates = resolve_backend(backend, change_based=change_based is not None)
        self.change_based = change_based
        self.backend: InferenceBackend | None = None
        self.class_names: tuple[str, ...] = ()
        self.regions: RegionLabeller | None = None
        self.cluster_address = cluster
        self.cluster_config = flow_path or FlowPathConfig()
        self.master: ClusterMaster | None = None
        self.student_size: tuple[int, int] | None = None  # the session's (WELCOME); None: the frame's size
        if flow_path is not None and cluster is None:
            self.regions = flow_path.build(lambda part: self._require_backend().infer(part))

    @property
    def backend_kind(self) -> str:
        """The backend in use (before the first load: the one that will be tried first)."""
        return self.backend.kind if self.backend is not None else self.candidates[0]

    @property
    def loaded(self) -> bool:
        return self.backend is not None

    def load(self, state: Mapping[str, torch.Tensor], class_names: tuple[str, ...]) -> None:
        """Replace the model by one built from a complete state dict (a checkpoint error if it is not).

        A backend that fails to start (a GPU provider that ONNX Runtime could not load) hands over
        to the next candidate of ``auto``, for good; a named backend's failure is an error.
        """
        student = student_from_state_dict(state, class_names)
        while True:
            kind = self.candidates[0]
            try:
                self.backend = build_inference_backend(kind, student, change_based=self.change_based)
                break
            except BackendUnavailableError as exc:
                if len(self.candidates) == 1:
                    raise
                self.candidates.pop(0)
                log.warning("%s; falling back to student backend %r", exc, self.candidates[0])
        self.class_names = tuple(class_names)
        if self.regions is not None:
            self.regions.invalidate_keys()
        if self.cluster_address is not None:
            self._load_cluster(state)

    def update(self, tensors: Mapping[str, torch.Tensor]) -> None:
        """Overwrite some of the model's tensors (a partial update); unknown names or shapes are an error."""
        self._require_backend().load_weights(tensors)
        if self.regions is not None:
            self.regions.invalidate_keys()
        if self.master is not None:
            self.master.load_weights(tensors)

    def set_student_size(self, size: tuple[int, int] | None) -> None:
        """Run the student at ``size`` from the next frame on (:mod:`shadowtutor.models.scale`)."""
        if size is not None and (self.regions is not None or self.cluster_address is not None):
            raise ValueError(f"the server distils at student size {size[0]}x{size[1]}, which the flow path and "
                             "the cluster (regions of a frame) cannot run at")
        self.student_size = size

    def infer(self, frame: np.ndarray) -> np.ndarray:
        """Per-pixel class labels ``(H, W)`` uint8 for one BGR uint8 frame."""
        if self.master is not None:
            return next(self.master.label_stream([check_frame(frame)]))[1]
        if self.regions is not None:
            self._require_backend()
            return self.regions.label(check_frame(frame))
        return infer_scaled(self._require_backend().infer, check_frame(frame), self.student_size)

    def _load_cluster(self, state: Mapping[str, torch.Tensor]) -> None:
        """Start the workers with these weights (first load), or send them to every worker."""
        from shadowtutor.acceleration.regions.cluster import ClusterMaster, connect, start_workers

        if self.master is not None:
            self.master.load_weights(state)
            return
        assert self.cluster_address is not None
        config = self.cluster_config
        connect(self.cluster_address)
        workers = start_workers(state, self.class_names, config.load_network(), config, margin=CLUSTER_MARGIN)
        self.master = ClusterMaster(workers, config.regions)

    @property
    def change_stats(self) -> ChangeStats | None:
        """What the last frame did, when the student runs change-based."""
        return self.backend.stats if isinstance(self.backend, ChangeBasedBackend) else None

    @property
    def cluster_state(self) -> tuple[int, int] | None:
        """Live workers and the regions waiting for one after the last frame (None without a cluster)."""
        return (self.master.live_workers, self.master.queue_depth) if self.master is not None else None

    @property
    def last_regions(self) -> FrameRegions | None:
        """The paths the last frame's regions took (None without the flow path)."""
        return self.regions.last if self.regions is not None else None

    def _require_backend(self) -> InferenceBackend:
        if self.backend is None:
            raise RuntimeError("the student has no weights yet; the server's WELCOME installs them")
        return self.backend
