"""``speedbench plan``: what a sweep would launch and send, with nothing started."""

from __future__ import annotations

import json

import pytest

from speedbench.cli import main


def test_plan_prints_commands_files_and_bodies_for_each_config(capsys, tmp_path):
    model = tmp_path / "llama"
    model.mkdir()
    argv = [
        "plan", "--engine", "trtllm", "--launcher", "docker", "--gpus", "all",
        "--model", str(model), "--methods", "none", "ngram", "--draft-lengths", "3",
        "--batch-sizes", "1", "32",
    ]  # fmt: skip
    assert main(argv) == 0
    out = capsys.readouterr().out
    assert "nothing was started" in out
    blocks = out.split("## ")[1:]
    assert [b.split(" ")[0] for b in blocks] == ["none", "ngram-k3"]
    ngram = blocks[1]
    assert "drafting: chain of 3, one n-gram pool shared by all requests" in ngram
    # TensorRT-LLM's own run line: the host's IPC namespace, unlimited locked memory.
    host = "--ipc=host --ulimit memlock=-1 --ulimit stack=67108864"
    assert f"$ docker run --gpus all {host} -v {model}:/models/target:ro" in ngram
    assert "trtllm-serve /models/target --backend pytorch" in ngram
    assert "--extra_llm_api_options /speedbench/extra_llm_api_options.yaml" in ngram
    assert "decoding_type: NGram" in ngram and "iter_stats_max_iterations: 100000" in ngram
    body = json.loads(ngram.split("# request body:\n")[1].splitlines()[0])
    assert body["detokenize"] is False and body["max_tokens"] == 96


def test_plan_refuses_a_batch_size_over_the_engine_cap(capsys):
    argv = [
        "plan", "--engine", "sglang", "--launcher", "external", "--model", "/m",
        "--methods", "ngram", "--draft-lengths", "3", "--batch-sizes", "1", "64",
    ]  # fmt: skip
    assert main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [
        "speedbench: error: sglang runs at most 48 requests at once for ngram-k3, so batch "
        "sizes [64] would be measured at 48; set max_num_seqs to at least 64 (--max-num-seqs)"
    ]


def test_a_container_reads_the_drafter_at_its_mount_not_the_host_path(capsys, tmp_path):
    """TensorRT-LLM's options YAML and its requests name the container's paths."""
    target, draft = tmp_path / "llama-70b", tmp_path / "llama-1b"
    target.mkdir(), draft.mkdir()
    argv = [
        "plan", "--engine", "trtllm", "--launcher", "docker", "--gpus", "all",
        "--model", str(target), "--draft-model", str(draft), "--methods", "draft_model",
        "--draft-lengths", "3", "--batch-sizes", "1", "--no-baseline",
    ]  # fmt: skip
    assert main(argv) == 0
    (block,) = capsys.readouterr().out.split("## ")[1:]
    assert f"-v {draft}:/models/draft:ro" in block
    assert "speculative_model_dir: /models/draft" in block
    assert str(draft) not in block.split("# file ")[1]  # no host path in the launch file
    body = json.loads(block.split("# request body:\n")[1].splitlines()[0])
    assert body["model"] == "/models/target"


def test_a_token_passed_by_name_reaches_the_container_and_nothing_else(
    capsys, tmp_path, monkeypatch
):
    from speedbench.config import EngineConfig, SpecConfig
    from speedbench.engines.base import EngineError
    from speedbench.engines.docker import container_options
    from speedbench.engines.running import passed_env
    from speedbench.run.plan import engine_config
    from speedbench.sweep_config import SweepConfig

    token, other = "hf_Zq8sEcretTokenValue4217", "plain-value-9931"
    monkeypatch.setenv("HF_TOKEN", token)
    monkeypatch.setenv("MY_SETTING", other)
    flags = [
        "--engine", "vllm", "--launcher", "docker", "--gpus", "all",
        "--model", "meta-llama/Llama-3.3-70B-Instruct", "--methods", "none",
        "--batch-sizes", "1", "--pass-env", "HF_TOKEN", "MY_SETTING",
        "--model-cache", str(tmp_path / "hf"),
    ]  # fmt: skip
    assert main(["plan", *flags]) == 0
    out = capsys.readouterr().out
    assert token not in out and other not in out
    assert "HF_TOKEN=***" in out and "MY_SETTING=<$MY_SETTING of speedbench's environment>" in out
    assert f"-v {tmp_path / 'hf'}:/speedbench-cache/huggingface:rw" in out
    # The form (what MLflow logs as params) holds the names only.
    form = SweepConfig(model="m", pass_env=["HF_TOKEN", "MY_SETTING"]).model_dump_json()
    assert token not in form and '"pass_env":["HF_TOKEN","MY_SETTING"]' in form
    # The container gets the values, with the shared cache as HF_HOME.
    sweep = SweepConfig(
        model="m", launcher="docker", gpus="all", pass_env=["HF_TOKEN"], model_cache="/srv/hf"
    )
    engine = engine_config(sweep, "m")
    env = container_options(engine, SpecConfig())["environment"]
    assert env["HF_TOKEN"] == token and env["HF_HOME"] == "/speedbench-cache/huggingface"
    monkeypatch.delenv("MY_SETTING")
    with pytest.raises(EngineError, match="pass_env names MY_SETTING, not set"):
        passed_env(EngineConfig(model="m", pass_env=["HF_TOKEN", "MY_SETTING"]))


