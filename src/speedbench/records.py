"""The per-request record schema and its durable sinks.

A :class:`RequestRecord` is one row per request (one turn of one prompt under one
configuration). Records are appended to a JSON-lines file as they arrive, flushed per record,
so a crash mid-run loses nothing already measured; :func:`write_parquet` consolidates them.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import IO

import pandas as pd


@dataclass
class RequestRecord:
    """Everything measured about one request.

    Times are seconds on one monotonic clock (``time.perf_counter``) shared by a whole run, so
    records of concurrent requests are comparable; they are not wall-clock dates.
    """

    request_id: str
    prompt_id: str
    category: str = ""
    split: str = ""
    turn: int = 0
    config_label: str = ""
    method: str = "none"
    k: int = 0
    batch_size: int = 1
    repeat: int = 0
    prompt_tokens: int = 0
    start_s: float = 0.0
    end_s: float = 0.0
    chunk_times_s: list[float] = field(default_factory=list)
    chunk_tokens: list[int] = field(default_factory=list)
    output_token_ids: list[int] = field(default_factory=list)
    finish_reason: str | None = None
    error: str | None = None

    @property
    def ok(self) -> bool:
        """Whether the request completed without error."""
        return self.error is None

    @property
    def output_tokens(self) -> int:
        """Number of generated tokens."""
        return len(self.output_token_ids) if self.output_token_ids else sum(self.chunk_tokens)

    def to_json(self) -> str:
        """One JSON line."""
        return json.dumps(asdict(self), separators=(",", ":"))


RECORD_FIELDS = tuple(f.name for f in fields(RequestRecord))


class RecordSink:
    """Append-only JSON-lines writer that makes every record durable as soon as it is written."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._fh: IO[str] | None = self.path.open("a", encoding="utf-8")
        self.count = 0

    def write(self, record: RequestRecord) -> None:
        """Append ``record`` and flush it to disk."""
        if self._fh is None:
            raise RuntimeError(f"record sink {self.path} is closed")
        self._fh.write(record.to_json() + "\n")
        self._fh.flush()
        os.fsync(self._fh.fileno())
        self.count += 1

    def close(self) -> None:
        """Close the file; further writes fail."""
        if self._fh is not None:
            self._fh.close()
            self._fh = None

    def __enter__(self) -> RecordSink:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def read_jsonl(path: str | Path) -> list[RequestRecord]:
    """Read records back; a truncated last line (crash mid-write) is skipped, not fatal."""
    out = []
    lines = Path(path).read_text(encoding="utf-8").splitlines()
    for i, line in enumerate(lines):
        if not line.strip():
            continue
        try:
            out.append(RequestRecord(**json.loads(line)))
        except json.JSONDecodeError:
            if i == len(lines) - 1:
                break
            raise ValueError(f"{path}:{i + 1}: malformed record line") from None
    return out


def records_to_frame(records: Iterable[RequestRecord]) -> pd.DataFrame:
    """Records as a DataFrame with one column per field (list columns stay lists)."""
    rows = [asdict(r) for r in records]
    return pd.DataFrame(rows, columns=list(RECORD_FIELDS))


def frame_to_records(frame: pd.DataFrame) -> list[RequestRecord]:
    """Inverse of :func:`records_to_frame`."""
    out = []
    for row in frame.to_dict(orient="records"):
        for key in ("chunk_times_s", "chunk_tokens", "output_token_ids"):
            row[key] = [x.item() if hasattr(x, "item") else x for x in list(row[key])]
        for key in ("finish_reason", "error"):
            if row[key] is not None and pd.isna(row[key]):
                row[key] = None
        out.append(RequestRecord(**row))
    return out


def write_parquet(records: Sequence[RequestRecord], path: str | Path) -> Path:
    """Write records to Parquet (via pandas/pyarrow) and return the path."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    records_to_frame(records).to_parquet(path, index=False)
    return path


def read_parquet(path: str | Path) -> list[RequestRecord]:
    """Read records written by :func:`write_parquet`."""
    return frame_to_records(pd.read_parquet(path))
