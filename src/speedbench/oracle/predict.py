"""The acceptance oracle: a baseline level's greedy answers replayed under a drafter, every k.

From a measured no-SD level (its records carry the prompt ids sent and the answer ids
received) and a drafter, :func:`predict_level` gives each request's predicted greedy SD stream
for k = 1..K (:mod:`speedbench.oracle.steps`), reads it with the same acceptance views as a
measured level (:mod:`speedbench.metrics.views`: SPEED-Bench's and the stream's, overall and
per category, with bootstrap intervals), and :func:`check_measured` compares it, request by
request and step by step, with an SD level the sweep did measure. The result is a level of its
own kind, ``oracle``: no speed, only acceptance, and what it cost to compute.

Where the measured steps differ from the predicted ones the engine was not lossless on that
request (its answer differs from the baseline's: bf16 verify steps, quantised weights) or it
merged steps in its stream; :class:`OracleCheck` counts each.
"""

from __future__ import annotations

import dataclasses
import time
from collections import defaultdict
from collections.abc import Mapping, Sequence
from typing import Any, Literal

from pydantic import Field

from speedbench.figures import Figure, Result, ViewFigures
from speedbench.metrics.views import speed_bench_view, stream_view
from speedbench.oracle.draft import DraftPass
from speedbench.oracle.steps import (
    PredictedStream,
    chain_stream,
    draft_model_stream,
    ngram_streams,
)
from speedbench.records import WITHHELD_TOKEN, RequestRecord, measured
from speedbench.results import SCHEMA_VERSION, finite

OracleDrafter = Literal["draft_model", "ngram", "eagle3"]
ORACLE_DRAFTERS: tuple[str, ...] = ("draft_model", "ngram", "eagle3")
# vLLM's prompt lookup as speedbench launches it (engines/vllm.py): n-grams of 1 to 4 tokens.
NGRAM_MIN, NGRAM_MAX = 1, 4
# Mismatching requests a check names (all are counted).
NAMED_MISMATCHES = 20


class StepMismatch(Result):
    """The first step of one request where the measured stream left the predicted one."""

    prompt_id: str
    turn: int
    repeat: int
    step: int
    predicted: int
    measured: int


class OracleCheck(Result):
    """An SD level the sweep measured, against the oracle's prediction for the same k.

    Attributes:
        config: The measured level's config label (``draft_model-k3``).
        batch_size: Its batch size.
        compared: Requests present in both, successful in both.
        identical: Of those, requests whose every step (chunk) was as predicted.
        output_differs: Requests whose answer differs from the baseline's: the engine was not
            lossless on them, so the prediction (made on the baseline's answer) cannot hold.
        steps_differ: Requests with the baseline's answer but other steps.
        mismatches: The first steps that differ, up to ``NAMED_MISMATCHES`` requests.
        predicted_al / measured_al: The speed_bench view's Average_AL over the compared
            requests, predicted and measured.
    """

    config: str
    batch_size: int = 0
    compared: int
    identical: int
    output_differs: int
    steps_differ: int
    mismatches: list[StepMismatch] = Field(default_factory=list)
    predicted_al: Figure = None
    measured_al: Figure = None


class OracleBreakEven(Result):
    """The break-even model at one batch size for one predicted k."""

    batch_size: int
    draft_cost_ratio: Figure
    expected_speedup: Figure
    # Where the sweep measured this drafter at this k and batch size.
    measured_speedup: Figure = None


class OracleK(Result):
    """The oracle's acceptance at one draft length."""

    k: int
    views: dict[str, ViewFigures]
    per_category: dict[str, dict[str, ViewFigures]]
    # Steps after the prefill that had a proposal (1 for a draft model; below for n-gram).
    drafted_fraction: Figure
    break_even: list[OracleBreakEven] = Field(default_factory=list)
    checks: list[OracleCheck] = Field(default_factory=list)

    def expected_at(self, batch_size: int) -> OracleBreakEven | None:
        """The break-even figures at ``batch_size`` (None where the draft cost is unknown)."""
        return next((b for b in self.break_even if b.batch_size == batch_size), None)


