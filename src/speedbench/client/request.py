"""One streaming request: send token IDs, timestamp every chunk, record any fault on the request.

The request function never raises for a fault of the request or the engine. An HTTP error, a 429
that outlasts its retries, a timeout, a truncated or dropped stream, an error event or a malformed
chunk ends the request with ``RequestRecord.fail(kind, message)``; what was streamed before the
fault stays on the record.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass

import orjson

from speedbench.client.http import ConnectionFailed, StreamConnection
from speedbench.engines.base import EngineAdapter, MalformedChunk
from speedbench.records import RequestRecord


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
        if event.total_tokens is not None:
            new = event.total_tokens - len(record.output_token_ids)
            ids = ids[-new:] if new > 0 else []
        if "verify_steps" in event.extra:
            record.engine_steps = event.extra["verify_steps"]
        if "accepted_steps" in event.extra:
            record.engine_accepted = list(event.extra["accepted_steps"])
            record.engine_drafted = list(event.extra.get("drafted_steps") or [])
        if ids:
            record.chunk_times_s.append(now_ns / 1e9)
            record.chunk_tokens.append(len(ids))
            record.output_token_ids.extend(ids)
            if delays_ns is not None and event.sent_ns:
                delays_ns.append(now_ns - event.sent_ns)
        if event.finish_reason:
            record.finish_reason = event.finish_reason

    attempt = 0
    while True:
        attempt += 1
        record.attempts = attempt
        _reset_stream(record)
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
