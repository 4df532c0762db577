"""Repeats, warm-up, goodput in a level's metrics, and the load shape's form: exact values."""

from __future__ import annotations

import math

import pytest

from speedbench.client.loadgen import LoadResult
from speedbench.config import ConfigError, load_config
from speedbench.figures import ClientFigures, SpecCounters
from speedbench.metrics.goodput import LatencyObjectives
from speedbench.metrics.latency import summarize_load
from speedbench.metrics.lossless import lossless_check
from speedbench.metrics.repeats import t_interval
from speedbench.metrics.summary import summarize_level
from speedbench.records import RequestRecord, read_parquet, write_parquet
from speedbench.results import finite
from speedbench.run.level import merge_runs, repeat_order, warmup_items
from speedbench.sweep_config import SweepConfig
from speedbench.workload import WorkItem


def rec(
    pid: str,
    start: float,
    tokens: int = 4,
    gap: float = 0.5,
    repeat: int = 0,
    warmup: bool = False,
    **kw,
) -> RequestRecord:
    """A request sent at ``start`` whose ``tokens`` chunks arrive ``gap`` apart from start+gap."""
    times = [start + gap * (i + 1) for i in range(tokens)]
    return RequestRecord(
        request_id=f"{pid}/t0/{'warmup' if warmup else f'r{repeat}'}",
        prompt_id=pid,
        category="qa",
        start_s=start,
        end_s=times[-1],
        chunk_times_s=times,
        chunk_tokens=[1] * tokens,
        output_token_ids=list(range(tokens)),
        finish_reason="length",
        repeat=repeat,
        warmup=warmup,
        **kw,
    )


def test_t_interval_exact_values():
    spread = t_interval([1.0, 2.0, 3.0])
    # mean 2, sample sd 1, t(0.975, 2 df) = 4.302652729911275.
    half = 4.302652729911275 / math.sqrt(3)
    assert (spread.mean, spread.count) == (2.0, 3)
    assert spread.low == pytest.approx(2.0 - half) and spread.high == pytest.approx(2.0 + half)
    assert t_interval([5.0, 5.0]).model_dump() == {"mean": 5.0, "low": 5.0, "high": 5.0, "count": 2}
    single = t_interval([7.0, float("nan")])
    assert single.mean == 7.0 and math.isnan(single.low) and single.count == 1
    with pytest.raises(ValueError, match="confidence must be in"):
        t_interval([1.0], confidence=1.0)


def test_a_levels_time_is_each_repeats_own_time_summed():
    # Two repeats of 2 s each, 100 s apart: 8 tokens over 4 s, not over 104 s.
    records = [rec("a", 0.0), rec("a", 102.0, repeat=1)]
    load = summarize_load(records)
    assert load.duration_s == pytest.approx(4.0)
    assert load.output_throughput_tok_s == pytest.approx(2.0)
    assert load.request_throughput_rps == pytest.approx(0.5)


def test_warmup_requests_are_absent_from_every_figure_and_repeats_get_intervals():
    measured = [
        rec("a", 0.0, repeat=0),  # 4 tokens in 2 s
        rec("b", 0.0, tokens=2, repeat=0),  # ends at 1 s
        rec("a", 10.0, gap=1.0, repeat=1),  # 4 tokens in 4 s
        rec("b", 10.0, tokens=2, gap=1.0, repeat=1),
    ]
    warm = [rec("a", -50.0, tokens=9, gap=5.0, warmup=True)]  # slow and long: would show
    objectives = LatencyObjectives(e2e_s=2.0)
    with_warm = summarize_level([*warm, *measured], None, 0, objectives=objectives)
    without = summarize_level(measured, None, 0, objectives=objectives)
    assert finite(with_warm.model_dump()) == finite(
        without.model_dump()
    )  # NaN (no arrival rate here) compares as None
    load = with_warm.overall.load
    assert (load.num_requests, load.output_tokens) == (4, 12)
    assert load.duration_s == pytest.approx(2.0 + 4.0)
    # e2e <= 2 s: both requests of repeat 0 (2 s, 1 s) and b of repeat 1 (2 s); a took 4 s.
    good = with_warm.goodput
    assert good is not None and (good.met, good.total) == (3, 4)
    assert good.rate_rps == pytest.approx(3 / 6.0)
    repeats = with_warm.repeats
    assert repeats is not None and repeats.count == 2
    assert [f["output_throughput_tok_s"] for f in repeats.per_repeat] == [3.0, 1.5]
    assert [f["goodput_rps"] for f in repeats.per_repeat] == [1.0, 0.25]
    spread = repeats.spread["output_throughput_tok_s"]
    half = (
        12.706204736174698 * math.sqrt(((3.0 - 2.25) ** 2 + (1.5 - 2.25) ** 2) / 1) / math.sqrt(2)
    )
    assert spread.mean == 2.25 and spread.high == pytest.approx(2.25 + half)
    # One repeat: no spread to report.
    one = summarize_level(measured[:2], None, 0)
    assert one.repeats is None and one.goodput is None


