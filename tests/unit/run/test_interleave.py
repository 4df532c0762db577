"""The interleaved grid's pure parts: round orders, paired speedups, drift, resident engines."""

from __future__ import annotations

import math

import pytest
from pydantic import ValidationError

from speedbench.config import EngineConfig, SpecConfig
from speedbench.engines.base import EngineError
from speedbench.metrics.paired import drift, paired_ratios, paired_speedup, round_throughputs
from speedbench.run import interleave
from speedbench.run.interleave import (
    EngineSlot,
    plan_residency,
    resident_engine,
    round_orders,
)
from speedbench.run.sweep import run_grid
from speedbench.sweep_config import LoadSection
from speedbench.sweep_summary import SummaryRow, with_speedup
from speedbench.workload import LoadSettings, WorkItem

LABELS = ["none", "draft_model-k3", "ngram-k3"]


def test_each_round_is_a_seeded_permutation_of_the_configs():
    orders = round_orders(LABELS, 3, seed=0)
    assert orders == [
        ["draft_model-k3", "none", "ngram-k3"],
        ["none", "ngram-k3", "draft_model-k3"],
        ["draft_model-k3", "ngram-k3", "none"],
    ]
    assert round_orders(LABELS, 3, seed=0) == orders  # the same seed, the same orders
    assert round_orders(LABELS, 3, seed=1) != orders
    assert all(sorted(o) == sorted(LABELS) for o in round_orders(LABELS, 50, seed=7))


def test_a_paired_speedup_is_the_geometric_mean_of_the_rounds_ratios_with_a_t_interval():
    sd, base = {0: 2.0, 1: 4.5, 2: 3.0}, {0: 1.0, 1: 3.0, 2: 2.0}
    assert paired_ratios(sd, base) == [2.0, 1.5, 1.5]
    got = paired_speedup(sd, base)
    assert got is not None and got.count == 3
    assert got.mean == pytest.approx(4.5 ** (1 / 3))
    # t(0.975, 2) = 4.3027 over the logs' standard error, exponentiated.
    logs = [math.log(2.0), math.log(1.5), math.log(1.5)]
    mean = sum(logs) / 3
    se = math.sqrt(sum((x - mean) ** 2 for x in logs) / 2 / 3)
    assert got.low == pytest.approx(math.exp(mean - 4.302653 * se), rel=1e-5)
    assert got.high == pytest.approx(math.exp(mean + 4.302653 * se), rel=1e-5)
    assert (got.low, got.high) == pytest.approx((1.0928188, 2.4941745), rel=1e-6)


def test_rounds_pair_by_repeat_index_and_one_round_has_no_interval():
    # The SD level lost its round 1: rounds 0 and 2 pair, not positions 0 and 1.
    sd = round_throughputs([{"repeat": 0.0, "output_throughput_tok_s": 3.0},
                            {"repeat": 2.0, "output_throughput_tok_s": 6.0}])  # fmt: skip
    assert sd == {0: 3.0, 2: 6.0}
    assert paired_ratios(sd, {0: 2.0, 1: 9.0, 2: 4.0}) == [1.5, 1.5]
    assert paired_speedup({0: 3.0}, {0: 2.0}) is None
    assert drift({0: 10.0, 1: 12.0, 2: 11.0}) == pytest.approx(2 / 11)
    assert drift({0: 10.0}) is None


def _row(label: str, rounds: dict[int, float], interleave: str = "resident") -> SummaryRow:
    total = sum(rounds.values()) / len(rounds)
    return SummaryRow(
        config=label, split="s", batch_size=1, output_throughput_tok_s=total,
        per_user_tok_s=total, error_rate=0.0, ttft_p50_s=0.1, tpot_p50_s=0.1,
        interleave=interleave, round_throughput_tok_s=rounds, drift=drift(rounds),
    )  # fmt: skip


def test_the_summary_names_how_the_rounds_were_paired():
    base = _row("none", {0: 10.0, 1: 8.0})
    sd = with_speedup(_row("ngram-k3", {0: 12.0, 1: 9.6}), [base])
    assert sd.speedup_rounds == pytest.approx([1.2, 1.2])
    assert sd.speedup_interval is not None
    assert (sd.speedup_interval.low, sd.speedup_interval.high) == pytest.approx((1.2, 1.2))
    assert sd.speedup_pairing == "interleaved"
    assert sd.baseline_drift == pytest.approx(2 / 9)
    apart = with_speedup(_row("ngram-k3", {0: 12.0, 1: 9.6}, "off"), [base])
    assert apart.speedup_pairing == "sequential"


def test_resident_engines_get_their_own_port_and_a_share_of_the_cpu_kv_budget(monkeypatch):
    monkeypatch.delenv("VLLM_CPU_KVCACHE_SPACE", raising=False)
    engine = EngineConfig(model="m", port=8000, env={"VLLM_CPU_KVCACHE_SPACE": "4"})
    third = resident_engine(engine, 2, 3)
    assert third.port == 8002 and third.env["VLLM_CPU_KVCACHE_SPACE"] == "1"
    assert resident_engine(engine, 1, 2).env["VLLM_CPU_KVCACHE_SPACE"] == "2"
    monkeypatch.setenv("VLLM_CPU_KVCACHE_SPACE", "3")  # the host sets it: kept as it is
    assert resident_engine(engine, 1, 3).env["VLLM_CPU_KVCACHE_SPACE"] == "4"


