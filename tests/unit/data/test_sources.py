"""Source registry: row validation, bad-row policy, content ids, hub loader on local files."""

import pandas as pd
import pytest

from speedbench.data.prompts import PromptRow, PromptSetError
from speedbench.data.qualitative import SPLIT_COLUMNS, write_split
from speedbench.data.sources import SOURCES, SourceError, collect, get_source
from speedbench.data.sources.base import content_id, register_source
from speedbench.data.speed_bench import load_speed_bench

GOOD = {"category": "qa", "turns": ["What is the boiling point of water at sea level?"]}


@pytest.fixture
def bad_source():
    rows = [
        ("r1", GOOD),
        ("r2", {"category": "qa"}),  # missing text
        ("r3", {"category": "qa", "turns": 42}),  # wrong type
        ("r4", {"category": "qa", "turns": []}),  # empty turns
        ("r5", {"category": "qa", "turns": ["  "]}),  # blank turn
        ("r6", {"category": "math", "turns": ["2+2?"]}),  # category the source does not declare
        ("r7", ["not", "a", "mapping"]),
        ("r8", {"category": "qa", "turns": ["Why is the sky blue?", "And at sunset?"]}),
    ]
    register_source("test/bad", ("qa",), "hand-made rows")(lambda: iter(rows))
    yield get_source("test/bad")
    del SOURCES["test/bad"]


def test_skip_policy_reports_each_bad_row_with_source_and_row_id(bad_source):
    problems: list[str] = []
    rows = collect(bad_source, "skip", problems)
    assert [r.src_id for r in rows] == ["r1", "r8"]
    assert rows[1].multiturn is True and rows[0].multiturn is False
    assert all(r.source == "test/bad" for r in rows)
    assert len(problems) == 6
    assert [p.split(":")[0] for p in problems] == [
        f"source test/bad row r{i}" for i in (2, 3, 4, 5, 6, 7)
    ]
    assert "turns" in problems[0] and "missing" in problems[0]
    assert "turns" in problems[1] and "list" in problems[1]
    assert "turns" in problems[2] and "at least 1" in problems[2]
    assert "empty" in problems[3]
    assert "'math' is not one the source declares" in problems[4]
    assert "expected a mapping, got list" in problems[5]
    assert all("\n" not in p for p in problems)


def test_fail_policy_raises_on_the_first_bad_row(bad_source):
    with pytest.raises(
        SourceError, match=r"^source test/bad row r2: PromptRow.turns: required field is missing$"
    ):
        collect(bad_source, "fail")


def test_question_id_is_a_content_hash():
    a = content_id(["Hello", "World"])
    assert a == content_id(["Hello", "World"])
    assert a != content_id(["Hello", "World!"])
    assert a != content_id(["HelloWorld"])
    assert a.startswith("q") and len(a) == 17


def test_unknown_source_lists_known_ones():
    with pytest.raises(SourceError, match=r"unknown source 'nope'; known: .*humaneval"):
        get_source("nope")


def test_register_rejects_unknown_category_and_duplicates():
    with pytest.raises(ValueError, match="unknown categories"):
        register_source("test/x", ("poetry",), "")
    with pytest.raises(ValueError, match="registered twice"):
        register_source("humaneval", ("coding",), "")(lambda: iter(()))


def test_every_category_has_two_sources():
    from speedbench.data.sources import CATEGORIES

    for cat in CATEGORIES:
        feeding = [s.name for s in SOURCES.values() if cat in s.categories]
        assert len(feeding) >= 2, (cat, feeding)


def _rows():
    return [
        PromptRow(
            question_id=content_id([t]),
            category=c,
            sub_category="s",
            turns=[t],
            source="src",
            src_id=str(i),
            difficulty="",
            multiturn=False,
        )
        for i, (c, t) in enumerate([("qa", "What is DNA?"), ("math", "Integrate x^2.")])
    ]


def test_hub_loader_reads_a_local_file_of_the_official_schema(tmp_path):
    path = write_split(_rows(), tmp_path / "qualitative.parquet")
    assert list(pd.read_parquet(path).columns) == SPLIT_COLUMNS
    loaded = load_speed_bench("qualitative", data_files=path)
    assert loaded == _rows()


def test_hub_loader_reports_a_bad_row_with_file_and_row(tmp_path):
    frame = pd.DataFrame([r.model_dump() for r in _rows()], columns=SPLIT_COLUMNS)
    frame.at[1, "turns"] = []
    frame.to_parquet(tmp_path / "bad.parquet", index=False)
    with pytest.raises(
        PromptSetError,
        match=r"bad\.parquet row 2: PromptRow.turns: List should have at least 1 item",
    ):
        load_speed_bench("qualitative", data_files=tmp_path / "bad.parquet")


def test_hub_loader_rejects_an_unknown_config():
    with pytest.raises(PromptSetError, match="unknown SPEED-Bench config 'throughput_3k'"):
        load_speed_bench("throughput_3k")
