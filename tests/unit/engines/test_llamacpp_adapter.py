"""llama.cpp adapter: launch flags, /completion bodies and events, step rejoining, counters.

The formats are the ones the real llama-server of the pinned build streams
(tests/integration/engines/test_llamacpp.py runs it).
"""

from __future__ import annotations

import json

import pytest

from speedbench.client.request import DraftCountSteps
from speedbench.config import EngineConfig, SpecConfig
from speedbench.engines import get_engine
from speedbench.engines.base import EngineError, UnsupportedSpecError
from speedbench.engines.docker import container_options
from speedbench.metrics.acceptance import acceptance_from_counters
from speedbench.provision.models import PROVENANCE, engine_weights

ENGINE = EngineConfig(kind="llamacpp", model="/m/target.gguf", port=8081)
DRAFT = SpecConfig(method="draft_model", num_speculative_tokens=3, draft_model="/m/draft.gguf")


def flag(args, name):
    return args[args.index(name) + 1]


@pytest.fixture
def llamacpp():
    return get_engine("llamacpp")


def test_draft_model_flags_draft_k_tokens_every_step(llamacpp):
    args = llamacpp.server_args(ENGINE.model_copy(update={"cpus": "1"}), DRAFT)
    assert args[:2] == ["--model", "/m/target.gguf"]
    names = ("--spec-type", "--spec-draft-model", "--spec-draft-n-max")
    assert [flag(args, n) for n in names] == ["draft-simple", "/m/draft.gguf", "3"]
    # llama.cpp's own default (0.75) would draft fewer than k where the draft is unsure.
    assert flag(args, "--spec-draft-p-min") == "0.0"
    # One thread per owned core, for the draft too.
    for name in ("--threads", "--threads-batch", "--spec-draft-threads"):
        assert flag(args, name) == "1"
    assert "--metrics" in args


def test_options_restore_llamacpp_defaults_and_unknown_ones_fail(llamacpp):
    spec = DRAFT.model_copy(update={"options": {"p_min": 0.75}})
    args = llamacpp.server_args(ENGINE, spec)
    assert flag(args, "--spec-draft-p-min") == "0.75"
    bad = DRAFT.model_copy(update={"options": {"eagle_topk": 4}})
    with pytest.raises(UnsupportedSpecError, match=r"llama.cpp SD options \['eagle_topk'\]"):
        llamacpp.server_args(ENGINE, bad)


def test_ngram_maps_to_ngram_simple_with_k_as_the_draft_length(llamacpp):
    spec = SpecConfig(method="ngram", num_speculative_tokens=4, prompt_lookup_max=2)
    args = llamacpp.server_args(ENGINE, spec)
    assert flag(args, "--spec-type") == "ngram-simple"
    assert flag(args, "--spec-ngram-simple-size-n") == "2"
    assert flag(args, "--spec-ngram-simple-size-m") == "4"


def test_methods_it_lacks_and_non_gguf_weights_fail_with_one_line(llamacpp):
    with pytest.raises(UnsupportedSpecError, match=r"llama\.cpp has no SD method 'suffix'"):
        llamacpp.server_args(ENGINE, SpecConfig(method="suffix", num_speculative_tokens=2))
    with pytest.raises(EngineError, match=r"llama\.cpp serves GGUF files; the target '/m/hf'"):
        llamacpp.server_args(ENGINE.model_copy(update={"model": "/m/hf"}), SpecConfig())


def test_body_sends_token_ids_and_asks_for_per_token_draft_counts(llamacpp):
    body = llamacpp.request_body(ENGINE, [1, 2, 3], 16, 0.0, 7, True)
    assert body == {
        "prompt": [1, 2, 3],
        "n_predict": 16,
        "temperature": 0.0,
        "ignore_eos": True,
        "stream": True,
        "return_tokens": True,
        "timings_per_token": True,
        "cache_prompt": False,  # no reset endpoint: "reset" turns reuse off
        "seed": 7,
    }
    kept = ENGINE.model_copy(update={"prefix_cache": "keep"})
    assert llamacpp.request_body(kept, [1], 1, 0.0, None, False)["cache_prompt"] is True


def test_events_carry_tokens_counts_and_the_finish(llamacpp):
    first = llamacpp.parse_event(b'{"tokens":[11],"stop":false,"tokens_predicted":1,"timings":{}}')
    assert (first.token_ids, first.draft_totals, first.finish_reason) == ([11], None, None)
    mid = llamacpp.parse_event(
        b'{"tokens":[12],"stop":false,"tokens_predicted":2,'
        b'"timings":{"draft_n":3,"draft_n_accepted":2}}'
    )
    assert (mid.token_ids, mid.draft_totals, mid.total_tokens) == ([12], (3, 2), 2)
    end = llamacpp.parse_event(
        b'{"tokens":[],"stop":true,"stop_type":"limit","tokens_predicted":9,"timings":{}}'
    )
    assert end.finish_reason == "length"
    eos = llamacpp.parse_event(b'{"tokens":[],"stop":true,"stop_type":"eos"}')
    assert eos.finish_reason == "stop"
    err = llamacpp.parse_event(b'{"error":{"code":400,"message":"bad token"}}')
    assert err.error == "engine error in stream: bad token"