def _weights(tmp_path, target_gib: float, draft_gib: float) -> tuple[str, str]:
    target, draft = tmp_path / "target", tmp_path / "draft"
    for folder, size in ((target, target_gib), (draft, draft_gib)):
        folder.mkdir()
        with (folder / "model.safetensors").open("wb") as f:
            f.truncate(int(size * 1024**3))  # sparse: the size is what counts
    return str(target), str(draft)


def test_two_engines_that_do_not_fit_together_take_turns_and_one_too_big_is_refused(
    tmp_path, monkeypatch
):
    # make test sets the KV size for its own engines; a host that sets it keeps it (no division).
    monkeypatch.delenv("VLLM_CPU_KVCACHE_SPACE", raising=False)
    target, draft = _weights(tmp_path, 3, 1)
    engine = EngineConfig(model=target, env={"VLLM_CPU_KVCACHE_SPACE": "2"})
    specs = [SpecConfig(), SpecConfig(method="draft_model", num_speculative_tokens=3,
                                      draft_model=draft)]  # fmt: skip
    # Together, 1 GiB of KV each: 1.8 x 3 + 1.25 = 6.65 and 1.8 x 4 + 1.25 = 8.45 GiB, and
    # 1.5 GiB for the sweep.
    monkeypatch.setattr(interleave, "available_gib", lambda: 16.6)
    plan = plan_residency(engine, specs)
    assert plan.shared == () and plan.resident == ["none", "draft_model-k3"]
    # One at a time, each with the whole 2 GiB: the draft's engine 9.45 GiB is the largest.
    monkeypatch.setattr(interleave, "available_gib", lambda: 16.5)
    plan = plan_residency(engine, specs)
    assert plan.resident == [] and plan.shared == ("none", "draft_model-k3")
    assert {lb: e.env["VLLM_CPU_KVCACHE_SPACE"] for lb, e in plan.engines.items()} == {
        "none": "2", "draft_model-k3": "2"
    }  # fmt: skip
    assert plan.estimate_gib == pytest.approx(1.8 * 4 + 2.25, abs=0.01)
    assert "do not fit this host's memory together" in plan.describe()
    monkeypatch.setattr(interleave, "available_gib", lambda: 10.9)
    alone = r"about 9\.4 GiB for the largest engine alone .* has 10\.9 GiB"
    with pytest.raises(EngineError, match=alone):
        plan_residency(engine, specs)


def test_the_main_jobs_three_bf16_engines_keep_the_baseline_up_and_share_a_slot(
    tmp_path, monkeypatch
):
    # The main job's none, draft and ngram configs in bf16 (3.2 and 1.1 GiB of weights) were
    # measured at 22.2 GiB resident together on a 23.6 GiB host, which then thrashed.
    monkeypatch.delenv("VLLM_CPU_KVCACHE_SPACE", raising=False)
    target, draft = _weights(tmp_path, 3.2, 1.1)
    engine = EngineConfig(model=target, port=8000, env={"VLLM_CPU_KVCACHE_SPACE": "4"})
    specs = [SpecConfig(),
             SpecConfig(method="draft_model", num_speculative_tokens=3, draft_model=draft),
             SpecConfig(method="ngram", num_speculative_tokens=3)]  # fmt: skip
    monkeypatch.setattr(interleave, "available_gib", lambda: 23.5)
    plan = plan_residency(engine, specs)
    assert plan.resident == ["none"] and plan.shared == ("draft_model-k3", "ngram-k3")
    # Two up at once, 2 GiB of KV each: the baseline 8.0 + the draft's engine 10.0 GiB.
    assert {lb: e.env["VLLM_CPU_KVCACHE_SPACE"] for lb, e in plan.engines.items()} == dict.fromkeys(
        ("none", "draft_model-k3", "ngram-k3"), "2"
    )
    assert [e.port for e in plan.engines.values()] == [8000, 8001, 8002]
    assert plan.estimate_gib == pytest.approx(1.8 * 3.2 + 2.25 + 1.8 * 4.3 + 2.25, abs=0.01)
    assert "taking turns in one slot" in plan.describe()
    # With room for all three (1 GiB of KV each), all stay up.
    monkeypatch.setattr(interleave, "available_gib", lambda: 24.6)
    assert plan_residency(engine, specs).shared == ()
    # Not even the baseline beside one SD config (float32 on an AVX2 host, say): all three
    # take turns in the slot, the baseline first (the sweep's order).
    monkeypatch.setattr(interleave, "available_gib", lambda: 17.0)
    plan = plan_residency(engine, specs)
    assert plan.shared == ("none", "draft_model-k3", "ngram-k3") and plan.resident == []
    orders = round_orders(plan.engines, 3, seed=0, shared=plan.shared, loaded=None)
    assert all(sorted(o) == sorted(plan.engines) for o in orders)
    assert [o[0] for o in orders[1:]] == [o[-1] for o in orders[:-1]]  # one swap per block after


