"""What a sweep's numbers rest on: the engine and its release, the dtype, the CPU, the protocol.

One model, :class:`SweepProvenance`, is written into a sweep's ``summary.json`` and, beside
each DVC stage's figures, into ``provenance.json``; ``verify-reference`` reads it back to
decide what a fresh run can promise against a reference. Greedy outputs are exact between two
runs only on one engine and release, one dtype and one CPU kernel family (no kernel cap in
between), and two runs that generated differently (another ``max_tokens``, EOS rule,
temperature or number of turns) are not compared at all.
"""

from __future__ import annotations

import json
from pathlib import Path

from pydantic import Field

from speedbench.figures import Result
from speedbench.hostcheck.cpu import CpuInfo


class GenerationProtocol(Result):
    """What a sweep generated: acceptance of two runs compares only under the same protocol."""

    max_tokens: int
    ignore_eos: bool
    temperature: float
    # The most turns any question was sent with (1: first turns only).
    max_turns: int

    def difference(self, other: GenerationProtocol) -> str:
        """How ``other`` generated otherwise: ``name mine vs theirs`` per field ('' if alike)."""
        mine, theirs = self.model_dump(), other.model_dump()
        return "; ".join(
            f"{name} {mine[name]} vs {theirs[name]}" for name in mine if mine[name] != theirs[name]
        )


class SweepContext(Result):
    """The engine's context, raised for prompts longer than its default (run/context.py).

    Attributes:
        max_model_len: The context the engines were launched with.
        need_by_split: Each longer split's longest prompt plus its answer, in tokens.
        target_trained: The target's trained context (None: not known from its config).
        draft_trained: The draft's (None: no draft, or not known).
    """

    max_model_len: int
    need_by_split: dict[str, int]
    target_trained: int | None = None
    draft_trained: int | None = None

    @property
    def beyond_draft(self) -> dict[str, int]:
        """The splits whose prompts and answers exceed the draft's trained context."""
        if self.draft_trained is None:
            return {}
        return {s: n for s, n in self.need_by_split.items() if n > self.draft_trained}


class SweepProvenance(Result):
    """The engine, dtype, CPU and protocol a sweep's numbers rest on.

    Attributes:
        engine: The engine kind (``vllm``, ``sglang``, ``trtllm``, ``llamacpp``).
        launcher: How it ran (``local``, ``docker``, ``external``).
        dtype: The dtype it computed in (``auto`` resolved where speedbench resolves it).
        engine_versions: The release each SD configuration's engine reported, by label.
        engine_hosts: On a work pool, the host each configuration ran on; None elsewhere.
        host_cpu: The engine host's CPU; None where the configurations ran on several hosts
            (a work pool: the gathering host's CPU says nothing about them).
        protocol: What was generated; None in files written before it was recorded.
        placeholders_skipped: SPEED-Bench rows left out as placeholders, by split (None
            unless the sweep skipped them): the figures rest on fewer questions.
        context: The engine's context where the sweep raised it for long prompts.
    """

    engine: str | None = None
    launcher: str | None = None
    dtype: str | None = None
    engine_versions: dict[str, str] = Field(default_factory=dict)
    engine_hosts: dict[str, str] | None = None
    host_cpu: CpuInfo | None = None
    protocol: GenerationProtocol | None = None
    placeholders_skipped: dict[str, int] | None = None
    context: SweepContext | None = None

    @classmethod
    def read(cls, path: Path) -> SweepProvenance | None:
        """A stage's ``provenance.json`` (None where there is none)."""
        if not path.exists():
            return None
        data = json.loads(path.read_text())
        data.pop("schema_version", None)
        return cls.model_validate(data)

    def file_form(self, schema_version: int) -> dict[str, object]:
        """``provenance.json``'s content: the fields that are set, and the schema."""
        return {**self.model_dump(mode="json", exclude_none=True), "schema_version": schema_version}
