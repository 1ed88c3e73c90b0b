# Sourced (not run) by the bench/*_run.sh and bench/h200_rows.sh device scripts: the preamble
# they all share on a lent GPU host, which has no network.
#   device_env OUT_DIR WHEEL_DIR CACHE_TAR [SMI_FIELDS]
# 1. installs the carried wheels from WHEEL_DIR into /tmp/site and puts it (and the repo) on
#    PYTHONPATH,
# 2. unpacks CACHE_TAR (a compile cache made here, e.g. by bench/precompile_cuda.py) when it was
#    carried; an empty CACHE_TAR skips this,
#    (made as `tar -cf - .cache | xz -9e --lzma2=dict=128MiB`: static cudart dedupes, 57 MB -> 1.5 MB),
# 3. writes the GPUs' state (nvidia-smi, SMI_FIELDS) to OUT_DIR/nvidia-smi.txt.
# Returns 1 when the wheels do not install; the caller exits then.
DEVICE_SMI_FIELDS=name,clocks.sm,clocks.mem,temperature.gpu,power.draw

device_env() {
  local out_dir=$1 wheels=$2 cache=$3 fields=${4:-$DEVICE_SMI_FIELDS}
  mkdir -p "$out_dir"
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
    --target /tmp/site "$wheels"/*.whl || return 1
  export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
  if [ -n "$cache" ] && [ -f "$cache" ]; then tar -xJf "$cache"; fi
  nvidia-smi --query-gpu="$fields" --format=csv > "$out_dir/nvidia-smi.txt" 2>&1
}
