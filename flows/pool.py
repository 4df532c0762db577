"""Sweeps across engine hosts: a Prefect work pool runs the configurations, MLflow gathers them.

A sweep that outgrows one host fans its SD configurations out as flow runs of the
``measure-config/<pool>`` deployment. Each worker of the pool owns one engine host (a GPU set,
a Docker host, here a CPU core) and runs one configuration at a time there (``prefect worker
start --limit 1``: Prefect's own per-worker concurrency limit). What a host is travels with
its worker, as environment the flow run inherits: ``SPEEDBENCH_ENGINE_CPUS``,
``SPEEDBENCH_ENGINE_PORT``, ``DOCKER_HOST``, ``CUDA_VISIBLE_DEVICES``; the sweep form stays the
same on any pool.

Every level lands in the shared MLflow tracking server as soon as it is measured, with its
records and metrics as artifacts. The parent flow (``pool_sweep``) then gathers the levels
from MLflow, downloading them, and computes what needs every configuration at once (speedup,
the lossless check, plots) exactly as the single-host sweep does, through the same runner.
A configuration whose flow run ended FAILED or CRASHED (its engine died, its worker or host
was lost: flow-run heartbeats and the zombie automation that :func:`deploy` installs mark a
silent one CRASHED) has FAILED level runs for what it did not measure; the rest of the sweep
goes on. Run the sweep again and only the configurations with a missing level are dispatched.

    .venv/bin/python -m flows.pool deploy --pool speedbench
    .venv/bin/python -m flows.pool worker --pool speedbench --cores 0-7   # on each engine host
    .venv/bin/python -m flows.pool run --pool speedbench --config sweep.yaml
"""

from __future__ import annotations

import contextlib
import json
import os
import socket
import sys
from datetime import timedelta
from pathlib import Path
from typing import Annotated, Any

from prefect import flow, task
from prefect.cache_policies import NO_CACHE
from prefect.deployments import run_deployment
from pydantic import Field

from flows.sweep import TrackedHooks, prepared
from flows.sync import synchronous
from speedbench.config import EngineConfig, SpecConfig
from speedbench.engines.base import EngineError
from speedbench.engines.launchers import OpenEngine
from speedbench.hostcheck.cpu import ENGINE_CPUS_ENV
from speedbench.report.html import write_sweep_report
from speedbench.run.hooks import GridPoint
from speedbench.run.plan import (
    engine_config,
    per_config_forms,
    sweep_items,
)
from speedbench.run.sweep import form_grid, run_sweep
from speedbench.sweep_config import SweepConfig
from speedbench.sweep_summary import SweepSummary
from tasks.summary import close_sweep, write_category_table
from tasks.tracking import CONFIG_HASH_TAG, Tracker

PROJECT_ROOT = Path(__file__).resolve().parents[1]
CHILD_FLOW = "measure-config"
PORT_ENV = "SPEEDBENCH_ENGINE_PORT"
# Flow-run heartbeats every 30 s (Prefect's minimum); three missed mark a run CRASHED.
HEARTBEAT_S, ZOMBIE_AFTER_S = 30, 90
ZOMBIE_AUTOMATION = "speedbench: crash flow runs whose host went silent"


def with_host_facts(config: SweepConfig) -> SweepConfig:
    """The form with what the worker's host says about itself (its engine port)."""
    port = os.environ.get(PORT_ENV)
    return config.with_fields(port=int(port)) if port else config


@flow(name=CHILD_FLOW, log_prints=True)
def measure_config(
    config: SweepConfig,
    parent_run_id: Annotated[
        str, Field(description="The sweep's MLflow parent run: levels go under it.")
    ],
) -> dict[str, Any]:
    """Measure one SD configuration on this worker's host, into the sweep's MLflow run.

    Raises:
        EngineError: The configuration failed (its engine did not start or died); the flow
            run ends FAILED, its level runs say why.
    """
    config = with_host_facts(config)
    target, tokenizer, items, draft = prepared(config)
    tracker = Tracker(config.output.tracking_uri, config.output.experiment)
    hooks = TrackedHooks(config, tracker, parent_run_id)
    summary = run_sweep(config, target, draft, items, tokenizer, hooks)
    if summary.failures:
        raise EngineError("; ".join(f"{f.config}: {f.error}" for f in summary.failures))
    return {"levels": len(summary.levels), "resumed": len(hooks.resumed_runs)}