def average_al(figures: OracleK | None, category: str | None = None) -> float | None:
    """SPEED-Bench's Average_AL at one k, or a category's Category_AL (None: not predicted)."""
    if figures is None:
        return None
    views = figures.views if category is None else figures.per_category.get(category, {})
    view = views.get("speed_bench")
    return view.al_request_mean if view is not None else None


class VocabSource(Result):
    """What a pruned vocabulary was counted on."""

    corpora: list[str]
    documents: int
    tokens: int


class VocabFigures(Result):
    """The draft restricted to its ``size`` most frequent tokens, at every k.

    ``coverage``: the share of the baseline's answer tokens that are kept (the paper's
    coverage table), overall and per category.
    """

    size: int
    kept_sha256: str
    coverage: Figure
    coverage_by_category: dict[str, Figure]
    by_k: list[OracleK]


class TreeFigures(Result):
    """A static tree's acceptance: ``figures.k`` is its depth."""

    shape: str
    breadths: list[int]
    tokens_per_step: int
    figures: OracleK


class DraftVariants(Result):
    """The pruned-vocabulary and tree drafters of one draft-model oracle level."""

    vocab_source: VocabSource | None = None
    vocabs: list[VocabFigures] = Field(default_factory=list)
    trees: list[TreeFigures] = Field(default_factory=list)


class OracleLevel(Result):
    """One drafter replayed over one baseline level, for every draft length."""

    kind: Literal["oracle"] = "oracle"
    drafter: OracleDrafter
    draft_model: str | None = None
    dtype: str | None = None
    ngram_min: int | None = None
    ngram_max: int | None = None
    split: str
    batch_size: int
    baseline: str
    requests: int
    questions: int
    left_out: dict[str, int] = Field(default_factory=dict)
    seconds: float
    tokens: int
    by_k: list[OracleK]
    # Batch size -> the k of the highest expected speedup there.
    best_k: dict[int, int] = Field(default_factory=dict)
    # A draft model's pruned vocabularies and trees (speedbench.oracle.variants).
    variants: DraftVariants | None = None
    # Its shape has not changed since schema 1, whose files therefore read as they are.
    schema_version: int = SCHEMA_VERSION

    @property
    def label(self) -> str:
        """``oracle-draft_model`` or ``oracle-ngram``."""
        return f"oracle-{self.drafter}"

    @classmethod
    def of(
        cls,
        prediction: Prediction,
        drafter: OracleDrafter,
        by_k: list[OracleK],
        baseline: str,
        *,
        draft_model: str | None = None,
        dtype: str | None = None,
        ngram: tuple[int, int] = (NGRAM_MIN, NGRAM_MAX),
    ) -> OracleLevel:
        """The level of a prediction; split and batch size are its baseline records'."""
        first = prediction.requests[0]
        is_draft = drafter != "ngram"  # weights: a draft model or an EAGLE-3 head
        return cls(
            drafter=drafter,
            draft_model=draft_model if is_draft else None,
            dtype=dtype if is_draft else None,
            ngram_min=None if is_draft else ngram[0],
            ngram_max=None if is_draft else ngram[1],
            split=first.split,
            batch_size=first.batch_size,
            baseline=baseline,
            requests=len(prediction.requests),
            questions=len({r.prompt_id for r in prediction.requests}),
            left_out=prediction.left_out,
            seconds=prediction.seconds,
            tokens=prediction.tokens,
            by_k=by_k,
        )

    def at(self, k: int) -> OracleK | None:
        """The figures at draft length ``k`` (None if not predicted)."""
        return next((f for f in self.by_k if f.k == k), None)


@dataclasses.dataclass(frozen=True)
class Prediction:
    """Predicted streams of the usable baseline requests, per k, and what they cost."""

    requests: list[RequestRecord]
    streams: dict[int, list[PredictedStream]]
    left_out: dict[str, int]
    seconds: float
    tokens: int
    # A draft model's teacher-forced pass (its ranks and pruned matches feed the variants).
    draft_pass: DraftPass | None = None


