"""Checks that speedbench's exported splits read back identically and that the peers read them.

The peers' own loaders run in ``.venv-peers`` (``make contract-envs``): AIPerf 0.13's SPEED-Bench
loaders and vLLM's ``bench serve`` SpeedBench dataset, through scripts/speed_bench_loaders.py.
"""

from __future__ import annotations

import json
import subprocess
from collections import Counter
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from speedbench import REPO_ROOT
from speedbench.data.export import (
    HUB_COLUMNS,
    LAYOUTS,
    TIER_CATEGORIES,
    export_splits,
    speed_bench_id,
    speedbench_id,
)
from speedbench.data.prompts import PromptRow, load_prompt_file
from speedbench.data.speed_bench import load_speed_bench
from speedbench.tokenize import PromptTokenizer

PEERS_PYTHON = REPO_ROOT / ".venv-peers" / "bin" / "python"
LOADERS = REPO_ROOT / "scripts" / "speed_bench_loaders.py"
HUB_TYPES = {"turns": pa.list_(pa.string()), "multiturn": pa.bool_()}


def peer_loads(peer: str, root: Path, configs: list[str]) -> dict[str, dict]:
    """What ``peer``'s own loader read from the NeMo-Skills files under ``root``, by config."""
    proc = subprocess.run(
        [str(PEERS_PYTHON), str(LOADERS), peer, str(root), *configs],
        capture_output=True, text=True, check=False, timeout=300,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    lines = [json.loads(line) for line in proc.stdout.splitlines() if line.startswith("{")]
    return {entry["config"]: entry for entry in lines}


def peer_refusal(peer: str, root: Path, config: str) -> str:
    """The error ``peer``'s loader ends with on ``config`` under ``root`` (it must fail)."""
    proc = subprocess.run(
        [str(PEERS_PYTHON), str(LOADERS), peer, str(root), config],
        capture_output=True, text=True, check=False, timeout=300,
    )  # fmt: skip
    assert proc.returncode != 0, proc.stdout[-2000:]
    return proc.stderr


def _same_question(back: PromptRow, original: PromptRow) -> None:
    assert back.question_id == speed_bench_id(original.question_id)
    assert len(back.question_id) == 32
    assert speedbench_id(back.question_id) == original.question_id
    for field in ("category", "sub_category", "turns", "source", "src_id", "difficulty"):
        assert getattr(back, field) == getattr(original, field), field
    assert back.multiturn is original.multiturn


def assert_export_reads_back_and_peers_read_it(
    split_files: list[Path], out: Path, tokenizer: PromptTokenizer
) -> dict:
    """Export ``split_files`` and check the export; return its summary.

    Every layout reads back to the same rows and token ids, the hub files have the hub's exact
    columns and types, and AIPerf's and vLLM's loaders keep every row with SPEED-Bench's
    categories.
    """
    summary = export_splits(split_files, out)
    configs = sorted(summary["configs"])
    originals = {c: load_prompt_file(summary["configs"][c]["from"]) for c in configs}
    for config in configs:
        rows = originals[config]
        for layout in LAYOUTS:
            root = out / layout
            back = load_speed_bench(config, root=root)
            assert len(back) == len(rows), (config, layout)
            for b, o in zip(back, rows, strict=True):
                _same_question(b, o)
                # Each turn alone: later turns' prompts hold answers only an engine gives.
                assert [tokenizer.encode_turn([t]) for t in b.turns] == [
                    tokenizer.encode_turn([t]) for t in o.turns
                ]
        for path in (out / "hub" / config).glob("*.parquet"):
            schema = pq.read_schema(path)
            assert schema.names == list(HUB_COLUMNS)
            assert {n: schema.field(n).type for n in HUB_COLUMNS} == {
                n: HUB_TYPES.get(n, pa.string()) for n in HUB_COLUMNS
            }
    ids = json.loads(Path(summary["question_ids"]).read_text())
    assert ids == {speed_bench_id(r.question_id): r.question_id for c in configs
                   for r in originals[c]}  # fmt: skip

    nemo = out / "nemo_skills"
    aiperf, vllm = peer_loads("aiperf", nemo, configs), peer_loads("vllm", nemo, configs)
    for config in configs:
        rows = originals[config]
        categories = Counter(TIER_CATEGORIES.get(r.category, r.category) for r in rows)
        assert summary["configs"][config]["categories"] == dict(sorted(categories.items()))
        by_id = {speed_bench_id(r.question_id): r for r in rows}
        got = aiperf[config]["rows"]
        assert {g["question_id"]: (g["prompt"], g["turns"]) for g in got} == {
            i: (r.turns[0], len(r.turns)) for i, r in by_id.items()
        }
        assert [g["prompt"] for g in vllm[config]["rows"]] == [r.turns[0] for r in rows]
        for peer in (aiperf, vllm):
            assert peer[config]["by_category"] == dict(categories), config
    return summary