class GatherHooks(TrackedHooks):
    """The runner over levels measured elsewhere: it resumes every level, starts no engine.

    A configuration with a level missing from MLflow is a failure. Given how the children
    ``ended``, each missing level gets a FAILED run saying how its configuration's flow run
    ended, unless its worker already logged one, and this sweep's own runs win over earlier
    ones of the same identity (so a ``force`` sweep gathers what it measured). Without it (the
    question asked before dispatching), ``force`` counts every level as missing.
    """

    def __init__(
        self,
        config: SweepConfig,
        tracker: Tracker,
        parent: str,
        ended: dict[str, str] | None = None,
    ):
        super().__init__(config, tracker, parent)
        self.ended = ended
        self.versions: dict[str, str] = {}
        self.hosts: dict[str, str] = {}
        by_status: dict[str, dict[str, str]] = {"FINISHED": {}, "FAILED": {}}
        for run in tracker.children(parent):
            if run.info.status in by_status:
                by_status[run.info.status][run.data.tags.get(CONFIG_HASH_TAG)] = run.info.run_id
        self.logged_failures = set(by_status["FAILED"])
        if ended is not None:
            self.done = {**tracker.completed(), **by_status["FINISHED"]}

    def resumed(self, point: GridPoint) -> Any:
        """The level from MLflow; notes the engine version its worker recorded."""
        kept = super().resumed(point)
        if kept is not None:
            run_id = self.done[point.identity_hash]
            params = self.tracker.params(run_id)
            self.versions[point.spec.label] = params.get("engine_version", "?")
            self.hosts[point.spec.label] = params.get("engine_host", "?")
        return kept

    def start_engine(self, engine: EngineConfig, spec: SpecConfig, log_path: Path) -> OpenEngine:
        """Never on the parent: a level not in MLflow was not measured by its worker."""
        if self.ended is None:
            raise EngineError("not measured yet")
        state = self.ended.get(spec.label, "not dispatched")
        raise EngineError(f"not measured: its flow run on the pool ended {state}")

    def level_failed(self, point: GridPoint, error: str, log_path: Path) -> None:
        """A FAILED run for the missing level, unless its worker logged one."""
        if self.ended is not None and point.identity_hash not in self.logged_failures:
            super().level_failed(point, error, log_path)


def gather(
    config: SweepConfig, tracker: Tracker, parent: str, ended: dict[str, str] | None = None
) -> SweepSummary:
    """The sweep's summary from the levels in MLflow (``ended``: the children's end states).

    Without ``ended`` it only asks what is missing: the summary's failures are the
    configurations still to dispatch, and nothing is logged.
    """
    engine = engine_config(config, config.model)  # identities name the model, not its path
    hooks = GatherHooks(config, tracker, parent, ended)
    summary = form_grid(config, engine, config.spec_configs(), sweep_items(config), hooks)
    # Each configuration ran on its worker's host: the parent's own CPU says nothing about them.
    provenance = summary.provenance.model_copy(
        update={"host_cpu": None, "engine_versions": hooks.versions, "engine_hosts": hooks.hosts}
    )
    return summary.model_copy(update={"provenance": provenance})


@task(cache_policy=NO_CACHE)
def dispatch(pool: str, label: str, config: SweepConfig, parent: str) -> str:
    """One configuration as a flow run on the pool; the name of the state it ended in."""
    run = synchronous(
        run_deployment(
            f"{CHILD_FLOW}/{pool}",
            parameters={"config": json.loads(config.model_dump_json()), "parent_run_id": parent},
            timeout=None,
            as_subflow=True,
            flow_run_name=f"{config.name}: {label}",
        )
    )
    print(f"{label}: flow run {run.name} ended {run.state.name if run.state else '?'}")
    return (run.state.name if run.state else None) or "unknown"


@flow(name="pool-sweep", log_prints=True)
def pool_sweep(
    config: SweepConfig,
    pool: Annotated[str, Field(description="The work pool whose workers measure.")] = "speedbench",
) -> SweepSummary:
    """Measure a sweep's SD configurations in parallel on a work pool's engine hosts."""
    forms = per_config_forms(config)  # a form the pool cannot run is refused before any run
    tracker = Tracker(config.output.tracking_uri, config.output.experiment)
    parent = tracker.start_parent(config.name, config.flat())
    try:
        missing = {f.config for f in gather(config, tracker, parent).failures}
        children = [(label, c) for label, c in forms if label in missing]
        ended: dict[str, str] = {}
        waves = [children]
        if config.load.rate_sweep:  # the swept rates follow from the baseline's levels
            waves = [
                [c for c in children if c[0] == "none"],
                [c for c in children if c[0] != "none"],
            ]
        for wave in waves:
            futures = [dispatch.submit(pool, label, child, parent) for label, child in wave]
            ended |= {label: f.result() for (label, _), f in zip(wave, futures, strict=True)}
        summary = gather(config, tracker, parent, ended)
    except BaseException as exc:
        tracker.abort_parent(parent, "FAILED", f"{type(exc).__name__}: {exc}")
        raise
    tracker.set_tags(parent, {"speedbench.dispatched": ",".join(sorted(ended)) or "-"})
    out = Path(config.output.out_dir) / config.name
    table = write_category_table(tracker, parent, out)
    files = [Path(p) for p in summary.plots] + [out / "summary.json"]
    files += write_sweep_report(out)
    close_sweep(tracker, parent, summary, files + ([table] if table else []))
    return summary.model_copy(update={"parent_run_id": parent, "tracking_uri": tracker.uri})