def usable(records: Sequence[RequestRecord]) -> tuple[list[RequestRecord], dict[str, int]]:
    """The baseline requests the oracle can replay, and how many it could not, by reason."""
    kept: list[RequestRecord] = []
    left: defaultdict[str, int] = defaultdict(int)
    for r in measured(records):
        if not r.ok:
            left["failed"] += 1
        elif not r.prompt_token_ids:
            left["no_prompt_ids"] += 1
        elif not r.output_token_ids or WITHHELD_TOKEN in r.output_token_ids:
            left["no_answer_ids"] += 1
        else:
            kept.append(r)
    return kept, dict(left)


def predict(
    records: Sequence[RequestRecord],
    drafter: OracleDrafter,
    ks: Sequence[int],
    *,
    draft: Any = None,
    ngram: tuple[int, int] = (NGRAM_MIN, NGRAM_MAX),
    max_model_len: int | None = None,
    kept: Mapping[int, Sequence[int]] | None = None,
    show_progress: bool = True,
) -> Prediction:
    """Every usable request's predicted stream at each k in ``ks``.

    ``draft`` is the loaded draft model (:func:`speedbench.oracle.draft.load_draft`) for the
    ``draft_model`` drafter, the head beside its target
    (:class:`speedbench.eagle3.chains.Eagle3Drafter`) for ``eagle3``; ``ngram`` the (min, max)
    n-gram sizes of prompt lookup; ``kept`` the pruned vocabularies (size -> token ids) the
    draft's pass also reads.
    """
    usable_requests, left = usable(records)
    if not usable_requests:
        reasons = ", ".join(f"{n} {why}" for why, n in left.items()) or "no records"
        raise ValueError(f"the baseline has no request the oracle can replay ({reasons})")
    started = time.perf_counter()
    prompts = [r.prompt_token_ids or [] for r in usable_requests]
    answers = [r.output_token_ids for r in usable_requests]
    streams: dict[int, list[PredictedStream]] = {k: [] for k in ks}
    passed = None
    if drafter == "draft_model":
        if draft is None:
            raise ValueError("the draft_model oracle needs the draft model")
        from speedbench.oracle.draft import teacher_forced_matches

        passed = teacher_forced_matches(draft, prompts, answers, kept=kept,
                                        show_progress=show_progress)  # fmt: skip
        for k in ks:
            streams[k] = [draft_model_stream(m, k) for m in passed.matches]
    elif drafter == "eagle3":
        if draft is None:
            raise ValueError("the eagle3 oracle needs the head and its target (Eagle3Drafter)")
        chains = draft.chains(prompts, answers, max(ks), show_progress=show_progress)
        for k in ks:
            streams[k] = [chain_stream(c, k) for c in chains]
    elif drafter == "ngram":
        for prompt, answer in zip(prompts, answers, strict=True):
            for k, stream in ngram_streams(prompt, answer, ks, *ngram, max_model_len).items():
                streams[k].append(stream)
    else:
        raise ValueError(f"unknown oracle drafter {drafter!r}; expected one of {ORACLE_DRAFTERS}")
    tokens = sum(len(p) + len(a) for p, a in zip(prompts, answers, strict=True))
    seconds = time.perf_counter() - started
    return Prediction(usable_requests, streams, left, seconds, tokens, passed)


def predicted_records(
    requests: Sequence[RequestRecord], streams: Sequence[PredictedStream], method: str, k: int
) -> list[RequestRecord]:
    """The baseline's records with the predicted chunks: what the views read."""
    return [
        dataclasses.replace(
            r,
            config_label=f"oracle-{method}-k{k}",
            method=method,
            k=k,
            chunk_tokens=list(s.chunks),
            chunk_times_s=[],
            engine_accepted=list(s.accepted),
            engine_drafted=None,
            engine_steps=None,
        )
        for r, s in zip(requests, streams, strict=True)
    ]


def _views(records: Sequence[RequestRecord], k: int, eos_id: int | None) -> dict[str, ViewFigures]:
    figures = {
        "speed_bench": speed_bench_view(records, k, eos_id),
        "stream": stream_view(records, k),
    }
    return {n: ViewFigures.model_validate(finite(v.model_dump())) for n, v in figures.items()}


