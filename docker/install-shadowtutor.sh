#!/usr/bin/env bash
# Installs ShadowTutor from a source folder into an image's Python without replacing what the
# base image ships:
# - torch, torchvision and numpy stay the image's own builds (CUDA, L4T): they are pinned to the
#   installed versions, so a requirement they do not meet fails the build instead of pulling
#   another build from PyPI;
# - a PyPI OpenCV or ONNX Runtime is not installed where the image already has cv2 or onnxruntime
#   (select_requirements.py);
# - everything else is installed at the exact version of SRC_DIR/constraints.txt (the lock that CI
#   tests, scripts/lock-constraints.sh), where the image's own packages above win over the lock.
# Usage: install-shadowtutor.sh SRC_DIR EXTRAS [MORE_PIP_REQUIREMENTS...]
#   e.g. install-shadowtutor.sh /opt/shadowtutor/src server,onnx /tmp/wheels/detectron2-*.whl
set -euo pipefail

src=${1:?usage: install-shadowtutor.sh SRC_DIR EXTRAS [MORE_PIP_REQUIREMENTS...]}
extras=${2-}
shift $(($# < 2 ? $# : 2))
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
python=${PYTHON:-python3}
pip_install=("$python" -m pip install --no-cache-dir)

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

kept='^(torch|torchvision|numpy)=='
"$python" -m pip list --format=freeze | grep -iE "$kept" >"$work/constraints.txt" || true
echo "install-shadowtutor: keeping the image's $(tr '\n' ' ' <"$work/constraints.txt")"
if [ -f "$src/constraints.txt" ]; then
    grep -viE "$kept" "$src/constraints.txt" >>"$work/constraints.txt"
fi

"${pip_install[@]}" --no-deps "$src"
"$python" "$here/select_requirements.py" shadowtutor --extras "$extras" >"$work/requirements.txt"
"${pip_install[@]}" --constraint "$work/constraints.txt" --requirement "$work/requirements.txt" "$@"
