#!/usr/bin/env bash
# PostgreSQL's server programs from Debian's packages, for `speedbench stores` and the work-pool
# test (which start their own clusters under a folder of theirs; nothing here starts a server).
# Idempotent.
set -euo pipefail
if ! command -v initdb >/dev/null && ! ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1; then
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq postgresql >/dev/null
fi
initdb=$(command -v initdb || ls /usr/lib/postgresql/*/bin/initdb | tail -1)
"$initdb" --version
