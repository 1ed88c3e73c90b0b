#!/usr/bin/env bash
# Every GPU-marked test module on the lent GPU host in one device call, one pytest process per
# module, all at once: their nvcc builds (CUTLASS ones take ~40 s each) then run side by side on
# the host's cores instead of one after another. The tests check outputs, never timings, so
# sharing the GPU does not change what they assert. From the repo root:
#   OUT=$OUT bash bench/h200_gpu_tests.sh
# carry: .whl (bash bench/gpu_wheels.sh); .device-carry/cache.tar.xz
# when a compile cache was made here (the modules that read TUNEHUB_GPU_TEST_CACHE use it).
#   GPU_TEST_FILES="tests/gpu/test_a.py ..."   the modules (default: every tests/gpu/test_*.py)
#   GPU_TEST_SECONDS=330                       each module's limit
# Writes $OUT/gpu-tests-summary.txt (a line per module) and $OUT/gpu-tests.log (every log, in
# turn). Exit status: 0 when every module passed, 1 otherwise.
set -uo pipefail
out=${OUT:-/tmp/tunehub-out}
source "$(dirname "${BASH_SOURCE[0]}")/_device_env.sh"
device_env "$out" .whl .device-carry/cache.tar.xz || exit 1
export TUNEHUB_GPU_TEST_CACHE=$PWD/.cache/tunehub
logs=/tmp/gpu-tests
mkdir -p "$logs"
for module in ${GPU_TEST_FILES:-tests/gpu/test_*.py}; do
  name=$(basename "$module" .py)
  timeout "${GPU_TEST_SECONDS:-330}" python3 -m pytest --noconftest -o addopts= -q -m gpu \
    -p no:cacheprovider "$module" > "$logs/$name.log" 2>&1 &
done
wait
for log in "$logs"/*.log; do
  last=$(grep -E "passed|failed|error|skipped" "$log" | tail -1)
  echo "$(basename "$log" .log): ${last:-no summary (killed at the limit?)}"
done | tee "$out/gpu-tests-summary.txt"
status=0
grep -qE "failed|error|no summary" "$out/gpu-tests-summary.txt" && status=1
for log in "$logs"/*.log; do echo "=== $(basename "$log")"; cat "$log"; done > "$out/gpu-tests.log"
exit $status
