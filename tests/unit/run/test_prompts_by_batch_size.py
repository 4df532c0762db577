"""More questions per category at one batch size: the form, the selection, the grid, the report."""

from __future__ import annotations

import pytest
from tests.summaries import views
from tests.unit.run.test_sweep_runner import FakeEngine

from speedbench.config import ConfigError, EngineConfig, SpecConfig, load_config
from speedbench.report.text import category_table
from speedbench.run.plan import config_identity, engine_config, first_per_category
from speedbench.run.sweep import run_grid
from speedbench.sweep_config import SweepConfig
from speedbench.sweep_summary import SummaryRow, SweepSummary
from speedbench.workload import LoadSettings, WorkItem

# Three categories, three questions each, interleaved as select_prompts orders them.
ITEMS = [WorkItem(f"{c}{i}", c, ("q",)) for i in range(3) for c in "abc"]


def test_the_first_n_of_each_category_in_order():
    assert [i.prompt_id for i in first_per_category(ITEMS, 1)] == ["a0", "b0", "c0"]
    assert [i.prompt_id for i in first_per_category(ITEMS, 2)] == [
        "a0", "b0", "c0", "a1", "b1", "c1",
    ]  # fmt: skip
    assert first_per_category(ITEMS, None) == ITEMS
    uneven = [WorkItem("a0", "a"), WorkItem("a1", "a"), WorkItem("b0", "b")]
    assert [i.prompt_id for i in first_per_category(uneven, 2)] == ["a0", "a1", "b0"]


def test_each_level_gets_its_count_and_the_sweep_loads_the_most():
    form = SweepConfig(batch_sizes=[1, 16], per_category=1, per_category_by_batch_size={16: 5})
    assert form.selected_per_category == 5
    assert [form.prompts.per_category_at(bs) for bs in (1, 16)] == [1, 5]
    assert form.prompts.per_category_at(16, request_rate=0.5) == 1  # open loop: per_category
    every = SweepConfig(batch_sizes=[1, 16], per_category_by_batch_size={1: 2})
    assert every.selected_per_category is None
    assert [every.prompts.per_category_at(bs) for bs in (1, 16)] == [2, None]


def test_the_identity_names_the_levels_own_count_and_keeps_earlier_keys():
    form = SweepConfig(batch_sizes=[1, 16], per_category=1, per_category_by_batch_size={16: 5})
    eng = engine_config(form, "/m")
    assert config_identity(form, eng, SpecConfig(), "qualitative", 16)["per_category"] == 5
    # Without the override a level's identity (and its MLflow resume key) is what it was.
    plain = SweepConfig(batch_sizes=[1, 16], per_category=1)
    assert config_identity(form, eng, SpecConfig(), "qualitative", 1) == config_identity(
        plain, engine_config(plain, "/m"), SpecConfig(), "qualitative", 1
    )


@pytest.mark.parametrize(
    ("data", "fragment"),
    [
        (
            {"batch_sizes": [1, 4], "per_category_by_batch_size": {16: 5}},
            "per_category_by_batch_size names batch sizes [16] that batch_sizes [1, 4] does not",
        ),
        (
            {"batch_sizes": [16], "per_category_by_batch_size": {16: 0}},
            "prompts per category must be >= 1, got {16: 0}",
        ),
        (
            {"per_category_by_batch_size": {"many": 5}},
            "SweepConfig.prompts.per_category_by_batch_size.many.[key]: Input should be a valid "
            "integer",
        ),
    ],
)
def test_a_bad_override_is_a_one_line_error(data, fragment):
    with pytest.raises(ConfigError) as info:
        load_config(SweepConfig, data)
    assert fragment in str(info.value) and "\n" not in str(info.value)


def test_the_command_line_takes_key_value_pairs(capsys):
    from speedbench.cli import build_parser, flags_given

    args = build_parser().parse_args(
        ["sweep", "--batch-sizes", "1", "16", "--per-category-by-batch-size", "16=5"]
    )
    form = SweepConfig.model_validate(flags_given(args, SweepConfig))
    assert form.prompts.per_category_by_batch_size == {16: 5}
    with pytest.raises(SystemExit):
        build_parser().parse_args(["sweep", "--per-category-by-batch-size", "16"])
    assert "expected KEY=VALUE pairs, got '16'" in capsys.readouterr().err


def test_the_prefect_form_sends_batch_sizes_as_strings():
    form = SweepConfig.model_validate(
        {"batch_sizes": [1, 16], "per_category_by_batch_size": {"16": 5}}
    )
    assert form.prompts.per_category_by_batch_size == {16: 5}


class CountingEngine(FakeEngine):
    def __init__(self):
        super().__init__()
        self.sent: dict[tuple[str, int], list[str]] = {}

    def run_level(self, running, items, settings, tokenizer, directory):
        self.sent[(running, settings.batch_size)] = [i.prompt_id for i in items]
        return super().run_level(running, items, settings, tokenizer, directory)


def test_the_grid_sends_each_level_its_prompts_baseline_and_sd_alike(tmp_path):
    hooks = CountingEngine()
    form = SweepConfig(batch_sizes=[1, 2], per_category=1, per_category_by_batch_size={2: 2})
    run_grid(
        EngineConfig(model="m", launcher="external"),
        [SpecConfig(), SpecConfig(method="ngram", num_speculative_tokens=3)],
        {"s": first_per_category(ITEMS, form.selected_per_category)},
        [1, 2],
        tmp_path,
        settings=LoadSettings(show_progress=False),
        hooks=hooks,
        per_category=form.prompts.per_category_at,
    )
    one, two = ["a0", "b0", "c0"], ["a0", "b0", "c0", "a1", "b1", "c1"]
    assert hooks.sent == {
        ("none", 1): one, ("none", 2): two, ("ngram-k3", 1): one, ("ngram-k3", 2): two,
    }  # fmt: skip


def row(load_bs, questions, cats=None, ci=None):
    """A draft_model-k3 level on the qualitative split with these questions' categories."""
    return SummaryRow(
        config="draft_model-k3",
        split="qualitative",
        batch_size=load_bs,
        output_throughput_tok_s=1.0,
        per_user_tok_s=1.0,
        error_rate=0.0,
        ttft_p50_s=0.1,
        tpot_p50_s=0.1,
        views=views(
            average=2.5,
            category_al=cats,
            category_ci=ci,
            questions={q: (c, 2.5) for q, c in questions.items()},
        ),
    )


def test_the_category_table_shows_n_and_the_interval_where_there_is_one():
    single = row(1, {"a0": "a"}, {"a": 3.0})
    five = row(
        16,
        {f"a{i}": "a" for i in range(5)},
        {"a": 2.5},
        {"a": (2.125, 2.875)},
    )
    lines = category_table(SweepSummary(levels=[single, five]))
    assert lines[0] == (
        "| category (speed_bench view: Category_AL) | draft_model-k3 bs1 (n=1) "
        "| draft_model-k3 bs16 (n=5) |"
    )
    assert lines[2] == "| a | 3.00 | 2.50 [2.12, 2.88] |"


def test_uneven_categories_show_the_range_of_questions():
    uneven = row(1, {"a0": "a", "a1": "a", "a2": "a", "b0": "b"})
    assert uneven.questions_per_category == "n=1-3"
    assert uneven.model_copy(update={"views": {}}).questions_per_category == ""


def test_rounds_of_one_question_count_as_one_question():
    rounds = row(1, {"a0": "a", "a0@r1": "a", "a0@r2": "a", "b0": "b", "b0@r1": "b", "b0@r2": "b"})
    assert rounds.questions_per_category == "n=1, 3 rounds"
