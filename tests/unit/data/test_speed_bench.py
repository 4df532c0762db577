"""SPEED-Bench's dataset in its three layouts, its placeholder rows and its throughput tiers."""

import json

import pandas as pd
import pytest

from speedbench.data.prompts import PromptSetError, load_prompt_file
from speedbench.data.qualitative import SPLIT_COLUMNS
from speedbench.data.speed_bench import (
    PLACEHOLDER,
    config_of_path,
    config_of_split,
    config_path,
    drop_placeholders,
    load_speed_bench,
)
from speedbench.run.plan import sweep_prompts
from speedbench.sweep_config import SweepConfig

ROWS = [
    {"question_id": "q1", "category": "coding", "sub_category": "python", "turns": ["Sort a list."],
     "source": "humaneval", "src_id": "1", "difficulty": "easy", "multiturn": False},
    {"question_id": "q2", "category": "rag", "sub_category": "chat",
     "source": "nvidia/ChatRAG-Bench", "src_id": "hybridial_3", "difficulty": "",
     "turns": [f"{PLACEHOLDER}\n\nPlease answer from the context."], "multiturn": False},
    {"question_id": "q3", "category": "roleplay", "sub_category": "role",
     "source": "ZenMoore/RoleBench", "turns": [f"{PLACEHOLDER}\n\nYou are {{role_name}}.", "Hi"],
     "src_id": "r_1_2", "difficulty": "", "multiturn": True},
    {"question_id": "q4", "category": "math", "sub_category": "algebra", "turns": ["Solve x+1=2.",
     "Now x+2=4."], "source": "mtbench", "src_id": "4", "difficulty": "hard", "multiturn": True},
]  # fmt: skip


def _hub_layout(root, config, rows):
    folder = root / config
    folder.mkdir(parents=True)
    pd.DataFrame(rows, columns=SPLIT_COLUMNS).to_parquet(folder / "test-00000-of-00001.parquet")


def _specdec_bench_layout(root, config, rows):
    folder = root / "speed" / config
    folder.mkdir(parents=True)
    pd.DataFrame(rows, columns=SPLIT_COLUMNS).to_parquet(folder / "test.parquet")


def _nemo_skills_layout(root, config, rows):
    # prepare.py: turns become user messages, the other columns stay.
    root.mkdir(parents=True, exist_ok=True)
    with (root / f"{config}.jsonl").open("w") as fh:
        for r in rows:
            out = {k: v for k, v in r.items() if k != "turns"}
            out["messages"] = [{"role": "user", "content": t} for t in r["turns"]]
            fh.write(json.dumps(out) + "\n")


LAYOUTS = [_hub_layout, _specdec_bench_layout, _nemo_skills_layout]


@pytest.mark.parametrize("layout", LAYOUTS)
def test_every_layout_reads_the_same_rows_with_every_column(tmp_path, layout):
    layout(tmp_path, "qualitative", ROWS)
    rows = load_speed_bench("qualitative", root=tmp_path)
    assert [r.question_id for r in rows] == ["q1", "q2", "q3", "q4"]
    assert rows[3].turns == ["Solve x+1=2.", "Now x+2=4."] and rows[3].multiturn
    assert (rows[0].sub_category, rows[0].source, rows[0].difficulty) == (
        "python", "humaneval", "easy"
    )  # fmt: skip
    item = rows[0].work_item()
    assert (item.sub_category, item.source, item.difficulty) == ("python", "humaneval", "easy")


def test_placeholders_are_refused_in_one_line_naming_count_sources_and_the_fix(tmp_path):
    _specdec_bench_layout(tmp_path, "qualitative", ROWS)
    rows = load_speed_bench("qualitative", root=tmp_path)
    with pytest.raises(PromptSetError) as err:
        drop_placeholders(rows, "speed_bench_qualitative", skip=False, config="qualitative")
    message = str(err.value)
    assert "\n" not in message
    assert message.startswith(
        "speed_bench_qualitative: 2 of 4 rows are SPEED-Bench placeholders, not prompts "
        "(sources: ZenMoore/RoleBench (1), nvidia/ChatRAG-Bench (1)); rebuild them with "
        "specdec_bench's prepare step"
    )
    assert "python prepare_data.py --config qualitative" in message
    assert message.endswith("or pass --skip-placeholders to measure without them")
    kept, skipped = drop_placeholders(rows, "x", skip=True)
    assert [r.question_id for r in kept] == ["q1", "q4"] and skipped == 2


