"""The Docker launcher against a real dockerd with the locally built vLLM-CPU image.

A draft == target pair (random weights, real Qwen vocabulary) is swept through a container and
as a local process: the greedy token ids and the acceptance must be the same. The container is
started on a "remote" Docker host reached over ssh://, as a GPU host would be: this machine's
dockerd behind a real sshd on a free loopback port, with keys made for the test (the
``ssh_host`` fixture), reached through the system ssh client (the docker SDK's
``use_ssh_client``) with a wrapper named ``ssh`` first on PATH that adds the test's key and
known-hosts file; the user's ~/.ssh is never touched. A GPU request on this GPU-less host, a
crashing engine and a Ctrl-C go to the local socket, and must each leave no speedbench container.
"""

from __future__ import annotations

import io
import os
import signal
import subprocess
import sys
import tarfile
import textwrap
import time

import pytest
from tests.integration.conftest import default_sigint, our_containers

from speedbench.config import EngineConfig, SpecConfig
from speedbench.engines.base import EngineError
from speedbench.engines.docker import (
    FILES_MOUNT,
    check_docker,
    container_options,
    docker_client,
    launch_docker,
    launch_files_archive,
)
from speedbench.engines.local import free_port
from speedbench.engines.vllm import cpu_vllm_engine
from speedbench.hostcheck.cpu import ENGINE_CPUS_ENV
from speedbench.records import read_parquet
from speedbench.results import LevelMetrics
from speedbench.run.hooks import SweepHooks
from speedbench.run.sweep import run_grid
from speedbench.tokenize import PromptTokenizer
from speedbench.workload import LoadSettings, WorkItem

pytestmark = pytest.mark.integration
IMAGE = "speedbench/vllm-cpu:0.32.0"
BASE_IMAGE = "speedbench/base:bookworm"
K = 3
PROMPTS = ["Write a haiku about the sea.", "Name three sorting algorithms."]


@pytest.fixture(autouse=True)
def no_our_containers():
    assert our_containers() == []
    yield
    assert our_containers() == []


def docker_engine(model, **overrides):
    fields = {"launcher": "docker", "image": IMAGE, "port": free_port(), "startup_timeout_s": 600}
    return cpu_vllm_engine(str(model), **{**fields, **overrides})


@pytest.fixture(scope="module")
def both_launchers(tiny_pair, ssh_host, tmp_path_factory):
    """The same one-config sweep (``run_grid``) through a local process and a container.

    The container runs on the ssh:// Docker host.
    """
    target, draft = tiny_pair
    out = tmp_path_factory.mktemp("sweeps")
    spec = SpecConfig(method="draft_model", num_speculative_tokens=K, draft_model=str(draft))
    tok = PromptTokenizer.from_pretrained(str(target))
    items = [WorkItem(f"p{i}", "mixed", (p,)) for i, p in enumerate(PROMPTS)]
    settings = LoadSettings(
        batch_size=2, max_tokens=1 + 8 * (K + 1), show_progress=False, split="hello"
    )
    results = {}
    for name, engine in (
        ("local", cpu_vllm_engine(str(target), port=free_port())),
        ("docker", docker_engine(target, docker_host=ssh_host.url)),
    ):
        logins = ssh_host.logins()

        class SeeContainers(SweepHooks):
            def level_done(self, point, level, row, n=name):
                results.setdefault(f"{n}-containers", our_containers())

        summary = run_grid(
            engine,
            [spec],
            {"hello": items},
            [2],
            out / name,
            settings=settings,
            tokenizer=tok,
            hooks=SeeContainers(),
        )
        (level,) = summary.levels
        results[name] = level
        level_dir = out / name / spec.label / "hello" / "bs2"
        results[f"{name}-records"] = read_parquet(level_dir / "records.parquet")
        results[f"{name}-ssh-logins"] = ssh_host.logins() - logins
    results["log"] = (out / "docker" / spec.label / "engine.log").read_text()
    for name in ("local", "docker"):
        metrics = out / name / spec.label / "hello" / "bs2" / "metrics.json"
        results[f"{name}-host"] = LevelMetrics.read(metrics).host
    return results


