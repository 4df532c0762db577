"""What the Docker launcher asks the daemon for, without a daemon."""

from __future__ import annotations

import io
import json
import tarfile

import pytest

from speedbench.config import ConfigError, EngineConfig, SpecConfig, load_config
from speedbench.engines.docker import (
    container_options,
    device_requests,
    launch_files_archive,
    remote_host,
)


def test_gpu_requests_follow_docker_run_gpus():
    (all_gpus,) = device_requests("all")
    assert (all_gpus["Count"], all_gpus["Capabilities"]) == (-1, [["gpu"]])
    (two,) = device_requests("2")
    assert two["Count"] == 2
    (ids,) = device_requests("device=0,3")
    assert ids["DeviceIDs"] == ["0", "3"]
    assert device_requests(None) == []


def test_bad_gpu_values_are_refused():
    with pytest.raises(ConfigError, match=r"EngineConfig.gpus: String should match pattern"):
        load_config(EngineConfig, {"model": "m", "gpus": "0,1"})


def test_create_call_mounts_models_binds_loopback_and_drops_privileges(tmp_path):
    target, draft = tmp_path / "t", tmp_path / "d"
    target.mkdir(), draft.mkdir()
    engine = EngineConfig(
        model=str(target), launcher="docker", port=8123, gpus="all", env={"HF_TOKEN": "hf_x"}
    )
    spec = SpecConfig(method="draft_model", num_speculative_tokens=3, draft_model=str(draft))
    opts = container_options(engine, spec)
    assert opts["image"] == "vllm/vllm-openai:v0.32.0"
    assert opts["entrypoint"] == ["vllm", "serve"]
    assert opts["ports"] == {"8000/tcp": ("127.0.0.1", 8123)}
    assert opts["volumes"] == {
        str(target): {"bind": "/models/target", "mode": "ro"},
        str(draft): {"bind": "/models/draft", "mode": "ro"},
    }
    cmd = opts["command"]
    assert cmd[0] == "/models/target"  # vllm serve takes the model as its positional argument
    assert cmd[cmd.index("--host") + 1] == "0.0.0.0" and cmd[cmd.index("--port") + 1] == "8000"
    assert json.loads(cmd[cmd.index("--speculative-config") + 1])["model"] == "/models/draft"
    assert opts["device_requests"][0]["Count"] == -1
    assert opts["cap_drop"] == ["ALL"] and opts["security_opt"] == ["no-new-privileges"]
    assert "privileged" not in opts and "user" not in opts  # the image's unprivileged user
    # The prefix-cache reset between levels is a development endpoint of vLLM's.
    assert opts["environment"] == {"VLLM_SERVER_DEV_MODE": "1", "HF_TOKEN": "hf_x"}
    assert opts["labels"] == {"speedbench": "1", "speedbench.config": "draft_model-k3"}


def test_hub_ids_pass_through_unmounted():
    engine = EngineConfig(model="meta-llama/Llama-3.3-70B-Instruct", launcher="docker")
    opts = container_options(engine, SpecConfig())
    assert opts["volumes"] == {}
    assert "meta-llama/Llama-3.3-70B-Instruct" in opts["command"]


def test_on_a_remote_host_absolute_paths_are_directories_there(tmp_path, monkeypatch):
    monkeypatch.delenv("DOCKER_HOST", raising=False)
    engine = EngineConfig(
        model="/srv/models/llama-70b", launcher="docker", docker_host="ssh://me@gpu-host"
    )
    spec = SpecConfig(method="eagle3", num_speculative_tokens=3, draft_model="org/eagle3-head")
    opts = container_options(engine, spec)
    # Neither path exists here: the target is mounted from the GPU host, the hub id passes.
    assert opts["volumes"] == {"/srv/models/llama-70b": {"bind": "/models/target", "mode": "ro"}}
    cmd = opts["command"]
    assert cmd[0] == "/models/target"  # vllm serve takes the model as its positional argument
    assert json.loads(cmd[cmd.index("--speculative-config") + 1])["model"] == "org/eagle3-head"


