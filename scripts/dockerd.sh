#!/usr/bin/env bash
# A Docker engine for the container tests: Debian's docker.io and mmdebstrap, and a dockerd
# started in the background (there is no service manager here). openssh-server lets a test
# reach the same daemon as a remote ssh:// Docker host (the test starts its own sshd on a free
# port with its own keys; nothing here touches ~/.ssh). Idempotent.
set -euo pipefail
if ! command -v dockerd >/dev/null || ! command -v mmdebstrap >/dev/null \
  || ! [ -x /usr/sbin/sshd ]; then
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq docker.io mmdebstrap openssh-server openssh-client >/dev/null
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
