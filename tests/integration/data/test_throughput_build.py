"""The default throughput split, built offline from the real corpora and the real tokenizer."""

from pathlib import Path

import pandas as pd
import pytest
from tests.integration.data.peers import assert_export_reads_back_and_peers_read_it

from speedbench.data.corpora import get_corpus
from speedbench.data.prompts import load_prompt_file
from speedbench.data.throughput import (
    DEFAULT_TIERS,
    THROUGHPUT_COLUMNS,
    ThroughputParams,
    build_throughput,
)
from speedbench.provision.models import provision
from speedbench.tokenize import PromptTokenizer


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    tok = PromptTokenizer.from_pretrained(str(provision("qwen2.5-coder-0.5b-instruct")))
    out = tmp_path_factory.mktemp("throughput")
    params = ThroughputParams(per_tier=3)
    report = build_throughput(params, out, tok, progress=False)
    return out, report, tok, params


def test_every_prompt_is_within_one_percent_in_target_tokens(built):
    out, report, tok, params = built
    for name, target in params.buckets.items():
        frame = pd.read_parquet(out / f"throughput_{name}.parquet")
        assert list(frame.columns) == THROUGHPUT_COLUMNS
        assert len(frame) == 3 * len(DEFAULT_TIERS)
        for _, row in frame.iterrows():
            measured = len(tok.encode_turn(list(row["turns"])))
            assert measured == row["isl_tokens"]
            assert abs(measured - target) <= 0.01 * target, (name, row["source"], measured)
        stats = report["buckets"][name]["lengths"]
        assert set(stats) == {"low", "mixed", "high"}
        assert all(s["n"] == 3 for s in stats.values())


def test_tiers_use_their_own_domains_and_no_context_is_shared(built):
    out, _, _, params = built
    for name in params.buckets:
        frame = pd.read_parquet(out / f"throughput_{name}.parquet")
        for _, row in frame.iterrows():
            assert get_corpus(row["source"]).tier == row["entropy_tier"]
            assert row["source"] in DEFAULT_TIERS[row["entropy_tier"]]
        docs = [d for ids in frame["src_id"] for d in ids.split("+")]
        assert len(docs) == len(set(docs)), name
        assert frame["question_id"].is_unique


def test_random_control_mirrors_each_real_prompt(built):
    out, _, _, params = built
    for name in params.buckets:
        real = pd.read_parquet(out / f"throughput_{name}.parquet")
        rows = load_prompt_file(out / f"throughput_{name}_random.parquet")
        assert [len(r.prompt_token_ids) for r in rows] == real["isl_tokens"].tolist()
        assert [r.category for r in rows] == [f"random_{c}" for c in real["category"]]
        items = [r.work_item() for r in rows]
        assert all(it.prompt_ids is not None and it.num_turns == 1 for it in items)


def test_the_long_context_presets_16k_and_32k_buckets_build_offline(tmp_path):
    """SPEED-Bench's two longest buckets from the packaged corpora, at the preset's size."""
    from pathlib import Path

    import yaml

    preset = Path(__file__).parents[3] / "presets" / "long-context.yaml"
    section = yaml.safe_load(preset.read_text())["throughput"]
    long = {name: n for name, n in section["buckets"].items() if n > 8192}
    assert set(long) == {"16k", "32k"}
    # The 0.5B's tokenizer is the 1.5B's (the same files); make test provisions only the 0.5B.
    params = ThroughputParams(**{**section, "buckets": long, "random_control": False,
                                 "tokenizer": "qwen2.5-coder-0.5b-instruct"})  # fmt: skip
    tok = PromptTokenizer.from_pretrained(str(provision("qwen2.5-coder-0.5b-instruct")))
    build_throughput(params, tmp_path, tok, progress=False)
    for name, target in long.items():
        frame = pd.read_parquet(tmp_path / f"throughput_{name}.parquet")
        assert sorted(frame["entropy_tier"]) == sorted(["low", "mixed", "high"] * 2)
        for _, row in frame.iterrows():
            assert abs(row["isl_tokens"] - target) <= params.tolerance * target, row["source"]
        docs = [d for ids in frame["src_id"] for d in ids.split("+")]
        assert len(docs) == len(set(docs)), name


def test_the_buckets_export_in_speed_bench_layouts_that_aiperf_and_vllm_read(built, tmp_path):
    out, _, tok, params = built
    summary = assert_export_reads_back_and_peers_read_it([out], tmp_path / "speed-bench", tok)
    assert sorted(summary["configs"]) == sorted(f"throughput_{b}" for b in params.buckets)
    for entry in summary["configs"].values():
        assert entry["categories"] == {"high_entropy": 3, "low_entropy": 3, "mixed": 3}
    # The random-token controls have no SPEED-Bench config and are named as skipped.
    assert sorted(Path(p).name for p in summary["skipped"]) == sorted(
        f"throughput_{b}_random.parquet" for b in params.buckets
    )
