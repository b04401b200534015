#!/usr/bin/env bash
# The Ray Serve deployment against the single-process server on this machine, same edges, same scene:
# `shadowtutor bench load` (EDGES simulated cameras, RATE key frames/s each, MINUTES long) against
#   1. `shadowtutor serve` (bench load's own local server),
#   2. `shadowtutor serve --ray` with 1 teaching replica, then the same deployment scaled in place to each
#      count of REPLICAS (default "1 2"; "1 2 3" for the three-way comparison),
# the cost of a session checkpoint per update as the ingress's /metrics saw it under that load, and alone
# (shadowtutor_lab.stress.checkpoint_cost). Writes OUT/single.* and OUT/ray-N.* (bench load's reports),
# OUT/checkpoint-under-load.json and OUT/checkpoint-alone.json. Usage:
#   ./lab/scripts/bench-ray-serve.sh            # EDGES=8 RATE=1 MINUTES=1 OUT=docs/results/ray_serve
#   REPLICAS="1 2 3" EDGES=4 OUT=docs/results/ray_replicas ./lab/scripts/bench-ray-serve.sh
#   DEVICE=cuda RAY_GPUS=1 ./lab/scripts/bench-ray-serve.sh   # on a GPU machine: one teaching replica per GPU
set -euo pipefail
cd "$(dirname "$0")/../.."
EDGES=${EDGES:-8} RATE=${RATE:-1} MINUTES=${MINUTES:-1} OUT=${OUT:-docs/results/ray_serve}
REPLICAS=${REPLICAS:-1 2} PORT=${PORT:-8391} DEVICE=${DEVICE:-cpu} RAY_GPUS=${RAY_GPUS:-0} STORE=${STORE:-$(mktemp -d)/sessions}
BIN=.venv/bin
mkdir -p "$OUT"
SCENE=$("$BIN/python" -c "from shadowtutor_lab.scenes.cache import cached_scene
print(cached_scene('moving-street', 240, 1, (320, 180), 30.0, None, progress=False))")
SERVER=(--teacher labels --labels-dir "$SCENE" --device "$DEVICE" --max-sessions 16 --log-level warning)
LOAD=(--edges "$EDGES" --rate "$RATE" --minutes "$MINUTES" --no-progress)

"$BIN/shadowtutor" bench load "${LOAD[@]}" --out "$OUT/single" --server-args "--device $DEVICE" \
  --note "single process: shadowtutor serve"

# this run's own Ray cluster, started by a Python process that shuts it down when it ends (`ray stop` would
# stop every Ray cluster on the machine)
"$BIN/python" -c 'import signal, time
from ray.cluster_utils import Cluster
cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 4})
signal.signal(signal.SIGTERM, lambda *_: (cluster.shutdown(), exit(0)))
print("address", cluster.address, flush=True)
while True:
    time.sleep(3600)' >"$OUT/ray-head.log" 2>&1 &
head=$! driver=
cleanup() {
  if [ -n "$driver" ]; then kill "$driver" 2>/dev/null || true; fi
  kill "$head" 2>/dev/null || true
  wait "$head" 2>/dev/null || true
  rm -f "$OUT/ray-head.log"
}
trap cleanup EXIT
until grep -q "^address " "$OUT/ray-head.log"; do kill -0 "$head" || { cat "$OUT/ray-head.log"; exit 1; }; sleep 1; done
RAY_ADDRESS=$(sed -n 's/^address //p' "$OUT/ray-head.log")
for replicas in $REPLICAS; do
  if [ -n "$driver" ]; then kill "$driver"; wait "$driver" 2>/dev/null || true; fi
  # the second deployment scales the first in place (the Serve application outlives its driver)
  "$BIN/shadowtutor" serve --ray "$RAY_ADDRESS" --host 127.0.0.1 --port "$PORT" --ray-replicas "$replicas" \
    --ray-gpus "$RAY_GPUS" --checkpoint-store "$STORE" "${SERVER[@]}" >"$OUT/ray-$replicas.driver.log" 2>&1 &
  driver=$!
  until grep -q "^  teaching: " "$OUT/ray-$replicas.driver.log"; do
    kill -0 "$driver" || { cat "$OUT/ray-$replicas.driver.log"; exit 1; }
    sleep 2
  done
  rm "$OUT/ray-$replicas.driver.log"
  "$BIN/shadowtutor" bench load "${LOAD[@]}" --server "http://127.0.0.1:$PORT" --out "$OUT/ray-$replicas" \
    --note "Ray Serve: shadowtutor serve --ray, $replicas teaching replica(s) of 1 CPU, ingress and replicas on this machine"
done
curl -sf "http://127.0.0.1:$PORT/metrics" | "$BIN/python" -c '
import json, sys
from prometheus_client.parser import text_string_to_metric_families
samples = {s.name: s.value for f in text_string_to_metric_families(sys.stdin.read()) for s in f.samples
           if not s.labels}
count = samples["shadowtutor_server_checkpoint_seconds_count"]
result = {"checkpoints": int(count), "mean_ms": 1000 * samples["shadowtutor_server_checkpoint_seconds_sum"] / count,
          "mean_bytes": samples["shadowtutor_server_checkpoint_bytes_sum"] / count}
print(json.dumps(result, indent=2))' | tee "$OUT/checkpoint-under-load.json"
"$BIN/python" -c 'import json; from shadowtutor_lab.stress.checkpoint_cost import measure
print(json.dumps(measure(updates=20), indent=2))' | tee "$OUT/checkpoint-alone.json"
