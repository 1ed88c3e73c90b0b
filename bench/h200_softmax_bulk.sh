#!/usr/bin/env bash
# The bulk-copy softmax family beside the existing variants, torch.softmax and the copy on the
# lent H200 in one device call (under 4 minutes), from the repo root:
#   OUT=$OUT bash bench/h200_softmax_bulk.sh
# carry: .whl (bash bench/gpu_wheels.sh) and
# .device-carry/cache.tar.xz, the compile cache made here (no GPU) by
#   python bench/softmax_bulk.py --precompile
#   python -c "from tests.gpu.test_cuda_softmax_bulk import build_all; build_all('.cache/tunehub')"
#   tar -cf - .cache | xz -9e --lzma2=dict=128MiB > .device-carry/cache.tar.xz
# (the variant ids include nvcc's version: a host with another nvcc builds them there, slowly).
# Everything lands under $OUT: softmax-bulk/softmax_bulk.{json,md}, softmax-bulk.log.
#   RUN_GPU_TESTS=1     first the family's GPU tests (at most 60 s), log in $OUT/gpu-tests.log
#   BULK_COMMIT=$(git rev-parse --short HEAD)   the commit measured (the device copy has no .git)
set -uo pipefail
out=${OUT:-/tmp/tunehub-out}
source "$(dirname "${BASH_SOURCE[0]}")/_device_env.sh"
device_env "$out" .whl .device-carry/cache.tar.xz \
  name,driver_version,clocks.sm,clocks.mem,temperature.gpu,power.draw,power.limit || exit 1
if [ "${RUN_GPU_TESTS:-0}" = 1 ]; then
  TUNEHUB_GPU_TEST_CACHE=$PWD/.cache/tunehub timeout "${GPU_TEST_SECONDS:-60}" \
    python3 -m pytest --noconftest -o addopts= -q -m gpu tests/gpu/test_cuda_softmax_bulk.py \
    > "$out/gpu-tests.log" 2>&1
  tail -3 "$out/gpu-tests.log"
fi
commit=${BULK_COMMIT:+--commit $BULK_COMMIT}
timeout "${BULK_SECONDS:-170}" python3 bench/softmax_bulk.py --out "$out/softmax-bulk" \
  --deadline "${BULK_DEADLINE:-130}" $commit > "$out/softmax-bulk.log" 2>&1
status=$?
tail -30 "$out/softmax-bulk.log"
exit $status
