#!/usr/bin/env bash
# The Ray Serve deployment against the single-process server on this machine, same edges, same scene:
# `shadowtutor bench load` (EDGES simulated cameras, RATE key frames/s each, MINUTES long) against
#   1. `shadowtutor serve` (bench load's own local server),
#   2. `shadowtutor serve --ray` with 1 teaching replica, then the same deployment scaled to 2,
# the cost of a session checkpoint per update as the ingress's /metrics saw it under that load, and alone
# (shadowtutor.stress.checkpoint_cost). Writes OUT/{single,ray-1,ray-2}.* (bench load's reports),
# OUT/checkpoint-under-load.json and OUT/checkpoint-alone.json. Usage:
#   ./scripts/bench-ray-serve.sh            # EDGES=8 RATE=1 MINUTES=1 OUT=docs/results/ray_serve
set -euo pipefail
cd "$(dirname "$0")/.."
EDGES=${EDGES:-8} RATE=${RATE:-1} MINUTES=${MINUTES:-1} OUT=${OUT:-docs/results/ray_serve}
RAY_PORT=${RAY_PORT:-6391} PORT=${PORT:-8391} STORE=${STORE:-$(mktemp -d)/sessions}
BIN=.venv/bin
mkdir -p "$OUT"
SCENE=$("$BIN/python" -c "from shadowtutor.scenes.cache import cached_scene
print(cached_scene('moving-street', 240, 1, (320, 180), 30.0, None, progress=False))")
SERVER=(--teacher labels --labels-dir "$SCENE" --device cpu --max-sessions 16 --log-level warning)
LOAD=(--edges "$EDGES" --rate "$RATE" --minutes "$MINUTES" --no-progress)

"$BIN/shadowtutor" bench load "${LOAD[@]}" --out "$OUT/single" --note "single process: shadowtutor serve"

"$BIN/ray" start --head --port "$RAY_PORT" --num-cpus 4 --include-dashboard=false --disable-usage-stats >/dev/null
driver=
cleanup() { [ -n "$driver" ] && kill "$driver" 2>/dev/null; "$BIN/ray" stop --force >/dev/null 2>&1 || true; }
trap cleanup EXIT
for replicas in 1 2; do
  if [ -n "$driver" ]; then kill "$driver"; wait "$driver" 2>/dev/null || true; fi
  # the second deployment scales the first in place (the Serve application outlives its driver)
  "$BIN/shadowtutor" serve --ray "127.0.0.1:$RAY_PORT" --host 127.0.0.1 --port "$PORT" --ray-replicas "$replicas" \
    --checkpoint-store "$STORE" "${SERVER[@]}" >"$OUT/ray-$replicas.driver.log" 2>&1 &
  driver=$!
  until grep -q "teaching replica(s) running" "$OUT/ray-$replicas.driver.log"; do
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
"$BIN/python" -c 'import json; from shadowtutor.stress.checkpoint_cost import measure
print(json.dumps(measure(updates=20), indent=2))' | tee "$OUT/checkpoint-alone.json"
