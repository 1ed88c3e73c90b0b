#!/usr/bin/env bash
# The conv2d-vs-cuDNN run on the lent H200 (through the device tool), from a staged copy:
#   cd .stage/conv && bash bench/h200_conv_run.sh     (carry: .stage/conv with its precompiled
#                                                     .cache/tunehub, and .whl)
#   WHEELS=.whl bash bench/h200_conv_run.sh            (from the repo root; carry .whl)
# 1. installs the carried wheels (CUTLASS headers, service deps; cuDNN is beside torch there),
# 2. the GPU tests of the cuDNN, cuBLASLt (1x1) and CUTLASS 3.x sm90 conv2d families,
# 3. bench/vs_vendor_conv.py: ResNet-50 and ConvNeXt-T layers tuned, then timed against cuDNN.
# Everything lands under $OUT (the device tool brings it back).
# The 1x1 question (output buffer or kernel; every cuDNN config of the 1x1 layers), ~6 min:
#   BENCH_SECONDS=380 BENCH_DEADLINE=330 BENCH_ARGS="--full-list-1x1 --compare-reserve-s 70 \
#     --max-variants 14 --shape-seconds 5 --full-list-seconds 20" bash bench/h200_conv_run.sh
set -uo pipefail
out=${OUT:-/tmp/tunehub-out}
source "$(dirname "${BASH_SOURCE[0]}")/_device_env.sh"
# no compile cache to unpack: the staged copy carries its .cache/tunehub as is
device_env "$out" "${WHEELS:-../../.whl}" "" || exit 1
python3 -c 'from tuner.vendor_paths import cudnn_paths, cudnn_version as v; print(cudnn_paths(), v())'
# the sm90 conv test builds a CUTLASS kernel on the host: 100 s stopped the last two tests
# (2026-12-04)
timeout "${GPU_TESTS_SECONDS:-240}" python3 -m pytest --noconftest -o addopts= -q -m gpu \
  -p no:cacheprovider tests/gpu/test_cuda_conv2d_cudnn.py tests/gpu/test_cuda_conv2d_sm90.py \
  tests/gpu/test_cuda_conv2d_cublaslt.py \
  > "$out/gpu-tests.log" 2>&1
tail -15 "$out/gpu-tests.log"
timeout "${BENCH_SECONDS:-200}" python3 bench/vs_vendor_conv.py --out "$out" \
  --deadline-s "${BENCH_DEADLINE:-180}" ${BENCH_ARGS:-} 2>&1 | tee "$out/bench.log" | grep -E "^\[|wrote|Error|device"
