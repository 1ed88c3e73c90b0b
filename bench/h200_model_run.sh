#!/usr/bin/env bash
# The whole-model benchmark on the lent H200 in one device call, from the repo root:
#   OUT=$OUT bash bench/h200_model_run.sh      (carry: .whl from ../shared/tools/gpu-wheels.sh and
#   .device-carry/cache.tar.xz from bench/precompile_cuda.py for the shapes of `--list` below)
# 1. `tunehub serve --backend cuda` (SQLite, local CUDA worker) on a fresh data folder,
# 2. the decoder (and ResNet-50) run once through tunehub's ops with recording on: every shape
#    without an answer lands in shapes.jsonl,
# 3. `tunehub tune --from-file`: the worker tunes them and uploads each winner's artifact,
# 4. bench/model_bench.py times the arms side by side (eager, TunableOp, torch.compile,
#    tunehub) at decode batch 1, 8, 32 in CUDA graphs and a 2048-token prefill; then ResNet-50,
# 5. a second process on an empty client cache: artifacts only (no compile, no tuning).
# Everything lands under $OUT (at most 8 files come back: the JSONs and a log).
set -uo pipefail
out=${OUT:-/tmp/tunehub-out}
source "$(dirname "${BASH_SOURCE[0]}")/_device_env.sh"
device_env "$out" .whl .device-carry/cache.tar.xz \
  name,driver_version,clocks.sm,clocks.mem,temperature.gpu,power.draw,power.limit || exit 1
log=$out/model.log
export TUNEHUB_DATA_DIR=/tmp/tunehub-model TUNEHUB_CACHE_DIR=$PWD/.cache/tunehub COLUMNS=100
export TUNEHUB_SERVER=http://127.0.0.1:8765 TUNEHUB_CLIENT_CACHE=/tmp/tunehub-client-1
model_args=${MODEL_ARGS:-}
{
  python3 -m service.cli serve --backend cuda --port 8765 > /tmp/serve.log 2>&1 &
  server=$!
  for _ in $(seq 90); do
    python3 -c 'import httpx; httpx.get("http://127.0.0.1:8765/healthz").raise_for_status()' \
      2>/dev/null && break
    sleep 1
  done
  echo "== record $(date -u +%T)"
  python3 bench/model_bench.py record --shapes /tmp/shapes.jsonl $model_args
  [ "${SKIP_RESNET:-0}" = 1 ] ||
    python3 bench/model_bench.py resnet-record --shapes /tmp/shapes.jsonl --batches 1,8
  echo "== tune $(date -u +%T)"
  timeout "${TUNE_SECONDS:-300}" python3 -m service.cli tune --from-file /tmp/shapes.jsonl \
    --max-seconds "${SHAPE_SECONDS:-6}" --max-variants "${SHAPE_VARIANTS:-16}"
  echo "== arms $(date -u +%T)"
  timeout "${ARMS_SECONDS:-330}" python3 bench/model_bench.py run --out "$out" --label first \
    $model_args
  [ "${SKIP_RESNET:-0}" = 1 ] || timeout 120 python3 bench/model_bench.py resnet --out "$out" \
    --label first --batches 1,8
  echo "== second process, empty client cache $(date -u +%T)"
  TUNEHUB_CLIENT_CACHE=/tmp/tunehub-client-2 timeout 120 python3 bench/model_bench.py run \
    --out "$out" --label second --arms eager,tunehub --batches 1 --prefill 0 --no-breakdown \
    $model_args
  python3 -m service.cli jobs
  kill "$server"
  tail -30 /tmp/serve.log
} > "$log" 2>&1
grep -E "^==|wrote|decode batch|prefill|resnet50|Error|error" "$log" | tail -40
