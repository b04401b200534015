#!/usr/bin/env bash
# Lab: prepare this checkout for lab/scripts/server_gpu_run.sh on a lent GPU machine, which gets a copy of the
# working tree and, as the device tool's `carry`, three folders that are never committed:
#   .whl/           the wheels the GPU machine's Python lacks (WHEELS_TOOL, default ../shared/tools/gpu-wheels.sh)
#   .gpu-assets/    the background photos of `shadowtutor scenes fetch-photos`, which bench load's scenes need
#   .gpu-baseline/  BASELINE_COMMIT's (default cd03a06) shadowtutor/ and lab/: the engine the run's step 0b times
#                   beside this checkout's on the same machine
# Each is listed in .git/info/exclude and made only where it is missing or empty (delete one to make it again).
# Ends by printing the carry list. Needs the checkout's .venv (./scripts/bootstrap.sh).
#   bash lab/scripts/server_gpu_prepare.sh
set -euo pipefail
cd "$(git rev-parse --show-toplevel)"
WHEELS_TOOL=${WHEELS_TOOL:-../shared/tools/gpu-wheels.sh}
BASELINE_COMMIT=${BASELINE_COMMIT:-cd03a06}
exclude="$(git rev-parse --git-path info/exclude)"
mkdir -p "$(dirname "$exclude")"
touch "$exclude"
missing() { [ ! -d "$1" ] || [ -z "$(ls -A "$1")" ]; }
for folder in .whl .gpu-assets .gpu-baseline; do
  grep -qxF "/$folder/" "$exclude" || echo "/$folder/" >> "$exclude"
done
if missing .whl; then
  if [ ! -f "$WHEELS_TOOL" ]; then
    echo "server_gpu_prepare: no wheel tool at $WHEELS_TOOL (set WHEELS_TOOL)" >&2
    exit 2
  fi
  bash "$WHEELS_TOOL" .whl > /dev/null
fi
if missing .gpu-assets; then
  if [ ! -x .venv/bin/shadowtutor ]; then
    echo "server_gpu_prepare: no .venv/bin/shadowtutor to fetch the photos with (run ./scripts/bootstrap.sh)" >&2
    exit 2
  fi
  SHADOWTUTOR_ASSETS_DIR="$PWD/.gpu-assets" .venv/bin/shadowtutor scenes fetch-photos > /dev/null
fi
if missing .gpu-baseline; then
  if ! git cat-file -e "$BASELINE_COMMIT^{commit}" 2> /dev/null; then
    echo "server_gpu_prepare: no commit $BASELINE_COMMIT in this checkout (set BASELINE_COMMIT)" >&2
    exit 2
  fi
  mkdir -p .gpu-baseline
  git archive "$BASELINE_COMMIT" shadowtutor lab | tar -x -C .gpu-baseline
fi
for folder in .whl .gpu-assets .gpu-baseline; do
  echo "$folder: $(find "$folder" -type f | wc -l) files, $(du -sh "$folder" | cut -f1)"
done
echo 'carry: [".whl", ".gpu-assets", ".gpu-baseline"]'
