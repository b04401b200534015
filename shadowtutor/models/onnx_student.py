"""The student run by ONNX Runtime: the fastest CPU path that ``shadowtutor bench student`` measured.

The exported graph is :class:`~shadowtutor.models.fast_student.FastStudent` (pixel-mean
subtraction, instance normalisation for the frame-statistics BatchNorm, folded head, argmax
inside): ``frame`` uint8 ``(H, W, 3)`` in, ``labels`` uint8 ``(H, W)`` out, any frame size.

Weight updates rebuild the session from the exported model with new initializer values.
(Overriding initializers through ``SessionOptions.add_initializer`` gives wrong labels once
ORT's layout optimisations are on, so the model bytes themselves are rewritten.)
"""

from __future__ import annotations

import copy
import functools
import io
import warnings
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import torch

from shadowtutor.models.fast_student import FastStudent
from shadowtutor.models.inference import check_frame
from shadowtutor.models.student import StudentNet

ONNX_OPSET = 17
INPUT_NAME = "frame"
OUTPUT_NAME = "labels"


def _require_onnx() -> tuple[Any, Any]:
    try:
        import onnx
        import onnxruntime
    except ImportError as exc:
        raise RuntimeError(
            f"the onnx inference backend needs onnx and onnxruntime ({exc}); "
            "install them with: pip install 'shadowtutor[onnx]'"
        ) from exc
    return onnx, onnxruntime


@functools.lru_cache(maxsize=4)
def export_fast_student(num_classes: int) -> bytes:
    """The serialised ONNX graph of a ``num_classes`` student's :class:`FastStudent`, weights as placeholders.

    The exporter merges initializers with equal values (all-zero biases of a fresh student,
    say), so the graph is exported from a student whose every tensor is unique random noise:
    then each initializer is one state-dict entry of :class:`FastStudent`, under its name,
    and :func:`with_weights` writes the real values in. The graph depends on the class count
    only, so exports are cached.
    """
    onnx, _ = _require_onnx()
    placeholder = FastStudent(StudentNet(num_classes).eval())
    generator = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for tensor in placeholder.state_dict().values():
            tensor.copy_(torch.rand(tensor.shape, generator=generator) + 0.5)
    example = torch.zeros((64, 96, 3), dtype=torch.uint8)
    buffer = io.BytesIO()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # instance_norm in "training mode" and exporter deprecations
        torch.onnx.export(
            placeholder,
            (example,),
            buffer,
            input_names=[INPUT_NAME],
            output_names=[OUTPUT_NAME],
            dynamic_axes={INPUT_NAME: {0: "height", 1: "width"}, OUTPUT_NAME: {0: "height", 1: "width"}},
            opset_version=ONNX_OPSET,
            dynamo=False,
        )
    names = {init.name for init in onnx.load_from_string(buffer.getvalue()).graph.initializer}
    unknown = names - set(placeholder.state_dict())
    if unknown:
        raise RuntimeError(f"the ONNX export produced initializers that are not student weights: {sorted(unknown)}")
    return buffer.getvalue()


def with_weights(template: bytes, fast: FastStudent) -> bytes:
    """``template`` (from :func:`export_fast_student`) with ``fast``'s current weights, serialised."""
    onnx, _ = _require_onnx()
    model = onnx.load_from_string(template)
    state = fast.state_dict()
    for init in model.graph.initializer:
        init.CopyFrom(onnx.numpy_helper.from_array(state[init.name].detach().cpu().numpy(), init.name))
    return model.SerializeToString()


class OnnxBackend:
    """Student inference through ONNX Runtime; holds its own copy of the student."""

    kind = "onnx"

    def __init__(
        self,
        student: StudentNet,
        threads: int | None = None,
        providers: Sequence[str] | None = None,
        spin: bool = False,
    ) -> None:
        """``spin``: let ORT's idle worker threads busy-wait for the next frame (a little lower
        latency, but they burn CPU that decoding, networking or training in the same process need)."""
        _, ort = _require_onnx()
        self._ort = ort
        self.fast = FastStudent(copy.deepcopy(student).cpu().eval())
        self._template = export_fast_student(student.num_classes)
        available = ort.get_available_providers()
        self.providers = list(providers) if providers else [
            p for p in ("CUDAExecutionProvider", "CPUExecutionProvider") if p in available
        ]
        self.options = ort.SessionOptions()
        self.options.intra_op_num_threads = threads or torch.get_num_threads()
        self.options.inter_op_num_threads = 1
        self.options.add_session_config_entry("session.intra_op.allow_spinning", "1" if spin else "0")
        self._session = self._build_session()

    def _build_session(self) -> Any:
        return self._ort.InferenceSession(
            with_weights(self._template, self.fast), self.options, providers=self.providers
        )

    def infer(self, frame_bgr: np.ndarray) -> np.ndarray:
        """Labels ``uint8 (H, W)`` of one BGR ``uint8 (H, W, 3)`` frame."""
        return self._session.run(None, {INPUT_NAME: check_frame(frame_bgr)})[0]

    def load_weights(self, update: Mapping[str, torch.Tensor]) -> None:
        """Install a (partial) student ``state_dict`` and rebuild the session (tens of ms)."""
        self.fast.load_weights(update)
        self._session = self._build_session()

    apply = load_weights
