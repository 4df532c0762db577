"""A synthetic OpenAI-compatible token-ID streaming server, for calibrating the client.

It answers ``/v1/completions`` with ``stream: true`` the way vLLM does (SSE chunks carrying
``token_ids`` and ``text``), at a configured time to first chunk, chunk interval and chunk-size
distribution. Chunk sizes mimic speculative decoding: each chunk is one verification step that
accepted ``a`` of ``k`` drafted tokens with conditional acceptance ``accept_p``, so it holds
``a + 1`` tokens. Every chunk carries the server's send time (``sent_ns``, CLOCK_MONOTONIC, the
clock of ``time.perf_counter_ns``) in the JSON and as ``"<sent_ns>;"`` in its text, so any client
on the same host, speedbench's or another's, can measure how late it timestamps what it reads.

It also speaks SGLang's native dialect: ``POST /generate`` with ``input_ids`` streams cumulative
``output_ids`` with ``meta_info`` (``completion_tokens``, ``spec_verify_ct``, a ``finish_reason``
object), the first chunk being the one prefill token, and ``GET /get_server_info`` reports
``avg_spec_accept_length`` the way SGLang computes it (completion tokens / verify steps, over
every request since the start). That lets the SGLang adapter run through the real client here,
where no SGLang can. Like SGLang's (srt/entrypoints/http_server.py), its ``POST /flush_cache``
answers 400 while any request is running.

With ``completions="trtllm"`` ``/v1/completions`` speaks trtllm-serve's dialect, shaped on its
completion post-processor (tensorrt_llm/serve/postprocess_handlers.py): a chunk carries
``token_ids`` only when the request has ``detokenize: false`` (and then empty text), otherwise
text and ``"token_ids": null``; the first chunk is the prefill token. ``GET /metrics`` returns
the iteration statistics since the last read as a JSON list, one iteration per verify step with
``specDecodingStats``, kept in a ``deque(maxlen=iter_stats_max_iterations)`` and emptied on
read, as trtllm-serve keeps them; ``/stats`` counts the iterations made and those the deque lost.

Prompts whose first token id is listed in ``faults`` get a fault instead of a normal answer (HTTP
500, 429, a truncated or dropped stream, a stall, an error event, a malformed chunk), and ids at
or above ``vocab_size`` get vLLM's HTTP 400. ``GET /stats`` reports how many streams were open
at once, which the tests use to check the client's in-flight budget. The prefix-cache resets of
both dialects (``POST /reset_prefix_cache``, ``POST /flush_cache``) empty nothing.

It is a measuring instrument for the client only: it never stands in for an engine in a result.
Run it with ``speedbench synthetic-server`` or :func:`serve_in_subprocess`.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import dataclasses
import json
import random
import subprocess
import sys
import time
from collections import Counter, deque
from collections.abc import Iterator
from pathlib import Path

FAULTS = (
    "http_500",  # 500 with a text body
    "http_429",  # 429 with Retry-After: 0 the first `fault_repeats` times, then a normal answer
    "http_429_always",  # 429 every time
    "truncate",  # half the chunks, then a clean end of body without a finish reason
    "drop",  # half the chunks, then the connection is reset
    "stall",  # the first chunk comes after `stall_s`
    "error_event",  # an error object inside a 200 stream
    "bad_json",  # a chunk that is not JSON
)

COMPLETION_DIALECTS = ("vllm", "trtllm")


@dataclasses.dataclass
class SyntheticOptions:
    """How the synthetic server answers.

    Attributes:
        ttft_s: Delay before the first chunk.
        interval_s: Gap between chunks of one stream (0: as fast as the client reads).
        k: Draft length of the simulated SD; 0 gives one token per chunk.
        accept_p: Conditional acceptance probability of each drafted position.
        vocab_size: Prompt token ids at or above it get HTTP 400.
        faults: First prompt token id -> one of :data:`FAULTS`.
        fault_repeats: How many 429s a ``http_429`` prompt gets before it is served.
        stall_s: How long a ``stall`` prompt waits before its first chunk.
        seed: Seeds the chunk sizes (per request: seed + the prompt's first id).
        completions: Dialect of ``/v1/completions``: ``vllm`` or ``trtllm``.
        iter_stats_max_iterations: The trtllm dialect's bound on kept iteration statistics
            (trtllm-serve's default is 1,000).
        slow_from_s: A host slowdown, injected: from this CLOCK_MONOTONIC time on (the clock
            of ``time.monotonic``, shared by every process of the host), chunk gaps are
            ``slow_factor`` times longer (None: never). Servers given the same time slow
            together, as engines on one drifting host do.
        slow_factor: How much longer a chunk gap is once slowed (1.25: 20 % slower).
    """

    ttft_s: float = 0.0
    interval_s: float = 0.0
    k: int = 0
    accept_p: float = 0.7
    vocab_size: int = 151936
    faults: dict[int, str] = dataclasses.field(default_factory=dict)
    fault_repeats: int = 2
    stall_s: float = 30.0
    seed: int = 0
    completions: str = "vllm"
    iter_stats_max_iterations: int = 1000
    slow_from_s: float | None = None
    slow_factor: float = 1.0

    def gap_s(self) -> float:
        """The gap between two chunks of a stream now (the injected slowdown applied)."""
        if self.slow_from_s is not None and time.monotonic() >= self.slow_from_s:
            return self.interval_s * self.slow_factor
        return self.interval_s

    def __post_init__(self) -> None:
        if self.completions not in COMPLETION_DIALECTS:
            raise ValueError(
                f"completions dialect {self.completions!r} is not one of {COMPLETION_DIALECTS}"
            )
        for first_id, fault in self.faults.items():
            if fault not in FAULTS:
                raise ValueError(f"fault for token {first_id}: {fault!r} is not one of {FAULTS}")


def chunk_sizes(total: int, k: int, accept_p: float, rng: random.Random) -> list[int]:
    """Split ``total`` tokens into SD steps of 1 + accepted drafts (the last step is cut)."""
    sizes = []
    while total > 0:
        accepted = 0
        while accepted < k and rng.random() < accept_p:
            accepted += 1
        size = min(accepted + 1, total)
        sizes.append(size)
        total -= size
    return sizes


class _Stats:
    def __init__(self, iter_stats_max_iterations: int = 1000) -> None:
        self.iteration_stats: deque[dict[str, object]] = deque(maxlen=iter_stats_max_iterations)
        self.reset()

    def reset(self) -> None:
        self.active = 0
        self.max_active = 0
        self.active_at_arrival: Counter[int] = Counter()
        self.requests = 0
        self.chunks = 0
        self.seen: Counter[int] = Counter()
        self.completion_tokens = 0  # SGLang dialect: what avg_spec_accept_length divides
        self.verify_steps = 0
        self.iterations = 0  # TensorRT-LLM dialect: iteration stats made, and lost to the bound
        self.iterations_lost = 0
        self.iteration_stats.clear()

    def add_iteration(self, drafted: int, accepted: int) -> None:
        """One trtllm-serve iteration statistic of one verify step."""
        self.iterations += 1
        if len(self.iteration_stats) == self.iteration_stats.maxlen:
            self.iterations_lost += 1
        sd = {"numDraftTokens": drafted, "numAcceptedTokens": accepted,
              "numRequestsWithDraftTokens": 1 if drafted else 0}  # fmt: skip
        self.iteration_stats.append({"iter": self.iterations, "specDecodingStats": sd})

    def drain_iterations(self) -> list[dict[str, object]]:
        """The kept iteration statistics, emptied (trtllm-serve's /metrics)."""
        out = list(self.iteration_stats)
        self.iteration_stats.clear()
        return out

    def as_dict(self) -> dict[str, object]:
        return {
            "active": self.active,
            "max_active": self.max_active,
            "active_at_arrival": {str(k): v for k, v in sorted(self.active_at_arrival.items())},
            "requests": self.requests,
            "chunks": self.chunks,
            "iterations": self.iterations,
            "iterations_lost": self.iterations_lost,
            "cpu_s": time.process_time(),
        }


class _Connection(asyncio.Protocol):
    """One keep-alive HTTP/1.1 connection; requests on it are served one at a time."""

    def __init__(self, options: SyntheticOptions, stats: _Stats) -> None:
        self.options = options
        self.stats = stats
        self.buffer = bytearray()
        self.transport: asyncio.Transport | None = None
        self.writable = asyncio.Event()
        self.writable.set()
        self.closed = False
        self.busy = False

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        self.writable.set()

    def pause_writing(self) -> None:
        self.writable.clear()

    def resume_writing(self) -> None:
        self.writable.set()

    def data_received(self, data: bytes) -> None:
        self.buffer += data
        self._next_request()

    def _next_request(self) -> None:
        if self.busy:
            return
        end = self.buffer.find(b"\r\n\r\n")
        if end < 0:
            return
        head = bytes(self.buffer[:end]).decode("latin-1").split("\r\n")
        headers = {}
        for line in head[1:]:
            name, _, value = line.partition(":")
            headers[name.strip().lower()] = value.strip()
        length = int(headers.get("content-length", "0"))
        if len(self.buffer) < end + 4 + length:
            return
        body = bytes(self.buffer[end + 4 : end + 4 + length])
        del self.buffer[: end + 4 + length]
        method, path = head[0].split(" ")[:2]
        self.busy = True
        asyncio.get_running_loop().create_task(self._serve(method, path, body))

    async def _serve(self, method: str, path: str, body: bytes) -> None:
        try:
            await self._route(method, path, body)
        finally:
            self.busy = False
            if not self.closed:
                self._next_request()

    def _send(self, status: str, body: bytes, content_type: str, extra: str = "") -> None:
        assert self.transport is not None
        head = (
            f"HTTP/1.1 {status}\r\nContent-Type: {content_type}\r\n"
            f"Content-Length: {len(body)}\r\n{extra}\r\n"
        )
        self.transport.write(head.encode() + body)

    def _json(self, status: str, data: object, extra: str = "") -> None:
        self._send(status, json.dumps(data).encode(), "application/json", extra)

    async def _route(self, method: str, path: str, body: bytes) -> None:
        if path == "/metrics" and self.options.completions == "trtllm":
            self._json("200 OK", self.stats.drain_iterations())
        elif path in ("/health", "/metrics"):
            self._send("200 OK", b"", "text/plain")
        elif path == "/version":
            self._json("200 OK", {"version": "synthetic"})
        elif path == "/v1/models":
            self._json("200 OK", {"object": "list", "data": [{"id": "synthetic"}]})
        elif path == "/stats":
            self._json("200 OK", self.stats.as_dict())
        elif path == "/reset" and method == "POST":
            self.stats.reset()
            self._json("200 OK", {"reset": True})
        elif path == "/flush_cache" and method == "POST":
            # SGLang refuses while requests run; there is no cache here to empty.
            if self.stats.active:
                self._send("400 Bad Request", b"Cache not flushed: requests are running.\n",
                           "text/plain")  # fmt: skip
            else:
                self._send("200 OK", b"Cache flushed.\n", "text/plain")
        elif path == "/reset_prefix_cache" and method == "POST":
            self._json("200 OK", {"success": True})
        elif path == "/get_server_info":  # SGLang 0.5.5's spelling; it serves no /server_info
            steps = self.stats.verify_steps
            al = self.stats.completion_tokens / steps if steps else None
            info = {"internal_states": [{"avg_spec_accept_length": al}], "version": "synthetic"}
            self._json("200 OK", info)
        elif path == "/v1/completions" and method == "POST":
            request = json.loads(body)
            prompt = request.get("prompt")
            token_prompt = isinstance(prompt, list) and prompt and isinstance(prompt[0], int)
            ids = prompt if token_prompt else []
            await self._complete(request, ids, int(request.get("max_tokens") or 16), sglang=False)
        elif path == "/generate" and method == "POST":
            request = json.loads(body)
            max_tokens = (request.get("sampling_params") or {}).get("max_new_tokens") or 16
            await self._complete(request, request.get("input_ids") or [], max_tokens, sglang=True)
        else:
            self._json("404 Not Found", {"error": {"message": f"no route {path}"}})

    async def _complete(self, request: dict, ids: list[int], total: int, sglang: bool) -> None:
        opts, stats = self.options, self.stats
        bad = [t for t in ids if not 0 <= t < opts.vocab_size]
        if bad:
            message = f"Token id {bad[0]} is out of vocabulary"
            self._json("400 Bad Request", {"error": {"message": message, "code": 400}})
            return
        first = ids[0] if ids else 0
        stats.seen[first] += 1
        fault = opts.faults.get(first)
        if fault == "http_500":
            self._send("500 Internal Server Error", b"Internal Server Error\n  boom", "text/plain")
            return
        if fault == "http_429_always" or (
            fault == "http_429" and stats.seen[first] <= opts.fault_repeats
        ):
            self._json("429 Too Many Requests", {"error": "slow down"}, "Retry-After: 0\r\n")
            return
        rng = random.Random(opts.seed + first)
        trtllm = not sglang and opts.completions == "trtllm"
        if sglang or trtllm:  # prefill yields one token, then one chunk per verification step
            sizes = [1, *chunk_sizes(total - 1, opts.k, opts.accept_p, rng)]
        else:
            sizes = chunk_sizes(total, opts.k, opts.accept_p, rng)
        if fault in ("truncate", "drop"):
            sizes = sizes[: max(1, len(sizes) // 2)]
        stats.requests += 1
        stats.active += 1
        stats.active_at_arrival[stats.active] += 1
        stats.max_active = max(stats.max_active, stats.active)
        try:
            if sglang:
                await self._stream_sglang(first, sizes, fault)
            elif trtllm:
                await self._stream_trtllm(request, first, sizes, fault)
            else:
                await self._stream(request, first, sizes, fault)
        finally:
            stats.active -= 1

    async def _stream(self, request: dict, first: int, sizes: list[int], fault: str | None) -> None:
        opts, transport = self.options, self.transport
        assert transport is not None
        transport.write(
            b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n"
            b"Transfer-Encoding: chunked\r\n\r\n"
        )
        delay = opts.stall_s if fault == "stall" else opts.ttft_s
        if delay:
            await asyncio.sleep(delay)
        if fault == "error_event":
            self._event(b'{"error": {"message": "engine overloaded", "code": 503}}')
        elif fault == "bad_json":
            self._event(b'{"choices": [{"token_ids": [1, 2')
        if fault in ("error_event", "bad_json"):
            transport.write(b"0\r\n\r\n")
            return
        loop = asyncio.get_running_loop()
        next_at = loop.time()
        position = first
        for size in sizes:
            if self.closed:
                return
            tokens = ",".join(str((position + i) % opts.vocab_size) for i in range(size))
            position += size
            sent = time.perf_counter_ns()
            self._event(
                b'{"object":"text_completion","model":"synthetic","choices":[{"index":0,'
                b'"text":"%d;","token_ids":[%s],"finish_reason":null}],"sent_ns":%d}'
                % (sent, tokens.encode(), sent)
            )
            self.stats.chunks += 1
            if opts.interval_s:
                next_at += opts.gap_s()
                await asyncio.sleep(max(0.0, next_at - loop.time()))
            else:
                await asyncio.sleep(0)  # let other streams interleave
            await self.writable.wait()
        if fault == "drop":
            transport.abort()
            return
        if fault != "truncate":
            self._event(
                b'{"object":"text_completion","model":"synthetic","choices":[{"index":0,'
                b'"text":"","token_ids":[],"finish_reason":"length"}]}'
            )
            if (request.get("stream_options") or {}).get("include_usage"):
                total = sum(sizes)
                self._event(b'{"choices":[],"usage":{"completion_tokens":%d}}' % total)
            self._event(b"[DONE]")
        transport.write(b"0\r\n\r\n")

    async def _stream_trtllm(
        self, request: dict, first: int, sizes: list[int], fault: str | None
    ) -> None:
        """trtllm-serve's completion stream: ids only without detokenization."""
        opts, transport = self.options, self.transport
        assert transport is not None
        transport.write(
            b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n"
            b"Transfer-Encoding: chunked\r\n\r\n"
        )
        detokenize = request.get("detokenize", True)
        position = first
        for step, size in enumerate(sizes):
            if self.closed:
                return
            await asyncio.sleep(opts.ttft_s if step == 0 else opts.interval_s)
            ids = [(position + i) % opts.vocab_size for i in range(size)]
            position += size
            if step:
                self.stats.add_iteration(opts.k, size - 1)
            last = step == len(sizes) - 1 and fault not in ("truncate", "drop")
            choice = {
                "index": 0,
                "text": " ".join(map(str, ids)) if detokenize else "",
                "token_ids": None if detokenize else ids,
                "finish_reason": "length" if last else None,
                "stop_reason": None,
                "avg_decoded_tokens_per_iter": None,
            }
            chunk = {"id": f"cmpl-{first}", "object": "text_completion", "model": "synthetic",
                     "choices": [choice], "usage": None}  # fmt: skip
            self._event(json.dumps(chunk).encode())
            self.stats.chunks += 1
            await self.writable.wait()
        if fault == "drop":
            transport.abort()
            return
        if fault != "truncate":
            if (request.get("stream_options") or {}).get("include_usage", False):
                usage = {"prompt_tokens": 1, "completion_tokens": sum(sizes),
                         "total_tokens": 1 + sum(sizes)}  # fmt: skip
                self._event(json.dumps({"choices": [], "model": "synthetic",
                                        "usage": usage}).encode())  # fmt: skip
            self._event(b"[DONE]")
        transport.write(b"0\r\n\r\n")

    async def _stream_sglang(self, first: int, sizes: list[int], fault: str | None) -> None:
        """SGLang's /generate stream: cumulative output_ids, counts in meta_info."""
        opts, transport = self.options, self.transport
        assert transport is not None
        transport.write(
            b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n"
            b"Transfer-Encoding: chunked\r\n\r\n"
        )
        if fault == "error_event":
            self._event(b'{"error": {"message": "engine overloaded", "code": 503}}')
            transport.write(b"0\r\n\r\n")
            return
        ids: list[int] = []
        for step, size in enumerate(sizes):
            if self.closed:
                return
            await asyncio.sleep(opts.ttft_s if step == 0 else opts.interval_s)
            ids += [(first + len(ids) + i) % opts.vocab_size for i in range(size)]
            last = step == len(sizes) - 1 and fault not in ("truncate", "drop")
            finish = {"type": "length", "length": len(ids)} if last else None
            meta = {
                "id": f"synthetic-{first}",
                "finish_reason": finish,
                "prompt_tokens": 1,
                "completion_tokens": len(ids),
                "spec_verify_ct": step,  # the prefill chunk is no verification step
            }
            self._event(json.dumps({"text": "", "output_ids": ids, "meta_info": meta}).encode())
            self.stats.chunks += 1
            await self.writable.wait()
        if fault == "drop":
            transport.abort()
            return
        if fault != "truncate":
            self.stats.completion_tokens += len(ids)
            self.stats.verify_steps += len(sizes) - 1
            self._event(b"[DONE]")
        transport.write(b"0\r\n\r\n")

    def _event(self, payload: bytes) -> None:
        data = b"data: " + payload + b"\n\n"
        assert self.transport is not None
        self.transport.write(b"%x\r\n%s\r\n" % (len(data), data))


async def serve(options: SyntheticOptions, host: str = "127.0.0.1", port: int = 8100) -> None:
    """Serve forever."""
    stats = _Stats(options.iter_stats_max_iterations)
    loop = asyncio.get_running_loop()
    server = await loop.create_server(
        lambda: _Connection(options, stats), host, port, backlog=4096, reuse_address=True
    )
    print(f"synthetic server on http://{host}:{port}", flush=True)
    async with server:
        await server.serve_forever()


def run(options: SyntheticOptions, host: str, port: int) -> None:
    """Serve on uvloop where available."""
    try:
        import uvloop

        uvloop.run(serve(options, host, port))
    except ImportError:
        asyncio.run(serve(options, host, port))


@contextlib.contextmanager
def serve_in_subprocess(
    options: SyntheticOptions, port: int, log_path: Path | None = None
) -> Iterator[str]:
    """Run the server in its own process (its own core); yield its base URL; always stop it."""
    import httpx

    cmd = [
        sys.executable,
        "-m",
        "speedbench.testing.synthetic",
        "--port",
        str(port),
        *to_args(options),
    ]
    log = open(log_path, "wb") if log_path else subprocess.DEVNULL  # noqa: SIM115
    proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 30
        while True:
            if proc.poll() is not None:
                raise RuntimeError(f"synthetic server exited with code {proc.returncode}")
            with contextlib.suppress(httpx.TransportError):
                if httpx.get(url + "/health", timeout=1).status_code == 200:
                    break
            if time.monotonic() > deadline:
                raise RuntimeError(f"synthetic server not up at {url} after 30 s")
            time.sleep(0.1)
        yield url
    finally:
        proc.terminate()
        proc.wait(timeout=10)
        if log_path:
            log.close()  # type: ignore[union-attr]


def to_args(options: SyntheticOptions) -> list[str]:
    """Command-line arguments that rebuild ``options``."""
    args = [
        f"--ttft-s={options.ttft_s}",
        f"--interval-s={options.interval_s}",
        f"--k={options.k}",
        f"--accept-p={options.accept_p}",
        f"--vocab-size={options.vocab_size}",
        f"--fault-repeats={options.fault_repeats}",
        f"--stall-s={options.stall_s}",
        f"--seed={options.seed}",
        f"--completions={options.completions}",
        f"--iter-stats-max-iterations={options.iter_stats_max_iterations}",
        f"--slow-factor={options.slow_factor}",
    ]
    if options.slow_from_s is not None:
        args.append(f"--slow-from-s={options.slow_from_s!r}")
    return args + [f"--fault={tok}={fault}" for tok, fault in options.faults.items()]


def parse_args(argv: list[str] | None = None) -> tuple[SyntheticOptions, str, int]:
    """Options, host and port from the command line."""
    p = argparse.ArgumentParser(prog="speedbench synthetic-server", description=__doc__)
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=8100)
    p.add_argument("--ttft-s", type=float, default=0.0)
    p.add_argument("--interval-s", type=float, default=0.0)
    p.add_argument("--k", type=int, default=0)
    p.add_argument("--accept-p", type=float, default=0.7)
    p.add_argument("--vocab-size", type=int, default=151936)
    p.add_argument("--fault-repeats", type=int, default=2)
    p.add_argument("--stall-s", type=float, default=30.0)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--fault", action="append", default=[], metavar="TOKEN=KIND")
    p.add_argument("--completions", choices=COMPLETION_DIALECTS, default="vllm")
    p.add_argument("--iter-stats-max-iterations", type=int, default=1000)
    p.add_argument("--slow-from-s", type=float, default=None)
    p.add_argument("--slow-factor", type=float, default=1.0)
    a = p.parse_args(argv)
    faults = {}
    for item in a.fault:
        token, _, kind = item.partition("=")
        faults[int(token)] = kind
    options = SyntheticOptions(
        a.ttft_s, a.interval_s, a.k, a.accept_p, a.vocab_size, faults, a.fault_repeats,
        a.stall_s, a.seed, a.completions, a.iter_stats_max_iterations, a.slow_from_s,
        a.slow_factor,
    )  # fmt: skip
    return options, a.host, a.port


if __name__ == "__main__":
    opts, host, port = parse_args()
    run(opts, host, port)
