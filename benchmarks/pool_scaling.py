"""One work-pool sweep on one worker and on two: the wall-time ratio, and where the rest goes.

Starts the team's stores (PostgreSQL, MLflow server, Prefect server) under a temporary folder,
deploys the pool, and runs the same four-configuration sweep (the 0.5B target: no SD and
n-gram k = 1, 2, 3) first with one worker owning core 0, then with two workers owning a core
each. Each run tracks into its own experiment, so nothing is resumed. Prints the wall times,
their ratio, and per run the sum of the configurations' flow-run times, their engine launches
(flow-run time not spent measuring levels) and the parent's own time (dispatch, waiting for a
worker to poll, gathering from MLflow).

    .venv/bin/python benchmarks/pool_scaling.py [--limit 2] [--output-len 32] \
        [--screenshots docs/screenshots]
"""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from speedbench.engines.local import free_port
from speedbench.hostcheck.cpu import cpu_info
from speedbench.operations.stores import StorePorts, TeamStores
from speedbench.sweep_config import SweepConfig

ROOT = Path(__file__).resolve().parents[1]
POOL = "scaling"
sys.path.insert(0, str(ROOT))  # flows/ is imported from the project root, not installed


def run_once(
    config: SweepConfig, cores: list[int], api_url: str, home: Path, shots: str | None = None
) -> dict[str, float]:
    """The sweep on one worker per core; wall time and its parts in seconds.

    With ``shots`` (a folder), the work pool's UI pages are captured after the sweep, while
    its workers are still online.
    """
    from mlflow.tracking import MlflowClient
    from prefect.client.orchestration import get_client

    from flows.pool import pool_sweep, worker_command

    workers = []
    for core in cores:
        argv, env = worker_command(POOL, f"core-{core}", str(core), free_port())
        env |= {"PREFECT_API_URL": api_url, "PREFECT_HOME": str(home)}
        env["PREFECT_WORKER_QUERY_SECONDS"] = "2"
        log = (home / f"worker-{core}-{len(cores)}.log").open("wb")
        workers.append(
            subprocess.Popen(argv, cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT)
        )
    try:
        started = time.monotonic()
        summary = pool_sweep(config, POOL)
        wall = time.monotonic() - started
        if shots:
            ui = api_url.removesuffix("/api")
            subprocess.run([str(ROOT / "scripts" / "screenshot_pool.sh"), ui, POOL, shots])
    finally:
        for proc in workers:
            proc.send_signal(signal.SIGINT)
            proc.wait(timeout=60)
    if summary.failures:
        raise SystemExit(f"{len(cores)} worker(s): {summary.failures}")
    with get_client(sync_client=True) as client:
        runs = [
            r
            for r in client.read_flow_runs()
            if r.name.startswith(f"{config.name}: ") and r.total_run_time
        ]
    children = sum(r.total_run_time.total_seconds() for r in runs)
    mlflow = MlflowClient(config.output.tracking_uri)
    found = mlflow.get_experiment_by_name(config.output.experiment)
    if found is None:
        raise SystemExit(
            f"no MLflow experiment {config.output.experiment!r}: the sweep logged nothing"
        )
    experiment = found.experiment_id
    levels = mlflow.search_runs(
        [experiment], filter_string=f"tags.mlflow.parentRunId = '{summary.parent_run_id}'"
    )
    measuring = sum((r.info.end_time - r.info.start_time) / 1000 for r in levels)
    return {"wall": wall, "children": children, "levels": measuring, "configs": len(runs)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="qwen2.5-coder-0.5b-instruct")
    ap.add_argument("--limit", type=int, default=2, help="MT-Bench prompts per level")
    ap.add_argument("--output-len", type=int, default=32)
    ap.add_argument("--screenshots", default=None, help="capture the pool's UI pages here")
    args = ap.parse_args()
    from prefect.settings import PREFECT_API_URL, PREFECT_HOME, temporary_settings

    from flows.pool import deploy
    from speedbench.provision.models import provision

    target = str(provision(args.model))
    root = Path(tempfile.mkdtemp(prefix="pool-scaling-"))
    root.chmod(0o755)  # PostgreSQL runs as its own user, which must reach its data folder
    stores = TeamStores(root / "stores", StorePorts(free_port(), free_port(), free_port()))
    t0 = time.monotonic()
    uris = stores.start(prefect=True)
    print(f"stores up in {time.monotonic() - t0:.1f} s (PostgreSQL, MLflow, Prefect)")
    home = root / "prefect-home"
    home.mkdir()
    os.environ["PREFECT_SERVER_ANALYTICS_ENABLED"] = "false"
    results = {}
    try:
        with temporary_settings({PREFECT_API_URL: uris["PREFECT_API_URL"], PREFECT_HOME: home}):
            deploy(POOL)
            for cores in ([0], [0, 1]):
                config = SweepConfig.model_validate(
                    {
                        "name": f"scaling-{len(cores)}",
                        "model": target,
                        "methods": ["none", "ngram"],
                        "draft_lengths": [1, 2, 3],
                        "batch_sizes": [1],
                        "splits": ["mtbench"],
                        "limit": args.limit,
                        "output_len": args.output_len,
                        "dtype": "float32",
                        "tracking_uri": uris["MLFLOW_TRACKING_URI"],
                        "experiment": f"scaling-{len(cores)}",
                        "out_dir": str(root / "out"),
                    }
                )
                shots = args.screenshots if len(cores) == 2 else None
                results[len(cores)] = run_once(config, cores, uris["PREFECT_API_URL"], home, shots)
    finally:
        stores.stop()
    cpu = cpu_info()
    print(f"host: {cpu.model}, {cpu.cores} cores, kernels {cpu.kernel_family}")
    for n, r in results.items():
        launches = r["children"] - r["levels"]
        parent = r["wall"] - r["children"] / n
        print(
            f"{n} worker(s): wall {r['wall']:.1f} s; {r['configs']} configurations: flow runs "
            f"{r['children']:.1f} s in all (levels {r['levels']:.1f} s, the rest engine "
            f"launches and flow start-up {launches:.1f} s); the parent beyond its "
            f"workers' share {parent:.1f} s"
        )
    print(f"speed-up of two workers over one: {results[1]['wall'] / results[2]['wall']:.2f}x")


if __name__ == "__main__":
    main()
