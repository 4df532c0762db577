"""`speedbench oracle` on recorded levels, and the sweep form's oracle fields."""

from __future__ import annotations

import json

import pytest

from speedbench.cli import main
from speedbench.config import ConfigError, load_config
from speedbench.records import RequestRecord, write_parquet
from speedbench.sweep_config import SweepConfig


def level(path, chunks_by_id, answers, k=0, method="none"):
    records = [
        RequestRecord(
            request_id=qid,
            prompt_id=qid,
            category=f"c{i}",
            split="qualitative",
            batch_size=2,
            method=method,
            k=k,
            prompt_token_ids=[5, 6, 7, 8],
            output_token_ids=answers[qid],
            chunk_tokens=chunks_by_id[qid],
            finish_reason="length",
        )
        for i, qid in enumerate(answers)
    ]
    write_parquet(records, path / "records.parquet")
    return path


ANSWERS = {"a": [9, 5, 6, 7, 8, 1], "b": [5, 6, 7, 8, 5, 6]}


def test_the_cli_predicts_every_k_and_checks_a_measured_level(tmp_path, capsys):
    base = level(tmp_path / "none", {q: [1] * 6 for q in ANSWERS}, ANSWERS)
    # b: p1 suffix [5] occurs at 0 -> [6, 7, 8]: right -> 4 tokens; p5 = the last -> 1.
    measured = level(tmp_path / "ngram", {"a": [1, 1, 4], "b": [1, 4, 1]}, ANSWERS, 3, "ngram")
    out = tmp_path / "o.json"
    argv = ["oracle", "--baseline", str(base), "--drafter", "ngram", "--max-k", "3"]
    assert main([*argv, "--measured", str(measured), "--out", str(out)]) == 0
    data = json.loads(out.read_text())
    assert [f["k"] for f in data["by_k"]] == [1, 2, 3]
    (check,) = data["by_k"][2]["checks"]
    assert (check["compared"], check["identical"], check["steps_differ"]) == (2, 2, 0)
    # Stream view at k=3: a [1, 4] and b [4, 1]: 10 tokens in 4 steps.
    assert data["by_k"][2]["views"]["stream"]["al_token_weighted"] == 2.5
    printed = capsys.readouterr().out
    assert "| **all** (Average_AL) |" in printed and "2 questions" in printed


def test_the_cli_refuses_a_folder_without_records(tmp_path, capsys):
    assert main(["oracle", "--baseline", str(tmp_path), "--drafter", "ngram"]) == 2
    assert f"{tmp_path}: no records.parquet" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"oracle": ["ngram"], "temperature": 0.5}, "greedy SD only; temperature is 0.5"),
        ({"oracle": ["ngram"], "baseline": False, "methods": ["ngram"]}, "baseline must be true"),
        ({"oracle": ["draft_model"]}, "oracle draft_model needs draft_model"),
        ({"oracle_per_category": 5}, "oracle_per_category/oracle_batch_size set but oracle"),
        ({"oracle": ["ngram", "ngram"]}, "oracle has duplicates"),
    ],
)
def test_oracle_fields_are_checked(fields, message):
    base = {"methods": ["none", "ngram"], "draft_lengths": [3]}
    with pytest.raises(ConfigError, match=message):
        load_config(SweepConfig, {**base, **fields})


def test_the_oracle_baseline_counts_in_the_prompts_loaded():
    form = SweepConfig(per_category=1, oracle=["ngram"], oracle_per_category=10,
                       methods=["none", "ngram"], draft_lengths=[3])  # fmt: skip
    assert form.selected_per_category == 10


def test_the_draft_variants_are_refused_for_prompt_lookup_and_bad_shapes(tmp_path, capsys):
    base = level(tmp_path / "none", {q: [1] * 6 for q in ANSWERS}, ANSWERS)
    argv = ["oracle", "--baseline", str(base)]
    assert main([*argv, "--drafter", "ngram", "--trees", "2x2"]) == 2
    assert "--draft-vocab and --trees are a draft model's" in capsys.readouterr().err
    assert main([*argv, "--drafter", "draft_model", "--draft", "d", "--trees", "2x"]) == 2
    assert "--trees: a tree is breadths per depth like 2x2x2, got '2x'" in capsys.readouterr().err
