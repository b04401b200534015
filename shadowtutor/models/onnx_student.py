"""The student run by ONNX Runtime: on the CPU, and on a GPU through ONNX Runtime's CUDA and
TensorRT execution providers (a Jetson).

The exported graph is :class:`~shadowtutor.models.fast_student.FastStudent` (pixel-mean
subtraction, instance normalisation for the frame-statistics BatchNorm, folded head and tail,
argmax inside): ``frame`` uint8 ``(H, W, 3)`` in, ``labels`` uint8 ``(H, W)`` out. It is exported
twice, with the tail fused and without (frame sizes where it cannot be): each frame runs through
the session of its size's variant, built when first needed.

Weight updates rebuild the session from the exported model bytes with the new initializer values
written into them (not through ``SessionOptions.add_initializer``, whose overrides give wrong labels
once ORT's layout optimisations are on). Under TensorRT that builds a new engine per update; its
timing cache (kept on disk) makes the rebuilds faster.

TensorRT runs in FP16 when, on the first frame, its labels agree with the FP32 labels of the same
weights (the torch graph on the CPU) on at least :data:`FP16_MIN_AGREEMENT` of the pixels; else it
rebuilds in FP32 and says so.
"""

from __future__ import annotations

import copy
import functools
import io
import logging
import os
import warnings
from collections.abc import Mapping
from typing import Any

import numpy as np
import torch

from shadowtutor.models.backends import ONNX_PROVIDERS, BackendUnavailableError
from shadowtutor.models.fast_student import FastStudent, channel_argmax, frame_tail_fusable
from shadowtutor.models.frames import check_frame
from shadowtutor.models.student import StudentNet

ONNX_OPSET = 17
INPUT_NAME = "frame"
OUTPUT_NAME = "labels"
# Least fraction of pixels whose FP16 label equals the FP32 one for TensorRT to keep FP16.
FP16_MIN_AGREEMENT = 0.995
TENSORRT_CACHE_ENV = "SHADOWTUTOR_TENSORRT_CACHE"

log = logging.getLogger(__name__)


def tensorrt_cache_dir() -> str:
    """TensorRT's timing cache folder: ``$SHADOWTUTOR_TENSORRT_CACHE``, else
    ``~/.cache/shadowtutor/tensorrt``."""
    default = os.path.join(os.path.expanduser("~"), ".cache", "shadowtutor", "tensorrt")
    return os.environ.get(TENSORRT_CACHE_ENV) or default


def provider_options(provider: str, fp16: bool) -> dict[str, str]:
    """ONNX Runtime options of one execution provider (TensorRT: precision and the timing cache)."""
    if provider != "TensorrtExecutionProvider":
        return {}
    cache = tensorrt_cache_dir()
    os.makedirs(cache, exist_ok=True)
    # No engine cache: ORT would reuse an engine built with older weights (it does not notice new
    # initializer values). The timing cache depends on layer shapes only, so it stays valid.
    return {
        "trt_fp16_enable": str(fp16),
        "trt_timing_cache_enable": "True",
        "trt_timing_cache_path": cache,
    }


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
def export_fast_student(num_classes: int, fuse_tail: bool = True) -> bytes:
    """The serialised ONNX graph of a ``num_classes`` student's :class:`FastStudent`, weights as
    placeholders; ``fuse_tail``: the variant for frame sizes where :func:`frame_tail_fusable` holds.

    The exporter merges initializers with equal values (all-zero biases of a fresh student,
    say), so the graph is exported from a student whose every tensor is unique random noise:
    then each initializer is one state-dict entry of :class:`FastStudent`, under its name,
    and :func:`with_weights` writes the real values in. The graph depends on the class count
    only, so exports are cached.
    """
    onnx, _ = _require_onnx()
    placeholder = FastStudent(StudentNet(num_classes).eval(), fuse_tail=fuse_tail)
    generator = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for tensor in placeholder.state_dict().values():
            tensor.copy_(torch.rand(tensor.shape, generator=generator) + 0.5)
    # a size where the tail can be fused
    example = torch.zeros((64, 96, 3), dtype=torch.uint8)
    buffer = io.BytesIO()
    with warnings.catch_warnings():
        # instance_norm in "training mode" and exporter deprecations
        warnings.simplefilter("ignore")
        torch.onnx.export(
            placeholder,
            (example,),
            buffer,  # type: ignore[arg-type]  # the TorchScript exporter (dynamo=False) writes to a file object
            input_names=[INPUT_NAME],
            output_names=[OUTPUT_NAME],
            dynamic_axes={
                INPUT_NAME: {0: "height", 1: "width"},
                OUTPUT_NAME: {0: "height", 1: "width"},
            },
            opset_version=ONNX_OPSET,
            dynamo=False,
        )
    names = {init.name for init in onnx.load_from_string(buffer.getvalue()).graph.initializer}
    unknown = names - set(placeholder.state_dict())
    if unknown:
        raise RuntimeError(
            f"the ONNX export produced initializers that are not student weights: {sorted(unknown)}"
        )
    return buffer.getvalue()


