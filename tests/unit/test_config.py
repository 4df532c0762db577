import json

import pytest
from pydantic import ValidationError
from tests.summaries import views

from speedbench.config import (
    SPEC_METHODS,
    ConfigError,
    EngineConfig,
    SpecConfig,
    load_config,
    load_params,
)
from speedbench.sweep_config import SweepConfig
from speedbench.sweep_summary import SummaryRow, summarize_sweep

BAD_CONFIGS = [
    # (model, data, expected fragment of the one-line message)
    (
        SpecConfig,
        {"method": "medusa2"},
        "SpecConfig.method: got 'medusa2'; allowed: 'none', 'ngram'",
    ),
    (
        SpecConfig,
        {"method": "draft_model", "num_speculative_tokens": 3},
        "draft_model is required for method 'draft_model'",
    ),
    (
        SpecConfig,
        {"method": "ngram", "num_speculative_tokens": 0},
        "num_speculative_tokens must be >= 1",
    ),
    (
        SpecConfig,
        {"method": "ngram", "num_speculative_tokens": 99},
        "SpecConfig.num_speculative_tokens: Input should be less than or equal to 32 (got 99)",
    ),
    (
        SpecConfig,
        {"method": "none", "num_speculative_tokens": 2},
        "must be 0 when method is 'none'",
    ),
    (
        SpecConfig,
        {"method": "ngram", "num_speculative_tokens": 2, "draft_model": "x"},
        "draft_model must be unset for method 'ngram'",
    ),
    (
        SpecConfig,
        {
            "method": "ngram",
            "num_speculative_tokens": 2,
            "prompt_lookup_min": 5,
            "prompt_lookup_max": 2,
        },
        "prompt_lookup_min (5) must be <= prompt_lookup_max (2)",
    ),
    (
        SpecConfig,
        {"method": "ngram", "num_speculative_tokens": 2, "lookahead": 4},
        "SpecConfig.lookahead: unknown field; allowed fields: method, draft_model",
    ),
    (
        EngineConfig,
        {"kind": "tgi", "model": "m"},
        "EngineConfig.kind: got 'tgi'; allowed: 'vllm', 'sglang', 'trtllm' or 'llamacpp'",
    ),
    (
        EngineConfig,
        {"model": "m", "port": 70000},
        "EngineConfig.port: Input should be less than or equal to 65535 (got 70000)",
    ),
    (EngineConfig, {}, "EngineConfig.model: required field is missing"),
    (
        EngineConfig,
        {"model": "m", "launcher": "k8s"},
        "EngineConfig.launcher: got 'k8s'; allowed: 'local', 'docker' or 'external'",
    ),
    (SweepConfig, {"batch_sizes": [1, 0]}, "batch_sizes must all be >= 1, got [0]"),
    (SweepConfig, {"batch_sizes": [4, 4]}, "batch_sizes has duplicates"),
    (
        SweepConfig,
        {"methods": ["eagle3"], "draft_lengths": [3]},
        "draft_model is required for methods ['eagle3']",
    ),
    (
        SweepConfig,
        {"methods": ["none"], "draft_lengths": [3]},
        "draft_lengths [3] given but no SD method is selected",
    ),
    (SweepConfig, {"methods": ["ngram"]}, "draft_lengths is required for SD methods ['ngram']"),
    (
        SweepConfig,
        {"splits": ["qualitative", "throughput_4k"]},
        "SweepConfig.prompts.splits.1: got 'throughput_4k'; allowed: 'qualitative', 'mtbench'",
    ),
    (SweepConfig, {"splits": []}, "SweepConfig.prompts.splits: List should have at least 1 item"),
    (
        SweepConfig,
        {"batch_sizes": []},
        "SweepConfig.load: no load level: give batch_sizes, request_rates",
    ),
    (SweepConfig, {"batch_sizes": [0]}, "batch_sizes must all be >= 1, got [0]"),
    (SweepConfig, {"methods": ["none", "none"]}, "methods has duplicates"),
    (SweepConfig, {"per_category": 0}, "SweepConfig.prompts.per_category: Input should be greater"),
    (SweepConfig, {"methds": ["none"]}, "SweepConfig.methds: unknown field; allowed fields: name"),
    (
        SweepConfig,
        {"temperature": -1},
        "SweepConfig.protocol.temperature: Input should be greater than or equal to 0 (got -1)",
    ),
    (
        SweepConfig,
        {"output_len": "many"},
        "SweepConfig.protocol.output_len: Input should be a valid integer, unable to parse string"
        " as an integer (got 'many')",
    ),
    (SweepConfig, {"methods": []}, "SweepConfig.methods: List should have at least 1 item"),
    (SweepConfig, ["not", "a", "mapping"], "SweepConfig: expected a mapping, got list"),
    (
        SweepConfig,
        {"oracle": ["draft_model"], "draft_model": "d", "oracle_trees": ["4x"]},
        "SweepConfig.oracle_trees.0: String should match pattern",
    ),
    (
        SweepConfig,
        {"oracle": ["ngram"], "oracle_draft_vocab": [32768]},
        "oracle_draft_vocab and oracle_trees are the draft's: add draft_model",
    ),
    (SweepConfig, {"oracle_trees": ["2x2"]}, "oracle_draft_vocab/oracle_trees set but oracle is"),
]


