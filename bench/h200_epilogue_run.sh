#!/usr/bin/env bash
# The fused-epilogue bench (issue 26 item 3) on a lent GPU host, from the repo root:
#   OUT=$OUT bash bench/h200_epilogue_run.sh
# carry: .whl (bash bench/gpu_wheels.sh) and .device-carry/cache.tar.xz (a compile cache made
# here: `python bench/serving_epilogue.py --list | sh`, then tar it as bench/_device_env.sh says).
# What the carried cache lacks is compiled there first, on the host's cores (PRECOMPILE=1, the
# default; the cache stays on a warm host between calls, so a second call can skip it with
# PRECOMPILE=0, or run only it with RUN_BENCH=0). Writes $OUT/serving-epilogue.json and .log.
set -uo pipefail
out=${OUT:-/tmp/tunehub-out}
source "$(dirname "${BASH_SOURCE[0]}")/_device_env.sh"
device_env "$out" .whl .device-carry/cache.tar.xz \
  name,driver_version,clocks.sm,clocks.mem,temperature.gpu,power.draw,power.limit || exit 1
if [ "${PRECOMPILE:-1}" = 1 ]; then
  python3 bench/serving_epilogue.py --list | sed 's/^python /python3 /' > "$out/precompile.sh"
  timeout "${PRECOMPILE_SECONDS:-300}" sh "$out/precompile.sh" > "$out/precompile.log" 2>&1
  grep -E "variants|Error" "$out/precompile.log" | tail -5
fi
if [ "${RUN_BENCH:-1}" = 1 ]; then
  timeout "${EPILOGUE_SECONDS:-560}" python3 bench/serving_epilogue.py \
    --out "$out/serving-epilogue.json" ${EPILOGUE_ARGS:-} 2>&1 \
    | tee "$out/serving-epilogue.log" | grep -E "^\[|geomean|min_|Error" | tail -70
fi
