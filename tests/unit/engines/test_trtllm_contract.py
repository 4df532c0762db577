"""TensorRT-LLM's argv, options file and bodies against its source, as transcribed.

PyPI has no tensorrt-llm wheel (only a stub sdist that downloads from NVIDIA's index), so the
options of ``trtllm-serve`` (a click command), the fields of its ``CompletionRequest``
(``extra="forbid"``) and the LLM-API keys are read from tests/contracts/trtllm.json, which cites
the source files and commits they were transcribed from. The argv is parsed by a click command
with exactly those options, as trtllm-serve's own click parser would; bodies by a pydantic model
with exactly those fields and ``extra="forbid"``. A draft-length schedule is validated by the
rules of ``draft_len_schedule``'s validator in each release and read back by the meaning its keys
have there (they changed in PR #10860).
"""

from __future__ import annotations

import json
from pathlib import Path

import click
import pytest
import yaml
from pydantic import ConfigDict, ValidationError, create_model, field_validator

from speedbench.config import METHODS_NEEDING_DRAFT_MODEL, EngineConfig, SpecConfig
from speedbench.engines import get_engine
from speedbench.engines.base import UnsupportedSpecError
from speedbench.engines.releases import image_release
from speedbench.oracle.schedule import engine_schedules, trtllm_draft_len_schedule, trtllm_options

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


# A schedule as `speedbench tune` writes it: k = 3 up to 4 streams, 2 up to 12, SD off above.
SCHEDULE = [(1, 4, 3), (5, 12, 2), (13, 64, 0)]


def decoding_config(release: str, decoding_type: str) -> type:
    """The release's decoding config as transcribed.

    Its fields, ``extra="forbid"``, and draft_len_schedule's validator (its rules in the
    contract).
    """
    decoding = RELEASES[release]
    rules = decoding["draft_len_schedule"]
    fields = [*decoding["decoding_base"], *decoding["decoding_types"][decoding_type]]

    def check_schedule(cls, v, info):
        if v is None:
            return v
        if any(b < 1 for b in v) or any(k < 0 for k in v.values()):
            raise ValueError("draft_len_schedule: batch sizes >= 1 and draft lengths >= 0")
        if rules["must_hold_key"] is not None and rules["must_hold_key"] not in v:
            raise ValueError(f"draft_len_schedule must include {rules['must_hold_key']}")
        top = info.data.get("max_draft_len")
        if top is not None and v[min(v)] != top:
            raise ValueError("draft_len_schedule's smallest key must draft max_draft_len")
        if top is not None and any(k > top for k in v.values()):
            raise ValueError("draft_len_schedule: all draft lengths must be <= max_draft_len")
        return dict(sorted(v.items()))

    annotations = {name: (object, None) for name in fields}
    annotations["max_draft_len"] = (int | None, None)
    annotations["draft_len_schedule"] = (dict[int, int] | None, None)
    return create_model(
        f"{decoding_type}DecodingConfig",
        __config__=ConfigDict(extra="forbid"),
        __validators__={"schedule": field_validator("draft_len_schedule")(check_schedule)},
        **annotations,
    )


def draft_len_at(release: str, schedule: dict[int, int], batch_size: int) -> int:
    """The draft length TensorRT-LLM ``release`` runs at ``batch_size``, by its keys' meaning."""
    rules = RELEASES[release]["draft_len_schedule"]
    keys = sorted(schedule)
    if rules["keys"].startswith("smallest"):
        return schedule[max(k for k in keys if k <= batch_size)]
    at = [k for k in keys if k >= batch_size]
    return schedule[at[0]] if at else rules["beyond_the_largest_key"]


def expected_k(batch_size: int, beyond) -> int:
    k = next((k for first, last, k in SCHEDULE if first <= batch_size <= last), None)
    return k if k is not None else (SCHEDULE[-1][2] if beyond != 0 else 0)


