#!/usr/bin/env bash
# Lab: every server figure measured on a GPU machine, in one run, most important first; each step writes
# its results under OUT (default docs/results/server_gpu) as soon as it ends, so a run cut short keeps them.
#   OUT=DIR SECONDS_PER_POINT=4 [ARCHIVE=FILE.tgz] bash lab/scripts/server_gpu_run.sh
# ARCHIVE: after every step, everything under OUT packed into that one file (for a machine that returns few
# files); the run ends by printing a summary of every step's headline figures.
# Step 0 times the batched engine's variants; the later steps run the server with the fastest one's flags
# (ENGINE_FLAGS="--distill-convolution ... --distill-tail ..." overrides the choice for every size), and with two
# engine threads for the labels teacher's load where step 2 measured them faster than one (THREAD_FLAGS="..."
# overrides that).
# Run from the repository root; nothing needs to be pip-installed but the product's dependencies: the
# product and the lab are imported from the checkout (`python3 -m shadowtutor_lab`, lab/ on PYTHONPATH).
# The scenes of `bench load` need the photos of `shadowtutor scenes fetch-photos` (SHADOWTUTOR_ASSETS_DIR).
# Random Mask R-CNN weights (timing only).
# RUN_LIMIT_S (default 530): the last step, a torch.compile study, runs only in what is left of it.
# VARIANTS_LIMIT_S (default 240): the most seconds step 0 may take.
# WARMUP (default 10): seconds each `bench server` point runs before its window (a compiled objective compiles in
# its first batch; the compiled kernels are cached on disk by step 0 for the later server processes).
# BASELINE: an earlier commit's checkout whose engine step 0b times on the same machine (below).
# ONLY="STEP ...": run these steps alone (default: every step); VARIANTS and SIZES: step 0's --variants (default:
# the server options still open, below) and --sizes (default 1280x720,640x360,128x72).
set -uo pipefail
OUT=${OUT:-docs/results/server_gpu}
SECS=${SECONDS_PER_POINT:-4}
WARMUP=${WARMUP:-10}
PY=${PYTHON:-python3}
export PYTHONPATH="$PWD:$PWD/lab${PYTHONPATH:+:$PYTHONPATH}"
mkdir -p "$OUT"
weights=${WEIGHTS:-/tmp/maskrcnn_random.pt}
log() { echo "== $(date +%T) $*" | tee -a "$OUT/run.log"; }
pack() { if [ -n "${ARCHIVE:-}" ]; then tar czf "$ARCHIVE" -C "$OUT" .; fi; }
STEPS=()
# whether ONLY (unset: every step) names the step $1
wanted() { [ -z "${ONLY:-}" ] || [[ " $ONLY " == *" $1 "* ]]; }
step() {
  local name=$1; shift
  wanted "$name" || return 0
  log "$name: $*"; STEPS+=("$name")
  "$@" > "$OUT/$name.log" 2>&1; echo "rc=$?" >> "$OUT/$name.log"; tail -40 "$OUT/$name.log"; pack
}
# the headline lines of every step's log, in the order the steps ran (the archive holds the rest)
summary() {
  echo "== summary"; cat "$OUT/device.txt"
  local name pattern width
  for name in "${STEPS[@]}"; do
    echo "-- $name"
    width=200
    case $name in
      engine_variants) pattern="^(device|fastest|not chosen|server flags)| sessions: |FAILED|Error|rc="; width=330 ;;
      engine_baseline) pattern=" sessions: |FAILED|Error|rc=" ;;
      engine_host_time) pattern="^\||host time|garbage|Error|rc=" ;;
      engine_compiled) pattern=" sessions: |rc=" ;;
      cuda_tests) pattern="passed|failed|error|rc=" ;;
      teacher_check|teacher_agreement_*) pattern="detections per frame|^ *[0-9]+ \||^ *(fp32|tf32|bf16)|host path|Error|rc=" ;;
      *) pattern="key frames/s|answered|turnaround|problem|FAILED|Error|rc=" ;;
    esac
    grep -E "$pattern" "$OUT/$name.log" | cut -c1-"$width" | tail -24
  done
}
$PY - <<'PY' | tee "$OUT/device.txt"
import torch
print(torch.cuda.get_device_name(0) if torch.cuda.is_available() else "no CUDA device", "| torch", torch.__version__,
      "| CUDA", torch.version.cuda)
