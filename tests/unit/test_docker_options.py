"""What the Docker launcher asks the daemon for, without a daemon."""

from __future__ import annotations

import json

import pytest

from speedbench.config import ConfigError, EngineConfig, SpecConfig, load_config
from speedbench.engines.docker import container_options, device_requests


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
    assert opts["entrypoint"] == ["python3", "-m", "vllm.entrypoints.openai.api_server"]
    assert opts["ports"] == {"8000/tcp": ("127.0.0.1", 8123)}
    assert opts["volumes"] == {
        str(target): {"bind": "/models/target", "mode": "ro"},
        str(draft): {"bind": "/models/draft", "mode": "ro"},
    }
    cmd = opts["command"]
    assert cmd[cmd.index("--model") + 1] == "/models/target"
    assert cmd[cmd.index("--host") + 1] == "0.0.0.0" and cmd[cmd.index("--port") + 1] == "8000"
    assert json.loads(cmd[cmd.index("--speculative-config") + 1])["model"] == "/models/draft"
    assert opts["device_requests"][0]["Count"] == -1
    assert opts["cap_drop"] == ["ALL"] and opts["security_opt"] == ["no-new-privileges"]
    assert "privileged" not in opts and "user" not in opts  # the image's unprivileged user
    assert opts["environment"] == {"HF_TOKEN": "hf_x"}
    assert opts["labels"] == {"speedbench": "1", "speedbench.config": "draft_model-k3"}


def test_hub_ids_pass_through_unmounted():
    engine = EngineConfig(model="meta-llama/Llama-3.3-70B-Instruct", launcher="docker")
    opts = container_options(engine, SpecConfig())
    assert opts["volumes"] == {}
    assert "meta-llama/Llama-3.3-70B-Instruct" in opts["command"]