@pytest.mark.parametrize("release", sorted(RELEASES))
@pytest.mark.parametrize("method", ["eagle3", "draft_model", "ngram"])
def test_the_schedule_yaml_drafts_the_schedule_s_k_at_every_batch_size(release, method):
    draft = "/models/draft" if method in METHODS_NEEDING_DRAFT_MODEL else None
    options = trtllm_options(method, SCHEDULE, image_release(IMAGES[release]), draft)
    options = yaml.safe_load(yaml.safe_dump(options))  # as the server reads the file
    assert set(options) <= set(CONTRACT["llm_api_options"]["top_level"])
    config = dict(options["speculative_config"])
    model = decoding_config(release, config["decoding_type"]).model_validate(config)
    schedule = model.draft_len_schedule
    beyond = RELEASES[release]["draft_len_schedule"]["beyond_the_largest_key"]
    # 1-4 draft 3, 5-12 draft 2, 13-64 none, and past the schedule's last batch size as well.
    assert [draft_len_at(release, schedule, b) for b in range(1, 129)] == [
        expected_k(b, beyond) for b in range(1, 129)
    ]
    assert model.max_draft_len == 3


def test_the_keys_changed_meaning_between_releases():
    # {1: 3, 5: 2, 13: 0} up to 1.2 (smallest batch size of each length); {4: 3, 12: 2} on main.
    written = {
        release: trtllm_draft_len_schedule(SCHEDULE, image_release(image))
        for release, image in IMAGES.items()
    }
    assert written == {"1.2.0": {1: 3, 5: 2, 13: 0}, "main": {4: 3, 12: 2}}
    # The old keys on main would draft 3 at batch size 1 only and 2 at 2-5: the bug a release
    # change would make silently.
    assert [draft_len_at("main", written["1.2.0"], b) for b in (1, 2, 5, 6)] == [3, 2, 2, 0]


def test_a_schedule_trtllm_cannot_hold_is_refused_by_it_and_by_speedbench():
    rising = [(1, 2, 1), (3, 8, 3)]  # more drafts at 3-8 than at 1
    for release, image in IMAGES.items():
        with pytest.raises(UnsupportedSpecError, match="smallest batch size to draft"):
            trtllm_draft_len_schedule(rising, image_release(image))
        model = decoding_config(release, "NGram")
        with pytest.raises(ValidationError, match="smallest key must draft max_draft_len"):
            model.model_validate({"max_draft_len": 3, "draft_len_schedule": {1: 1, 3: 3}})
        with pytest.raises(ValidationError, match="draft_length_schedule"):
            model.model_validate({"max_draft_len": 3, "draft_length_schedule": {1: 3}})
    with pytest.raises(ValidationError, match="must include 1"):
        decoding_config("1.2.0", "NGram").model_validate(
            {"max_draft_len": 3, "draft_len_schedule": {4: 3}}
        )
    with pytest.raises(UnsupportedSpecError, match="release is unknown"):
        trtllm_draft_len_schedule(SCHEDULE, None)
    # SD off at every batch size: no speculative_config at all.
    assert trtllm_options("ngram", [(1, 64, 0)], (1, 2, 0)) == {}


def test_engine_schedules_carry_every_engine_and_say_why_not():
    files = engine_schedules("ngram", [(1, 2, 1), (3, 8, 3)], ngram=(1, 4))
    assert "smallest batch size to draft" in files["trtllm"]["unsupported"]
    assert "adaptive" not in files["sglang"]  # the pinned SGLang 0.5.5 has none, ngram neither
    files = engine_schedules("eagle3", SCHEDULE, "/m/e3", sglang_image="lmsysorg/sglang:v0.5.23")
    assert files["sglang"]["adaptive"]["config"] == {
        "1": {"candidate_steps": [3]}, "5": {"candidate_steps": [2]}, "13": {"candidate_steps": [0]}
    }  # fmt: skip
    assert files["trtllm"]["llm_api_options"]["speculative_config"]["draft_len_schedule"] == {
        1: 3, 5: 2, 13: 0
    }  # fmt: skip