PY
if [ ! -f "$weights" ] && { wanted teacher_check || wanted load_maskrcnn || wanted profile; }; then
  $PY -c "import torch, torchvision; torch.save(torchvision.models.detection.maskrcnn_resnet50_fpn(weights=None, weights_backbone=None, num_classes=91).state_dict(), '$weights')"
fi
dev=${DEVICE:-cuda}
OPEN_VARIANTS=grouped-fused,matmul-fused,matmul-fused-bf16,grouped-fused-bf16,matmul-fused-graphs,matmul-fused-bf16-graphs,matmul-fused-closs-graphs
case "${VARIANTS:-}" in all) ENGINE_VARIANTS= ;; "") ENGINE_VARIANTS=$OPEN_VARIANTS ;; *) ENGINE_VARIANTS=$VARIANTS ;; esac
# the tests that need a GPU (CUDA graphs replayed against plain runs); the rest of the suite runs in CI
step cuda_tests "$PY" -m pytest -q -p no:cacheprovider tests/shadowtutor/algorithms/test_step_graph.py \
  tests/shadowtutor/algorithms/test_batched_distill.py tests/lab/evaluation/test_torch_switches.py \
  tests/shadowtutor/models/test_host_copy.py -k "cuda or graph"
# 0. the batched engine alone, 64 sessions: which variant is fastest, of the convolutions x tails with and without
# CUDA graphs (TF32, cuDNN's autotuner and bf16 were measured on an H100: docs/results/server_gpu/h100-engine-v2;
# VARIANTS=all to time every variant of engine_variants.py again); 128x72 has next to no arithmetic, so its batch
# time is the host's cost of a batch (Python and kernel launches), what CUDA graphs are to remove
# VARIANTS_LIMIT_S bounds the step: cut short, it still chooses the flags from the points it measured
step engine_variants timeout "${VARIANTS_LIMIT_S:-240}" "$PY" lab/scripts/engine_variants.py --device "$dev" --sessions 64 --kernel-time \
  --sizes "${SIZES:-1280x720,640x360,128x72}" ${ENGINE_VARIANTS:+--variants "$ENGINE_VARIANTS"} --repeats "${VARIANT_REPEATS:-2}" \
  --out "$OUT/engine_variants.json"
# 0b. BASELINE (a directory holding an earlier commit's shadowtutor/ and lab/, e.g. from `git archive`, carried to
# the machine): the plain variants of that commit timed the same way on this machine, so that a change to the
# engine is a ratio within one run
if [ -n "${BASELINE:-}" ]; then
  step engine_baseline env PYTHONPATH="$BASELINE:$BASELINE/lab:$PYTHONPATH" timeout "${VARIANTS_LIMIT_S:-240}" "$PY" \
    "$BASELINE/lab/scripts/engine_variants.py" --device "$dev" --sessions 64 --sizes "${SIZES:-1280x720,640x360,128x72}" \
    --variants grouped-fused,matmul-fused --repeats "${VARIANT_REPEATS:-2}" --out "$OUT/engine_baseline.json"
fi
# 0c. the host's time of a batch of this commit's engine at 640x360 by phase (gathering, training, writing back, the
# rest) and the collector's passes, the heap frozen as the server's is
step engine_host_time timeout 150 "$PY" lab/scripts/engine_host_time.py --device "$dev" --sessions 64 --size 640x360 \
  --freeze-heap --out "$OUT/engine_host_time.json"
# the server flags of the fastest server option per size (none measured: the defaults)
flags_at() {
  "$PY" -c "import json,sys; print(json.load(open(sys.argv[1])).get('server_flags', {}).get(sys.argv[2], ''))" \
    "$OUT/engine_variants.json" "$1" 2>/dev/null
}
FLAGS_720=${ENGINE_FLAGS:-$(flags_at 1280x720)}
FLAGS_360=${ENGINE_FLAGS:-$(flags_at 640x360)}
# the TF32 switches are per process: a teacher at another float32 setting than distillation takes turns with it
# (docs/design/training_precision.md), so Mask R-CNN runs at tf32 where distillation does
case "$FLAGS_720" in *"--distill-precision tf32"*) TEACHER_PRECISION=tf32 ;; *) TEACHER_PRECISION=fp32 ;; esac
log "engine flags: 1280x720 '$FLAGS_720', 640x360 '$FLAGS_360'; Mask R-CNN precision $TEACHER_PRECISION"
# 1. distillation through the server's engine, batched, all 8 steps (THRESHOLD 0.999), free teacher, per size; 128 sessions
# only at 640x360 (at 1280x720 a window of two batches per session would cost the later steps their time)
step distill_batched_720 "$PY" -m shadowtutor_lab bench server --stages distill --sessions 1,64 --sizes 1280x720 \
  --engines batched --seconds "$SECS" --warmup "$WARMUP" --server-args "--device $dev $FLAGS_720" --out "$OUT/distill_batched_720"