@pytest.mark.parametrize(("model", "data", "fragment"), BAD_CONFIGS)
def test_bad_values_get_one_line_errors(model, data, fragment):
    with pytest.raises(ConfigError) as info:
        load_config(model, data)
    msg = str(info.value)
    assert "\n" not in msg
    assert fragment in msg


def test_valid_spec_and_label():
    spec = load_config(
        SpecConfig, {"method": "draft_model", "num_speculative_tokens": 3, "draft_model": "d"}
    )
    assert spec.label == "draft_model-k3"
    assert SpecConfig().label == "none" and not SpecConfig().is_speculative


def test_sweep_expands_methods_and_lengths_with_one_baseline():
    sweep = SweepConfig(
        methods=["none", "ngram", "draft_model"], draft_lengths=[2, 4], draft_model="d"
    )
    labels = [s.label for s in sweep.spec_configs()]
    assert labels == ["none", "ngram-k2", "ngram-k4", "draft_model-k2", "draft_model-k4"]
    assert sweep.spec_configs()[3].draft_model == "d"
    assert sweep.spec_configs()[1].draft_model is None


def test_eagle_heads_give_one_config_per_head_beside_the_draft_model():
    sweep = SweepConfig(
        methods=["draft_model", "eagle3"],
        draft_lengths=[3],
        draft_model="d",
        eagle_heads={"full": "heads/full", "pruned-32k": "heads/p"},
    )
    specs = sweep.spec_configs()
    assert [s.label for s in specs] == [
        "none", "draft_model-k3", "eagle3-full-k3", "eagle3-pruned-32k-k3"
    ]  # fmt: skip
    assert [s.draft_model for s in specs] == [None, "d", "heads/full", "heads/p"]
    assert specs[3].variant == "pruned-32k"


def test_eagle_heads_stand_in_for_draft_model_and_need_an_eagle_method():
    only_heads = SweepConfig(methods=["eagle3"], draft_lengths=[2], eagle_heads={"h": "x"})
    assert [s.label for s in only_heads.spec_configs()] == ["none", "eagle3-h-k2"]
    with pytest.raises(ValueError, match=r"draft_model is required for methods \['draft_model'\]"):
        SweepConfig(methods=["draft_model", "eagle3"], draft_lengths=[2], eagle_heads={"h": "x"})
    with pytest.raises(ValueError, match="eagle_heads given but methods has no eagle"):
        SweepConfig(methods=["ngram"], draft_lengths=[2], eagle_heads={"h": "x"})
    with pytest.raises(ValueError, match="pattern"):
        SweepConfig(methods=["eagle3"], draft_lengths=[2], eagle_heads={"a b": "x"})
    with pytest.raises(ValueError, match="variant names a drafter"):
        SpecConfig(variant="x")