def figures_at(prediction: Prediction, drafter: str, k: int, eos_id: int | None) -> OracleK:
    """The views of the prediction at ``k``, overall and per category."""
    streams = prediction.streams[k]
    records = predicted_records(prediction.requests, streams, drafter, k)
    by_cat: dict[str, list[RequestRecord]] = defaultdict(list)
    for r in records:
        by_cat[r.category].append(r)
    steps = sum(len(s.chunks) - 1 for s in streams)
    drafted = sum(sum(s.drafted) for s in streams)
    return OracleK(
        k=k,
        views=_views(records, k, eos_id),
        per_category={c: _views(rs, k, eos_id) for c, rs in sorted(by_cat.items())},
        drafted_fraction=drafted / steps if steps else None,
    )


def _key(r: RequestRecord) -> tuple[str, int, int]:
    return r.prompt_id, r.turn, r.repeat


def check_measured(
    prediction: Prediction,
    k: int,
    measured_records: Sequence[RequestRecord],
    config: str,
    eos_id: int | None,
    batch_size: int = 0,
) -> OracleCheck:
    """A measured SD level at ``k`` against the prediction, request by request, step by step.

    Requests pair by (question, turn, repeat). A request whose measured answer differs from
    the baseline's counts as ``output_differs``; of the rest, those whose chunks are not the
    predicted ones are named with their first differing step.
    """
    predicted = {
        _key(r): (r, s) for r, s in zip(prediction.requests, prediction.streams[k], strict=True)
    }
    compared = identical = differs = 0
    mismatches: list[StepMismatch] = []
    pairs_measured, pairs_predicted = [], []
    for m in measured(measured_records):
        if not m.ok or _key(m) not in predicted:
            continue
        base, stream = predicted[_key(m)]
        compared += 1
        pairs_measured.append(m)
        pairs_predicted.append(dataclasses.replace(base, chunk_tokens=list(stream.chunks)))
        if m.output_token_ids != base.output_token_ids:
            differs += 1
            continue
        chunks = [c for c in m.chunk_tokens if c > 0]
        if chunks == stream.chunks:
            identical += 1
            continue
        step = next(
            (i for i, (a, b) in enumerate(zip(stream.chunks, chunks, strict=False)) if a != b),
            min(len(chunks), len(stream.chunks)),
        )
        mismatches.append(
            StepMismatch(
                prompt_id=m.prompt_id,
                turn=m.turn,
                repeat=m.repeat,
                step=step,
                predicted=stream.chunks[step] if step < len(stream.chunks) else 0,
                measured=chunks[step] if step < len(chunks) else 0,
            )
        )
    mean = lambda rs: speed_bench_view(rs, k, eos_id).al_request_mean if rs else None  # noqa: E731
    return OracleCheck(
        config=config,
        batch_size=batch_size,
        compared=compared,
        identical=identical,
        output_differs=differs,
        steps_differ=len(mismatches),
        mismatches=mismatches[:NAMED_MISMATCHES],
        predicted_al=finite(mean(pairs_predicted)),
        measured_al=finite(mean(pairs_measured)),
    )


def break_even_at(
    figures: OracleK,
    batch_size: int,
    draft_cost_ratio: float | None,
    measured_speedup: float | None = None,
) -> OracleBreakEven | None:
    """The break-even model's expected speedup of ``figures`` at one batch size.

    AL per target step (the stream view, token-weighted) over the step's cost in target steps,
    ``1 + f k c``: ``f`` the fraction of steps that drafted (an undrafted n-gram step runs no
    drafter), ``c`` one draft step's cost in target steps at that batch size (0 for n-gram).
    None where ``c`` is unknown.
    """
    stream = figures.views.get("stream")
    al = stream.al_token_weighted if stream else None
    f = figures.drafted_fraction
    if al is None or f is None or draft_cost_ratio is None:
        return None
    return OracleBreakEven(
        batch_size=batch_size,
        draft_cost_ratio=draft_cost_ratio,
        expected_speedup=al / (1 + f * figures.k * draft_cost_ratio),
        measured_speedup=measured_speedup,
    )


def best_k(by_k: Sequence[OracleK], batch_size: int) -> int | None:
    """The draft length of the highest expected speedup at ``batch_size`` (None: not known)."""
    known = [
        (even.expected_speedup, -f.k, f.k)
        for f in by_k
        if (even := f.expected_at(batch_size)) is not None and even.expected_speedup is not None
    ]
    return max(known)[2] if known else None
