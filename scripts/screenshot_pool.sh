#!/usr/bin/env bash
# Screenshots of a work pool in the Prefect UI, with headless Chromium from Debian
# (apt-get install chromium): its workers, and the flow runs it ran.
#   scripts/screenshot_pool.sh http://127.0.0.1:4200 speedbench docs/screenshots
# benchmarks/pool_scaling.py --screenshots calls it while its two workers are still online.
set -euo pipefail
ui=${1:?usage: scripts/screenshot_pool.sh UI_URL POOL OUT_DIR}
pool=${2:?pool name}
out=${3:?output folder}
mkdir -p "$out"
shot() { chromium --headless=new --no-sandbox --disable-gpu --hide-scrollbars \
  --window-size="$1" --virtual-time-budget=30000 --screenshot="$2" "$3" 2>/dev/null; }
shot 1500,900 "$out/prefect_pool_workers.png" "$ui/work-pools/work-pool/$pool?tab=Workers"
shot 1500,1100 "$out/prefect_pool_runs.png" "$ui/work-pools/work-pool/$pool?tab=Runs"
echo "$out/prefect_pool_workers.png $out/prefect_pool_runs.png"
