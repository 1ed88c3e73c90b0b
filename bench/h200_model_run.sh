#!/usr/bin/env bash
# The whole-model benchmark on the lent H200, one device call per model, from the repo root:
#   OUT=$OUT bash bench/h200_model_run.sh              # the decoder (Mistral-7B dims)
#   OUT=$OUT MODEL=resnet bash bench/h200_model_run.sh  # ResNet-50 at batch 1 and 8
# (carry: .whl from bash bench/gpu_wheels.sh and .device-carry/cache.tar.xz from
# bench/precompile_cuda.py for the shapes of `python bench/model_bench.py list`)
# 1. `tunehub serve --backend cuda` (SQLite, local CUDA worker) on a fresh data folder,
# 2. the model run once through tunehub's ops with recording on: every shape without an answer
#    lands in shapes.jsonl,
# 3. `tunehub tune --from-file`: the worker tunes them and uploads each winner's artifact,
# 4. bench/model_bench.py times the arms side by side (decoder: eager, TunableOp,
#    torch.compile, tunehub at decode batch 1, 8, 32 in CUDA graphs and a 2048-token prefill;
#    ResNet-50: cuDNN channels_last against tunehub's conv2d),
# 5. (decoder) a second process on an empty client cache: artifacts only, no compile, no tuning.
# Everything lands under $OUT: the JSONs, shapes.jsonl and model.log (the whole output).
set -uo pipefail
out=${OUT:-/tmp/tunehub-out}
source "$(dirname "${BASH_SOURCE[0]}")/_device_env.sh"
device_env "$out" .whl .device-carry/cache.tar.xz \
  name,driver_version,clocks.sm,clocks.mem,temperature.gpu,power.draw,power.limit || exit 1
log=$out/model.log
export TUNEHUB_DATA_DIR=/tmp/tunehub-model TUNEHUB_CACHE_DIR=$PWD/.cache/tunehub COLUMNS=100
export TUNEHUB_SERVER=http://127.0.0.1:8765 TUNEHUB_CLIENT_CACHE=/tmp/tunehub-client-1
model_args=${MODEL_ARGS:-}
shapes=$out/shapes.jsonl
{
  python3 -m service.cli serve --backend cuda --port 8765 > "$out/serve.log" 2>&1 &
  server=$!
  for _ in $(seq 90); do
    python3 -c 'import httpx; httpx.get("http://127.0.0.1:8765/healthz").raise_for_status()' \
      2>/dev/null && break
    sleep 1
  done
  echo "== record $(date -u +%T)"
  if [ "${MODEL:-decoder}" = resnet ]; then
    python3 bench/model_bench.py resnet-record --shapes "$shapes" --batches 1,8
  else
    python3 bench/model_bench.py record --shapes "$shapes" $model_args
  fi
  echo "== tune $(date -u +%T)"
  timeout "${TUNE_SECONDS:-240}" python3 -m service.cli tune --from-file "$shapes" \
    --max-seconds "${SHAPE_SECONDS:-6}" --max-variants "${SHAPE_VARIANTS:-16}" \
    --artifact-wait 30
  # a tune that ran out of time leaves jobs queued: cancel them, so that the arms are timed on
  # a quiet GPU (their shapes fall back to torch's ops and the stats say so)
  python3 - <<'PY'
import os
from service.client import TunehubClient
from service.schemas.common import FINISHED_STATUSES
token = open(os.path.join(os.environ["TUNEHUB_DATA_DIR"], "admin-token")).read().strip()
with TunehubClient(os.environ["TUNEHUB_SERVER"], token) as client:
    for job in client.list_jobs():
        if job.status not in FINISHED_STATUSES:
            print(f"cancelling unfinished job {job.id} ({job.op})")
            client.cancel_job(job.id)
PY
  echo "== arms $(date -u +%T)"
  if [ "${MODEL:-decoder}" = resnet ]; then
    timeout "${ARMS_SECONDS:-150}" python3 bench/model_bench.py resnet --out "$out" \
      --label run --batches 1,8
  else
    timeout "${ARMS_SECONDS:-330}" python3 bench/model_bench.py run --out "$out" --label first \
      $model_args
    echo "== second process, empty client cache $(date -u +%T)"
    TUNEHUB_CLIENT_CACHE=/tmp/tunehub-client-2 timeout 120 python3 bench/model_bench.py run \
      --out "$out" --label second --arms eager,tunehub --batches 1 --prefill 0 \
      --no-breakdown $model_args
  fi
  echo "== done $(date -u +%T)"
  python3 -m service.cli jobs
  kill "$server"
} > "$log" 2>&1
grep -E "^==|wrote|decode batch|prefill [0-9]|resnet50|summary|Error|Traceback" "$log" | tail -40
