"""Every preset in presets/ is a valid params file: its splits and both measure stages."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from speedbench.data.throughput import ThroughputParams
from speedbench.pipeline.stages import stage_sweep

PRESETS = sorted((Path(__file__).parents[2] / "presets").glob("*.yaml"))


@pytest.mark.parametrize("preset", PRESETS, ids=lambda p: p.stem)
def test_a_preset_validates_for_every_stage(preset):
    params = yaml.safe_load(preset.read_text())
    ThroughputParams(**params["throughput"])
    for stage in ("measure_qualitative", "measure_throughput"):
        stage_sweep(params, stage)


def test_the_long_context_presets_32k_bucket_and_its_answer_fit_the_qwen_pairs_context():
    params = yaml.safe_load((Path(PRESETS[0]).parent / "long-context.yaml").read_text())
    split = ThroughputParams(**params["throughput"])
    assert sorted(split.buckets.values()) == [1024, 2048, 8192, 16384, 32512]
    sweep = stage_sweep(params, "measure_throughput")
    assert {f"throughput_{b}" for b in split.buckets} <= set(sweep.prompts.splits)
    longest = max(split.buckets.values()) * (1 + split.tolerance)
    # max_position_embeddings of Qwen2.5-Coder-1.5B and -0.5B.
    assert longest + sweep.protocol.output_len <= 32768
