"""Async load generator: N concurrent streams of token-ID requests, one record per request.

Concurrency is closed-loop: N workers each take the next conversation from a shared queue and
run its turns back to back, so exactly N requests are in flight while work remains (the batch
size). Turn ``i+1`` of a multi-turn prompt is templated with the model's own answer to turn ``i``.

A request never raises into the run: HTTP errors, engine errors inside the stream, transport
failures and streams that end without a finish reason become ``RequestRecord.error``. Each record
goes to the ``on_record`` callback (the durable sink) as soon as the request ends.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import httpx
from tqdm.auto import tqdm

from speedbench.config import EngineConfig, SpecConfig
from speedbench.engines.base import EngineAdapter
from speedbench.metrics.acceptance import SpecCounters
from speedbench.records import RequestRecord
from speedbench.tokenize import PromptTokenizer


@dataclass(frozen=True)
class WorkItem:
    """One prompt to send: text turns (templated here) or ready token IDs (single turn).

    Attributes:
        prompt_id: Stable id of the prompt (the split's question_id).
        category: Category or bucket/tier label used for grouping.
        user_turns: User turns, templated with the target's tokenizer one by one.
        prompt_ids: Pre-tokenized single-turn prompt; takes precedence over ``user_turns``.
    """

    prompt_id: str
    category: str = ""
    user_turns: tuple[str, ...] = ()
    prompt_ids: tuple[int, ...] | None = None

    @property
    def num_turns(self) -> int:
        """Requests this item produces."""
        return 1 if self.prompt_ids is not None else len(self.user_turns)


@dataclass
class LoadSettings:
    """How to drive one load level."""

    batch_size: int = 1
    max_tokens: int = 96
    temperature: float = 0.0
    seed: int | None = 0
    ignore_eos: bool = True
    request_timeout_s: float = 1800.0
    split: str = ""
    repeat: int = 0
    show_progress: bool = True


@dataclass
class LoadResult:
    """Records of a load level plus the engine's SD counter delta over it."""

    records: list[RequestRecord]
    counters: SpecCounters | None
    duration_s: float
    extras: dict[str, object] = field(default_factory=dict)


async def scrape_counters(
    client: httpx.AsyncClient, base_url: str, adapter: EngineAdapter
) -> SpecCounters | None:
    """Read the engine's cumulative SD counters; None if the endpoint is unavailable."""
    try:
        resp = await client.get(base_url + adapter.metrics_path, timeout=30.0)
    except httpx.TransportError:
        return None
    if resp.status_code != 200:
        return None
    return adapter.parse_counters(resp.text)


async def stream_one(
    client: httpx.AsyncClient,
    url: str,
    body: dict[str, object],
    adapter: EngineAdapter,
    record: RequestRecord,
    timeout_s: float,
) -> None:
    """Send one streaming request and fill ``record`` in place; never raises for request faults."""
    record.start_s = time.perf_counter()
    try:
        async with client.stream("POST", url, json=body, timeout=timeout_s) as resp:
            if resp.status_code != 200:
                text = (await resp.aread()).decode(errors="replace")
                record.error = f"HTTP {resp.status_code}: {_one_line(text)[:300]}"
                return
            async for line in resp.aiter_lines():
                event = adapter.parse_stream_line(line)
                if event is None:
                    continue
                now = time.perf_counter()
                if event.error:
                    record.error = event.error
                    return
                if event.token_ids:
                    record.chunk_times_s.append(now)
                    record.chunk_tokens.append(len(event.token_ids))
                    record.output_token_ids.extend(event.token_ids)
                if event.finish_reason:
                    record.finish_reason = event.finish_reason
        if record.finish_reason is None:
            record.error = (
                f"truncated stream: ended after {record.output_tokens} tokens with no finish reason"
            )
    except (httpx.HTTPError, json.JSONDecodeError) as exc:
        record.error = f"{type(exc).__name__}: {_one_line(str(exc)) or 'no detail'}"
    finally:
        record.end_s = time.perf_counter()


def _one_line(text: str) -> str:
    return " ".join(text.split())


async def run_load_async(
    engine: EngineConfig,
    spec: SpecConfig,
    adapter: EngineAdapter,
    items: Sequence[WorkItem],
    settings: LoadSettings,
    tokenizer: PromptTokenizer | None = None,
    on_record: Callable[[RequestRecord], None] | None = None,
    transport: httpx.AsyncBaseTransport | None = None,
) -> LoadResult:
    """Drive ``items`` at ``settings.batch_size`` concurrent streams against a healthy engine.

    ``transport`` replaces the network (fault-injection tests); by default requests go over TCP.
    """
    if any(it.prompt_ids is None for it in items) and tokenizer is None:
        raise ValueError("text prompts need a tokenizer")
    url = engine.base_url + adapter.generate_path
    queue: asyncio.Queue[WorkItem] = asyncio.Queue()
    for it in items:
        queue.put_nowait(it)
    records: list[RequestRecord] = []
    total = sum(it.num_turns for it in items)
    bar = tqdm(
        total=total,
        desc=f"{spec.label} bs={settings.batch_size}",
        unit="req",
        disable=not settings.show_progress,
    )
    limits = httpx.Limits(
        max_connections=settings.batch_size + 2, max_keepalive_connections=settings.batch_size + 2
    )

    async def worker(client: httpx.AsyncClient) -> None:
        while True:
            try:
                item = queue.get_nowait()
            except asyncio.QueueEmpty:
                return
            answers: list[str] = []
            for turn in range(item.num_turns):
                rec = RequestRecord(
                    request_id=f"{item.prompt_id}/t{turn}/r{settings.repeat}",
                    prompt_id=item.prompt_id,
                    category=item.category,
                    split=settings.split,
                    turn=turn,
                    config_label=spec.label,
                    method=spec.method,
                    k=spec.num_speculative_tokens,
                    batch_size=settings.batch_size,
                    repeat=settings.repeat,
                )
                if item.prompt_ids is not None:
                    ids = list(item.prompt_ids)
                else:
                    assert tokenizer is not None
                    ids = tokenizer.encode_turn(item.user_turns[: turn + 1], answers)
                rec.prompt_tokens = len(ids)
                body = adapter.request_body(
                    engine,
                    ids,
                    settings.max_tokens,
                    settings.temperature,
                    settings.seed,
                    settings.ignore_eos,
                )
                await stream_one(client, url, body, adapter, rec, settings.request_timeout_s)
                records.append(rec)
                if on_record is not None:
                    on_record(rec)
                bar.update(1)
                if not rec.ok:
                    bar.update(item.num_turns - turn - 1)
                    break  # later turns need this turn's answer
                if tokenizer is not None and turn + 1 < item.num_turns:
                    answers.append(tokenizer.answer_text(rec.output_token_ids))

    async with httpx.AsyncClient(
        limits=limits, timeout=settings.request_timeout_s, transport=transport
    ) as client:
        before = await scrape_counters(client, engine.base_url, adapter)
        t0 = time.perf_counter()
        try:
            await asyncio.gather(*(worker(client) for _ in range(settings.batch_size)))
        finally:
            bar.close()
        duration = time.perf_counter() - t0
        after = await scrape_counters(client, engine.base_url, adapter)
    delta = after - before if before is not None and after is not None else None
    return LoadResult(records, delta, duration)


def run_load(*args: object, **kwargs: object) -> LoadResult:
    """Synchronous wrapper of :func:`run_load_async`."""
    return asyncio.run(run_load_async(*args, **kwargs))  # type: ignore[arg-type]