def test_the_speedup_model_can_be_left_out_but_not_under_measure_best_k():
    fields = {"methods": ["ngram"], "draft_lengths": [3], "oracle": ["ngram"]}
    assert SweepConfig(**fields).speedup_model
    assert not SweepConfig(**fields, speedup_model=False).speedup_model
    with pytest.raises(ValueError, match="measure_best_k measures the speedup model's pick"):
        SweepConfig(**fields, speedup_model=False, measure_best_k=True)


def test_engine_base_url():
    assert EngineConfig(model="m", port=8123).base_url == "http://127.0.0.1:8123"


def test_malformed_params_file(tmp_path):
    p = tmp_path / "params.yaml"
    p.write_text("sweep:\n  batch_sizes: [1, 2\n")
    with pytest.raises(ConfigError, match=r"params.yaml: malformed YAML at line \d+"):
        load_params(p)
    with pytest.raises(ConfigError, match="params file not found"):
        load_params(tmp_path / "missing.yaml")


def test_prompt_selection_interleaves_categories():
    from speedbench.data.prompts import PromptRow, PromptSetError
    from speedbench.run.plan import select_prompts

    rows = [
        PromptRow(question_id=f"{c}{i}", category=c, turns=["q"]) for c in "ab" for i in range(3)
    ]
    picked = select_prompts(rows, None, 2, None)
    assert [r.question_id for r in picked] == ["a0", "b0", "a1", "b1"]
    assert [r.question_id for r in select_prompts(rows, ["b"], None, 2)] == ["b0", "b1"]
    with pytest.raises(PromptSetError, match=r"unknown categories \['c'\]"):
        select_prompts(rows, ["c"], None, None)


def test_a_tier_picks_the_random_controls_prompts_of_that_tier():
    from speedbench.data.prompts import PromptRow
    from speedbench.run.plan import select_prompts

    control = [
        PromptRow(question_id=f"{t}{i}", category=f"random_{t}", turns=["q"])
        for t in ("low", "mixed")
        for i in range(2)
    ]
    assert [r.question_id for r in select_prompts(control, ["mixed"], 1, None)] == ["mixed0"]


def test_preferred_cpu_dtype_follows_native_bf16():
    from speedbench.provision.models import preferred_cpu_dtype

    assert preferred_cpu_dtype("flags\t\t: fpu avx2 avx512f avx512_bf16 amx_tile\n") == "bfloat16"
    assert preferred_cpu_dtype("flags\t\t: fpu avx2 fma\n") == "float32"
    assert preferred_cpu_dtype("") == "float32"


@pytest.mark.parametrize("native", ["bfloat16", "float32"])
def test_the_cpu_engine_gets_the_provisioned_dtype_not_vllms_auto(monkeypatch, native):
    import speedbench.provision.models
    from speedbench.run.plan import engine_config

    monkeypatch.setattr(speedbench.provision.models, "preferred_cpu_dtype", lambda: native)
    assert engine_config(SweepConfig(), "/m").dtype == native
    assert engine_config(SweepConfig(dtype="float32"), "/m").dtype == "float32"
    # A GPU engine decides for itself from its checkpoint.
    assert engine_config(SweepConfig(gpus="all"), "/m").dtype == "auto"


def _row(config, **figures):
    base = {"split": "qualitative", "batch_size": 1, "per_user_tok_s": 1.0, "error_rate": 0.0}
    base |= {"ttft_p50_s": 0.1, "tpot_p50_s": 0.3}
    return SummaryRow(config=config, **(base | figures))