step distill_batched_360 "$PY" -m shadowtutor_lab bench server --stages distill --sessions 1,64,128 --sizes 640x360 \
  --engines batched --seconds "$SECS" --warmup "$WARMUP" --server-args "--device $dev $FLAGS_360" --out "$OUT/distill_batched_360"
# 1a. the same at 1280x720, 64 sessions, at the other training precision than the chosen flags' (bf16 where they
# name fp32 or tf32, fp32 where they name bf16): the server's ratio of the two in one run
case "$FLAGS_720" in
  *"--distill-precision bf16"*) OTHER_720=${FLAGS_720/--distill-precision bf16/--distill-precision fp32} ;;
  *"--distill-precision "*) OTHER_720=$(echo "$FLAGS_720" | sed -E 's/--distill-precision [a-z0-9]+/--distill-precision bf16/') ;;
  *) OTHER_720="$FLAGS_720 --distill-precision fp32" ;;
esac
step distill_precision_720 "$PY" -m shadowtutor_lab bench server --stages distill --sessions 64 --sizes 1280x720 \
  --engines batched --seconds "$SECS" --warmup "$WARMUP" --server-args "--device $dev $OTHER_720" \
  --out "$OUT/distill_precision_720"
# 1b. the same at 1280x720, 64 sessions, with 8 threads preparing key frames instead of the default 2: in a closed loop
# the GPU waits while a batch's 64 key frames are prepared (9.3 ms each at 1280x720 on the H100's host while the
# weight map came from connected components; since from region borders, about a tenth of that on a CPU)
step distill_workers_720 "$PY" -m shadowtutor_lab bench server --stages distill --sessions 64 --sizes 1280x720 \
  --engines batched --seconds "$SECS" --warmup "$WARMUP" --server-args "--device $dev $FLAGS_720 --distill-workers 8" \
  --out "$OUT/distill_workers_720"
# 2. two engine threads, each with batches of at most 32 (--distill-engines 2 --distill-batch-size 32: two cohorts of
# sessions at 64, one prepared and its host work done while the other trains), against one engine with batches of 64
# (step 1), at 64 and 128 sessions; the labels teacher's load uses them where they beat one engine at 1280x720 and
# 64 sessions (THREAD_FLAGS="..." sets its flags instead). The Mask R-CNN steps keep one engine: beside that teacher
# on the same GPU two engines answered 0.76x one's key frames (docs/results/server_gpu/h100-threads-v1)
TWO_ENGINES="--distill-engines 2 --distill-batch-size 32"
step distill_engines_720 "$PY" -m shadowtutor_lab bench server --stages distill --sessions 64,128 --sizes 1280x720 \
  --engines batched --seconds "$SECS" --warmup "$WARMUP" --server-args "--device $dev $FLAGS_720 $TWO_ENGINES" \
  --out "$OUT/distill_engines_720"
step distill_engines_360 "$PY" -m shadowtutor_lab bench server --stages distill --sessions 64,128 --sizes 640x360 \
  --engines batched --seconds "$SECS" --warmup "$WARMUP" --server-args "--device $dev $FLAGS_360 $TWO_ENGINES" \
  --out "$OUT/distill_engines_360"
# key frames/s at 64 sessions in a bench server result (0 where absent)
rate_at_64() {
  "$PY" -c "import json,sys; print(max([p['key_frames_per_s'] for p in json.load(open(sys.argv[1]))['points'] if p['sessions'] == 64] or [0]))" \
    "$1" 2>/dev/null || echo 0
}
if [ -z "${THREAD_FLAGS+set}" ]; then
  THREAD_FLAGS=$("$PY" -c "import sys; print(sys.argv[3] if float(sys.argv[1]) > float(sys.argv[2]) > 0 else '')" \
    "$(rate_at_64 "$OUT/distill_engines_720.json")" "$(rate_at_64 "$OUT/distill_batched_720.json")" "$TWO_ENGINES")
