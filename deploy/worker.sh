#!/bin/sh
# The worker image's entry (Dockerfile, target worker): `tunehub worker` against the server named
# by TUNEHUB_SERVER with this host's TUNEHUB_TOKEN (a `worker` token), both from
# deploy/worker.env. Arguments go to `tunehub worker` (the image passes --backend cuda).
# TUNEHUB_WORKER_NAME, if set, names the worker (else the container's host name).
set -eu

missing=""
[ -n "${TUNEHUB_SERVER:-}" ] || missing="TUNEHUB_SERVER (the API's URL, e.g. http://tunehub:8765)"
if [ -z "${TUNEHUB_TOKEN:-}" ]; then
  token="TUNEHUB_TOKEN (this host's worker token: tunehub token create --scope worker)"
  missing="${missing:+$missing and }$token"
fi
if [ -n "$missing" ]; then
  echo "tunehub worker: set $missing in deploy/worker.env" \
    "(copy deploy/worker.env.example; docs/deploy.md)" >&2
  exit 2
fi

exec tunehub worker "$@"
