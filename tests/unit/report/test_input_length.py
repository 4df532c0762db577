"""AL and speedup by input length: the bucket table and its plot (report.input_length)."""

from speedbench.provenance import SweepContext
from speedbench.report.input_length import bucket_of, input_length_table, nominal_tokens
from speedbench.report.plots import write_plots
from speedbench.sweep_summary import SweepSummary

COMMON = {"error_rate": 0.0, "ttft_p50_s": 0.1, "tpot_p50_s": 0.3, "per_user_tok_s": 1.0}


def level(config, split, tok_s, al=None, speedup=None, bs=1, **extra):
    row = COMMON | {"config": config, "split": split, "batch_size": bs}
    row |= {"output_throughput_tok_s": tok_s, "speedup": speedup, **extra}
    if al is not None:
        row["views"] = {"speed_bench": {"al_request_mean": al}}
    return row


def summary(levels, context=None):
    data = {"levels": levels}
    if context is not None:
        data["provenance"] = {"context": context.model_dump()}
    return SweepSummary.model_validate(data)


def test_buckets_are_read_from_speed_bench_split_names():
    assert bucket_of("throughput_32k") == ("32k", False)
    assert bucket_of("throughput_8k_random") == ("8k", True)
    assert bucket_of("qualitative") is None
    assert bucket_of("throughput_1k_shuffled") is None
    assert nominal_tokens("16k") == 16384


LEVELS = [
    level("none", "throughput_1k", 8.0),
    level("none", "throughput_8k", 5.0),
    level("ngram-k3", "throughput_1k", 10.0, al=2.13, speedup=1.25),
    level("ngram-k3", "throughput_8k", 5.5, al=1.80, speedup=1.10),
    level("ngram-k3", "throughput_1k_random", 7.0, al=1.02, speedup=0.91),
    # Another batch size stays out of the curve about input length.
    level("ngram-k3", "throughput_1k", 20.0, al=2.0, speedup=1.0, bs=4),
]


def test_a_row_per_bucket_in_length_order_with_its_random_control_and_the_context_flag():
    context = SweepContext(
        max_model_len=9216, need_by_split={"throughput_8k": 8256}, draft_trained=4096
    )
    lines = input_length_table(summary(LEVELS, context))
    assert lines[0] == "**ngram-k3** (bs 1):"
    rows = [line for line in lines if line.startswith("| 1k") or line.startswith("| 8k")]
    assert rows == [
        "| 1k | 1,024 | 2.13 | 1.02 | 1.25 | 0.91 | no |",
        "| 8k | 8,192 | 1.80 | - | 1.10 | - | yes |",
    ]
    assert not any(line.startswith("**none**") for line in lines)


def test_the_paired_interval_is_shown_where_the_level_had_rounds():
    interval = {"mean": 1.12, "low": 1.08, "high": 1.16, "count": 2}
    levels = [*LEVELS[:3], level("ngram-k3", "throughput_8k", 5.5, al=1.8, speedup=1.12,
                                 speedup_interval=interval)]  # fmt: skip
    rows = [line for line in input_length_table(summary(levels)) if line.startswith("| 8k")]
    assert rows == ["| 8k | 8,192 | 1.80 | - | 1.12 [1.08, 1.16] | - | no |"]


def test_one_bucket_gets_no_table_and_no_plot(tmp_path):
    one = summary(LEVELS[:1] + LEVELS[2:3])
    assert input_length_table(one) == []
    assert "input_length.png" not in [p.name for p in write_plots(one, tmp_path)]


def test_two_buckets_get_the_plot(tmp_path):
    paths = {p.name: p for p in write_plots(summary(LEVELS), tmp_path)}
    assert paths["input_length.png"].read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
