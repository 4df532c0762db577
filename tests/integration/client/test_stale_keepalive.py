"""A kept-alive connection the server closed while idle: the request goes again on a new one.

llama.cpp's server announces keep-alive yet closes the connection after each stream; a client
that reuses it fails the next request "before a response". An in-process server that reads the
second request on a connection and closes it unanswered shows the retry, and that a connection
closed mid-response is still a failure.
"""

from __future__ import annotations

import asyncio

import pytest

from speedbench.client.http import ConnectionFailed, StreamConnection

ANSWER = (
    b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n"
    b"Keep-Alive: timeout=5, max=100\r\n\r\n"
    b'10\r\ndata: {"n": 1}\n\n\r\n0\r\n\r\n'
)


async def serve(mid_response: bool) -> tuple[asyncio.Server, list[int]]:
    """A server that answers each connection's first request and closes on its second.

    With ``mid_response`` it sends the head and part of the body first. It also returns the
    count of requests each connection read.
    """
    seen: list[int] = []

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        seen.append(0)
        index = len(seen) - 1
        while True:
            head = await reader.readuntil(b"\r\n\r\n")
            length = int(head.lower().split(b"content-length: ")[1].split(b"\r\n")[0])
            await reader.readexactly(length)
            seen[index] += 1
            if seen[index] == 1:
                writer.write(ANSWER)
                await writer.drain()
                continue
            if mid_response:
                writer.write(ANSWER[: ANSWER.index(b"\r\n\r\n") + 12])
                await writer.drain()
            writer.close()
            return

    server = await asyncio.start_server(handle, "127.0.0.1", 0)
    return server, seen


async def two_posts(mid_response: bool) -> tuple[list[list[bytes]], list[int]]:
    server, seen = await serve(mid_response)
    port = server.sockets[0].getsockname()[1]
    conn = StreamConnection(f"http://127.0.0.1:{port}")
    lines: list[list[bytes]] = []
    try:
        for _ in range(2):
            lines.append([])
            await conn.post("/completion", b"{}", lambda payload, _ns: lines[-1].append(payload))
    finally:
        conn.close()
        server.close()
    return lines, seen


def test_request_on_a_connection_the_server_dropped_goes_again_on_a_new_one():
    lines, seen = asyncio.run(two_posts(mid_response=False))
    assert lines == [[b'{"n": 1}'], [b'{"n": 1}']]
    assert seen == [2, 1]  # the second request was read on the first connection, then resent


def test_a_connection_closed_mid_response_is_not_retried():
    with pytest.raises(ConnectionFailed, match="connection closed mid-response"):
        asyncio.run(two_posts(mid_response=True))
