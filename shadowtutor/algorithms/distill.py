"""Algorithm 1: train the student on one key frame until THRESHOLD or MAX_UPDATES.

In partial mode the frozen front runs once per key frame and only the back is trained
and re-run each step: the same arithmetic as the paper's PartialBackward, less work. The
student's linear tail is trained fused where the frame size allows
(:func:`~shadowtutor.models.fast_student.fused_back`): the same function, rounded differently,
and a step about 3x cheaper on a CPU at 640x360.

The loop follows the authors' ``dod_server.py``: a step whose metric passes THRESHOLD ends
the loop with that student; otherwise, after MAX_UPDATES steps, a student worse than the best
seen is rolled back to the best (``params.restore``: its trainable weights, or the weights
together with Adam's state, as the authors' deep copy of model and optimiser does).

The arithmetic runs at the distiller's ``precision`` (:mod:`~shadowtutor.models.precision`):
``fp32``, IEEE float32 as in the paper; ``tf32``, TF32 tensor cores for convolutions and matmuls on
CUDA (the same as ``fp32`` on a CPU); or ``bf16``, the trained part's forward pass (the back in
partial mode, the whole student in full mode) under bfloat16 autocast, its logits cast back to the
student's dtype: the weights (the master copy the edge is sent), their gradients, Adam's state, the
loss and the metric stay in that dtype.
"""

from __future__ import annotations

import copy
import time
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch

from shadowtutor.algorithms.coordinates import CoordinateChooser
from shadowtutor.algorithms.flat_trainable import FlatTrainable
from shadowtutor.algorithms.loss import key_frame_weights, weighted_cross_entropy
from shadowtutor.algorithms.metrics import miou
from shadowtutor.algorithms.params import AlgorithmParams
from shadowtutor.algorithms.sparse_options import SparseOptions
from shadowtutor.models.fast_student import fused_back
from shadowtutor.models.precision import (
    TRAINING_PRECISIONS,
    TrainingPrecision,
    bf16_autocast,
    check_precision,
    float32_precision,
    training_float32,
)
from shadowtutor.models.scale import (
    Size,
    boxes_to_student,
    check_size,
    frame_to_student,
    labels_to_student,
)
from shadowtutor.models.student import FrontFeatures, StudentNet, normalise_frame