def test_docker_and_local_give_the_same_tokens_and_acceptance(both_launchers):
    local, docker = both_launchers["local-records"], both_launchers["docker-records"]
    assert all(r.ok for r in local + docker) and len(local) == len(PROMPTS)
    assert {r.prompt_id: r.output_token_ids for r in local} == {
        r.prompt_id: r.output_token_ids for r in docker
    }
    assert {r.prompt_id: r.chunk_tokens for r in local} == {
        r.prompt_id: r.chunk_tokens for r in docker
    }
    for view, figure in (
        ("stream", "al_token_weighted"),
        ("counters", "al_token_weighted"),
        ("counters", "conditional_ar"),
    ):
        docker_figure = both_launchers["docker"].figure(view, figure)
        assert docker_figure is not None and docker_figure == both_launchers["local"].figure(
            view, figure
        )
    assert both_launchers["docker"].figure("counters", "al_token_weighted") == K + 1


def test_the_container_was_labelled_and_logged(both_launchers):
    assert both_launchers["local-containers"] == []
    # Only the container went through sshd.
    assert both_launchers["local-ssh-logins"] == 0 and both_launchers["docker-ssh-logins"] > 0
    (name,) = both_launchers["docker-containers"]
    assert name.startswith("speedbench-vllm-draft_model-k3-")
    log = both_launchers["log"]
    # Bound to this test process's engine core (tests/conftest.py): the cpuset says so.
    cpus = os.environ[ENGINE_CPUS_ENV]
    # The CPU run line's host settings (vLLM's CPU docs: --shm-size=4g) are in it too.
    flags = "--ipc=private --shm-size=4g"
    assert log.startswith(f"$ docker run --cpuset-cpus {cpus} {flags} {IMAGE} vllm serve")
    # The level's host figures name the engine's cores where it runs on this host; the cores of
    # a Docker host reached over ssh:// are another machine's, as far as speedbench can tell.
    assert both_launchers["local-host"].engine_cpus == cpus
    assert both_launchers["docker-host"].engine_cpus is None
    assert "vllm serve /models/target" in log and '"model": "/models/draft"' in log
    assert "Application startup complete" in log
    # Stopped (SIGTERM) and drained before removal, so the shutdown is in the log too.
    assert "[shutdown] API server: shutdown triggered" in log.split("Application startup")[1]


def test_a_gpu_request_fails_clearly_on_a_host_without_gpus(tiny_pair, tmp_path):
    target, _ = tiny_pair
    engine = docker_engine(target, gpus="all")
    with pytest.raises(EngineError) as err, launch_docker(engine, SpecConfig(), tmp_path / "l"):
        pass
    message = str(err.value)
    assert message.startswith(f"cannot start {IMAGE} with GPUs (all): ")
    assert "could not select device driver" in message
    assert message.endswith("(set docker_host to a GPU host, or unset gpus)")


def test_the_gpu_preflight_names_the_missing_nvidia_runtime(tiny_pair):
    # The check before any launch (the sweep's check_available): this dockerd has only runc.
    target, _ = tiny_pair
    with pytest.raises(EngineError) as err:
        check_docker(docker_engine(target, gpus="all"))
    message = str(err.value)
    assert message.startswith("gpus=all asked, but the Docker host has no NVIDIA runtime")
    assert "runc" in message and message.endswith("install the NVIDIA Container Toolkit there")


def test_a_container_left_by_a_killed_sweep_is_named_before_any_launch(tiny_pair):
    # What a SIGKILLed sweep leaves: a labelled container that may still hold GPUs and ports.
    target, _ = tiny_pair
    client = docker_client(EngineConfig(model="-"))
    left = client.containers.create(
        BASE_IMAGE, ["true"], name="speedbench-vllm-left-behind", labels={"speedbench": "1"}
    )
    try:
        with pytest.raises(EngineError) as err:
            check_docker(docker_engine(target))
        message = str(err.value)
        assert "1 speedbench container(s) from an earlier sweep (speedbench-vllm-left-behind)" in (
            message
        )
        assert message.endswith("docker rm -f speedbench-vllm-left-behind")
    finally:
        left.remove(force=True)
        client.close()
    check_docker(docker_engine(target))  # clean again: the preflight passes


