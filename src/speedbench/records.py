"""The per-request record schema and its durable sinks.

A :class:`RequestRecord` is one row per request (one turn of one prompt under one
configuration). Records are appended to a JSON-lines file as they arrive, flushed per record,
so a crash of the process mid-run loses only the requests still in flight;
:func:`write_parquet` consolidates them.

A failed request keeps its partial stream and says what went wrong twice: ``error`` is a
one-line message for people, ``error_kind`` one of :data:`ERROR_KINDS` for grouping.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import IO

import pandas as pd

# What can go wrong with one request. Every failed record carries exactly one of these.
ERROR_KINDS = (
    "http_4xx",  # the engine refused the request (bad token id, context too long, ...)
    "http_5xx",  # the engine failed on it
    "rate_limited",  # HTTP 429 on every attempt, backoff included
    "timeout",  # no finish within the request timeout
    "truncated",  # the stream ended without a finish reason
    "connection",  # refused, reset or dropped connection
    "engine_error",  # an error event inside a 200 stream
    "bad_payload",  # a chunk that is not the engine's JSON format
    "client_died",  # the load-generator worker holding the request died
)


# An output token the engine generated and counted but did not stream the id of.
WITHHELD_TOKEN = -1


@dataclass
class RequestRecord:
    """Everything measured about one request.

    Times are seconds on one monotonic clock (``time.perf_counter``) shared by a whole run, so
    records of concurrent requests are comparable; they are not wall-clock dates.
    ``engine_steps`` is the number of verification steps the engine itself reports for the
    request (SGLang's ``spec_verify_ct``), where it reports one. ``engine_accepted`` and
    ``engine_drafted`` are the engine's own accepted and proposed draft counts of every drafted
    verify step, in order (vLLM's per-request spec-decode metrics), where it reports them.
    ``scheduled_s`` is when an open-loop (request-rate) level meant the request to arrive; its
    latencies count from then, so a wait for a free slot under a concurrency cap is latency.
    Closed-loop requests have none: they are sent the moment a stream is free.
    ``warmup`` marks a request sent before the level's measurement at its own load shape: it is
    kept with the records and left out of every metric. ``repeat`` is which measurement of
    the level (0 to repeats - 1) the request belongs to. ``prompt_token_ids`` are the ids
    sent (the templated conversation up to this turn): with the output ids they are what the
    acceptance oracle (:mod:`speedbench.oracle`) replays; None in files written before them.
    An output id of ``WITHHELD_TOKEN``
    stands for a token the engine counted but never streamed the id of (llama.cpp holds back a
    token whose text ends inside a UTF-8 character and streams only the next one's id), so
    counts and positions stay the engine's.
    """

    request_id: str
    prompt_id: str
    category: str = ""
    # The prompt's labels in its split (SPEED-Bench's columns); empty in earlier files.
    sub_category: str = ""
    source: str = ""
    difficulty: str = ""
    split: str = ""
    turn: int = 0
    config_label: str = ""
    method: str = "none"
    k: int = 0
    batch_size: int = 1
    repeat: int = 0
    prompt_tokens: int = 0
    prompt_token_ids: list[int] | None = None
    start_s: float = 0.0
    end_s: float = 0.0
    chunk_times_s: list[float] = field(default_factory=list)
    chunk_tokens: list[int] = field(default_factory=list)
    output_token_ids: list[int] = field(default_factory=list)
    finish_reason: str | None = None
    error: str | None = None
    error_kind: str | None = None
    attempts: int = 1
    engine_steps: int | None = None
    engine_accepted: list[int] | None = None
    engine_drafted: list[int] | None = None
    scheduled_s: float | None = None
    warmup: bool = False

    def fail(self, kind: str, message: str) -> None:
        """Mark the request failed with one of :data:`ERROR_KINDS` and a one-line message."""
        if kind not in ERROR_KINDS:
            raise ValueError(f"unknown error kind {kind!r}; expected one of {ERROR_KINDS}")
        self.error_kind = kind
        self.error = " ".join(message.split())

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
    """Append-only JSON-lines writer; every record reaches the OS as soon as it is written.

    A flush per record survives a crash of this process (the kernel holds the data); ``fsync``
    runs at close only, since a disk sync per request would slow the client at high rates.
    """

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
        self.count += 1

    def close(self) -> None:
        """Close the file; further writes fail."""
        if self._fh is not None:
            self._fh.flush()
            os.fsync(self._fh.fileno())
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
        for key in ("engine_accepted", "engine_drafted", "prompt_token_ids"):
            value = row.get(key)
            row[key] = None if value is None else [int(x) for x in list(value)]
        for key in ("finish_reason", "error", "error_kind", "engine_steps", "scheduled_s"):
            if row.get(key) is not None and pd.isna(row[key]):
                row[key] = None
        if row.get("engine_steps") is not None:
            row["engine_steps"] = int(row["engine_steps"])
        row["warmup"] = bool(row.get("warmup") or False)  # absent from earlier files
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


def measured(records: Iterable[RequestRecord]) -> list[RequestRecord]:
    """The records that count in metrics: every one but the warm-up requests."""
    return [r for r in records if not r.warmup]