def deploy(pool: str, zombie_after_s: int = ZOMBIE_AFTER_S) -> str:
    """The pool (process type), the zombie automation and the child deployment; idempotent.

    Args:
        pool: The work pool's name; the deployment is ``measure-config/<pool>``.
        zombie_after_s: A flow run this long without a heartbeat is marked CRASHED (at least
            one heartbeat period, 30 s, more on a loaded host).
    """
    from prefect.automations import Automation
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.actions import WorkPoolCreate
    from prefect.client.schemas.objects import StateType
    from prefect.events.actions import ChangeFlowRunState
    from prefect.events.schemas.automations import EventTrigger, Posture
    from prefect.events.schemas.events import ResourceSpecification
    from prefect.exceptions import ObjectAlreadyExists, ObjectNotFound
    from prefect.workers.process import ProcessWorker

    with get_client(sync_client=True) as client, contextlib.suppress(ObjectAlreadyExists):
        client.create_work_pool(
            WorkPoolCreate(
                name=pool,
                type="process",
                base_job_template=ProcessWorker.get_default_base_job_template(),
            )
        )
    try:
        synchronous(Automation.read(name=ZOMBIE_AUTOMATION))
    except (ObjectNotFound, ValueError):
        # Prefect's documented zombie detection: a flow run whose heartbeats stop (its host
        # or worker is gone) is marked CRASHED, so the sweep waiting on it goes on.
        automation = Automation(
            name=ZOMBIE_AUTOMATION,
            trigger=EventTrigger(
                after={"prefect.flow-run.heartbeat"},
                expect={
                    "prefect.flow-run.heartbeat",
                    "prefect.flow-run.Completed",
                    "prefect.flow-run.Failed",
                    "prefect.flow-run.Cancelled",
                    "prefect.flow-run.Crashed",
                },
                match=ResourceSpecification({"prefect.resource.id": ["prefect.flow-run.*"]}),
                for_each={"prefect.resource.id"},
                posture=Posture.Proactive,
                threshold=1,
                within=timedelta(seconds=zombie_after_s),
            ),
            actions=[
                ChangeFlowRunState(
                    state=StateType.CRASHED,
                    message="no heartbeat: the worker or its host was lost",
                )
            ],
        )
        synchronous(automation.create())
    deployment = synchronous(
        measure_config.from_source(
            source=str(PROJECT_ROOT), entrypoint="flows/pool.py:measure_config"
        )
    ).deploy(
        name=pool,
        work_pool_name=pool,
        job_variables={"env": {"PREFECT_FLOWS_HEARTBEAT_FREQUENCY": str(HEARTBEAT_S)}},
        description="One SD configuration of a pool sweep, on the worker's engine host.",
        tags=["speedbench"],
        print_next_steps=False,
    )
    return str(deployment)


def worker_command(
    pool: str, name: str, cores: str | None = None, port: int | None = None
) -> tuple[list[str], dict[str, str]]:
    """``prefect worker start`` for one engine host: its argv and its environment.

    The worker runs one configuration at a time (``--limit 1``); the host's facts (its engine
    cores and port) go into the environment its flow runs inherit.
    """
    argv = [
        sys.executable, "-m", "prefect", "worker", "start",
        "--pool", pool, "--type", "process", "--limit", "1", "--name", name,
    ]  # fmt: skip
    env = dict(os.environ)
    if cores is not None:
        env[ENGINE_CPUS_ENV] = cores
    if port is not None:
        env[PORT_ENV] = str(port)
    return argv, env


def main(argv: list[str] | None = None) -> int:
    """``python -m flows.pool deploy|worker|run``: set a pool up, serve a host, run a sweep.

    Exit codes as ``python -m flows.sweep``'s (:mod:`speedbench.errors`).
    """
    import argparse

    from speedbench.config import load_config, read_config_file
    from speedbench.errors import finish

    parser = argparse.ArgumentParser(prog="python -m flows.pool", description=main.__doc__)
    parser.add_argument("action", choices=["deploy", "worker", "run"])
    parser.add_argument("--pool", default="speedbench", help="work pool name")
    parser.add_argument("--config", help="run: YAML or JSON with SweepConfig fields")
    parser.add_argument("--name", default=socket.gethostname(), help="worker: its name")
    parser.add_argument("--cores", default=None, help="worker: the engine's cores, e.g. 0-7")
    parser.add_argument("--port", type=int, default=None, help="worker: the engine's port")
    args = parser.parse_args(argv)
    os.environ.setdefault("PREFECT_SERVER_ANALYTICS_ENABLED", "false")
    if args.action == "worker":
        command, env = worker_command(args.pool, args.name, args.cores, args.port)
        os.execve(command[0], command, env)
    if args.action == "deploy":
        return finish(lambda: print(f"deployment {CHILD_FLOW}/{args.pool}: {deploy(args.pool)}"))
    if not args.config:
        parser.error("run needs --config")
    return finish(
        lambda: pool_sweep(load_config(SweepConfig, read_config_file(args.config)), args.pool)
    )


if __name__ == "__main__":
    raise SystemExit(main())