fi
LABELS_FLAGS_720="$FLAGS_720 $THREAD_FLAGS"
log "engine threads for the labels teacher's load: '${THREAD_FLAGS:-one engine, batches of 64}'"
# 3. the Mask R-CNN teacher: label path per frame at batch 8/16; fp32, tf32 and fp32 with cuDNN's autotuner
[ "${TEACHER_CHECK:-1}" = 1 ] && step teacher_check "$PY" lab/scripts/teacher_gpu_check.py --weights-path "$weights" --device "$dev" --size 1280x720 \
  --batches 8,16 --precisions fp32,tf32 --cudnn-benchmark --score-threshold 0.05 --out "$OUT/teacher_check.json"
# 3b. the teacher's labels at tf32 and bf16 against fp32 on the packaged clips' frames (vtest, bikes): only with real
# weights (REAL_WEIGHTS=a torchvision maskrcnn_resnet50_fpn COCO state dict); random weights say nothing of them
if [ -n "${REAL_WEIGHTS:-}" ] && wanted teacher_agreement; then
  clips=$("$PY" -c "from shadowtutor_lab.scenes.real import REAL_CLIPS; print(REAL_CLIPS['vtest'].path, REAL_CLIPS['bikes'].path)")
  for clip in $clips; do
    name=$(basename "${clip%.*}")
    ONLY= step "teacher_agreement_$name" "$PY" lab/scripts/teacher_gpu_check.py --weights-path "$REAL_WEIGHTS" --device "$dev" \
      --video "$clip" --size 1280x720 --frames 32 --batches 8 --precisions fp32,tf32,bf16 --score-threshold 0.5 \
      --out "$OUT/teacher_agreement_$name.json"
  done
elif wanted teacher_agreement; then
  log "teacher_agreement: skipped, no REAL_WEIGHTS (random weights say nothing of the labels' agreement)"
fi
# 4. bench load, labels teacher then Mask R-CNN: 64 edges at 1 key frame/s, 1280x720
step load_labels "$PY" -m shadowtutor_lab bench load --edges 64 --rate 1 --size 1280x720 --minutes 0.5 --scene-frames 120 \
  --no-progress --server-args "--device $dev --distill-workers 8 --max-sessions 64 $LABELS_FLAGS_720" --out "$OUT/load_labels"
step load_maskrcnn "$PY" -m shadowtutor_lab bench load --edges 64 --rate 1 --size 1280x720 --minutes 0.5 --scene-frames 120 \
  --no-progress --server-args "--device $dev --distill-workers 8 --max-sessions 64 $FLAGS_720 --teacher maskrcnn --weights-path $weights --teacher-batch-size 16 \
  --teacher-precision $TEACHER_PRECISION" --out "$OUT/load_maskrcnn"
# 5. teacher + distillation together with Mask R-CNN: the capacity planner's profile
step profile "$PY" -m shadowtutor_lab bench server --stages teacher,distill,both --sessions 64 --sizes 640x360,1280x720 \
  --engines batched --seconds "$SECS" --warmup "$WARMUP" \
  --server-args "--device $dev $FLAGS_720 --teacher maskrcnn --weights-path $weights --teacher-batch-size 16 \
  --teacher-precision $TEACHER_PRECISION" --out "$OUT/maskrcnn_server" --profile-out "$OUT/profile.json"
# 6. a study, only where the run has time left for it (compiling takes minutes; RUN_LIMIT_S: the seconds the whole
# run may take): the engine compiled by torch.compile at 640x360, against its references
left=$(( ${RUN_LIMIT_S:-530} - SECONDS ))
if ! wanted engine_compiled; then
  :
elif [ "$left" -ge 120 ]; then
  step engine_compiled timeout "$left" "$PY" lab/scripts/engine_variants.py --device "$dev" --sessions 64 --sizes 640x360 \
    --variants grouped-written-compiled,grouped-fused-compiled --repeats 2 --out "$OUT/engine_compiled.json"
else
  log "engine_compiled: skipped, ${left} s left"
fi
log "all steps done"
summary
pack
