"""A host that slows by 20 % halfway: the interleaved speedup holds, the sequential one does not.

Fault injection through the real runner, client and records: two synthetic servers (one per
config, ``speedbench.testing.synthetic``) stream at a fixed chunk gap, the SD one k = 3 steps
with deterministic acceptance, so the true speedup is the ratio of their chunk counts. Both
share one injected slowdown (chunk gaps x 1.25 from one CLOCK_MONOTONIC instant on), as two
engines on one drifting VM do. The sweep's own engine launches are replaced by these servers;
everything from the grid loop down (rounds, levels, records, metrics, the paired speedup) is
speedbench's.
"""

from __future__ import annotations

import contextlib
import itertools
import random
import time
from pathlib import Path

import pytest

from speedbench.config import EngineConfig, SpecConfig
from speedbench.engines.base import get_engine
from speedbench.engines.running import RunningEngine, free_port
from speedbench.run.hooks import SweepHooks
from speedbench.run.interleave import measure_interleaved
from speedbench.run.sweep import run_grid
from speedbench.testing.synthetic import SyntheticOptions, chunk_sizes, serve_in_subprocess
from speedbench.workload import LoadSettings, WorkItem

# A timing test: it runs alone (make test's second pass), not beside engines on two cores.
pytestmark = [pytest.mark.integration, pytest.mark.alone]

TOKENS = 16
GAP_S = 0.01
ROUNDS = 20
ITEMS = {"s": [WorkItem(f"p{i}", "qa", (), prompt_ids=(100 + i, 7, 8)) for i in range(2)]}
SD = SpecConfig(method="ngram", num_speculative_tokens=3)


def true_speedup() -> float:
    """Chunks the baseline streams over chunks the SD server streams, for the same prompts."""
    base = len(ITEMS["s"]) * TOKENS
    sd = sum(
        len(chunk_sizes(TOKENS, 3, 0.7, random.Random(it.prompt_ids[0])))  # type: ignore[index]
        for it in ITEMS["s"]
    )
    return base / sd


class SyntheticHost(SweepHooks):
    """Each config's engine is a synthetic server on its port; all slow at ``slow_from_s``."""

    def __init__(self, slow_from_s: float | None):
        self.slow_from_s = slow_from_s
        self.launches: list[str] = []

    def options(self, spec: SpecConfig) -> SyntheticOptions:
        return SyntheticOptions(
            k=spec.num_speculative_tokens, interval_s=GAP_S, slow_from_s=self.slow_from_s,
            slow_factor=1.25,
        )  # fmt: skip

    @contextlib.contextmanager
    def serve(self, engine: EngineConfig, spec: SpecConfig):
        self.launches.append(spec.label)
        with serve_in_subprocess(self.options(spec), engine.port):
            yield RunningEngine(engine, spec, get_engine("vllm"), Path("/dev/null"))

    def start_engine(self, engine, spec, log_path):
        stack = contextlib.ExitStack()
        running = stack.enter_context(self.serve(engine, spec))
        handle = type("Handle", (), {"running": running, "close": stack.close})()
        return handle

    def engine_version(self, handle):
        return "synthetic"


def sweep(tmp_path: Path, interleave: str, slow_after_s: float | None) -> float:
    """The SD level's speedup from a bs-1 grid of the baseline and k = 3."""
    engine = EngineConfig(model="m", launcher="local", port=free_port())
    settings = LoadSettings(
        max_tokens=TOKENS, show_progress=False, repeats=ROUNDS, interleave=interleave
    )
    slow_from = None if slow_after_s is None else time.monotonic() + slow_after_s
    summary = run_grid(
        engine, [SpecConfig(), SD], ITEMS, [1], tmp_path / interleave, settings=settings,
        hooks=SyntheticHost(slow_from),
    )  # fmt: skip
    row = next(r for r in summary.levels if r.is_speculative)
    assert row.speedup is not None
    assert row.speedup_interval is not None and row.speedup_interval.count == ROUNDS
    assert row.speedup_pairing == ("interleaved" if interleave != "off" else "sequential")
    return row.speedup


def test_an_interleaved_speedup_survives_a_host_that_slows_halfway(tmp_path):
    truth = true_speedup()
    # Each side's work at full speed: the baseline's rounds and the SD config's.
    wall_s = ROUNDS * len(ITEMS["s"]) * GAP_S * (TOKENS + TOKENS / truth)
    quiet = sweep(tmp_path / "quiet", "resident", None)
    assert quiet == pytest.approx(truth, rel=0.03)  # the servers keep their pace
    interleaved = sweep(tmp_path / "slowed", "resident", wall_s / 2)
    sequential = sweep(tmp_path / "slowed", "off", wall_s / 2)
    assert interleaved == pytest.approx(quiet, rel=0.02)
    assert interleaved == pytest.approx(truth, rel=0.02)
    # One after the other, the SD config runs on the slowed host and the baseline half on it
    # (seen: -10 %, where the interleaved one read -0.3 %).
    assert abs(sequential / quiet - 1) > 0.05


