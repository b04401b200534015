"""The student inference backends by name, and which of them this machine can run.

Importing this module imports neither torch nor ONNX Runtime (the settings and the CLI use the
names); :func:`available` imports them to look.

* ``reference``, ``torch``, ``onnx``: on the CPU (StudentNet as written, the fast torch graph, the
  same graph in ONNX Runtime);
* ``onnx-trt``, ``onnx-cuda``: the ONNX graph on an NVIDIA GPU through ONNX Runtime's TensorRT
  (FP16 where its labels agree with FP32) or CUDA execution provider: they need onnxruntime-gpu
  (NVIDIA's Jetson build in the Jetson image) and a CUDA device;
* ``cuda``: StudentNet in PyTorch on the GPU;
* ``auto``: the fastest of them this machine runs, in the order of :data:`AUTO_ORDER`.
"""

from __future__ import annotations

CPU_BACKENDS = ("reference", "torch", "onnx")
GPU_BACKENDS = ("onnx-trt", "onnx-cuda", "cuda")
STUDENT_BACKENDS = ("auto", *GPU_BACKENDS, *CPU_BACKENDS)
# ONNX Runtime's execution providers per ONNX backend: the first runs the graph, ORT gives what it
# cannot run to the next ones.
ONNX_PROVIDERS = {
    "onnx": ("CPUExecutionProvider",),
    "onnx-cuda": ("CUDAExecutionProvider", "CPUExecutionProvider"),
    "onnx-trt": ("TensorrtExecutionProvider", "CUDAExecutionProvider", "CPUExecutionProvider"),
}
# The order ``auto`` tries backends in: the first that starts is used. TensorRT (``onnx-trt``) is
# chosen by name only: it builds a new engine for every weight update.
AUTO_ORDER = ("onnx-cuda", "cuda", "onnx", "torch")
# Change-based inference (shadowtutor.acceleration.change_based) runs on the CPU in PyTorch and
# hands frames where too much changed to one of these full-frame backends, fastest first.
CHANGE_BASED_FALLBACKS = ("onnx", "torch")


class BackendUnavailableError(RuntimeError):
    """This machine cannot run the backend asked for; the message says what is missing."""


def onnxruntime_providers() -> tuple[str, ...] | None:
    """The execution providers of the installed ONNX Runtime, or ``None`` without onnx and
    onnxruntime."""
    try:
        import onnx  # noqa: F401
        import onnxruntime
    except ImportError:
        return None
    return tuple(onnxruntime.get_available_providers())


def unavailable_reason(kind: str) -> str | None:
    """Why this machine cannot run backend ``kind``, or ``None`` when it can (as far as can be told
    before use)."""
    if kind not in STUDENT_BACKENDS or kind == "auto":
        raise ValueError(
            f"unknown student backend {kind!r}: choose one of {', '.join(STUDENT_BACKENDS)}"
        )
    if kind in ("reference", "torch"):
        return None
    if kind in ONNX_PROVIDERS:
        providers = onnxruntime_providers()
        if providers is None:
            return f"student backend {kind!r} needs onnx and onnxruntime (pip install 'shadowtutor[onnx]')"
        needed = ONNX_PROVIDERS[kind][0]
        if needed not in providers:
            import onnxruntime

            return (
                f"student backend {kind!r} needs ONNX Runtime's {needed}, which this onnxruntime "
                f"{onnxruntime.__version__} does not have (it has {list(providers)}); install "
                "onnxruntime-gpu "
                "(the Jetson image has NVIDIA's build)"
            )
        if kind == "onnx":
            return None
    import torch

    if not torch.cuda.is_available():
        return f"student backend {kind!r}: no CUDA device here (PyTorch sees none)"
    return None


def resolve_backend(name: str, change_based: bool = False) -> list[str]:
    """The backends to try for ``name``, in order: ``auto`` gives every available one of
    :data:`AUTO_ORDER` (the next is the fallback when one fails to start); a name gives itself, or a
    :class:`BackendUnavailableError` saying what is missing. With ``change_based`` only the
    :data:`CHANGE_BASED_FALLBACKS` qualify."""
    order = CHANGE_BASED_FALLBACKS if change_based else AUTO_ORDER
    if change_based and name not in ("auto", *order):
        raise ValueError(
            f"change-based inference runs with the {' or '.join(order)} backend, not {name}"
        )
    if name == "auto":
        return [kind for kind in order if unavailable_reason(kind) is None]
    reason = unavailable_reason(name)
    if reason is not None:
        raise BackendUnavailableError(reason)
    return [name]