def test_the_speed_bench_view_leaves_warmup_out_too():
    measured = [rec("a", 0.0, tokens=4)]
    merged_chunks = rec("a", -9.0, tokens=2, warmup=True)
    merged_chunks.chunk_tokens = [1, 3]  # a step of 3 would change the AL
    merged_chunks.output_token_ids = [0, 1, 2, 3]
    plain = summarize_level(measured, None, 3).overall.views["speed_bench"]
    warm = summarize_level([merged_chunks, *measured], None, 3).overall.views["speed_bench"]
    assert finite(warm.model_dump()) == finite(plain.model_dump()) and plain.num_tokens == 4


def test_repeat_order_keeps_the_first_and_permutes_the_rest_reproducibly():
    items = [WorkItem(f"p{i}") for i in range(6)]
    assert repeat_order(items, 0, 0) == items
    second = repeat_order(items, 0, 1)
    assert sorted(i.prompt_id for i in second) == [i.prompt_id for i in items]
    assert second != items and second == repeat_order(items, 0, 1)
    assert repeat_order(items, 0, 2) != second and repeat_order(items, 1, 1) != second


def test_warmup_items_count_requests_and_cycle_when_there_are_few():
    two_turns = WorkItem("m", user_turns=("a", "b"))
    one = WorkItem("s", prompt_ids=(1,))
    assert [i.prompt_id for i in warmup_items([one, two_turns], 5)] == ["s", "m", "s", "m"]
    assert warmup_items([one], 0) == [] and warmup_items([], 3) == []


def test_merge_runs_pools_records_and_sums_counters_and_cache_traffic():
    first = LoadResult(
        [rec("a", 0.0)],
        SpecCounters(
            num_drafts=2, num_draft_tokens=6, num_accepted_tokens=3, accepted_per_pos=(2, 1, 0)
        ),
        2.0,
        {"client": ClientFigures(workers=1), "prefix_cache": {"query_tokens": 10, "hit_tokens": 0}},
    )
    second = LoadResult(
        [rec("a", 5.0, repeat=1)],
        SpecCounters(
            num_drafts=1, num_draft_tokens=3, num_accepted_tokens=3, accepted_per_pos=(1, 1, 1)
        ),
        3.0,
        {
            "client": ClientFigures(workers=1, warning="late"),
            "prefix_cache": {"query_tokens": 10, "hit_tokens": 4},
        },
    )
    merged = merge_runs([first, second])
    assert merged.counters == SpecCounters(
        num_drafts=3, num_draft_tokens=9, num_accepted_tokens=6, accepted_per_pos=(3, 2, 1)
    )
    assert merged.duration_s == 5.0 and len(merged.records) == 2
    assert merged.extras["prefix_cache"] == {"query_tokens": 20, "hit_tokens": 4}
    assert merged.extras["client"].warning == "late"
    assert [c.warning for c in merged.extras["client"].per_repeat] == [None, "late"]
    assert merge_runs([first]) is first


def test_lossless_check_ignores_warmup_and_compares_every_repeat():
    base = [rec("a", 0.0), rec("a", 9.0, warmup=True)]
    base[1].output_token_ids = [9, 9, 9, 9]
    sd = [rec("a", 0.0), rec("a", 5.0, repeat=1), rec("a", 9.0, warmup=True)]
    sd[1].output_token_ids = [0, 1, 7, 3]
    check = lossless_check(sd, base)
    assert (check.compared, check.matched) == (2, 1)
    assert check.mismatches[0].first_divergence == 2


def test_warmup_flag_survives_parquet_and_old_files_read_as_measured(tmp_path):
    records = [rec("a", 0.0, warmup=True), rec("a", 1.0)]
    path = write_parquet(records, tmp_path / "r.parquet")
    assert [r.warmup for r in read_parquet(path)] == [True, False]
    import pandas as pd

    old = pd.read_parquet(path).drop(columns=["warmup"])
    old.to_parquet(path, index=False)
    assert [r.warmup for r in read_parquet(path)] == [False, False]


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"batch_sizes": [1], "rate_sweep": 3}, "it needs the baseline and at least two"),
        (
            {
                "batch_sizes": [1, 4],
                "rate_sweep": 3,
                "methods": ["ngram"],
                "draft_lengths": [3],
                "baseline": False,
            },
            "it needs the baseline",
        ),
        ({"max_concurrency": 4}, "max_concurrency apply to open-loop levels only"),
        ({"request_rates": [1.0], "burstiness": 0.5}, "burstiness applies to gamma arrivals only"),
        ({"request_rates": [0.0]}, "request_rates must all be finite and > 0 requests/s"),
        ({"request_rates": [1.0, 1.0]}, "request_rates has duplicates"),
        ({"request_rates": [1.0], "client_workers": 2}, "client_workers must be 0 or 1, got 2"),
        ({"batch_sizes": [], "request_rates": []}, "no load level"),
        ({"slo_ttft_s": 0}, "slo_ttft_s: Input should be greater than 0"),
        ({"repeats": 0}, "repeats: Input should be greater than or equal to 1"),
    ],
)
def test_bad_load_shapes_get_one_line_errors(fields, message):
    with pytest.raises(ConfigError, match=message) as info:
        load_config(SweepConfig, fields)
    assert "\n" not in str(info.value)


