#!/usr/bin/env bash
# The one command run on a GPU host through the device tool, from the repo root:
#   bash bench/multi_gpu_run.sh        (carry: .whl, and .device-carry/multi-cache.tar.xz made here by
#                                       bench/multi_gpu.py precompile + tar, see docs/benchmarks/multi-gpu.md)
# 1. installs the carried wheels (the host has no network) and unpacks the compile cache,
# 2. bench/multi_gpu.py run on every GPU of the host (one worker, one slot per GPU),
# 3. on a host with several GPUs, the same job again on GPU 0 alone (the 1.8x comparison).
# NVLink multicast stays off (the device README): nothing here uses NCCL, the variables say so anyway.
# Everything lands under $OUT; MULTI_GPU_SECONDS bounds each run (default 150).
set -uo pipefail
out=${OUT:-/tmp/multi-gpu-out}
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
source "$(dirname "${BASH_SOURCE[0]}")/_device_env.sh"
device_env "$out" .whl .device-carry/multi-cache.tar.xz \
  index,name,pci.bus_id,clocks.sm,temperature.gpu,power.draw || exit 1
cat "$out/nvidia-smi.txt"
all=$(nvidia-smi --query-gpu=index --format=csv,noheader | paste -sd, -)
count=$(echo "$all" | tr ',' '\n' | grep -c .)
seconds=${MULTI_GPU_SECONDS:-150}

python3 bench/multi_gpu.py run --backend cuda --devices "$all" --out "$out" \
  --label "gpus-$count" --timeout "$seconds" 2>&1 | tee "$out/gpus-$count.log"
if [ "$count" -gt 1 ]; then
  python3 bench/multi_gpu.py run --backend cuda --devices 0 --out "$out" --label gpus-1 \
    --timeout "$seconds" --no-agreement 2>&1 | tee "$out/gpus-1.log"
fi
