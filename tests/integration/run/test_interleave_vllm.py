"""The interleaved grid on real vLLM-CPU servers: a resident baseline and SD engines in a slot.

What the synthetic-server tests cannot show: that real engines survive being swapped in and
out of the slot between rounds, that an idle vLLM-CPU server beside the one measured costs
next to no CPU (``host.sibling_cpu_s``, measured during every block), and that the rounds'
greedy answers still match the baseline's token for token. The small random-weight Qwen2
target of the integration tests, float32; the draft is an exact copy (every draft accepted).

Four vLLM launches (the baseline, then the slot's first engine and a swap a round): make
test-e2e, beside the other whole-engine jobs, not in make test's budget.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from tests.integration.conftest import TINY_PROMPTS

from speedbench.config import SpecConfig
from speedbench.engines.local import free_port
from speedbench.engines.vllm import cpu_vllm_engine
from speedbench.run import sweep as sweep_module
from speedbench.run.hooks import SweepHooks
from speedbench.run.interleave import Residency, resident_engine
from speedbench.run.sweep import run_grid
from speedbench.tokenize import PromptTokenizer
from speedbench.workload import LoadSettings, WorkItem

pytestmark = [pytest.mark.integration, pytest.mark.e2e]

ROUNDS = 2


class CountingHooks(SweepHooks):
    """The real launches, counted."""

    def __init__(self) -> None:
        self.launches: list[str] = []

    def start_engine(self, engine, spec, log_path):
        self.launches.append(spec.label)
        return super().start_engine(engine, spec, log_path)


@pytest.fixture(scope="module")
def slotted(tiny_pair, tmp_path_factory):
    target, draft = tiny_pair
    specs = [
        SpecConfig(),
        SpecConfig(method="ngram", num_speculative_tokens=3),
        SpecConfig(method="draft_model", num_speculative_tokens=3, draft_model=str(draft)),
    ]
    engine = cpu_vllm_engine(str(target), port=free_port())

    # The tiny models fit together on any host; the plan a 24 GiB host makes for the main
    # job's bf16 engines is forced: the baseline up, the two SD configs in one slot.
    def slot_plan(engine, specs):
        engines = {s.label: resident_engine(engine, i, 2) for i, s in enumerate(specs)}
        return Residency(engines, tuple(s.label for s in specs if s.is_speculative))

    monkeypatch = pytest.MonkeyPatch()
    monkeypatch.setattr(sweep_module, "plan_residency", slot_plan)
    tok = PromptTokenizer.from_pretrained(str(target))
    items = {"s": [WorkItem(f"p{i}", "mixed", (p,)) for i, p in enumerate(TINY_PROMPTS[:2])]}
    settings = LoadSettings(
        max_tokens=16, show_progress=False, repeats=ROUNDS, interleave="resident"
    )
    out = tmp_path_factory.mktemp("interleave-vllm")
    hooks = CountingHooks()
    try:
        summary = run_grid(engine, specs, items, [1], out, settings=settings, tokenizer=tok,
                           hooks=hooks)  # fmt: skip
    finally:
        monkeypatch.undo()
    return summary, hooks, out


def test_the_baseline_launches_once_and_the_slot_swaps_once_a_round(slotted):
    summary, hooks, _ = slotted
    assert not summary.failures
    assert hooks.launches.count("none") == 1
    sd = [label for label in hooks.launches if label != "none"]
    assert len(sd) == 1 + ROUNDS  # the first launch, then one swap in each round


def test_every_sd_level_pairs_its_rounds_and_matches_the_baseline(slotted):
    summary, _, _ = slotted
    rows = [r for r in summary.levels if r.is_speculative]
    assert sorted(r.config for r in rows) == ["draft_model-k3", "ngram-k3"]
    for row in rows:
        assert row.speedup_pairing == "interleaved"
        assert row.speedup_interval is not None and row.speedup_interval.count == ROUNDS
        assert row.lossless is not None and row.lossless.compared >= 2
        assert row.lossless.matched == row.lossless.compared  # float32: exact


def test_an_idle_vllm_server_beside_the_measured_one_costs_next_to_no_cpu(slotted):
    _, _, out = slotted
    host = json.loads(Path(out / "none" / "s" / "bs1" / "metrics.json").read_text())["host"]
    # The slot's engine sat idle during every baseline block: its CPU time is measured.
    assert host["sibling_cpu_s"] is not None
    # An engine that spun its OpenMP threads while idle would take about a core for the
    # block's wall time; an idle one takes its periodic loops only.
    assert host["sibling_cpu_s"] < 0.1 * host["wall_s"]
