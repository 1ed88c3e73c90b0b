#!/usr/bin/env bash
# The one command run on the lent H200 through the device tool, from the repo root:
#   bash bench/h200_run.sh [vs_vendor args]      (carry: .whl from bash bench/gpu_wheels.sh; .device-carry optional)
#   (SKIP_VS_VENDOR=1 runs only the end-to-end job; SKIP_E2E=1 only the vendor comparison)
# 1. installs the carried wheels (service stack + CUTLASS headers; the host has no network),
# 2. bench/vs_vendor.py: tunes every suite, then times winners and vendor baselines side by side,
# 3. an end-to-end job through `tunehub serve` (SQLite, local worker, CUDA backend): a GEMM and a
#    softmax problem submitted with `tunehub tune`, then `tunehub best` for both,
# 4. with RUN_GPU_TESTS=1, the GPU-marked tests.
# Everything lands under $OUT (the device tool brings it back).
set -uo pipefail
out=${OUT:-/tmp/tunehub-out}
source "$(dirname "${BASH_SOURCE[0]}")/_device_env.sh"
device_env "$out" .whl .device-carry/cache.tar.xz || exit 1

if [ "${SKIP_VS_VENDOR:-0}" != 1 ]; then
  timeout "${VS_VENDOR_SECONDS:-420}" python3 bench/vs_vendor.py --out "$out" "$@" \
    2>&1 | tee "$out/vs_vendor.log" | grep -E "^\[|wrote|Error|error" | tail -60
fi

e2e() {
  th() { python3 -m service.cli "$@"; }
  export COLUMNS=160
  export TUNEHUB_DATA_DIR=/tmp/tunehub-e2e TUNEHUB_CACHE_DIR=$PWD/.cache/tunehub
  th serve --backend cuda --port 8765 > "$out/serve.log" 2>&1 &
  server=$!
  for _ in $(seq 60); do
    python3 -c 'import httpx; httpx.get("http://127.0.0.1:8765/healthz").raise_for_status()' \
      2>/dev/null && break
    sleep 1
  done
  {
    export TUNEHUB_SERVER=http://127.0.0.1:8765
    timeout 90 python3 -m service.cli tune softmax --m 65536 --k 4096 --dtype f16 --backend cuda \
      --max-variants 8
    # a decode GEMM: the cuBLASLt default first, then the skinny kernels (no CUTLASS build)
    timeout 90 python3 -m service.cli tune gemm --m 1 --n 4096 --k 4096 --dtype f16 \
      --backend cuda --max-variants 6
    th best gemm --m 1 --n 4096 --k 4096 --dtype f16 --device cuda
    # the same decode GEMM tuned for energy through the service (issue 12's energy pair)
    timeout 120 python3 bench/energy_pair.py --server "$TUNEHUB_SERVER" --op gemm \
      --problem m=1,n=4096,k=4096 --layout rcr --max-variants 6 --out "$out/energy-gemm.json"
    timeout 90 python3 -m service.cli tune gemm --m 4096 --n 4096 --k 4096 --dtype f16 \
      --backend cuda --max-variants 8
    th best softmax --m 65536 --k 4096 --dtype f16 --device cuda
    th best gemm --m 4096 --n 4096 --k 4096 --dtype f16 --device cuda
    th jobs
  } > "$out/e2e.log" 2>&1
  tail -40 "$out/e2e.log"
  kill "$server"
}
[ "${SKIP_E2E:-0}" = 1 ] || e2e

if [ "${RUN_GPU_TESTS:-0}" = 1 ]; then
  timeout "${GPU_TEST_SECONDS:-240}" python3 -m pytest --noconftest -o addopts= -q -m gpu tests/gpu \
    > "$out/gpu-tests.log" 2>&1
  tail -3 "$out/gpu-tests.log"
fi