def test_summary_table_lists_per_category_al_with_whole_names():
    from speedbench.report.text import format_summary

    summary = summarize_sweep(
        [
            _row("none", output_throughput_tok_s=3.0),
            _row(
                "draft_model-k3",
                output_throughput_tok_s=3.3,
                views=views(
                    average=2.8, stream=2.9, category_al={"coding": 3.25, "summarization": 3.75}
                ),
            ),
        ]
    )
    lines = format_summary(summary).splitlines()
    assert lines[0].split()[:5] == ["config", "load", "tok/s", "Average_AL", "AL"]
    expected = ["draft_model-k3", "bs1", "3.300", "2.800", "2.900", "-", "-", "1.100", "0.000"]
    assert lines[2].split() == expected
    assert lines[-2].split() == ["config", "load", "coding", "summarization"]  # never cut
    assert lines[-1].split() == ["draft_model-k3", "bs1", "3.250", "3.750"]


def test_one_speedup_formula_same_split_and_batch_size_only():
    summary = summarize_sweep(
        [
            _row("none", output_throughput_tok_s=4.0, per_user_tok_s=4.0),
            _row("none", output_throughput_tok_s=10.0, per_user_tok_s=2.5, batch_size=4),
            _row("ngram-k3", output_throughput_tok_s=5.0, per_user_tok_s=5.0),
            _row("ngram-k3", output_throughput_tok_s=8.0, per_user_tok_s=2.0, batch_size=4),
            # No baseline at bs 8, and dominated by bs 4 (slower per user, no more throughput).
            _row("ngram-k3", output_throughput_tok_s=8.0, per_user_tok_s=1.0, batch_size=8),
        ]
    )
    assert [r.speedup for r in summary.levels] == [None, None, 1.25, 0.8, None]
    assert summary.pareto_batch_sizes == {"none": [1, 4], "ngram-k3": [1, 4]}


def _sweep_args(*argv):
    from speedbench.cli import build_parser, flags_given

    args = build_parser().parse_args(["sweep", *argv])
    return SweepConfig(**flags_given(args, SweepConfig))


def test_cli_methods_none_and_ngram_measure_both():
    config = _sweep_args("--methods", "none", "ngram", "--draft-lengths", "3")
    assert [s.label for s in config.spec_configs()] == ["none", "ngram-k3"]
    # Asking for ngram alone still measures the baseline, so the speedup is defined.
    config = _sweep_args("--methods", "ngram", "--draft-lengths", "3", "4")
    assert [s.label for s in config.spec_configs()] == ["none", "ngram-k3", "ngram-k4"]


def test_baseline_false_measures_the_sd_configurations_only():
    config = SweepConfig(methods=["ngram"], draft_lengths=[3, 4], baseline=False)
    assert [s.label for s in config.spec_configs()] == ["ngram-k3", "ngram-k4"]
    message = "baseline is false but methods include none"
    with pytest.raises(ValidationError, match=message):
        SweepConfig(methods=["none", "ngram"], draft_lengths=[3], baseline=False)
    with pytest.raises(ValidationError, match=message):
        SweepConfig(methods=["none"], draft_lengths=[], baseline=False)


def test_cli_flags_are_the_form_fields_each_with_its_help():
    from speedbench.cli import TRACKING_FIELDS, build_parser

    sweep = build_parser()._subparsers._group_actions[0].choices["sweep"]
    flags = {a.dest: a for a in sweep._actions if a.dest not in ("help", "config")}
    assert set(flags) == set(SweepConfig.flat_fields()) - TRACKING_FIELDS
    for name, action in flags.items():
        assert action.help.startswith(SweepConfig.flat_fields()[name].description), name
    assert flags["methods"].choices == list(SPEC_METHODS)
    # Values are validated by the model alone, with its one-line message.
    with pytest.raises(
        ConfigError, match=r"SweepConfig.load: batch_sizes must all be >= 1, got \[0\]"
    ):
        load_config(SweepConfig, {"batch_sizes": [0]})
    assert _sweep_args("--batch-sizes", "1", "4", "--no-multiturn").load.batch_sizes == [1, 4]


