#!/usr/bin/env bash
# Screenshots for the README, with headless Chromium from Debian (apt-get install chromium).
# Needs a Prefect server on :4200 with `python -m flows.serve` running and an MLflow server on
# :5000 over the project store (see README, "Prefect UI").
set -euo pipefail
cd "$(dirname "$0")/.."
shot() { chromium --headless=new --no-sandbox --disable-gpu --hide-scrollbars \
  --window-size="$1" --virtual-time-budget=45000 --screenshot="$2" "$3" 2>/dev/null; }
dep=$(curl -s -X POST http://127.0.0.1:4200/api/deployments/filter -H 'Content-Type: application/json' \
  -d '{"deployments":{"name":{"any_":["sweep"]}}}' | python3 -c "import json,sys; print(json.load(sys.stdin)[0]['id'])")
shot 1400,1700 docs/screenshots/prefect_sweep_form.png "http://127.0.0.1:4200/deployments/deployment/$dep/run"
url=$(.venv/bin/python - <<'PY'
import json, urllib.parse
from mlflow.tracking import MlflowClient
from tasks.tracking import default_tracking_uri
client = MlflowClient(default_tracking_uri())
exp = client.get_experiment_by_name("speedbench")
parent = client.search_runs([exp.experiment_id], "tags.`speedbench.kind` = 'sweep'", max_results=1)[0]
runs = client.search_runs([exp.experiment_id], f"tags.mlflow.parentRunId = '{parent.info.run_id}'")
ids = json.dumps([r.info.run_id for r in runs])
print("http://127.0.0.1:5000/#/compare-runs?runs=" + urllib.parse.quote(ids)
      + "&experiments=" + urllib.parse.quote(json.dumps([exp.experiment_id])))
PY
)
shot 1500,1400 docs/screenshots/mlflow_compare_runs.png "$url"
# The main job's HTML report, every request sent to a dead proxy: it must render with no network.
chromium --headless=new --no-sandbox --disable-gpu --hide-scrollbars --proxy-server=127.0.0.1:9 \
  --window-size=1300,2200 --virtual-time-budget=5000 \
  --screenshot=docs/screenshots/report_html.png "file://$PWD/results/metrics/report.html" 2>/dev/null
# A CLI sweep's own report (README, "Measuring your own setup": two methods on the 0.5B), also
# with every request sent to a dead proxy: its interactive figures and tables need no network.
if [ -f results/ngram/sweep/report.html ]; then
  chromium --headless=new --no-sandbox --disable-gpu --hide-scrollbars --proxy-server=127.0.0.1:9 \
    --disable-background-networking --disable-component-update --no-first-run \
    --window-size=1300,3000 --virtual-time-budget=8000 \
    --screenshot=docs/screenshots/cli_sweep_report.png "file://$PWD/results/ngram/sweep/report.html" 2>/dev/null
fi
echo "docs/screenshots/ updated"