def test_a_file_of_placeholders_only_is_refused_even_when_skipping(tmp_path):
    _nemo_skills_layout(tmp_path, "qualitative", ROWS[1:3])
    rows = load_speed_bench("qualitative", root=tmp_path)
    with pytest.raises(PromptSetError, match="every row is a SPEED-Bench placeholder"):
        drop_placeholders(rows, "x", skip=True)


def test_throughput_categories_become_the_entropy_tiers(tmp_path):
    rows = [
        {**ROWS[0], "question_id": f"t{i}", "category": c}
        for i, c in enumerate(["low_entropy", "mixed", "high_entropy"])
    ]
    _hub_layout(tmp_path, "throughput_1k", rows)
    assert [r.category for r in load_speed_bench("throughput_1k", root=tmp_path)] == [
        "low", "mixed", "high"
    ]  # fmt: skip


def test_a_config_in_two_layouts_or_in_none_is_refused(tmp_path):
    with pytest.raises(PromptSetError, match=r"no SPEED-Bench throughput_2k under .*: looked for"):
        config_path(tmp_path, "throughput_2k")
    _hub_layout(tmp_path, "qualitative", ROWS)
    _nemo_skills_layout(tmp_path, "qualitative", ROWS)
    with pytest.raises(PromptSetError, match=r"SPEED-Bench qualitative is under .* twice"):
        config_path(tmp_path, "qualitative")
    with pytest.raises(PromptSetError, match="unknown SPEED-Bench config 'throughput_4k'"):
        config_path(tmp_path, "throughput_4k")


def test_the_config_is_read_from_a_path_of_each_layout_but_not_from_speedbenchs_split(tmp_path):
    assert config_of_path(tmp_path / "throughput_8k.jsonl") == "throughput_8k"
    assert config_of_path(tmp_path / "speed" / "qualitative" / "test.parquet") == "qualitative"
    assert config_of_path(tmp_path / "qualitative" / "test-00000-of-00001.parquet") == "qualitative"
    assert config_of_path(tmp_path / "qualitative" / "qualitative.parquet") is None
    assert config_of_path(tmp_path / "mine.jsonl") is None
    assert config_of_split("speed_bench_throughput_32k") == "throughput_32k"
    assert config_of_split("qualitative") is None


def test_a_sweep_refuses_placeholders_before_any_engine_and_counts_the_skipped(tmp_path):
    _specdec_bench_layout(tmp_path, "qualitative", ROWS)
    path = tmp_path / "speed" / "qualitative" / "test.parquet"
    form = {"prompts": {"prompt_file": str(path)}, "methods": ["none"]}
    config = SweepConfig.model_validate(form)
    assert config.prompts.split_names == ["speed_bench_qualitative"]
    with pytest.raises(PromptSetError, match="2 of 4 rows are SPEED-Bench placeholders"):
        sweep_prompts(config)
    form["prompts"]["skip_placeholders"] = True
    items, skipped = sweep_prompts(SweepConfig.model_validate(form))
    assert skipped == {"speed_bench_qualitative": 2}
    assert sorted(i.prompt_id for i in items["speed_bench_qualitative"]) == ["q1", "q4"]
    # The split by name, from the folder that holds the same file.
    named = {"prompts": {"splits": ["speed_bench_qualitative"], "speed_bench_dir": str(tmp_path),
                         "skip_placeholders": True}, "methods": ["none"]}  # fmt: skip
    again, _ = sweep_prompts(SweepConfig.model_validate(named))
    assert again == items


def test_a_folder_of_parquet_shards_is_one_prompt_set(tmp_path):
    folder = tmp_path / "qualitative"
    folder.mkdir()
    frame = pd.DataFrame([ROWS[0], ROWS[3]], columns=SPLIT_COLUMNS)
    frame.iloc[:1].to_parquet(folder / "test-00000-of-00002.parquet")
    frame.iloc[1:].to_parquet(folder / "test-00001-of-00002.parquet")
    assert [r.question_id for r in load_prompt_file(folder)] == ["q1", "q4"]
    assert config_of_path(folder) == "qualitative"