def test_relaunch_alternates_one_launch_per_block(tmp_path):
    engine = EngineConfig(model="m", launcher="local", port=free_port())
    host = SyntheticHost(None)
    specs = {"none": SpecConfig(), SD.label: SD}
    settings = LoadSettings(max_tokens=TOKENS, show_progress=False, repeats=3, split="s")
    levels = measure_interleaved(
        list(specs), ITEMS["s"], settings, None,
        {label: tmp_path / label for label in specs},
        lambda label: host.serve(engine, specs[label]),
    )  # fmt: skip
    assert sorted(host.launches) == sorted([*specs] * 3)
    assert all(not level.failed for level in levels.values())
    tput = {
        label: [f["output_throughput_tok_s"] for f in level.metrics.repeats.per_repeat]
        for label, level in levels.items()
    }
    ratios = [sd / base for sd, base in zip(tput[SD.label], tput["none"], strict=True)]
    assert ratios == pytest.approx([true_speedup()] * 3, rel=0.05)


SD2 = SpecConfig(method="ngram", num_speculative_tokens=2)


def true_speedup_at(k: int) -> float:
    """The synthetic servers' speedup at draft length ``k``."""
    base = len(ITEMS["s"]) * TOKENS
    sd = sum(
        len(chunk_sizes(TOKENS, k, 0.7, random.Random(it.prompt_ids[0])))  # type: ignore[index]
        for it in ITEMS["s"]
    )
    return base / sd


class FailingSecondLaunch(SyntheticHost):
    """The second SD config's engine fails to start the second time it is launched."""

    def start_engine(self, engine, spec, log_path):
        if spec.label == SD2.label and self.launches.count(SD2.label) == 1:
            from speedbench.engines.base import EngineError

            self.launches.append(f"{spec.label} (failed)")
            raise EngineError(f"{spec.label}: the server exited during start-up (injected)")
        return super().start_engine(engine, spec, log_path)


def slot_sweep(tmp_path: Path, monkeypatch, host: SyntheticHost, available_gib: float = 18.0):
    """Three configs on a host whose memory holds two engines: the SD ones share a slot."""
    from speedbench.run import interleave

    # Two engines of 7.65 GiB (3 GiB of weights, 2 GiB of KV each) and 1.5 GiB fit 18 GiB;
    # three of 6.65 GiB do not. One of 9.65 GiB (4 GiB of KV) fits 12 GiB, two do not.
    monkeypatch.setattr(interleave, "weights_gib", lambda model: 3.0 if model else 0.0)
    monkeypatch.setattr(interleave, "available_gib", lambda: available_gib)
    monkeypatch.delenv("VLLM_CPU_KVCACHE_SPACE", raising=False)  # make test sets its own
    engine = EngineConfig(
        model="m", launcher="local", port=free_port(), env={"VLLM_CPU_KVCACHE_SPACE": "4"}
    )
    settings = LoadSettings(max_tokens=TOKENS, show_progress=False, repeats=3,
                            interleave="resident")  # fmt: skip
    return run_grid(engine, [SpecConfig(), SD, SD2], ITEMS, [1, 2], tmp_path, settings=settings,
                    hooks=host)  # fmt: skip


def assert_every_level_paired_near_the_truth(summary) -> None:
    """All 6 levels measured; each SD speedup at bs 1 paired over 3 rounds, within 5 %."""
    rows = {(r.config, r.batch_size): r for r in summary.levels}
    assert len(rows) == 6 and not summary.failures
    for spec in (SD, SD2):
        row = rows[(spec.label, 1)]
        assert row.speedup_pairing == "interleaved"
        assert row.speedup_interval is not None and row.speedup_interval.count == 3
        assert row.speedup == pytest.approx(true_speedup_at(spec.num_speculative_tokens),
                                            rel=0.05)  # fmt: skip


def test_sd_configs_that_do_not_fit_together_take_turns_in_one_slot(tmp_path, monkeypatch):
    host = SyntheticHost(None)
    summary = slot_sweep(tmp_path, monkeypatch, host)
    # The baseline launched once; the slot: its first launch, then one swap a round (3 rounds
    # at each of 2 batch sizes), each round starting with the engine the last one left.
    assert host.launches.count("none") == 1
    sd_launches = [label for label in host.launches if label != "none"]
    assert len(sd_launches) == 1 + 3 * 2
    assert all(a != b for a, b in itertools.pairwise(sd_launches))
    assert_every_level_paired_near_the_truth(summary)


def test_where_no_two_engines_fit_every_config_takes_turns_in_the_slot(tmp_path, monkeypatch):
    host = SyntheticHost(None)
    summary = slot_sweep(tmp_path, monkeypatch, host, available_gib=12.0)
    # One engine up at a time: the first launch, then two swaps a round (3 rounds at each of
    # 2 batch sizes), each round starting with the engine the last one left.
    assert len(host.launches) == 1 + 3 * 2 * 2
    assert all(a != b for a, b in itertools.pairwise(host.launches))
    assert host.launches.count("none") >= 3
    assert_every_level_paired_near_the_truth(summary)


def test_a_slot_launch_that_fails_stops_that_config_and_keeps_the_others(tmp_path, monkeypatch):
    host = FailingSecondLaunch(None)
    summary = slot_sweep(tmp_path, monkeypatch, host)
    assert [f.config for f in summary.failures] == [SD2.label]
    assert "exited during start-up (injected)" in summary.failures[0].error
    measured = {(r.config, r.batch_size) for r in summary.levels}
    # The baseline and the first SD config are measured at both batch sizes, every round.
    assert {("none", 1), ("none", 2), (SD.label, 1), (SD.label, 2)} <= measured
    assert all(
        r.speedup_interval is not None and r.speedup_interval.count == 3
        for r in summary.levels
        if r.config == SD.label
    )
