#!/usr/bin/env bash
# Run the DVC pipeline on a preset in a scratch copy of this checkout, then compare its acceptance
# numbers with the committed reference of that preset (exactly; throughput only by ratio).
#   scripts/reproduce.sh presets/ci.yaml            # reference: results/reference/ci
#   scripts/reproduce.sh presets/ci.yaml --update   # (re)write that reference (and its report)
set -euo pipefail
cd "$(dirname "$0")/.."
preset=${1:?usage: scripts/reproduce.sh presets/NAME.yaml [--update]}
name=$(basename "$preset" .yaml)
root=$PWD
work=$(mktemp -d "${TMPDIR:-/tmp}/speedbench-$name.XXXX")
trap 'rm -rf "$work"' EXIT
git worktree add -q --detach "$work" HEAD
trap 'git -C "$root" worktree remove --force "$work"; rm -rf "$work"' EXIT
cp "$preset" "$work/params.yaml"
# Share the model, wheel and embedding caches and the engines; nothing else carries over.
ln -s "$root/.cache" "$work/.cache"
ln -s "$root/.venv-engine" "$work/.venv-engine"
if [ -d "$root/.llama.cpp" ]; then ln -s "$root/.llama.cpp" "$work/.llama.cpp"; fi
cd "$work"
rm -f dvc.lock
PATH="$root/.venv/bin:$PATH" "$root/.venv/bin/dvc" repro --force
if [[ "${2:-}" == --update ]]; then
  mkdir -p "$root/results/reference/$name"
  for stage in qualitative throughput; do
    mkdir -p "$root/results/reference/$name/$stage"
    cp results/metrics/$stage/*.json "$root/results/reference/$name/$stage/"
  done
  # The report beside it: the lossless check and the break-even model are not in the JSON.
  cp results/metrics/report.md "$root/results/reference/$name/report.md"
  echo "reference results/reference/$name updated"
else
  "$root/.venv/bin/speedbench" verify-reference --reference "$root/results/reference/$name" \
    --results results/metrics
fi
