#!/bin/sh
# The server image's entry (Dockerfile, target server): migrate the database to the newest
# revision (`tunehub db upgrade`, Alembic's `upgrade head`), then serve the API without a local
# worker (the GPU hosts run the workers). Arguments go to `tunehub serve`.
# Settings come from the environment (deploy/server.env): TUNEHUB_DATABASE_URL above all.
set -eu

if [ -z "${TUNEHUB_DATABASE_URL:-}" ]; then
  echo "tunehub server: TUNEHUB_DATABASE_URL is not set; copy deploy/server.env.example to" \
    "deploy/server.env and set it (docs/deploy.md)" >&2
  exit 2
fi

tunehub db upgrade
exec tunehub serve --no-local-worker "$@"