def test_which_hosts_are_remote(monkeypatch):
    monkeypatch.delenv("DOCKER_HOST", raising=False)
    assert remote_host(EngineConfig(model="m")) is None
    assert remote_host(EngineConfig(model="m", docker_host="unix:///var/run/docker.sock")) is None
    assert remote_host(EngineConfig(model="m", docker_host="ssh://gpu")) == "ssh://gpu"
    monkeypatch.setenv("DOCKER_HOST", "tcp://10.0.0.5:2376")
    assert remote_host(EngineConfig(model="m")) == "tcp://10.0.0.5:2376"


def test_launch_files_are_one_world_readable_folder():
    data = launch_files_archive({"b.yaml": "speculative_config: {}\n", "a.txt": "x"})
    with tarfile.open(fileobj=io.BytesIO(data)) as tar:
        members = [(m.name, m.type, oct(m.mode)) for m in tar.getmembers()]
        assert tar.extractfile("speedbench/b.yaml").read() == b"speculative_config: {}\n"
    assert members == [
        ("speedbench", tarfile.DIRTYPE, "0o755"),
        ("speedbench/a.txt", tarfile.REGTYPE, "0o644"),
        ("speedbench/b.yaml", tarfile.REGTYPE, "0o644"),
    ]


def test_a_bound_engine_gets_a_cpuset_and_bound_openmp_threads():
    engine = EngineConfig(model="m", launcher="docker", cpus="2-3", env={"OMP_NUM_THREADS": "1"})
    opts = container_options(engine, SpecConfig())
    assert opts["cpuset_cpus"] == "2-3"
    # The engine's own env wins over the binding's defaults.
    assert opts["environment"] == {
        "OMP_NUM_THREADS": "1",
        "OMP_PLACES": "{2,3}",
        "OMP_PROC_BIND": "true",
        "VLLM_SERVER_DEV_MODE": "1",
    }
    assert "cpuset_cpus" not in container_options(EngineConfig(model="m"), SpecConfig())


def _host(**fields):
    opts = container_options(EngineConfig(model="/m", launcher="docker", **fields), SpecConfig())
    ulimits = [(u["Name"], u["Soft"], u["Hard"]) for u in opts.get("ulimits", [])]
    return opts["ipc_mode"], opts.get("shm_size"), ulimits


def test_each_engine_gets_its_own_run_lines_host_settings():
    # vLLM on GPUs: --ipc=host (its Docker docs); on the CPU: --shm-size=4g (its CPU docs).
    assert _host(gpus="all") == ("host", None, [])
    assert _host() == ("private", "4g", [])
    # SGLang: --shm-size 32g --ipc=host; under the host's namespace the size is the host's.
    assert _host(kind="sglang", gpus="all") == ("host", None, [])
    # TensorRT-LLM: --ipc host --ulimit memlock=-1 --ulimit stack=67108864.
    assert _host(kind="trtllm", gpus="all") == (
        "host", None, [("memlock", -1, -1), ("stack", 67108864, 67108864)]
    )  # fmt: skip
    assert _host(kind="sglang") == ("host", None, [])  # no CPU run line: the GPU one


def test_a_config_overrides_the_engines_host_settings():
    assert _host(kind="sglang", gpus="all", ipc="private") == ("private", "32g", [])
    assert _host(kind="trtllm", gpus="all", ulimits={"nofile": 65536}, shm_size="64g") == (
        "host", None, [("nofile", 65536, 65536)]
    )  # fmt: skip
    assert _host(kind="trtllm", gpus="all", ulimits={}) == ("host", None, [])  # none at all
    with pytest.raises(ConfigError, match=r"EngineConfig.shm_size: String should match pattern"):
        load_config(EngineConfig, {"model": "m", "shm_size": "lots"})
    with pytest.raises(ConfigError, match=r"EngineConfig.ulimits.rss.\[key\]: got 'rss'; allo"):
        load_config(EngineConfig, {"model": "m", "ulimits": {"rss": 1}})
