#!/usr/bin/env bash
# The FP8 GEMM bench (issue 26 item 1) on the lent H200 in one device call, from the repo root:
#   OUT=$OUT bash bench/h200_fp8_run.sh
# carry: .whl (bash bench/gpu_wheels.sh) and .device-carry/cache.tar.xz, a compile cache of
# the CUTLASS and decode variants made here first:
#   python bench/serving_fp8.py --list | sh      # the precompile commands (sm_90, nvcc 13.0)
#   tar -cf - .cache | xz -9e --lzma2=dict=128MiB > .device-carry/cache.tar.xz
# cuBLASLt's FP8 algorithms are discovered and built on the host (seconds each).
# FP8_ARGS: serving_fp8.py's options (its --deadline-s, 540 s by default, and FP8_SECONDS, the
# kill limit, 570 s, keep the call under 10 minutes). RUN_GPU_TESTS=1 also runs
# tests/gpu/test_cuda_scaled_gemm.py (GPU_TEST_SECONDS, 300): shorten the bench's deadline then,
# e.g. FP8_ARGS="--scaling per_tensor --deadline-s 240".
set -uo pipefail
out=${OUT:-/tmp/tunehub-out}
source "$(dirname "${BASH_SOURCE[0]}")/_device_env.sh"
device_env "$out" .whl .device-carry/cache.tar.xz \
  name,driver_version,clocks.sm,clocks.mem,temperature.gpu,power.draw || exit 1
timeout "${FP8_SECONDS:-570}" python3 bench/serving_fp8.py --out "$out/serving-fp8.json" \
  ${FP8_ARGS:-} 2>&1 | tee "$out/serving-fp8.log" | grep -E "^\[(tune|compare)\]|geomean|min_|Error" \
  | tail -80
if [ "${RUN_GPU_TESTS:-0}" = 1 ]; then
  # the tests' CUTLASS builds come from the carried cache when it holds them (else ~4 minutes)
  TUNEHUB_GPU_TEST_CACHE=$PWD/.cache/tunehub timeout "${GPU_TEST_SECONDS:-300}" python3 -m pytest --noconftest -o addopts= -q -m gpu \
    tests/gpu/test_cuda_scaled_gemm.py > "$out/gpu-tests-fp8.log" 2>&1
  tail -5 "$out/gpu-tests-fp8.log"
fi