def test_the_daemon_takes_each_engines_own_host_settings(tiny_pair):
    # What the engines' run lines ask (docker run --ipc host, --ulimit memlock=-1, ...) as the
    # daemon records it at create; a sweep's form overrides them. Created, never started.
    target, _ = tiny_pair
    client = docker_client(EngineConfig(model="-"))
    cases = {
        "trtllm": (docker_engine(target, kind="trtllm"), "host", 0,
                   [("memlock", -1), ("stack", 67108864)]),
        "vllm-cpu": (docker_engine(target), "private", 4 * 1024**3, []),
        "sglang-overridden": (docker_engine(target, kind="sglang", ipc="private",
                                            shm_size="1g", ulimits={"nofile": 4096}),
                              "private", 1024**3, [("nofile", 4096)]),
    }  # fmt: skip
    made = []
    try:
        for name, (engine, ipc, shm, ulimits) in cases.items():
            container = client.containers.create(**container_options(engine, SpecConfig()))
            made.append(container)
            host = client.api.inspect_container(container.id)["HostConfig"]
            got = [(u["Name"], u["Soft"]) for u in host.get("Ulimits") or []]
            assert (host["IpcMode"], got) == (ipc, ulimits), name
            assert all(u["Soft"] == u["Hard"] for u in host.get("Ulimits") or []), name
            if ipc != "host":  # under the host's namespace /dev/shm is the host's
                assert host["ShmSize"] == shm, name
    finally:
        for container in made:
            container.remove(force=True)
        client.close()


def test_a_crashing_engine_fails_with_its_log_and_is_removed(tmp_path):
    engine = docker_engine(tmp_path)  # an empty directory is no model
    with pytest.raises(EngineError) as err, launch_docker(engine, SpecConfig(), tmp_path / "log"):
        pass
    assert str(err.value).startswith("engine exited with code 1 before healthy: ")
    assert "config.json" in str(err.value)  # the drained log's tail names what is missing


def test_ctrl_c_while_starting_removes_the_container(tiny_pair, tmp_path):
    target, _ = tiny_pair
    engine = docker_engine(target)
    script = textwrap.dedent(
        f"""
        from speedbench.config import EngineConfig, SpecConfig
        from speedbench.engines.docker import launch_docker
        engine = EngineConfig.model_validate_json({engine.model_dump_json()!r})
        with launch_docker(engine, SpecConfig(), {str(tmp_path / "log")!r}):
            pass
        """
    )
    proc = subprocess.Popen([sys.executable, "-c", script], preexec_fn=default_sigint)
    deadline = time.monotonic() + 120
    while not our_containers():
        assert proc.poll() is None and time.monotonic() < deadline
        time.sleep(0.2)
    proc.send_signal(signal.SIGINT)
    assert proc.wait(timeout=60) != 0


def test_the_ssh_host_is_the_same_daemon(ssh_host):
    remote = docker_client(EngineConfig(model="-", docker_host=ssh_host.url))
    local = docker_client(EngineConfig(model="-"))
    try:
        assert remote.info()["ID"] == local.info()["ID"]
        assert ssh_host.logins() >= 1  # it really went through sshd
        assert IMAGE in {tag for image in remote.images.list() for tag in image.tags}
    finally:
        remote.close(), local.close()


def test_launch_files_reach_the_container_over_ssh_readable_by_its_user(ssh_host):
    """TensorRT-LLM's options YAML travels this way: copied in, not bind-mounted."""
    client = docker_client(EngineConfig(model="-", docker_host=ssh_host.url))
    text = "speculative_config:\n  decoding_type: Eagle\n  max_draft_len: 3\n"
    container = client.containers.create(
        BASE_IMAGE,
        ["cat", f"{FILES_MOUNT}/extra_llm_api_options.yaml"],
        user="65534:65534",
        labels={"speedbench": "1"},
    )
    try:
        container.put_archive("/", launch_files_archive({"extra_llm_api_options.yaml": text}))
        container.start()
        assert container.wait(timeout=60)["StatusCode"] == 0
        assert container.logs().decode() == text
        stream, _ = container.get_archive(f"{FILES_MOUNT}/extra_llm_api_options.yaml")
        with tarfile.open(fileobj=io.BytesIO(b"".join(stream))) as tar:
            (member,) = tar.getmembers()
            assert (member.mode & 0o7777, member.uid) == (0o644, 0)
    finally:
        container.remove(force=True)
        client.close()
