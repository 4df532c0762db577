"""A lean HTTP/1.1 streaming client for the load generator's hot path.

General-purpose clients (httpx, aiohttp) hand a stream to the caller through layers of async
iterators; at hundreds of concurrent streams that costs more CPU per chunk than the engine's SD
step takes to produce it, and the timestamp of a chunk is taken only when the caller's coroutine
is scheduled. Here each connection is an ``asyncio.Protocol``: the SSE lines of a read are split
and handed to a callback inside ``data_received``, with one ``perf_counter_ns`` stamp per socket
read, so the time recorded for a chunk is when its bytes left the kernel, not when a coroutine got
round to it.

Only what the load generator needs is implemented: ``POST`` with a JSON body on a keep-alive
connection, responses with ``Content-Length``, chunked transfer encoding or read-until-close. Health
checks, metrics scrapes and everything else use httpx.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from urllib.parse import urlsplit

# (payload of one "data:" line, perf_counter_ns of the socket read that completed it)
LineHandler = Callable[[bytes, int], None]


class ConnectionFailed(Exception):
    """The connection could not be opened, or was closed or reset mid-response.

    Attributes:
        stale: A reused keep-alive connection closed before any byte of the response came.
    """

    stale = False


@dataclass
class Response:
    """Status and headers of a response; ``body`` only for non-streamed (non-200) answers."""

    status: int
    headers: dict[str, str] = field(default_factory=dict)
    body: bytes = b""


class _Protocol(asyncio.Protocol):
    def __init__(self) -> None:
        self.transport: asyncio.Transport | None = None
        self.done: asyncio.Future[Response] | None = None
        self.on_line: LineHandler | None = None
        self.lost = False
        self.reused = False  # the request now on it was not the connection's first
        self._reset_parser()

    def _reset_parser(self) -> None:
        self.buf = bytearray()
        self.response: Response | None = None
        self.mode = ""  # "chunked" | "length" | "close"
        self.remaining = 0  # bytes left in the current chunk or the body
        self.chunk_trailer = False
        self.sse = b""
        self.keep_alive = True

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def connection_lost(self, exc: Exception | None) -> None:
        self.lost = True
        if self.done is not None and not self.done.done():
            if self.response is not None and self.mode == "close":
                self._finish()
            else:
                got = "before a response" if self.response is None else "mid-response"
                detail = f": {exc}" if exc else ""
                failed = ConnectionFailed(f"connection closed {got}{detail}")
                failed.stale = self.reused and self.response is None and not self.buf
                self.done.set_exception(failed)

    def data_received(self, data: bytes) -> None:
        now = time.perf_counter_ns()
        self.buf += data
        if self.response is None and not self._parse_head():
            return
        self._parse_body(now)

    def _parse_head(self) -> bool:
        end = self.buf.find(b"\r\n\r\n")
        if end < 0:
            return False
        lines = bytes(self.buf[:end]).decode("latin-1").split("\r\n")
        del self.buf[: end + 4]
        try:
            status = int(lines[0].split(" ", 2)[1])
        except (IndexError, ValueError):
            self._fail(f"malformed status line {lines[0][:80]!r}")
            return False
        headers = {}
        for line in lines[1:]:
            name, _, value = line.partition(":")
            headers[name.strip().lower()] = value.strip()
        self.response = Response(status, headers)
        self.keep_alive = headers.get("connection", "").lower() != "close"
        if headers.get("transfer-encoding", "").lower() == "chunked":
            self.mode = "chunked"
        elif "content-length" in headers:
            self.mode, self.remaining = "length", int(headers["content-length"])
        else:
            self.mode, self.keep_alive = "close", False
        return True

    def _parse_body(self, now: int) -> None:
        if self.mode == "chunked":
            self._parse_chunked(now)
        else:
            data = bytes(self.buf)
            self.buf.clear()
            if self.mode == "length":
                data = data[: self.remaining]
                self.remaining -= len(data)
            self._body(data, now)
            if self.mode == "length" and self.remaining == 0:
                self._finish()

    def _parse_chunked(self, now: int) -> None:
        # Index arithmetic over the buffer and one body callback per socket read: at high
        # rates a read holds dozens of chunks, and per-chunk copies would dominate.
        buf = self.buf
        pos, end = 0, len(buf)
        pieces = []
        finished = False
        while True:
            if self.chunk_trailer:  # the CRLF after a chunk's data
                if end - pos < 2:
                    break
                pos += 2
                self.chunk_trailer = False
            if self.remaining == 0:
                eol = buf.find(b"\r\n", pos)
                if eol < 0:
                    break
                try:
                    size = int(bytes(buf[pos:eol]).split(b";")[0], 16)
                except ValueError:
                    self._fail(f"malformed chunk size {bytes(buf[pos:eol])[:40]!r}")
                    return
                if size == 0:
                    if buf.find(b"\r\n", eol + 2) < 0:
                        break  # wait for the final CRLF
                    pos, finished = end, True
                    break
                pos = eol + 2
                self.remaining = size
            take = min(self.remaining, end - pos)
            if take == 0:
                break
            pieces.append(bytes(buf[pos : pos + take]))
            pos += take
            self.remaining -= take
            if self.remaining == 0:
                self.chunk_trailer = True
        del buf[:pos]
        if pieces:
            self._body(pieces[0] if len(pieces) == 1 else b"".join(pieces), now)
        if finished:
            self._finish()

    def _body(self, data: bytes, now: int) -> None:
        if self.response is not None and self.response.status != 200:
            self.response.body += data
            return
        lines = (self.sse + data if self.sse else data).split(b"\n")
        self.sse = lines.pop()  # an incomplete last line waits for the next read
        on_line = self.on_line
        for line in lines:
            if line[:5] == b"data:" and on_line is not None:
                on_line(line[5:].strip(), now)

    def _finish(self) -> None:
        if self.done is not None and not self.done.done():
            assert self.response is not None
            self.done.set_result(self.response)

    def _fail(self, message: str) -> None:
        if self.done is not None and not self.done.done():
            self.done.set_exception(ConnectionFailed(message))
        if self.transport is not None:
            self.transport.abort()


class StreamConnection:
    """One keep-alive connection to an HTTP server; one request at a time; reconnects as needed."""

    def __init__(self, base_url: str) -> None:
        parts = urlsplit(base_url)
        if parts.scheme != "http":
            raise ValueError(f"the load generator speaks plain http, not {parts.scheme!r}")
        self.host = parts.hostname or "127.0.0.1"
        self.port = parts.port or 80
        self.prefix = parts.path.rstrip("/")
        self._protocol: _Protocol | None = None

    async def _connect(self) -> tuple[_Protocol, bool]:
        """The open connection (and True), or a new one (and False)."""
        if self._protocol is not None and not self._protocol.lost and self._protocol.keep_alive:
            return self._protocol, True
        self.close()
        loop = asyncio.get_running_loop()
        try:
            _, protocol = await loop.create_connection(_Protocol, self.host, self.port)
        except OSError as exc:
            raise ConnectionFailed(f"cannot connect to {self.host}:{self.port}: {exc}") from None
        self._protocol = protocol
        return protocol, False

    async def post(self, path: str, body: bytes, on_line: LineHandler) -> Response:
        """Send ``body``; SSE ``data:`` lines of a 200 answer go to ``on_line`` as they arrive.

        A kept-alive connection the server closed while it was idle fails before any byte of a
        response (llama.cpp's server closes the connection after each stream, its headers
        notwithstanding); the request is then sent once more on a new connection, as HTTP
        clients do: the server never read it.

        Raises:
            ConnectionFailed: The connection failed before the response ended.
        """
        try:
            return await self._post_once(path, body, on_line)
        except ConnectionFailed as exc:
            if not exc.stale:
                raise
        return await self._post_once(path, body, on_line)

    async def _post_once(self, path: str, body: bytes, on_line: LineHandler) -> Response:
        protocol, reused = await self._connect()
        protocol.reused = reused
        protocol._reset_parser()
        protocol.on_line = on_line
        protocol.done = asyncio.get_running_loop().create_future()
        head = (
            f"POST {self.prefix}{path} HTTP/1.1\r\nHost: {self.host}:{self.port}\r\n"
            f"Content-Type: application/json\r\nAccept: text/event-stream\r\n"
            f"Content-Length: {len(body)}\r\n\r\n"
        ).encode()
        assert protocol.transport is not None
        protocol.transport.write(head + body)
        try:
            return await protocol.done
        except BaseException:
            self.close()  # a half-read response leaves the connection unusable
            raise
        finally:
            protocol.on_line = None

    def close(self) -> None:
        """Close the connection (a later request opens a new one)."""
        if self._protocol is not None and self._protocol.transport is not None:
            self._protocol.transport.close()
        self._protocol = None