def with_weights(template: bytes, fast: FastStudent) -> bytes:
    """``template`` (from :func:`export_fast_student`) with ``fast``'s current weights,
    serialised."""
    onnx, _ = _require_onnx()
    model = onnx.load_from_string(template)
    state = fast.state_dict()
    for init in model.graph.initializer:
        init.CopyFrom(
            onnx.numpy_helper.from_array(state[init.name].detach().cpu().numpy(), init.name)
        )
    return model.SerializeToString()


class OnnxBackend:
    """Student inference through ONNX Runtime; holds its own copy of the student.

    ``kind`` (``onnx``, ``onnx-cuda``, ``onnx-trt``) picks the execution providers
    (:data:`~shadowtutor.models.backends.ONNX_PROVIDERS`); a session that ONNX Runtime could not
    start on the first of them (no GPU, missing CUDA or TensorRT libraries: ORT then silently runs
    on the CPU) is a :class:`BackendUnavailableError`.
    """

    def __init__(
        self,
        student: StudentNet,
        threads: int | None = None,
        kind: str = "onnx",
        *,
        spin: bool = False,
        fuse_tail: bool = True,
    ) -> None:
        """``spin``: let ORT's idle worker threads busy-wait for the next frame (a little lower
        latency, but they burn CPU that decoding, networking or training in the same process need).
        ``fuse_tail`` False: the unfused graph at every frame size (for comparison)."""
        if kind not in ONNX_PROVIDERS:
            raise ValueError(
                f"unknown ONNX backend {kind!r}: choose one of {', '.join(ONNX_PROVIDERS)}"
            )
        _, ort = _require_onnx()
        self._ort = ort
        self.kind = kind
        self.fast = FastStudent(copy.deepcopy(student).cpu().eval(), fuse_tail=fuse_tail)
        self.providers = ONNX_PROVIDERS[kind]
        # TensorRT starts in FP16 and keeps it if the first frame's labels agree with FP32 ones.
        self.fp16 = kind == "onnx-trt"
        self._check_fp16 = self.fp16
        self.fp16_agreement: float | None = None
        self.options = ort.SessionOptions()
        self.options.intra_op_num_threads = threads or torch.get_num_threads()
        self.options.inter_op_num_threads = 1
        self.options.add_session_config_entry(
            "session.intra_op.allow_spinning", "1" if spin else "0"
        )
        # Per tail variant (fused or not); the fused one now, so that a provider that cannot start
        # fails here.
        self._sessions: dict[bool, Any] = {fuse_tail: self._build_session(fuse_tail)}

    @property
    def precision(self) -> str:
        return "fp16" if self.fp16 else "fp32"

    def _session(self, frame: np.ndarray) -> Any:
        """The session for ``frame``'s size (its tail variant), built now if it is not yet."""
        fused = self.fast.fuse_tail and frame_tail_fusable(frame.shape[0], frame.shape[1])
        if fused not in self._sessions:
            self._sessions[fused] = self._build_session(fused)
        return self._sessions[fused]

    def _build_session(self, fused: bool) -> Any:
        providers = [(p, provider_options(p, self.fp16)) for p in self.providers]
        template = export_fast_student(self.fast.student.num_classes, fused)
        session = self._ort.InferenceSession(
            with_weights(template, self.fast), self.options, providers=providers
        )
        if self.providers[0] not in session.get_providers():
            raise BackendUnavailableError(
                f"student backend {self.kind!r}: ONNX Runtime could not start {self.providers[0]} "
                "(the session "
                f"runs on {session.get_providers()}); its log above says why"
            )
        return session

    def infer(self, frame_bgr: np.ndarray) -> np.ndarray:
        """Labels ``uint8 (H, W)`` of one BGR ``uint8 (H, W, 3)`` frame."""
        frame = check_frame(frame_bgr)
        labels = self._session(frame).run(None, {INPUT_NAME: frame})[0]
        if self._check_fp16:
            self._check_fp16 = False
            labels = self._keep_fp16_if_it_agrees(frame, labels)
        return labels

    def _keep_fp16_if_it_agrees(self, frame: np.ndarray, labels: np.ndarray) -> np.ndarray:
        with torch.inference_mode():
            reference = channel_argmax(self.fast.logits(torch.from_numpy(frame))).numpy()
        self.fp16_agreement = float(np.mean(labels == reference))
        if self.fp16_agreement >= FP16_MIN_AGREEMENT:
            log.info(
                "student backend %s: FP16, its labels agree with FP32 on %.3f%% of the first "
                "frame's pixels",
                self.kind,
                100 * self.fp16_agreement,
            )
            return labels
        log.warning(
            "student backend %s: FP16 labels agree with FP32 on only %.3f%% of the first frame's "
            "pixels (< %.1f%%): running in FP32",
            self.kind,
            100 * self.fp16_agreement,
            100 * FP16_MIN_AGREEMENT,
        )
        self.fp16 = False
        self._sessions.clear()
        return self._session(frame).run(None, {INPUT_NAME: frame})[0]

    def load_weights(self, update: Mapping[str, torch.Tensor]) -> None:
        """Install a (partial) student ``state_dict`` and rebuild the sessions (tens of ms each on a
        CPU)."""
        self.fast.load_weights(update)
        self._sessions = {fused: self._build_session(fused) for fused in self._sessions}

    apply = load_weights
