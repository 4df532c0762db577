"""TensorRT-LLM's argv, options file and bodies against its source, as transcribed.

PyPI has no tensorrt-llm wheel (only a stub sdist that downloads from NVIDIA's index), so the
options of ``trtllm-serve`` (a click command), the fields of its ``CompletionRequest``
(``extra="forbid"``) and the LLM-API keys are read from tests/contracts/trtllm.json, which cites
the source files and commits they were transcribed from. The argv is parsed by a click command
with exactly those options, as trtllm-serve's own click parser would; bodies by a pydantic model
with exactly those fields and ``extra="forbid"``.
"""

from __future__ import annotations

import json
from pathlib import Path

import click
import pytest
import yaml
from pydantic import ConfigDict, ValidationError, create_model

from speedbench.config import METHODS_NEEDING_DRAFT_MODEL, EngineConfig, SpecConfig
from speedbench.engines import get_engine
from speedbench.engines.base import UnsupportedSpecError

CONTRACT = json.loads((Path(__file__).parents[2] / "contracts" / "trtllm.json").read_text())
TYPES = {"str": str, "int": int, "float": float}


def serve_command() -> click.Command:
    """A click command with trtllm-serve's argument and options (serve.py)."""
    params: list[click.Parameter] = [click.Argument([CONTRACT["serve"]["argument"]])]
    for name, option in CONTRACT["serve"]["options"].items():
        names = [name, *option.get("aliases", []), *([option["dest"]] if "dest" in option else [])]
        if option["type"] == "flag":
            params.append(click.Option(names, is_flag=True))
        elif option["type"] == "choice":
            params.append(click.Option(names, type=click.Choice(option["choices"])))
        else:
            params.append(
                click.Option(names, type=TYPES[option["type"]], multiple=option.get("multiple"))
            )
    return click.Command("trtllm-serve", params=params, callback=lambda **kw: kw)


def parse(argv: list[str]) -> dict:
    return serve_command().main(argv, standalone_mode=False)


CompletionRequest = create_model(
    "CompletionRequest",
    __config__=ConfigDict(extra="forbid"),
    **{name: (object, None) for name in CONTRACT["completion_request"]["fields"]},
)


def specs() -> list[SpecConfig]:
    out = [SpecConfig()]
    for method in sorted(get_engine("trtllm").methods):
        draft = "/models/draft" if method in METHODS_NEEDING_DRAFT_MODEL else None
        out.append(SpecConfig(method=method, num_speculative_tokens=3, draft_model=draft))
    return out


ENGINES = [
    EngineConfig(kind="trtllm", model="/models/target", launcher="docker"),
    EngineConfig(
        kind="trtllm",
        model="/models/target",
        launcher="docker",
        tokenizer="/models/tok",
        dtype="bfloat16",
        max_model_len=4096,
        max_num_seqs=64,
        prefix_cache="keep",
    ),
]
# Each transcribed release, as the image tag that names it (the pinned image is 1.2.0).
RELEASES = CONTRACT["llm_api_options"]["decoding_by_release"]
IMAGES = {
    name: f"nvcr.io/nvidia/tensorrt-llm/release:{release.get('release', name)}"
    for name, release in RELEASES.items()
}


@pytest.mark.parametrize("release", sorted(RELEASES))
@pytest.mark.parametrize("engine", ENGINES, ids=["defaults", "limits"])
@pytest.mark.parametrize("spec", specs(), ids=lambda s: s.label)
def test_argv_options_and_bodies_fit_trtllm(release, engine, spec):
    adapter = get_engine("trtllm")
    engine = engine.model_copy(update={"image": IMAGES[release]})
    args = parse(adapter.server_args(engine, spec, files_dir="/speedbench"))
    assert args["model"] == "/models/target" and args["backend"] == "pytorch"
    assert args["extra_llm_api_options"] == "/speedbench/extra_llm_api_options.yaml"
    ((_, text),) = adapter.launch_files(engine, spec).items()
    options = yaml.safe_load(text)
    llm = CONTRACT["llm_api_options"]
    assert set(options) <= set(llm["top_level"])
    assert set(options.get("kv_cache_config", {})) <= set(llm["kv_cache_config"])
    if spec.is_speculative:
        config = options["speculative_config"]
        decoding = RELEASES[release]
        kind = config["decoding_type"]
        assert kind in decoding["decoding_types"], f"{release} has no decoding_type {kind}"
        assert set(config) <= set(decoding["decoding_base"]) | set(decoding["decoding_types"][kind])
    body = adapter.request_body(engine, [1, 2, 3], 96, 0.0, 0, True)
    CompletionRequest.model_validate(body)
    # Token ids arrive only without detokenization (the completion post-processor).
    assert body["detokenize"] is False


def test_a_misspelt_flag_key_or_field_is_refused():
    adapter = get_engine("trtllm")
    args = adapter.server_args(ENGINES[0], SpecConfig(), files_dir="/speedbench")
    with pytest.raises(click.NoSuchOption):
        parse([*args[:-2], "--extra_llm_api_option", args[-1]])
    with pytest.raises(click.NoSuchOption):
        parse([*args, "--max-seq-len", "4096"])  # trtllm-serve spells it with underscores
    body = adapter.request_body(ENGINES[0], [1], 8, 0.0, None, False)
    with pytest.raises(ValidationError, match="max_new_tokens"):
        CompletionRequest.model_validate({**body, "max_new_tokens": 8})


def test_the_contract_names_its_source():
    source = CONTRACT["source"]
    assert source["repo"] == "NVIDIA/TensorRT-LLM"
    assert all(len(commit) == 40 for path, commit in source["files"].items() if "serve" in path)
    assert (
        CONTRACT["completion_stream"]["token_ids"]
        == "None if detokenize else output.token_ids_diff"
    )


def test_the_draft_model_is_spelt_as_each_release_spells_it():
    # 1.2.0 dispatches "DraftTarget" by name; main's union member is Literal["Draft_Target"],
    # which refuses the old name (the image's release decides, before any launch).
    adapter = get_engine("trtllm")
    spec = SpecConfig(method="draft_model", num_speculative_tokens=3, draft_model="/models/draft")
    written = {}
    for release, image in IMAGES.items():
        engine = ENGINES[0].model_copy(update={"image": image})
        ((_, text),) = adapter.launch_files(engine, spec).items()
        written[release] = yaml.safe_load(text)["speculative_config"]
    assert written["1.2.0"]["decoding_type"] == "DraftTarget"
    assert written["1.2.0"]["speculative_model_dir"] == "/models/draft"
    assert written["main"]["decoding_type"] == "Draft_Target"
    assert written["main"]["speculative_model"] == "/models/draft"


def test_a_draft_model_on_an_image_without_a_release_is_refused_before_launch():
    adapter = get_engine("trtllm")
    spec = SpecConfig(method="draft_model", num_speculative_tokens=3, draft_model="/models/draft")
    engine = ENGINES[0].model_copy(update={"image": "nvcr.io/nvidia/tensorrt-llm/release:latest"})
    with pytest.raises(UnsupportedSpecError, match=r"DraftTarget up to 1\.2 and Draft_Target"):
        adapter.server_args(engine, spec)
    # The methods spelt alike in every release need no release.
    adapter.server_args(engine, SpecConfig(method="ngram", num_speculative_tokens=3))