def test_a_rate_only_sweep_with_a_gamma_cap_and_slos_is_a_valid_form():
    config = load_config(
        SweepConfig,
        {
            "batch_sizes": [],
            "request_rates": [0.5, 1.0],
            "arrival": "gamma",
            "burstiness": 0.5,
            "max_concurrency": 4,
            "warmup_requests": 2,
            "repeats": 3,
            "slo_ttft_s": 2.0,
            "slo_e2e_s": 30.0,
        },
    )
    assert config.load.objectives == {"ttft_s": 2.0, "e2e_s": 30.0}


def test_the_throughput_table_compares_goodput_at_equal_slos_when_the_sweep_set_them():
    from speedbench.report.text import throughput_table
    from speedbench.sweep_summary import SummaryRow, SweepSummary

    figures = {"split": "q", "batch_size": 1, "per_user_tok_s": 1.0, "error_rate": 0.0}
    figures |= {"output_throughput_tok_s": 2.0, "ttft_p50_s": 0.1, "tpot_p50_s": 0.3}
    plain = SweepSummary(levels=[SummaryRow(config="none", **figures)])
    assert throughput_table(plain)[0].endswith("| errors |")
    slo = SummaryRow(config="none", goodput_rps=0.5, goodput_fraction=0.75, **figures)
    lines = throughput_table(SweepSummary(levels=[slo]))
    assert lines[0].endswith("| errors | goodput req/s (met) |") and lines[1] == "|---" * 8 + "|"
    assert lines[2] == "| none | q | 1 | 2.00 | 1.00 | - | 0% | 0.500 (75%) |"


def test_a_reset_that_fails_because_the_engine_died_names_its_exit_code(tmp_path):
    from speedbench.config import EngineConfig, SpecConfig
    from speedbench.engines import get_engine
    from speedbench.engines.base import EngineError
    from speedbench.engines.local import free_port
    from speedbench.engines.running import RunningEngine
    from speedbench.run.level import reset_cache
    from speedbench.workload import LoadSettings

    log = tmp_path / "engine.log"
    log.write_text("RuntimeError: out of memory\n")
    engine = EngineConfig(model="m", port=free_port())  # nothing listens: the engine is gone
    running = RunningEngine(engine, SpecConfig(), get_engine("vllm"), log, poll=lambda: -9)
    with pytest.raises(EngineError, match="engine exited with code -9 before measuring q bs4"):
        reset_cache(running, LoadSettings(split="q", batch_size=4))
    alive = RunningEngine(engine, SpecConfig(), get_engine("vllm"), log, poll=lambda: None)
    with pytest.raises(EngineError, match=r"prefix-cache reset at .* failed"):
        reset_cache(alive, LoadSettings(split="q", batch_size=4))


def test_the_arrival_rate_is_the_due_times_own_per_repeat():
    from speedbench.metrics.latency import arrival_rate_rps

    due = [(0.0, 0), (2.0, 0), (4.0, 0), (10.0, 1), (11.0, 1)]
    records = [rec(f"p{i}", t + 0.5, repeat=rep, scheduled_s=t) for i, (t, rep) in enumerate(due)]
    # Repeat 0: 2 gaps over 4 s; repeat 1: 1 gap over 1 s; the 6 s between them is no gap.
    assert arrival_rate_rps(records) == pytest.approx(3 / 5)
    assert summarize_load(records).arrival_rate_rps == pytest.approx(0.6)
    assert math.isnan(arrival_rate_rps([rec("a", 0.0), rec("b", 1.0)]))  # closed loop


def test_a_form_that_sends_every_field_with_its_default_is_valid():
    # The Prefect form and a dumped config give every field, the open-loop ones included.
    full = SweepConfig().model_dump()
    assert load_config(SweepConfig, full) == SweepConfig()
    assert load_config(SweepConfig, SweepConfig().flat()) == SweepConfig()
    closed_loop_with_arrival = {**full, "load": {**full["load"], "arrival": "constant"}}
    with pytest.raises(ConfigError, match="arrival apply to open-loop levels only"):
        load_config(SweepConfig, closed_loop_with_arrival)
