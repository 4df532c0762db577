"""A sweep whose SD config cannot start keeps going and reports the failure."""

from __future__ import annotations

import json

import pytest

from speedbench.client.loadgen import LoadSettings, WorkItem
from speedbench.config import SpecConfig
from speedbench.engines.local import free_port
from speedbench.measure import cpu_vllm_engine, measure
from speedbench.tokenize import PromptTokenizer

pytestmark = pytest.mark.integration


def test_failed_config_is_reported_and_the_sweep_continues(tiny_pair, tmp_path):
    target, _ = tiny_pair
    broken = SpecConfig(
        method="draft_model", num_speculative_tokens=2, draft_model=str(tmp_path / "no-draft")
    )
    engine = cpu_vllm_engine(str(target), port=free_port(), env={"HF_HUB_OFFLINE": "1"})
    summary = measure(
        engine,
        [broken, SpecConfig()],
        [WorkItem("p0", "mixed", ("Say hello.",))],
        [1],
        tmp_path / "out",
        settings=LoadSettings(max_tokens=8, show_progress=False, split="hello"),
        tokenizer=PromptTokenizer.from_pretrained(str(target)),
    )
    (failure,) = summary["failures"]
    assert failure["config"] == "draft_model-k2"
    assert failure["error"].startswith("engine exited with code")
    assert "no-draft" in failure["error"]
    assert [(r["config"], r["batch_size"], r["error_rate"]) for r in summary["levels"]] == [
        ("none", 1, 0.0)
    ]
    on_disk = json.loads((tmp_path / "out" / "summary.json").read_text())
    assert on_disk["failures"] == summary["failures"]
    assert (tmp_path / "out" / "none" / "hello" / "bs1" / "records.parquet").exists()
