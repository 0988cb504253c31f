#!/bin/sh
# Entrypoint of the mst-service image.
#
#   (no arguments)      start the service: mst-service, configured by MST_* variables
#   -x / --option ...   start the service with those arguments
#   any other command   run it instead (e.g. `docker compose run --rm mst sh`)
#
# Before starting the service it checks that the data dir is writable, so a bind mount owned by
# another user fails here with a message instead of deep inside SQLite.
set -eu

if [ "$#" -eq 0 ] || [ "${1#-}" != "$1" ]; then
  set -- mst-service "$@"
fi

if [ "$1" = "mst-service" ]; then
  data_dir="${MST_DATA_DIR:-/data}"
  mkdir -p "$data_dir" 2>/dev/null || true
  if [ ! -d "$data_dir" ] || [ ! -w "$data_dir" ]; then
    echo "entrypoint: MST_DATA_DIR=$data_dir is not a folder writable by uid $(id -u);" \
      "mount a volume there or chown it to $(id -u):$(id -g)." >&2
    exit 1
  fi
  if command -v nvidia-smi >/dev/null 2>&1; then
    echo "entrypoint: GPUs visible: $(nvidia-smi -L 2>/dev/null | wc -l) (MST_BACKEND=${MST_BACKEND:-auto})"
  else
    echo "entrypoint: no NVIDIA driver mounted; MST_BACKEND=${MST_BACKEND:-auto} (auto falls back to the CPU)"
  fi
fi

exec "$@"
