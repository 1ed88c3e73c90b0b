#!/usr/bin/env bash
# The regression check on the lent H200 in one device call (under 8 minutes), from the repo root:
#   OUT=$OUT bash bench/h200_regress_run.sh
# carry: .whl (bash bench/gpu_wheels.sh) and
# .device-carry/cache.tar.xz, the compile cache of every command `python bench/regress.py --list`
# prints (run them here, then `tar -cf - .cache | xz -9e --lzma2=dict=128MiB >
# .device-carry/cache.tar.xz`; see bench/_device_env.sh). Everything lands under $OUT/regress:
# regress.json, regress.md (the table), regress.log. Exit status: bench/regress.py's (1: a drop).
# The shapes of issue 26's families (fused epilogues, scaled_gemm, grouped_gemm) run last: a
# deadline cuts them first (and a cut shape fails the run: raise REGRESS_DEADLINE then).
#   REGRESS_ARGS="--quick"            a short check (issue 22's softmax shapes and one of each op)
#   REGRESS_COMMIT=$(git rev-parse --short HEAD)   the commit measured (the device copy has no .git)
#   RUN_GPU_TESTS=1                   also the softmax GPU tests of issue 22 first (at most 60 s;
#                                     the run's deadline drops to 340 s to stay under 8 minutes)
set -uo pipefail
out=${OUT:-/tmp/tunehub-out}
source "$(dirname "${BASH_SOURCE[0]}")/_device_env.sh"
device_env "$out" .whl .device-carry/cache.tar.xz \
  name,driver_version,clocks.sm,clocks.mem,temperature.gpu,power.draw,power.limit || exit 1
if [ "${RUN_GPU_TESTS:-0}" = 1 ]; then
  TUNEHUB_GPU_TEST_CACHE=$PWD/.cache/tunehub timeout "${GPU_TEST_SECONDS:-60}" \
    python3 -m pytest --noconftest -o addopts= -q -m gpu tests/gpu/test_cuda_softmax_rows.py \
    > "$out/gpu-tests.log" 2>&1
  tail -3 "$out/gpu-tests.log"
  REGRESS_DEADLINE=${REGRESS_DEADLINE:-340}
fi
commit=${REGRESS_COMMIT:+--commit $REGRESS_COMMIT}
timeout "${REGRESS_SECONDS:-440}" python3 bench/regress.py --out "$out/regress" \
  --deadline "${REGRESS_DEADLINE:-400}" $commit ${REGRESS_ARGS:-} > "$out/regress.log" 2>&1
status=$?
grep -vE "^\[(tune|compare)\]" "$out/regress.log" | tail -70
exit $status
