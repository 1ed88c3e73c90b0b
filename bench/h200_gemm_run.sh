#!/usr/bin/env bash
# The GEMM-vs-vendor run on the lent H200 (through the device tool), from the repo root:
#   bash bench/h200_gemm_run.sh       (carry: .whl; .device-carry/cache.tar.xz optional)
# 1. installs the carried wheels (CUTLASS headers, service deps; cuBLAS is beside torch there),
# 2. the GPU tests of the cuBLASLt and skinny GEMM families (SKIP_GPU_TESTS=1 skips them),
# 3. bench/vs_vendor_gemm.py: real-model shapes tuned twice, then timed against cuBLAS.
# Everything lands under $OUT (the device tool brings it back).
set -uo pipefail
out=${OUT:-/tmp/tunehub-out}
source "$(dirname "${BASH_SOURCE[0]}")/_device_env.sh"
device_env "$out" .whl .device-carry/cache.tar.xz || exit 1
python3 -c 'from tuner.vendor_paths import cublas_paths, cublas_version as v; print(cublas_paths(), v())'
if [ "${SKIP_GPU_TESTS:-0}" != 1 ]; then
  timeout "${GPU_TESTS_SECONDS:-150}" python3 -m pytest --noconftest -o addopts= -q -m gpu \
    tests/gpu/test_cuda_gemm_families.py > "$out/gpu-tests.log" 2>&1
  tail -4 "$out/gpu-tests.log"
fi
timeout "${BENCH_SECONDS:-380}" python3 bench/vs_vendor_gemm.py --out "$out" \
  --deadline-s "${BENCH_DEADLINE:-330}" ${BENCH_ARGS:-} 2>&1 | tee "$out/bench.log" | grep -E "^\[|wrote|Error"