def on_host(value: Any) -> Any:
    """``value`` with every tensor in it (through dicts, lists and tuples) replaced by a CPU copy of
    it."""
    if isinstance(value, torch.Tensor):
        return value.detach().to("cpu", copy=True)
    if isinstance(value, dict):
        return {key: on_host(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return type(value)(on_host(item) for item in value)
    return value


@dataclass
class HostKeyFrame:
    """One key frame at the student's size, on the host, as torch tensors (in pinned memory where
    the distiller's device is CUDA, so that uploading them need not block the host): ``frame_bgr``
    ``(H, W, 3)`` uint8, ``label`` ``(H, W)`` classes, ``weights`` ``(H, W)`` float32, the loss's
    per-pixel weights."""

    frame_bgr: torch.Tensor
    label: torch.Tensor
    weights: torch.Tensor


@dataclass
class PreparedKeyFrame:
    """One key frame ready for Algorithm 1 on the distiller's device, at the student's size.

    ``x``: normalised frame ``(1, 3, H, W)``; ``target``: labels ``(H, W)`` long; ``weights``: the
    loss's per-pixel weights ``(H, W)``; floats in the student's dtype."""

    x: torch.Tensor
    target: torch.Tensor
    weights: torch.Tensor


@dataclass(kw_only=True)
class DistillResult:
    """What training a student on one key frame gave: the metrics before and after, the steps and
    their times, and host copies of the trained weights and the optimiser's state."""

    # best metric, the one the returned student has
    metric: float
    initial_metric: float
    # optimisation steps taken (0 when the first metric passed THRESHOLD)
    steps: int
    step_seconds: list[float] = field(default_factory=list)
    weights: dict[str, torch.Tensor] = field(default_factory=dict)
    """The trainable weights the student ended with, by state-dict key: CPU copies in the student's
    dtype, made by the training thread once its work was done, so that readers never wait on the
    device."""
    optimizer_state: dict[str, Any] = field(default_factory=dict)
    """The optimiser's ``state_dict()`` as training left it, its tensors CPU copies made the same
    way."""

    @property
    def skipped(self) -> bool:
        return self.steps == 0


class Distiller:
    """Holds one student, its optimiser and the algorithm parameters (one per edge session)."""

    def __init__(
        self,
        student: StudentNet,
        params: AlgorithmParams,
        background: int,
        device: torch.device | str = "cpu",
        student_size: Size | None = None,
        fuse_tail: bool | None = None,
        precision: TrainingPrecision = "fp32",
    ) -> None:
        """``student_size`` ``(W, H)``: train on key frames resized to it, with the labels
        downsampled by nearest neighbour (:mod:`shadowtutor.models.scale`), as the edge's student
        sees them; None: as they come. ``fuse_tail`` False: the tail as written (bit for bit the
        authors' arithmetic); True: fused (fewer multiply-adds, many small kernels: pays on a CPU);
        None: fused on a CPU, as written elsewhere. ``precision``: the arithmetic of training
        (module docstring); ValueError for another."""
        self.device = torch.device(device)
        self.fuse_tail = self.device.type == "cpu" if fuse_tail is None else fuse_tail
        self.precision: TrainingPrecision = check_precision(precision, TRAINING_PRECISIONS)
        self.student = student.to(device)
        self.student_size = check_size(student_size)
        self.params = params
        self.background = background
        self.trainable_keys = student.trainable_keys(params.mode)
        self.optimizer = torch.optim.Adam(
            student.set_trainable(params.mode), lr=params.learning_rate
        )
        named = dict(self.student.named_parameters())
        self.trainable = FlatTrainable([named[key] for key in self.trainable_keys], self.optimizer)
        """The trainable weights and Adam's state as flat tensors (in ``trainable_keys`` order), for
        the batched engine."""
        self.chooser: CoordinateChooser | None = None
        """Where updates are sparse: the coordinates trained (:meth:`train_sparse`); None: all of
        them."""

    def train_sparse(self, options: SparseOptions) -> None:
        """From now on train only a chosen share of the trainable coordinates
        (:mod:`.coordinates`)."""
        named = dict(self.student.named_parameters())
        self.chooser = CoordinateChooser(options, {key: named[key] for key in self.trainable_keys})

    def _forward(self, x: torch.Tensor, front: FrontFeatures | None) -> torch.Tensor:
        """Logits in ``x``'s dtype (the student's) computed at the distiller's precision; ``front``:
        the frozen front's features (partial mode), or None: run the whole student."""
        with bf16_autocast(self.device, self.precision):
            if front is None:
                front = self.student.forward_front(x)
            logits = (
                fused_back(self.student, front)
                if self.fuse_tail
                else self.student.forward_back(front)
            )
        return logits.to(x.dtype)

    def _snapshot(self) -> tuple[dict[str, torch.Tensor], dict[str, Any] | None]:
        """The trainable weights, and Adam's state too when ``params.restore`` asks for it."""
        state = self.student.state_dict()
        weights = {key: state[key].detach().clone() for key in self.trainable_keys}
        adam = (
            copy.deepcopy(self.optimizer.state_dict())
            if self.params.restore == "weights+adam"
            else None
        )
        return weights, adam

    def _restore(self, snapshot: tuple[dict[str, torch.Tensor], dict[str, Any] | None]) -> None:
        weights, adam = snapshot
        self.student.load_state_dict(weights, strict=False)
        if adam is not None:
            self.optimizer.load_state_dict(adam)

    def prepare(
        self, frame_bgr: np.ndarray, label: np.ndarray, boxes: np.ndarray | None = None
    ) -> PreparedKeyFrame:
        """The key frame at the student's size on the device, with its loss weights:
        :meth:`prepare_on_host` then :meth:`upload`."""
        return self.upload(self.prepare_on_host(frame_bgr, label, boxes))

    def prepare_on_host(
        self, frame_bgr: np.ndarray, label: np.ndarray, boxes: np.ndarray | None = None
    ) -> HostKeyFrame:
        """The key frame at the student's size with its loss weights, on the host (ValueError where
        the frame and the label differ in size). ``boxes``: the teacher's instance boxes ``(N, 4)``
        (``x0, y0, x1, y1``) for the ``instances`` weight map, or None. Touches neither the student
        nor the device (pinning memory aside): any thread may call it."""
        if frame_bgr.shape[:2] != label.shape:
            raise ValueError(f"frame {frame_bgr.shape[:2]} and label {label.shape} differ in size")
        boxes = boxes_to_student(boxes, frame_bgr.shape, self.student_size)
        frame_bgr = frame_to_student(frame_bgr, self.student_size)
        label = labels_to_student(label, self.student_size)
        weights = key_frame_weights(label, boxes, self.background, self.params)
        tensors = [torch.from_numpy(np.ascontiguousarray(a)) for a in (frame_bgr, label, weights)]
        if self.device.type == "cuda":
            tensors = [t.pin_memory() for t in tensors]
        return HostKeyFrame(*tensors)

    def upload(self, key_frame: HostKeyFrame) -> PreparedKeyFrame:
        """``key_frame`` on the distiller's device, normalised, in the student's dtype. From pinned
        memory the copies are queued on the current stream without blocking the host."""
        dtype = next(self.student.parameters()).dtype
        pinned = key_frame.frame_bgr.is_pinned()
        frame, label, weights = (
            t.to(self.device, non_blocking=pinned)
            for t in (key_frame.frame_bgr, key_frame.label, key_frame.weights)
        )
        return PreparedKeyFrame(
            x=normalise_frame(frame, self.device).to(dtype),
            target=label.long(),
            weights=weights.to(dtype),
        )

    def train(
        self, frame_bgr: np.ndarray, label: np.ndarray, boxes: np.ndarray | None = None
    ) -> DistillResult:
        """Run Algorithm 1 on one key frame; the student ends as the best one seen.

        ``boxes``: the teacher's instance boxes ``(N, 4)`` (``x0, y0, x1, y1``) for the
        ``instances`` weight map, or None.
        """
        return self.train_prepared(self.prepare(frame_bgr, label, boxes))

    def train_prepared(self, key_frame: PreparedKeyFrame) -> DistillResult:
        """:meth:`train` on a key frame from :meth:`prepare`, at the distiller's precision."""
        with float32_precision(self.device, training_float32(self.precision)):
            result = self._train_prepared(key_frame)
        result.weights, result.optimizer_state = self.state_on_host()
        return result

    def state_on_host(self) -> tuple[dict[str, torch.Tensor], dict[str, Any]]:
        """CPU copies of the trainable weights as they are now (by state-dict key) and of the
        optimiser's ``state_dict()``; reads the device, so it waits for the work queued there."""
        state = self.student.state_dict()
        return {key: on_host(state[key]) for key in self.trainable_keys}, on_host(
            self.optimizer.state_dict()
        )

    def _train_prepared(self, key_frame: PreparedKeyFrame) -> DistillResult:
        params = self.params
        num_classes = self.student.num_classes
        x, target = key_frame.x, key_frame.target
        self.student.train()
        front = None
        if params.mode == "partial":
            with torch.no_grad():
                front = self.student.forward_front(x).detached()

        logits = self._forward(x, front)
        best_metric = initial = miou(logits.argmax(1)[0], target, num_classes)
        result = DistillResult(metric=initial, initial_metric=initial, steps=0)
        if best_metric >= params.threshold:
            return result

        weights = key_frame.weights
        metric = best_metric
        # None while the current student is the best one seen
        saved_best = None
        for _ in range(params.max_updates):
            start = time.perf_counter()
            if saved_best is None:
                # about to move away from the best student
                saved_best = self._snapshot()
            loss = weighted_cross_entropy(logits, target, weights)
            self.optimizer.zero_grad(set_to_none=True)
            loss.backward()
            if self.chooser is not None:
                self.chooser.before_step(self.optimizer)
            self.optimizer.step()
            logits = self._forward(x, front)
            metric = miou(logits.argmax(1)[0], target, num_classes)
            result.step_seconds.append(time.perf_counter() - start)
            result.steps += 1
            if metric > params.threshold:
                break
            if metric > best_metric:
                best_metric, saved_best = metric, None
        else:
            if metric < best_metric:
                assert saved_best is not None, (
                    "the best student was saved when training moved away from it"
                )
                self._restore(saved_best)
                metric = best_metric
        if self.chooser is not None:
            self.chooser.key_frame_trained()
        result.metric = metric
        return result
