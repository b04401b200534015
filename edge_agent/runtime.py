"""The student on the edge: inference and weight installation through a backend, nothing about versions.

Backends (``--backend``): ``cuda`` runs :class:`StudentNet` on the GPU (a Jetson); ``reference``,
``torch`` (the faster rewritten graph) and ``onnx`` (the same graph in ONNX Runtime) run on
the CPU (see :mod:`shadowtutor.models.inference`); ``auto`` picks ``cuda`` when a GPU is
available, else ``torch``. All give the same labels up to float rounding.

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

import copy
from collections.abc import Mapping
from typing import TYPE_CHECKING

import numpy as np
import torch

from shadowtutor.acceleration.regions.decision import default_decision_network_path, load_decision_network
from shadowtutor.acceleration.regions.labeller import FlowPathConfig, FrameRegions, RegionLabeller
from shadowtutor.models.checkpoint import student_from_state_dict
from shadowtutor.models.inference import (
    BACKEND_KINDS,
    InferenceBackend,
    ReferenceBackend,
    build_inference_backend,
    check_frame,
    onnx_available,
)
from shadowtutor.models.student import StudentNet, normalise_frame

if TYPE_CHECKING:
    from shadowtutor.acceleration.regions.cluster import ClusterMaster

BACKENDS = ("auto", "cuda", *BACKEND_KINDS)
# A cluster worker segments its region alone: 96 pixels of context cost 2.6 mIoU points against the
# whole frame (docs/results/regions/bench.md), against 8.9 with 32.
CLUSTER_MARGIN = 96


def resolve_backend(name: str) -> str:
    """The concrete backend for ``name``; an error when this machine cannot run it."""
    if name not in BACKENDS:
        raise ValueError(f"unknown student backend {name!r}: choose one of {', '.join(BACKENDS)}")
    if name == "auto":
        return "cuda" if torch.cuda.is_available() else "torch"
    if name == "cuda" and not torch.cuda.is_available():
        raise RuntimeError("student backend 'cuda': PyTorch sees no CUDA device here")
    if name == "onnx" and not onnx_available():
        raise RuntimeError("student backend 'onnx' needs onnx and onnxruntime (pip install 'shadowtutor[onnx]')")
    return name


class CudaBackend(ReferenceBackend):
    """:class:`StudentNet` as written, on the GPU (updates load as in the reference backend)."""

    kind = "cuda"

    def __init__(self, student: StudentNet) -> None:
        self.student = copy.deepcopy(student).cuda().eval()

    def infer(self, frame_bgr: np.ndarray) -> np.ndarray:
        with torch.inference_mode():
            logits = self.student(normalise_frame(check_frame(frame_bgr), "cuda"))
            return logits[0].argmax(0).to(torch.uint8).cpu().numpy()


class StudentRuntime:
    """The edge's student; empty until :meth:`load` gets full weights (the server's WELCOME)."""

    def __init__(self, backend: str = "auto", flow_path: FlowPathConfig | None = None,
                 cluster: str | None = None) -> None:
        self.backend_kind = resolve_backend(backend)
        self.backend: InferenceBackend | None = None
        self.class_names: tuple[str, ...] = ()
        self.regions: RegionLabeller | None = None
        self.cluster_address = cluster
        self.cluster_config = flow_path or FlowPathConfig()
        self.master: ClusterMaster | None = None
        if flow_path is not None and cluster is None:
            self.regions = flow_path.build(lambda part: self._require_backend().infer(part))

    @property
    def loaded(self) -> bool:
        return self.backend is not None

    def load(self, state: Mapping[str, torch.Tensor], class_names: tuple[str, ...]) -> None:
        """Replace the model by one built from a complete state dict (a checkpoint error if it is not)."""
        student = student_from_state_dict(state, class_names)
        self.backend = CudaBackend(student) if self.backend_kind == "cuda" else build_inference_backend(
            self.backend_kind, student
        )
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

    def infer(self, frame: np.ndarray) -> np.ndarray:
        """Per-pixel class labels ``(H, W)`` uint8 for one BGR uint8 frame."""
        if self.master is not None:
            return next(self.master.label_stream([check_frame(frame)]))[1]
        if self.regions is not None:
            self._require_backend()
            return self.regions.label(check_frame(frame))
        return self._require_backend().infer(frame)

    def _load_cluster(self, state: Mapping[str, torch.Tensor]) -> None:
        """Start the workers with these weights (first load), or send them to every worker."""
        from shadowtutor.acceleration.regions.cluster import ClusterMaster, connect, start_workers

        if self.master is not None:
            self.master.load_weights(state)
            return
        assert self.cluster_address is not None
        config = self.cluster_config
        connect(self.cluster_address)
        network, _meta = load_decision_network(config.network or default_decision_network_path())
        workers = start_workers(state, self.class_names, network, config, margin=CLUSTER_MARGIN)
        self.master = ClusterMaster(workers, config.regions)

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
