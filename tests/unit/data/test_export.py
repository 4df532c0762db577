"""The SPEED-Bench layouts speedbench exports: ids, rows, configs and the files' refusals."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pandas as pd
import pytest

from speedbench.data.export import (
    config_of_split_file,
    export_config,
    export_splits,
    hub_row,
    nemo_skills_row,
    speed_bench_id,
    speedbench_id,
)
from speedbench.data.prompts import PromptRow, PromptSetError
from speedbench.data.qualitative import write_split
from speedbench.data.speed_bench import load_speed_bench


def row(qid: str = "q0123456789abcdef", category: str = "coding", **kw) -> PromptRow:
    return PromptRow(question_id=qid, category=category, turns=kw.pop("turns", ["Hi?"]), **kw)


def test_a_content_id_maps_to_32_hex_and_back():
    checksum = hashlib.sha256(b"speedbench/q0123456789abcdef").hexdigest()[:14]
    assert speed_bench_id("q0123456789abcdef") == "0123456789abcdef" + "71" + checksum
    assert speed_bench_id("q0123456789abcdef") == "0123456789abcdef71069643860487f2"
    assert speed_bench_id("r0123456789abcdef") == "0123456789abcdef721544f97033e1c8"
    for qid in ("q0123456789abcdef", "r0123456789abcdef"):
        assert speedbench_id(speed_bench_id(qid)) == qid


def test_other_ids_map_one_way_and_foreign_ids_decode_to_none():
    assert speed_bench_id("sb-code") == hashlib.sha256(b"speedbench/sb-code").hexdigest()[:32]
    assert speedbench_id(speed_bench_id("sb-code")) is None
    # A SPEED-Bench id, a corrupted checksum, a wrong length.
    assert speedbench_id("5f0e2a1c9b8d4e7fa6b3c2d1e0f9a8b7") is None
    assert speedbench_id("0123456789abcdef71069643860487f3") is None
    assert speedbench_id("0123456789abcdef71") is None


def test_split_files_name_their_configs():
    assert config_of_split_file(Path("d/qualitative.parquet")) == "qualitative"
    assert config_of_split_file(Path("d/throughput_32k.parquet")) == "throughput_32k"
    assert config_of_split_file(Path("d/throughput_1k_random.parquet")) is None
    assert config_of_split_file(Path("d/throughput_4k.parquet")) is None
    assert config_of_split_file(Path("d/qualitative.jsonl")) is None


def test_hub_rows_have_the_hubs_columns_categories_and_messages():
    r = row(category="low", sub_category="python_stdlib", source="python_stdlib", src_id="a+b")
    hub = hub_row(r)
    assert hub == {
        "question_id": "0123456789abcdef71069643860487f2", "category": "low_entropy",
        "sub_category": "python_stdlib", "turns": ["Hi?"], "source": "python_stdlib",
        "src_id": "a+b", "difficulty": "", "multiturn": False,
    }  # fmt: skip
    assert hub_row(row(category="high"))["category"] == "high_entropy"
    assert hub_row(row(category="mixed"))["category"] == "mixed"
    two = nemo_skills_row(hub_row(row(turns=["a?", "b?"], multiturn=True)))
    assert "turns" not in two
    assert two["messages"] == [{"role": "user", "content": "a?"}, {"role": "user", "content": "b?"}]
    assert list(two) == ["question_id", "category", "sub_category", "source", "src_id",
                         "difficulty", "multiturn", "messages"]  # fmt: skip


def test_export_refuses_an_unknown_config_no_rows_and_an_id_clash(tmp_path):
    with pytest.raises(PromptSetError, match="unknown SPEED-Bench config 'throughput_4k'"):
        export_config([row()], "throughput_4k", tmp_path)
    with pytest.raises(PromptSetError, match="qualitative: no rows to export"):
        export_config([], "qualitative", tmp_path)
    twins = [row(), row(category="qa")]
    with pytest.raises(PromptSetError, match="two rows map to the SPEED-Bench id 0123456789ab"):
        export_config(twins, "qualitative", tmp_path)


def test_every_layout_reads_back_as_the_same_config(tmp_path):
    rows = [row(), row("q00000000000000ff", "qa", turns=["x?", "y?"], multiturn=True)]
    write_split(rows, tmp_path / "in" / "qualitative.parquet")
    pd.DataFrame({"question_id": ["q1"]}).to_parquet(tmp_path / "in" / "throughput_4k.parquet")
    summary = export_splits([tmp_path / "in"], tmp_path / "out")
    assert summary["configs"]["qualitative"]["rows"] == 2
    assert summary["configs"]["qualitative"]["categories"] == {"coding": 1, "qa": 1}
    assert list(summary["skipped"].values()) == [
        "not one of SPEED-Bench's configs (qualitative, throughput_1k, throughput_2k, "
        "throughput_8k, throughput_16k, throughput_32k)"
    ]
    for layout in ("nemo_skills", "specdec_bench", "hub"):
        back = load_speed_bench("qualitative", root=tmp_path / "out" / layout)
        assert [speedbench_id(b.question_id) for b in back] == [r.question_id for r in rows]
        assert [b.turns for b in back] == [r.turns for r in rows]
    ids = json.loads((tmp_path / "out" / "question_ids.json").read_text())
    assert ids == {speed_bench_id(r.question_id): r.question_id for r in rows}


def test_nothing_to_export_and_a_missing_split_are_one_line_errors(tmp_path):
    with pytest.raises(PromptSetError, match=r"split not found: .*nowhere"):
        export_splits([tmp_path / "nowhere"], tmp_path / "out")
    (tmp_path / "throughput_1k_random.parquet").write_bytes(b"")
    with pytest.raises(PromptSetError, match="nothing to export among 1 file"):
        export_splits([tmp_path], tmp_path / "out")
    (tmp_path / "qualitative.parquet").write_bytes(b"PAR")
    with pytest.raises(PromptSetError, match=r"qualitative\.parquet: not a readable Parquet file"):
        export_splits([tmp_path], tmp_path / "out")
