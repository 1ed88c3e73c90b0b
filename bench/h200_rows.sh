#!/usr/bin/env bash
# The rows sweep on the lent H200 in one device call, from the repo root:
#   OUT=$OUT bash bench/h200_rows.sh        (carry: .whl and .device-carry/cache.tar.xz, built by
#   bench/precompile_cuda.py for every shape of `python bench/rows_sweep.py --list`)
# Internal timeouts keep the whole call under ~8 minutes.
set -uo pipefail
out=${OUT:-/tmp/tunehub-out}
source "$(dirname "${BASH_SOURCE[0]}")/_device_env.sh"
device_env "$out" .whl .device-carry/cache.tar.xz \
  name,driver_version,clocks.sm,clocks.mem,temperature.gpu,power.draw || exit 1
timeout "${ROWS_SECONDS:-380}" python3 bench/rows_sweep.py --out "$out/h200-rows" \
  --max-seconds "${ROWS_TUNE_SECONDS:-230}" ${ROWS_ARGS:-} 2>&1 | tee "$out/rows.log" | grep -vE "^\s*$" | tail -80
if [ "${RUN_GPU_TESTS:-0}" = 1 ]; then
  # TUNEHUB_GPU_TEST_CACHE: the carried cache holds the tests' variants too (precompiled)
  TUNEHUB_GPU_TEST_CACHE=${TUNEHUB_GPU_TEST_CACHE:-} timeout "${GPU_TEST_SECONDS:-90}" \
    python3 -m pytest --noconftest -o addopts= -q -m gpu tests/gpu -k "any_k" \
    > "$out/gpu-tests.log" 2>&1
  tail -5 "$out/gpu-tests.log"
fi