def test_an_sglang_sweep_at_t_above_0_samples_with_its_seed():
    # SGLang uses a request's sampling_seed only under deterministic inference.
    from speedbench.run.plan import engine_config
    from speedbench.sweep_config import SweepConfig

    sweep = SweepConfig(model="m", engine="sglang", launcher="external", temperature=0.7, seed=3)
    assert engine_config(sweep, "m").extra_args == ["--enable-deterministic-inference"]
    greedy = SweepConfig(model="m", engine="sglang", launcher="external", seed=3)
    assert engine_config(greedy, "m").extra_args == []


def test_a_config_the_engine_release_cannot_run_is_refused_before_any_launch(capsys):
    from speedbench.config import ConfigError, EngineConfig, SpecConfig
    from speedbench.run.plan import check_specs

    windows = SpecConfig(method="ngram", num_speculative_tokens=3, prompt_lookup_min=2)
    pinned = EngineConfig(kind="sglang", model="/m", launcher="docker", gpus="all")
    check_specs(pinned, [windows])  # 0.5.5, the pinned image, has the n-gram window flags
    newer = pinned.model_copy(update={"image": "lmsysorg/sglang:v0.5.23-cu129"})
    with pytest.raises(ConfigError) as err:
        check_specs(newer, [SpecConfig(), windows])
    assert str(err.value) == (
        "ngram-k3: SGLang 0.5.23 has no --speculative-ngram-min/max-match-window-size "
        "(removed in 0.5.10): unset prompt_lookup_min/max for it"
    )
    check_specs(newer, [SpecConfig(method="ngram", num_speculative_tokens=3)])  # no windows
    # A method the engine lacks: refused before the baseline runs, not when its turn comes.
    argv = [
        "plan", "--engine", "sglang", "--launcher", "external", "--model", "/m",
        "--methods", "none", "suffix", "--draft-lengths", "3", "--batch-sizes", "1",
    ]  # fmt: skip
    assert main(argv) == 2
    assert "suffix-k3: SGLang has no SD method 'suffix'" in capsys.readouterr().err


def test_plan_shows_the_host_settings_a_sweeps_form_overrides(capsys, tmp_path):
    argv = [
        "plan", "--engine", "trtllm", "--launcher", "docker", "--gpus", "all",
        "--model", str(tmp_path), "--methods", "none", "--batch-sizes", "1",
        "--ipc", "private", "--shm-size", "64g", "--ulimits", "memlock=-1", "nofile=65536",
    ]  # fmt: skip
    assert main(argv) == 0
    out = capsys.readouterr().out
    flags = "--ipc=private --shm-size=64g --ulimit memlock=-1 --ulimit nofile=65536"
    assert f"$ docker run --gpus all {flags} -v {tmp_path}:/models/target:ro" in out


def test_a_sampled_sweep_on_vllms_cpu_build_is_warned_about():
    from speedbench.config import EngineConfig, SpecConfig
    from speedbench.run.plan import sampling_caveats

    cpu = EngineConfig(kind="vllm", model="m")
    specs = [SpecConfig(), SpecConfig(method="ngram", num_speculative_tokens=3)]
    assert sampling_caveats(cpu, specs, 1.0, None) == [
        "temperature 1 with ngram-k3 on vLLM's CPU build: it accepts almost no draft when "
        "sampling (docs/findings/sampled-acceptance.md), so these levels measure SD's cost, "
        "not its gain"
    ]
    (_, seeded) = sampling_caveats(cpu, specs, 1.0, 0)
    assert seeded.startswith("seed 0 at temperature 1 on vLLM's CPU build: a seeded request")
    assert sampling_caveats(cpu, specs[:1], 1.0, 0) == [seeded]  # no drafting, still seeded
    assert sampling_caveats(cpu, specs, 0.0, 0) == []  # greedy
    gpu = cpu.model_copy(update={"launcher": "docker", "gpus": "all"})
    assert sampling_caveats(gpu, specs, 1.0, 0) == []


def test_an_external_server_gets_no_launch_built_or_refused():
    # Someone else launched it: its release cannot be told, and no argument of ours reaches it;
    # a method its engine lacks is still refused (the test above).
    from speedbench.config import EngineConfig, SpecConfig
    from speedbench.run.dryrun import sweep_launch_plans
    from speedbench.run.plan import check_specs
    from speedbench.sweep_config import SweepConfig

    draft = SpecConfig(method="draft_model", num_speculative_tokens=3, draft_model="/d")
    check_specs(EngineConfig(kind="trtllm", model="m", launcher="external"), [draft])
    sweep = SweepConfig(
        model="m", draft_model="/d", engine="trtllm", launcher="external",
        methods=["none", "draft_model"], draft_lengths=[3],
    )  # fmt: skip
    plans = sweep_launch_plans(sweep, "m", "/d")
    assert [p.command for p in plans] == [
        ["# already running at http://127.0.0.1:8000: nothing is launched"]
    ] * 2
    assert all(p.files == {} for p in plans)
