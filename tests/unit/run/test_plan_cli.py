"""``speedbench plan``: what a sweep would launch and send, with nothing started."""

from __future__ import annotations

import json

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
    assert f"$ docker run --gpus all -v {model}:/models/target:ro" in ngram
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
