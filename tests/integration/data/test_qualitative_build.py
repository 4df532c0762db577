"""The qualitative split built from the real packaged sources with the real embedder (small k)."""

import json
import subprocess
import sys

import pandas as pd
import pytest
from tests.integration.data.peers import assert_export_reads_back_and_peers_read_it, peer_refusal

from speedbench.data.export import hub_row, nemo_skills_row
from speedbench.data.prompts import load_prompt_file
from speedbench.data.qualitative import SPLIT_COLUMNS, QualitativeParams, build_qualitative
from speedbench.data.sources import CATEGORIES
from speedbench.provision.models import provision
from speedbench.tokenize import PromptTokenizer


@pytest.fixture(scope="module")
def builds(tmp_path_factory):
    root = tmp_path_factory.mktemp("qual")
    small = build_qualitative(QualitativeParams(k=3, pool_size=16), root / "k3", progress=False)
    smaller = build_qualitative(QualitativeParams(k=2, pool_size=16), root / "k2", progress=False)
    return root, small, smaller


def test_split_has_schema_size_and_no_duplicates(builds):
    root, report, _ = builds
    frame = pd.read_parquet(root / "k3" / "qualitative.parquet")
    assert list(frame.columns) == SPLIT_COLUMNS
    assert len(frame) == 3 * len(CATEGORIES) == report["rows"]
    assert frame["question_id"].is_unique
    assert frame.groupby("category").size().to_dict() == dict.fromkeys(CATEGORIES, 3)
    assert all(isinstance(t, str) and t.strip() for turns in frame["turns"] for t in turns)
    assert (frame["multiturn"] == frame["turns"].map(len).gt(1)).all()
    rows = load_prompt_file(root / "k3" / "qualitative.parquet")  # the measure path's validator
    assert len(rows) == len(frame)


def test_greedy_pick_is_more_diverse_than_random_in_every_category(builds):
    _, report, _ = builds
    for row in report["categories"]:
        assert row["pool"] == 16
        assert row["greedy_cosine"] < row["random_cosine"], row
    metrics = json.loads((builds[0] / "k3" / "diversity_metrics.json").read_text())
    assert set(metrics) == set(CATEGORIES)


def test_smaller_k_is_the_prefix_of_the_larger_pick(builds):
    root = builds[0]
    big = pd.read_parquet(root / "k3" / "qualitative.parquet")
    small = pd.read_parquet(root / "k2" / "qualitative.parquet")
    for cat in CATEGORIES:
        ids3 = big[big.category == cat]["question_id"].tolist()
        ids2 = small[small.category == cat]["question_id"].tolist()
        assert ids2 == ids3[:2]


def test_rebuild_is_byte_identical(builds, tmp_path):
    root = builds[0]
    build_qualitative(QualitativeParams(k=3, pool_size=16), tmp_path, progress=False)
    assert (tmp_path / "qualitative.parquet").read_bytes() == (
        root / "k3" / "qualitative.parquet"
    ).read_bytes()


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--k", "0"], "QualitativeParams.k: Input should be greater than or equal to 1 (got 0)"),
        (["--k", "500", "--pool-size", "20"], "fewer than k=500"),
    ],
)
def test_cli_rejects_bad_params_in_one_line(tmp_path, args, message):
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "speedbench.cli",
            "build-qualitative",
            "--quiet",
            "--out",
            str(tmp_path),
            *args,
        ],
        capture_output=True,
        text=True,
    )
    assert proc.returncode == 2
    assert proc.stderr.count("\n") == 1 and message in proc.stderr, proc.stderr


def test_the_split_exports_in_speed_bench_layouts_that_aiperf_and_vllm_read(builds, tmp_path):
    root = builds[0]
    tok = PromptTokenizer.from_pretrained(str(provision("qwen2.5-coder-0.5b-instruct")))
    split = root / "k3" / "qualitative.parquet"
    summary = assert_export_reads_back_and_peers_read_it([split], tmp_path / "sb", tok)
    assert summary["configs"]["qualitative"]["categories"] == dict.fromkeys(CATEGORIES, 3)


def test_aiperf_refuses_speedbenchs_own_ids_which_is_why_the_export_maps_them(builds, tmp_path):
    rows = load_prompt_file(builds[0] / "k3" / "qualitative.parquet")
    with (tmp_path / "qualitative.jsonl").open("w") as fh:
        for r in rows:  # the export's rows, but with speedbench's 17-character ids
            raw = {**hub_row(r), "question_id": r.question_id}
            fh.write(json.dumps(nemo_skills_row(raw)) + "\n")
    assert "at least 32 characters" in peer_refusal("aiperf", tmp_path, "qualitative")
