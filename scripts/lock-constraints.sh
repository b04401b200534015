#!/usr/bin/env bash
# Writes constraints.txt: the exact version of every package a fresh install of ShadowTutor with
# all its extras (the dev extra), the lab (lab/) and the pinned PyTorch resolve to, on this platform and Python
# (CI's: x86-64 Linux, Python 3.11). pip resolves from scratch (--ignore-installed) and installs
# nothing (--dry-run --report). scripts/bootstrap.sh (so CI) and the images install with
# `pip install -c constraints.txt`. Run it after changing a requirement or the PyTorch pin, and commit:
#   ./scripts/lock-constraints.sh
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON=${PYTHON:-.venv/bin/python}
TORCH_SPEC=${TORCH_SPEC:-"torch==2.14.1 torchvision==0.29.1"}
report=$(mktemp)
trap 'rm -f "$report"' EXIT
# shellcheck disable=SC2086
"$PYTHON" -m pip install --quiet --dry-run --ignore-installed --report "$report" $TORCH_SPEC -e ".[dev]" -e ./lab
"$PYTHON" - "$report" "$TORCH_SPEC" >constraints.txt <<'PY'
import json, platform, sys

report, torch_spec = json.load(open(sys.argv[1])), sys.argv[2]
pins = sorted(
    (item["metadata"]["name"], item["metadata"]["version"])
    for item in report["install"]
    if item["metadata"]["name"].lower().replace("_", "-") not in ("shadowtutor", "shadowtutor-lab")
)
print("# Exact versions of everything `pip install -e '.[dev]' -e ./lab` resolves to with", torch_spec)
print(f"# on {platform.system()} {platform.machine()}, Python {platform.python_version()}.")
print("# Made by ./scripts/lock-constraints.sh (do not edit); used by scripts/bootstrap.sh and the images.")
for name, version in pins:
    print(f"{name}=={version}")
PY
echo "constraints.txt: $(grep -vc '^#' constraints.txt) pins"