def place_all(events):
    """Chunks as the request function builds them from (totals, tokens in the event)."""
    steps, chunks = DraftCountSteps(), []
    for totals, n in events:
        joined, sizes = steps.place(totals, n)
        if joined:
            chunks[-1] += joined
        chunks += sizes
    return steps, chunks


def test_steps_rejoin_from_the_cumulative_counts():
    """One-token events: prefill, 2 of 3 accepted, no draft, 0 of 3, 3 of 3 cut by max_tokens."""
    events = [
        (None, 1),
        ((3, 2), 1),
        ((3, 2), 1),
        ((3, 2), 1),
        ((3, 2), 1),
        ((6, 2), 1),
        ((9, 5), 1),
        ((9, 5), 1),
    ]
    steps, chunks = place_all(events)
    assert chunks == [1, 3, 1, 1, 2]
    assert steps.accepted_steps == [2, 0, 3]
    assert steps.drafted_steps == [3, 3, 3]


def test_held_back_tokens_complete_the_earlier_step_or_begin_the_new_one():
    # A step of 4 whose last token was held and came with the next step's first.
    steps, chunks = place_all([(None, 1), ((3, 3), 1), ((3, 3), 1), ((3, 3), 1), ((6, 6), 2)])
    assert chunks == [1, 4, 1]
    assert steps.accepted_steps == [3, 3]
    # A new step whose first token was held: the placeholder begins it.
    _, chunks = place_all([(None, 1), ((3, 3), 2), ((3, 3), 1), ((3, 3), 1)])
    assert chunks == [1, 4]
    # Without SD every token is a step, a held one too.
    assert place_all([(None, 1), (None, 2), (None, 1)])[1] == [1, 1, 1, 1]


def test_counters_read_like_vllms():
    text = "\n".join(
        [
            "# TYPE llamacpp:spec_decode_num_drafts_total counter",
            "llamacpp:spec_decode_num_drafts_total 10",
            "# TYPE llamacpp:spec_decode_num_draft_tokens_total counter",
            "llamacpp:spec_decode_num_draft_tokens_total 30",
            "# TYPE llamacpp:spec_decode_num_accepted_tokens_total counter",
            "llamacpp:spec_decode_num_accepted_tokens_total 24",
            "# TYPE llamacpp:spec_decode_num_accepted_tokens_per_pos_total counter",
            'llamacpp:spec_decode_num_accepted_tokens_per_pos_total{position="0"} 10',
            'llamacpp:spec_decode_num_accepted_tokens_per_pos_total{position="1"} 8',
            'llamacpp:spec_decode_num_accepted_tokens_per_pos_total{position="2"} 6',
            "",
        ]
    )
    counters = get_engine("llamacpp").parse_counters(text)
    assert (counters.num_drafts, counters.num_draft_tokens, counters.num_accepted_tokens) == (
        10,
        30,
        24,
    )
    acc = acceptance_from_counters(counters, 3)
    assert acc.al_token_weighted == pytest.approx(3.4)
    assert acc.conditional_ar == pytest.approx([1.0, 0.8, 0.75])


def test_packaged_models_resolve_to_their_gguf_for_llamacpp(tmp_path):
    hf = tmp_path / "qwen" / "hf-float32"
    hf.mkdir(parents=True)
    (hf / PROVENANCE).write_text(json.dumps({"gguf": "qwen.gguf", "dtype": "float32"}))
    assert engine_weights(str(hf), "gguf") == str(tmp_path / "qwen" / "qwen.gguf")
    assert engine_weights(str(hf), "hf") == str(hf)
    assert engine_weights("/x/y.gguf", "gguf") == "/x/y.gguf"


def test_container_mounts_the_gguf_files_folders(tmp_path):
    target, draft = tmp_path / "t" / "t.gguf", tmp_path / "d" / "d.gguf"
    for f in (target, draft):
        f.parent.mkdir()
        f.write_bytes(b"GGUF")
    engine = ENGINE.model_copy(update={"model": str(target), "launcher": "docker"})
    spec = DRAFT.model_copy(update={"draft_model": str(draft)})
    options = container_options(engine, spec)
    assert options["entrypoint"] == ["/opt/llama.cpp/bin/llama-server"]
    assert options["volumes"] == {
        str(target.parent): {"bind": "/models/target", "mode": "ro"},
        str(draft.parent): {"bind": "/models/draft", "mode": "ro"},
    }
    command = options["command"]
    assert flag(command, "--model") == "/models/target/t.gguf"
    assert flag(command, "--spec-draft-model") == "/models/draft/d.gguf"
    assert flag(command, "--port") == "8080"


def test_a_draft_in_the_targets_folder_shares_its_mount(tmp_path):
    target = tmp_path / "m.gguf"
    target.write_bytes(b"GGUF")
    engine = ENGINE.model_copy(update={"model": str(target), "launcher": "docker"})
    options = container_options(engine, DRAFT.model_copy(update={"draft_model": str(target)}))
    assert options["volumes"] == {str(tmp_path): {"bind": "/models/target", "mode": "ro"}}
    command = options["command"]
    assert (
        flag(command, "--model") == flag(command, "--spec-draft-model") == "/models/target/m.gguf"
    )
