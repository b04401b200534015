#!/usr/bin/env bash
# Lab: every server figure measured on a GPU machine, in one run, most important first; each step writes
# its results under OUT (default docs/results/server_gpu) as soon as it ends, so a run cut short keeps them.
#   OUT=DIR SECONDS_PER_POINT=4 bash lab/scripts/server_gpu_run.sh
# Run from the repository root; nothing needs to be pip-installed but the product's dependencies: the
# product and the lab are imported from the checkout (`python3 -m shadowtutor_lab`, lab/ on PYTHONPATH).
# The scenes of `bench load` need the photos of `shadowtutor scenes fetch-photos` (SHADOWTUTOR_ASSETS_DIR).
# Random Mask R-CNN weights (timing only).
set -uo pipefail
OUT=${OUT:-docs/results/server_gpu}
SECS=${SECONDS_PER_POINT:-4}
PY=${PYTHON:-python3}
export PYTHONPATH="$PWD:$PWD/lab${PYTHONPATH:+:$PYTHONPATH}"
mkdir -p "$OUT"
weights=${WEIGHTS:-/tmp/maskrcnn_random.pt}
log() { echo "== $(date +%T) $*" | tee -a "$OUT/run.log"; }
step() { local name=$1; shift; log "$name: $*"; "$@" > "$OUT/$name.log" 2>&1; echo "rc=$?" >> "$OUT/$name.log"; tail -25 "$OUT/$name.log"; }

$PY - <<'PY' | tee "$OUT/device.txt"
import torch
print(torch.cuda.get_device_name(0) if torch.cuda.is_available() else "no CUDA device", "| torch", torch.__version__,
      "| CUDA", torch.version.cuda)
PY
if [ ! -f "$weights" ]; then
  $PY -c "import torch, torchvision; torch.save(torchvision.models.detection.maskrcnn_resnet50_fpn(weights=None, weights_backbone=None, num_classes=91).state_dict(), '$weights')"
fi
dev=${DEVICE:-cuda}
# 1. distillation engine, batched, all 8 steps (THRESHOLD 0.999), free teacher
step distill_batched "$PY" -m shadowtutor_lab bench server --stages distill --sessions 1,64,256 --sizes 640x360,1280x720 \
  --engines batched --seconds "$SECS" --warmup 3 --server-args "--device $dev" --out "$OUT/distill_batched"
# 1b. the same with the fused tail (one convolution at an eighth of the resolution instead of two at a half)
step distill_batched_fused "$PY" -m shadowtutor_lab bench server --stages distill --sessions 1,64,256 \
  --sizes 640x360,1280x720 --engines batched --seconds "$SECS" --warmup 3 \
  --server-args "--device $dev --distill-tail fused" --out "$OUT/distill_batched_fused"
# 2. the same on the sequential engine (the ratio, same run)
step distill_sequential "$PY" -m shadowtutor_lab bench server --stages distill --sessions 1,16 --sizes 1280x720 \
  --engines sequential --seconds "$SECS" --warmup 2 --server-args "--device $dev --distill-workers 8" \
  --out "$OUT/distill_sequential"
# 3. the Mask R-CNN teacher: label path per frame at batch 1/8/16, precisions
[ "${TEACHER_CHECK:-1}" = 1 ] && step teacher_check "$PY" lab/scripts/teacher_gpu_check.py --weights-path "$weights" --device "$dev" --size 1280x720 \
  --batches 1,8,16 --out "$OUT/teacher_check.json"
# 4. bench load, labels teacher then Mask R-CNN: 64 edges at 1 key frame/s, 1280x720
step load_labels "$PY" -m shadowtutor_lab bench load --edges 64 --rate 1 --size 1280x720 --minutes 0.5 --scene-frames 120 \
  --no-progress --server-args "--device $dev --distill-workers 8 --max-sessions 64" --out "$OUT/load_labels"
step load_maskrcnn "$PY" -m shadowtutor_lab bench load --edges 64 --rate 1 --size 1280x720 --minutes 0.5 --scene-frames 120 \
  --no-progress --server-args "--device $dev --distill-workers 8 --max-sessions 64 --teacher maskrcnn --weights-path $weights --teacher-batch-size 16" \
  --out "$OUT/load_maskrcnn"
# 5. teacher + distillation together with Mask R-CNN: the capacity planner's profile
step profile "$PY" -m shadowtutor_lab bench server --stages teacher,distill,both --sessions 64 --sizes 640x360,1280x720 \
  --engines batched --seconds "$SECS" --warmup 3 \
  --server-args "--device $dev --teacher maskrcnn --weights-path $weights --teacher-batch-size 16" \
  --out "$OUT/maskrcnn_server" --profile-out "$OUT/profile.json"
log "all steps done"
