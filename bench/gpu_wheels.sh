#!/usr/bin/env bash
# The wheels the lent GPU host lacks (it has no network), downloaded here into .whl for the
# device scripts (bench/h200_*.sh, installed there by bench/_device_env.sh). From the repo root:
#   bash bench/gpu_wheels.sh [.whl]
# ../shared/tools/gpu-wheels.sh brings the service stack and CUTLASS's headers; the requirements
# named here are the project's own that the host's Python lacks (found by running there):
# psycopg[binary] because service.store imports it at import time (pg_bulk), so `tunehub serve`
# on the host (the torch-op GPU tests start one) needs it even on SQLite.
set -euo pipefail
exec ../shared/tools/gpu-wheels.sh "${1:-.whl}" platformdirs optuna fastapi-offline "psycopg[binary]"