def test_a_prompt_file_is_measured_as_a_split_named_after_it(tmp_path):
    from speedbench.run.plan import sweep_items

    path = tmp_path / "my-prompts.jsonl"
    rows = [{"question_id": f"q{i}", "category": c, "turns": ["Hi"]} for i, c in enumerate("aab")]
    path.write_text("\n".join(json.dumps(r) for r in rows))
    config = SweepConfig(prompt_file=str(path), categories=["a"])
    assert config.prompts.split_names == ["my-prompts"]
    items = sweep_items(config)
    assert list(items) == ["my-prompts"] and [it.prompt_id for it in items["my-prompts"]] == [
        "q0",
        "q1",
    ]


def test_break_even_model_exact_values():
    from speedbench.sweep_summary import break_even

    rows = [
        _row("none", output_throughput_tok_s=4.0, tpot_p50_s=0.3),
        _row("ngram-k3", method="ngram", k=3, output_throughput_tok_s=6.0, views=views(stream=2.0)),
        _row(
            "draft_model-k3",
            method="draft_model",
            k=3,
            output_throughput_tok_s=3.6,
            views=views(stream=3.0),
        ),
        _row(
            "draft_model-k3", method="draft_model", k=3, batch_size=4, output_throughput_tok_s=9.0
        ),
    ]
    table = break_even(summarize_sweep(rows).levels, {("qualitative", 1, None): 0.1})
    assert [(b.config, b.batch_size) for b in table] == [
        ("ngram-k3", 1),
        ("draft_model-k3", 1),
        ("draft_model-k3", 4),
    ]
    ngram, draft, no_baseline = table
    # n-gram drafting runs no model: c = 0, expected = AL.
    assert (ngram.draft_cost_ratio, ngram.expected_speedup, ngram.measured_speedup) == (
        0.0,
        2.0,
        1.5,
    )
    # c = 0.1 / 0.3; expected = 3 / (1 + 3 c) = 1.5; measured 3.6 / 4.0.
    assert draft.draft_cost_ratio == pytest.approx(1 / 3)
    assert draft.expected_speedup == pytest.approx(1.5)
    assert draft.measured_speedup == pytest.approx(0.9)
    assert no_baseline.draft_cost_ratio is None and no_baseline.expected_speedup is None


def test_flat_names_and_sections_give_the_same_form():
    flat = SweepConfig.model_validate(
        {"engine": "sglang", "port": 9000, "batch_sizes": [1, 4], "out_dir": "o", "seed": 3}
    )
    nested = SweepConfig.model_validate(
        {
            "engine": {"kind": "sglang", "port": 9000},
            "load": {"batch_sizes": [1, 4]},
            "output": {"out_dir": "o"},
            "protocol": {"seed": 3},
        }
    )
    assert flat == nested
    assert (flat.engine.kind, flat.engine.port, flat.load.batch_sizes) == ("sglang", 9000, [1, 4])
    # flat() is the inverse, and a dumped form validates again.
    assert SweepConfig.model_validate(flat.flat()) == flat
    assert SweepConfig.model_validate(flat.model_dump()) == flat
    assert flat.flat()["engine"] == "sglang" and flat.flat()["batch_sizes"] == [1, 4]
    assert SweepConfig.section_of("batch_sizes") == "load"
    assert SweepConfig.section_of("methods") is None
    # A section passed as a model counts only what it was given.
    from speedbench.config import EngineSettings

    mixed = SweepConfig(engine=EngineSettings(kind="sglang"), port=9000)
    assert (mixed.engine.kind, mixed.engine.port) == ("sglang", 9000)


def test_with_fields_validates_what_it_changes():
    form = SweepConfig(methods=["none", "ngram"], draft_lengths=[3])
    assert form.with_fields(port=8123, force=True).engine.port == 8123
    assert form.with_fields(force=True).output.force is True
    with pytest.raises(ValidationError, match="less than or equal to 65535"):
        form.with_fields(port=70000)
    with pytest.raises(ValidationError, match="draft_lengths is required"):
        form.with_fields(draft_lengths=[])
