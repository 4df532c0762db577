"""What a sweep would start and send, printed before anything starts (``speedbench plan``).

For each SD configuration of a sweep form: the engine's exact command line (a local process:
its own command and arguments; a container: image, entrypoint, arguments and GPU request), the
files it reads at launch (TensorRT-LLM's options YAML), its environment (secret values
redacted), the concurrency the server itself allows, its drafting shape, and the JSON body of a
generation request. A GPU user reads this before reserving GPU hours; the contract tests check
the same argv and bodies with the engines' own parsers and request models.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from speedbench.config import EngineConfig, SpecConfig
from speedbench.engines.base import EngineError, get_engine
from speedbench.engines.containers import container_spec
from speedbench.engines.docker import (
    CACHE_MOUNT,
    container_options,
    container_view,
    host_flags,
    host_settings,
)
from speedbench.run.plan import check_concurrency, check_specs, engine_config, load_settings
from speedbench.secrets import redact, redact_args
from speedbench.sweep_config import SweepConfig

# Token ids stand in for a prompt: the shape of the body is the point, not its prompt.
EXAMPLE_PROMPT_IDS = (151644, 872, 198)


@dataclass(frozen=True)
class LaunchPlan:
    """One SD configuration's launch, as it would happen."""

    label: str
    launcher: str
    command: list[str]
    files: dict[str, str]
    env: dict[str, str]
    body: dict[str, Any]
    drafting_shape: str
    concurrency_cap: int | None
    gpus: str | None


def launch_plan(engine: EngineConfig, spec: SpecConfig, sweep: SweepConfig) -> LaunchPlan:
    """The launch of ``spec`` on ``engine`` and the body of its requests.

    Raises:
        UnsupportedSpecError: The engine has no such SD method.
    """
    adapter = get_engine(engine.kind)
    settings = load_settings(sweep)
    served, served_spec = engine, spec  # the engine's own view of paths: the container's
    if engine.launcher == "docker":
        inside, served_spec, _ = container_view(engine, spec)
        served = engine.model_copy(update={"model": inside.model})
        options = container_options(engine, spec)  # what the launcher's create call gets
        mounts = [f"-v {src}:{v['bind']}:{v['mode']}" for src, v in options["volumes"].items()]
        host, port = options["ports"][next(iter(options["ports"]))]
        command = [
            "docker run",
            *(["--gpus", engine.gpus] if engine.gpus else []),
            *host_flags(host_settings(engine)),
            *mounts,
            f"-p {host}:{port}:{container_spec(engine.kind).port}",
            options["image"],
            *options["entrypoint"],
            *options["command"],
        ]
    elif engine.launcher == "external":
        command = [f"# already running at {engine.base_url}: nothing is launched"]
    else:
        files_dir = "<log folder>/<engine log>.files"
        args = adapter.server_args(engine, spec, files_dir=files_dir)
        try:
            program = adapter.server_command(engine)
        except EngineError:  # the engine is not installed here; a GPU host has it
            program = [f"<{engine.kind} command of the engine environment>"]
        command = [*program, *args]
    body = adapter.request_body(
        served,
        EXAMPLE_PROMPT_IDS,
        settings.max_tokens,
        settings.temperature,
        settings.seed,
        settings.ignore_eos,
    )
    env = {**adapter.server_env(engine), **engine.env}
    if engine.model_cache:
        env["HF_HOME"] = CACHE_MOUNT if engine.launcher == "docker" else engine.model_cache
    # Passed by name: the value is read at launch, and shown nowhere, here neither.
    env.update({name: f"<${name} of speedbench's environment>" for name in engine.pass_env})
    return LaunchPlan(
        label=spec.label,
        launcher=engine.launcher,
        command=redact_args(command),
        files={} if engine.launcher == "external" else adapter.launch_files(served, served_spec),
        env={k: redact(k, v) for k, v in env.items()},
        body=body,
        drafting_shape=adapter.drafting_shape(spec),
        concurrency_cap=adapter.concurrency_cap(engine, spec),
        gpus=engine.gpus,
    )


def sweep_launch_plans(sweep: SweepConfig, target: str, draft: str | None) -> list[LaunchPlan]:
    """Every SD configuration's launch plan of ``sweep`` (models as given or resolved).

    Raises:
        ConfigError: A batch size above what the server runs at once (as the sweep refuses).
    """
    engine = engine_config(sweep, target)
    specs = [
        s.model_copy(update={"draft_model": draft or s.draft_model}) if s.draft_model else s
        for s in sweep.spec_configs()
    ]
    check_specs(engine, specs)
    check_concurrency(engine, specs, sweep.load.batch_sizes)
    return [launch_plan(engine, spec, sweep) for spec in specs]


def format_plans(plans: list[LaunchPlan]) -> str:
    """The plans as a reader sees them: one block per configuration."""
    lines = []
    for plan in plans:
        lines += [
            f"## {plan.label} ({plan.launcher}; drafting: {plan.drafting_shape})",
            "$ " + " ".join(plan.command),
        ]
        for name, text in plan.files.items():
            lines += [f"# file {name}:", *("    " + line for line in text.splitlines())]
        if plan.env:
            lines.append("# env: " + " ".join(f"{k}={v}" for k, v in sorted(plan.env.items())))
        if plan.concurrency_cap is not None:
            lines.append(f"# the server runs at most {plan.concurrency_cap} requests at once")
        lines += ["# request body:", "    " + json.dumps(plan.body, sort_keys=True), ""]
    return "\n".join(lines)
