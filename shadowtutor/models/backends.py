"""The names of the student inference backends, importable without torch (settings, CLI)."""

from __future__ import annotations

# Run on the CPU: StudentNet as written, the fast torch graph, the same graph in ONNX Runtime.
CPU_BACKENDS = ("reference", "torch", "onnx")
# What ``--backend`` accepts: ``cuda`` is StudentNet on a GPU in PyTorch; ``auto`` picks one.
STUDENT_BACKENDS = ("auto", "cuda", *CPU_BACKENDS)
