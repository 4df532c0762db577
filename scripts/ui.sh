#!/usr/bin/env bash
# Start the local Prefect server (127.0.0.1:4200), serve the speedbench deployments, and start
# the MLflow UI (127.0.0.1:5000) over the project's SQLite store. `scripts/ui.sh stop` stops them.
set -euo pipefail
cd "$(dirname "$0")/.."
RUN=.run
mkdir -p "$RUN"
export PREFECT_HOME="$PWD/$RUN/prefect" PREFECT_SERVER_ANALYTICS_ENABLED=false
export PREFECT_API_URL=http://127.0.0.1:4200/api
if [[ "${1:-start}" == stop ]]; then
  for name in serve prefect mlflow; do
    [[ -f $RUN/$name.pid ]] && kill -- "-$(cat "$RUN/$name.pid")" 2>/dev/null || true
    rm -f "$RUN/$name.pid"
  done
  exit 0
fi
start() {  # name, command...: own process group, log in .run/<name>.log
  local name=$1; shift
  setsid "$@" >"$RUN/$name.log" 2>&1 &
  echo $! >"$RUN/$name.pid"
}
start prefect .venv/bin/prefect server start --host 127.0.0.1 --port 4200
for _ in $(seq 90); do curl -sf http://127.0.0.1:4200/api/health >/dev/null && break; sleep 1; done
start serve .venv/bin/python -m flows.serve
mkdir -p mlflow
MLFLOW_SERVER_ENABLE_JOB_EXECUTION=false start mlflow .venv/bin/mlflow server \
  --backend-store-uri "sqlite:///$PWD/mlflow/mlflow.db" --default-artifact-root "$PWD/mlflow/artifacts" \
  --host 127.0.0.1 --port 5000
echo "Prefect UI: http://127.0.0.1:4200/deployments   MLflow UI: http://127.0.0.1:5000   logs: $RUN/"
