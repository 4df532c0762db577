"""The cross-engine comparison's tables, from hand-made summaries and records."""

from __future__ import annotations

from tests.summaries import views

from speedbench.records import RequestRecord
from speedbench.report.cross_engine import agreement_table, category_table, overall_table, render
from speedbench.sweep_summary import SummaryRow, SweepSummary


def row(config, tok_s, **acceptance):
    speculative = config != "none"
    return SummaryRow(
        config=config,
        split="qualitative",
        batch_size=1,
        method="draft_model" if speculative else "none",
        k=3 if speculative else 0,
        output_throughput_tok_s=tok_s,
        per_user_tok_s=tok_s,
        error_rate=0.0,
        ttft_p50_s=0.1,
        tpot_p50_s=1 / tok_s,
        **acceptance,
    )


SUMMARIES = {
    "vllm": SweepSummary(
        levels=[
            row("none", 3.0),
            row(
                "draft_model-k3",
                2.7,
                drafting_shape="chain of 3",
                speedup=0.9,
                views=views(average=2.5, category_al={"coding": 3.0, "math": 2.0}),
            ),
        ]
    ),
    "llamacpp": SweepSummary(
        levels=[
            row(
                "draft_model-k3",
                12.0,
                speedup=0.6,
                views=views(average=2.25, category_al={"coding": 2.5}),
            ),
            row("none", 20.0),
        ]
    ),
}


def record(prompt_id, ids):
    r = RequestRecord(request_id=prompt_id, prompt_id=prompt_id, batch_size=1)
    r.output_token_ids = list(ids)
    r.finish_reason = "length"
    return r


def test_every_level_of_every_engine_with_its_views_and_speedup():
    lines = overall_table(SUMMARIES)
    assert lines[2] == "| vllm | none | - | bs1 | - | - | - | - | 3.0 | - | - |"
    assert lines[3] == (
        "| vllm | draft_model-k3 | chain of 3 | bs1 | 2.50 | - | - | - | 2.7 | 0.90 | - |"
    )
    # Baseline first within an engine, whatever order the sweep wrote.
    assert lines[4].startswith("| llamacpp | none |")
    assert lines[5].startswith("| llamacpp | draft_model-k3 |")


def test_category_table_has_a_column_per_engine_and_a_gap_where_one_has_no_prompt():
    lines = category_table(SUMMARIES)
    assert lines[0].endswith("| vllm draft_model-k3 bs1 | llamacpp draft_model-k3 bs1 |")
    assert lines[2:] == ["| coding | 3.00 | 2.50 |", "| math | 2.00 | - |"]


def test_agreement_names_the_first_divergent_token():
    baselines = {
        "vllm": [record("a", [1, 2, 3]), record("b", [4, 5, 6])],
        "llamacpp": [record("a", [1, 2, 3]), record("b", [4, 9, 6])],
    }
    assert agreement_table(baselines)[2] == "| llamacpp | 1/2 | 1 |"
    text = render(SUMMARIES, baselines, "t", ["a note"])
    assert text.startswith("# t\n\na note\n")
    assert "## Do the engines generate the same text?" in text