def test_shared_configs_start_with_the_one_in_the_slot_and_the_baseline_sits_between():
    shared = ("draft_model-k3", "ngram-k3")
    orders = round_orders(LABELS, 4, seed=0, shared=shared, loaded="ngram-k3")
    # One swap a round, right after the baseline; each round starts with what the last left,
    # so the two SD configs take turns at the round's ends.
    assert orders == [
        ["ngram-k3", "none", "draft_model-k3"],
        ["draft_model-k3", "none", "ngram-k3"],
        ["ngram-k3", "none", "draft_model-k3"],
        ["draft_model-k3", "none", "ngram-k3"],
    ]
    assert round_orders(LABELS, 1, seed=0, shared=shared)[0][1] == "none"  # nothing loaded yet


def test_a_slot_swaps_only_for_another_config_and_keeps_a_failed_launch(tmp_path):
    started, closed = [], []

    class Handle:
        def __init__(self, label):
            self.running, self.label = label, label

        def close(self):
            closed.append(self.label)

    def start(label):
        if label == "bad":
            raise EngineError("bad: exited")
        started.append(label)
        return Handle(label)

    slot = EngineSlot(start)
    assert slot.get("a") == "a" and slot.get("a") == "a" and slot.swaps == 0
    assert slot.get("b") == "b" and slot.swaps == 1 and closed == ["a"]
    with pytest.raises(EngineError):
        slot.get("bad")
    assert slot.failures == {"bad": "bad: exited"} and slot.running is None
    assert closed == ["a", "b"] and started == ["a", "b"]


def test_interleaving_needs_rounds_and_closed_loop_levels_and_reads_yaml_off():
    with pytest.raises(ValidationError, match="set repeats >= 2"):
        LoadSection(interleave="resident")
    with pytest.raises(ValidationError, match="pairs closed-loop levels only"):
        LoadSection(interleave="resident", repeats=3, request_rates=[1.0])
    assert LoadSection(interleave=False).interleave == "off"  # YAML's bare `off`
    with pytest.raises(ValidationError, match="interleave"):
        LoadSection(interleave="sometimes", repeats=2)


def test_an_external_server_cannot_be_interleaved(tmp_path):
    engine = EngineConfig(model="m", launcher="external")
    items = {"s": [WorkItem("p0", "qa", (), prompt_ids=(1, 2))]}
    settings = LoadSettings(show_progress=False, repeats=2, interleave="resident")
    ngram = SpecConfig(method="ngram", num_speculative_tokens=3)
    with pytest.raises(EngineError, match="an external server is one config's"):
        run_grid(engine, [SpecConfig(), ngram], items, [1], tmp_path, settings=settings)


def test_throughput_json_carries_the_paired_interval_and_both_drifts():
    from speedbench.pipeline.stages import _throughput_entry

    base = _row("none", {0: 10.0, 1: 8.0})
    sd = with_speedup(_row("ngram-k3", {0: 12.0, 1: 9.6}), [base])
    entry = _throughput_entry(sd)
    assert entry["speedup_low"] == entry["speedup_high"] == entry["speedup_paired"] == 1.2
    assert entry["speedup_rounds"] == 2 and entry["speedup_pairing"] == "interleaved"
    assert entry["baseline_drift"] == round(2 / 9, 6) and entry["drift"] == round(2.4 / 10.8, 6)
    assert "speedup_low" not in _throughput_entry(base)


def test_float32_engines_are_estimated_at_the_factor_measured_for_them(tmp_path, monkeypatch):
    # The main job's draft engine in float32 (6.62 + 2.24 GiB of weights, 4 GiB of KV) on a
    # host with 21.6 GiB available: 1.6 x 8.86 + 4.25 = 18.4 (+1.5 for the sweep) fits; at
    # bf16's 1.8 it is 20.2 (+1.5), refused.
    monkeypatch.delenv("VLLM_CPU_KVCACHE_SPACE", raising=False)
    target, draft = _weights(tmp_path, 6.62, 2.24)
    specs = [SpecConfig(), SpecConfig(method="draft_model", num_speculative_tokens=3,
                                      draft_model=draft)]  # fmt: skip
    monkeypatch.setattr(interleave, "available_gib", lambda: 21.6)
    engine = EngineConfig(model=target, env={"VLLM_CPU_KVCACHE_SPACE": "4"}, dtype="float32")
    plan = plan_residency(engine, specs)
    assert plan.shared == ("none", "draft_model-k3")
    assert plan.estimate_gib == pytest.approx(1.6 * 8.86 + 4.25, abs=0.01)
    with pytest.raises(EngineError, match=r"1\.8 x weights"):
        plan_residency(engine.model_copy(update={"dtype": "bfloat16"}), specs)
