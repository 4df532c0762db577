"""One streaming request: send token IDs, timestamp every chunk, record any fault on the request.

The request function never raises for a fault of the request or the engine. An HTTP error, a 429
that outlasts its retries, a timeout, a truncated or dropped stream, an error event or a malformed
chunk ends the request with ``RequestRecord.fail(kind, message)``; what was streamed before the
fault stays on the record.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, field

import orjson

from speedbench.client.http import ConnectionFailed, StreamConnection
from speedbench.engines.base import EngineAdapter, MalformedChunk
from speedbench.records import WITHHELD_TOKEN, RequestRecord


@dataclass(frozen=True)
class RetryPolicy:
    """Retries of HTTP 429 (rate limited); no other fault is retried, so results stay honest.

    Attributes:
        max_retries: 429 answers retried before the request is recorded as ``rate_limited``.
        backoff_s: First wait when the server sends no Retry-After; doubles each retry.
        max_backoff_s: Cap of one wait.
    """

    max_retries: int = 5
    backoff_s: float = 0.5
    max_backoff_s: float = 8.0

    def wait_s(self, attempt: int, retry_after: str | None) -> float:
        """Seconds to wait before attempt ``attempt + 1``."""
        if retry_after is not None:
            try:
                return min(float(retry_after), self.max_backoff_s)
            except ValueError:
                pass  # an HTTP date; fall back to exponential backoff
        return min(self.backoff_s * 2 ** (attempt - 1), self.max_backoff_s)


def error_message(status: int, body: bytes) -> str:
    """``HTTP <status>: <message>``, the message taken from a JSON error body when there is one."""
    text = body.decode(errors="replace")
    try:
        data = orjson.loads(body)
        if isinstance(data, dict):
            err = data.get("error", data)
            msg = err.get("message") if isinstance(err, dict) else err
            text = str(msg or data.get("message") or data.get("detail") or text)
    except orjson.JSONDecodeError:
        pass
    return f"HTTP {status}: {' '.join(text.split())[:300]}"


@dataclass
class DraftCountSteps:
    """Places one-token events into verify steps from the engine's cumulative draft counts.

    llama.cpp streams every token as its own event, the tokens of one verify step back to back,
    and annotates each with the request's drafted and accepted totals so far. Token by token:
    while the current drafted step still has tokens due, a token joins it; otherwise a token
    whose event shows new totals begins a drafted step of ``accepted + 1`` tokens (fewer only
    when the request ends inside it), and any other token is a step of its own (prefill, a step
    with no draft). An event can carry tokens the engine held back (``WITHHELD_TOKEN``
    placeholders before the event's own token); they are placed first, so they complete the
    earlier step or begin the new one as their order says. The deltas are the engine's
    per-step counts of its drafted steps, the same shape as vLLM's per-request metrics.
    """

    drafted: int = 0
    accepted: int = 0
    tokens_due: int = 0
    accepted_steps: list[int] = field(default_factory=list)
    drafted_steps: list[int] = field(default_factory=list)

    def place(self, totals: tuple[int, int] | None, n_tokens: int) -> tuple[int, list[int]]:
        """Tokens that join the previous chunk, and the sizes of the new chunks, in order."""
        joined, new = 0, list[int]()
        for _ in range(n_tokens):
            if self.tokens_due > 0:
                self.tokens_due -= 1
                if new:
                    new[-1] += 1
                else:
                    joined += 1
            elif totals is not None and totals != (self.drafted, self.accepted):
                drafted, accepted = totals
                self.drafted_steps.append(drafted - self.drafted)
                self.accepted_steps.append(accepted - self.accepted)
                self.tokens_due = accepted - self.accepted  # this token is the step's first
                self.drafted, self.accepted = drafted, accepted
                new.append(1)
            else:
                new.append(1)
        return joined, new


def _reset_stream(record: RequestRecord) -> None:
    record.chunk_times_s.clear()
    record.chunk_tokens.clear()
    record.output_token_ids.clear()
    record.finish_reason = None
    record.error = record.error_kind = None


async def stream_one(
    connection: StreamConnection,
    path: str,
    body: bytes,
    adapter: EngineAdapter,
    record: RequestRecord,
    timeout_s: float,
    retry: RetryPolicy | None = None,
    delays_ns: list[int] | None = None,
) -> None:
    """Send one streaming request and fill ``record`` in place; never raises for request faults.

    Args:
        connection: The slot's keep-alive connection to the engine.
        path: The generation endpoint.
        body: The JSON request body.
        adapter: Parses the engine's stream chunks.
        record: Filled with chunk times and token ids, the finish reason or the fault.
        timeout_s: Limit on the whole request, first byte to finish.
        retry: 429 policy (default: :class:`RetryPolicy`).
        delays_ns: If given, receives (socket read time - server send time) of every chunk whose
            server stamps its send time (the synthetic calibration server).

    ``start_s`` is the start of the last attempt, so a 429 backoff does not count as engine
    latency; ``attempts`` says how many were made.
    """
    retry = retry or RetryPolicy()

    def on_line(payload: bytes, now_ns: int) -> None:
        if record.error is not None:
            return
        try:
            event = adapter.parse_event(payload)
        except MalformedChunk as exc:
            record.fail("bad_payload", str(exc))
            return
        if event is None:
            return
        if event.error:
            record.fail("engine_error", event.error)
            return
        ids = event.token_ids
        withheld = 0
        if event.total_tokens is not None:
            new = event.total_tokens - len(record.output_token_ids)
            if new > len(ids):
                # Tokens the engine counted before these but never streamed (llama.cpp):
                # placeholders keep the request's length and positions the engine's.
                withheld = new - len(ids)
                ids = [WITHHELD_TOKEN] * withheld + list(ids)
            else:
                ids = ids[-new:] if new > 0 else []
        if "verify_steps" in event.extra:
            record.engine_steps = event.extra["verify_steps"]
        if "accepted_steps" in event.extra:
            record.engine_accepted = list(event.extra["accepted_steps"])
            record.engine_drafted = list(event.extra.get("drafted_steps") or [])
        if event.draft_totals is not None or withheld:
            # One token per event (llama.cpp): steps come from the draft counts.
            joined, sizes = steps.place(event.draft_totals, len(ids))
            if event.draft_totals is not None:
                record.engine_accepted = list(steps.accepted_steps)
                record.engine_drafted = list(steps.drafted_steps)
        else:
            joined, sizes = 0, [len(ids)] if ids else []
        if joined and not record.chunk_tokens:
            joined, sizes = 0, [joined, *sizes]
        if joined:
            record.chunk_tokens[-1] += joined
        for size in sizes:
            record.chunk_times_s.append(now_ns / 1e9)
            record.chunk_tokens.append(size)
        record.output_token_ids.extend(ids)
        if sizes and delays_ns is not None and event.sent_ns:
            delays_ns.append(now_ns - event.sent_ns)
        if event.finish_reason:
            record.finish_reason = event.finish_reason

    attempt = 0
    while True:
        attempt += 1
        record.attempts = attempt
        _reset_stream(record)
        steps = DraftCountSteps()
        record.start_s = time.perf_counter()
        try:
            async with asyncio.timeout(timeout_s):
                response = await connection.post(path, body, on_line)
        except TimeoutError:
            record.fail(
                "timeout",
                f"request timed out: no finish within {timeout_s:g} s "
                f"({record.output_tokens} tokens received)",
            )
            break
        except ConnectionFailed as exc:
            if record.error is None:
                after = (
                    "" if str(exc).startswith("cannot") else f" after {record.output_tokens} tokens"
                )
                record.fail("connection", f"{exc}{after}")
            break
        if response.status == 429 and attempt <= retry.max_retries:
            await asyncio.sleep(retry.wait_s(attempt, response.headers.get("retry-after")))
            continue
        if response.status != 200:
            kind = (
                "rate_limited"
                if response.status == 429
                else "http_4xx"
                if response.status < 500
                else "http_5xx"
            )
            message = error_message(response.status, response.body)
            if kind == "rate_limited":
                message += f" (after {attempt} attempts)"
            record.fail(kind, message)
        elif record.error is None and record.finish_reason is None:
            record.fail(
                "truncated",
                f"truncated stream: ended after {record.output_tokens} tokens "
                "with no finish reason",
            )
        break
    record.end_s = time.perf_counter()


def encode_body(body: dict[str, object]) -> bytes:
    """JSON bytes of a request body."""
    return orjson.dumps(body)
