#!/usr/bin/env bash
# A Docker engine for the container tests: Debian's docker.io and mmdebstrap, and a dockerd
# started in the background (there is no service manager here). Idempotent.
set -euo pipefail
if ! command -v dockerd >/dev/null || ! command -v mmdebstrap >/dev/null; then
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq docker.io mmdebstrap >/dev/null
fi
if ! docker info >/dev/null 2>&1; then
  mkdir -p .run
  nohup dockerd --host unix:///var/run/docker.sock >.run/dockerd.log 2>&1 &
  for _ in $(seq 60); do
    docker info >/dev/null 2>&1 && break
    sleep 1
  done
  docker info >/dev/null 2>&1 || { echo "dockerd did not start:"; tail -20 .run/dockerd.log; exit 1; }
fi
docker version --format 'docker {{.Server.Version}}'
