"""Named acceptance views: the same records read by the rules of different sources.

Every acceptance number speedbench publishes names the view it comes from
(docs/acceptance-views.md gives each rule, its source and where the views differ):

* ``speed_bench``: SPEED-Bench's own framework (NVIDIA Model-Optimizer
  ``examples/specdec_bench``: ``models/vllm.py``'s ``run``, ``metrics/acceptance_rate.py``'s
  ``_process_lengths`` and ``metrics/specbench.py``'s ``process_final``), rule by rule:

  - A *step* is every streamed output that adds tokens, the first (prefill) output included.
  - When the level stops at EOS (no ``ignore_eos``; upstream's ``end_id`` is the tokenizer's
    ``eos_token_id``, ``-1`` otherwise) and a turn's last token is that EOS, the EOS is cut
    from the turn's last step, and a last step that held only the EOS is dropped. A 1-token
    answer that is the EOS therefore has no step; a question left with none is counted under
    ``left_out["no_steps"]`` (upstream's ``mean`` of no lengths would raise).
  - The steps of all turns of a question are pooled; per-question AL = tokens / steps, and
    ``Average_AL`` (``al_request_mean``) is the mean over questions, ``Category_AL`` the same
    mean within a category. Each repeat is its own run: the unit is (question, repeat), so the
    mean is the mean over runs of each run's Average_AL.
  - A question with a failed turn is left out (upstream's ``failed_request_ids``), counted and
    named in ``failed_units``.
  - Conditional AR is keyed by observed step length, from the pooled histogram in ascending
    length order: AR(L) = #(len >= L) / #(len >= previous observed length), 1 for the
    shortest; joint AR is its running product (``conditional_ar_by_length``,
    ``joint_ar_by_length``). ``conditional_ar`` keeps speedbench's per-position form,
    AR_j = #(len >= j + 1) / #(len >= j), beside it.
* ``stream``: speedbench's own reading of the stream. The prefill chunk is not a step; every
  later chunk is one verification step that accepted ``size - 1`` drafts (an n-gram miss
  counts, as a = 0). Per request (turn); a request whose chunks were merged is left out.
* ``engine``: the engine's own per-request step counts. vLLM (``--per-request-spec-decode-
  metrics detailed``) reports the accepted count of every *drafted* verify step: AL = 1 + mean
  accepted. SGLang reports ``spec_verify_ct``: AL = completion tokens / verify steps, its own
  ``spec_accept_length`` rule (prefill token in, no per-position rates).
* ``counters``: the engine's Prometheus counters over the level (vLLM's ``spec_decode_*``),
  drafted steps only: AL = 1 + accepted / drafts; token-weighted by nature, no request mean.
* ``server``: the engine's own running AL as it states it (SGLang's
  ``avg_spec_accept_length``), one figure read after the level.

All views report conditional and joint AR per draft position 1..k and AL both as a request (or
question) mean and token-weighted, with bootstrap intervals where per-request data exists.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import get_args

import numpy as np

from speedbench.figures import SpecCounters, ViewFigures, ViewName
from speedbench.metrics.acceptance import acceptance_from_counters
from speedbench.metrics.bootstrap import mean_ci, ratio_ci
from speedbench.records import RequestRecord

VIEWS: tuple[ViewName, ...] = get_args(ViewName)
NAN = float("nan")


@dataclass(frozen=True)
class ViewSpec:
    """What a view declares about itself, read by every report instead of naming views.

    Attributes:
        name: The view's name (its key in ``views`` everywhere).
        rule: One line: what a step is and what the AL averages, for the reports' notes.
        columns: The overall figures the views table shows, as (figure, column title).
        positions: Whether its conditional AR per draft position is shown (the AR table).
        optional: Shown only where some level has it (an engine that states its own AL).
    """

    name: ViewName
    rule: str
    columns: tuple[tuple[str, str], ...]
    positions: bool = False
    optional: bool = False


VIEW_SPECS: dict[ViewName, ViewSpec] = {
    spec.name: spec
    for spec in (
        ViewSpec(
            "speed_bench",
            "SPEED-Bench's own rule (every streamed step, prefill included, turns pooled per "
            "question; Average_AL is the mean over questions)",
            (("al_request_mean", "speed_bench Average_AL"),
             ("al_token_weighted", "speed_bench pooled")),
            positions=True,
        ),
        ViewSpec(
            "stream",
            "speedbench's (prefill chunk left out, token-weighted)",
            (("al_token_weighted", "stream"),),
        ),
        ViewSpec(
            "engine",
            "the engine's per-request counts (drafted steps only)",
            (("al_token_weighted", "engine"),),
        ),
        ViewSpec(
            "counters",
            "the engine's Prometheus counters (drafted steps only)",
            (("al_token_weighted", "counters"),),
            positions=True,
        ),
        ViewSpec(
            "server",
            "the engine's own running AL as it states it (SGLang's avg_spec_accept_length)",
            (("al_token_weighted", "server"),),
            optional=True,
        ),
    )
}  # fmt: skip
assert tuple(VIEW_SPECS) == VIEWS, "every view declares itself, in the order of ViewName"


def _rates_from_lengths(lengths: Sequence[int], k: int) -> tuple[list[float], list[float]]:
    """Conditional and joint AR_j from step lengths (tokens per step), j = 1..k.

    AR_j = #(len >= j + 1) / #(len >= j); a length above k + 1 (merged steps) counts as
    reaching every position.
    """
    arr = np.asarray(lengths, dtype=np.int64)
    at_least = [int((arr >= j + 1).sum()) for j in range(k + 1)]  # at_least[j]: len >= j + 1
    cond = [at_least[j] / at_least[j - 1] if at_least[j - 1] else NAN for j in range(1, k + 1)]
    joint = [at_least[j] / at_least[0] if at_least[0] else NAN for j in range(1, k + 1)]
    return cond, joint


def rates_by_length(lengths: Sequence[int]) -> tuple[dict[str, float], dict[str, float]]:
    """SPEED-Bench's conditional and joint AR, keyed by each observed step length.

    In ascending order of length L: AR(L) = #(len >= L) / #(len >= the previous observed
    length), which is 1 for the shortest; the joint rate is the running product, i.e.
    #(len >= L) / #steps.
    """
    hist: dict[int, int] = defaultdict(int)
    for n in lengths:
        hist[n] += 1
    total = sum(hist.values())
    cond, joint = {}, {}
    remaining, previous = total, total
    for length in sorted(hist):
        cond[str(length)] = remaining / previous
        joint[str(length)] = remaining / total
        previous = remaining
        remaining -= hist[length]
    return cond, joint


def speed_bench_turn_steps(record: RequestRecord, eos_id: int | None) -> list[int]:
    """One turn's steps by specdec_bench's vLLM wrapper: the EOS cut from the last step.

    ``eos_id`` is None when the level did not stop at EOS (``ignore_eos``): nothing is cut.
    """
    steps = [c for c in record.chunk_tokens if c > 0]
    ends_at_eos = eos_id is not None and record.output_token_ids[-1:] == [eos_id]
    if steps and ends_at_eos:
        if steps[-1] == 1:
            steps.pop()
        else:
            steps[-1] -= 1
    return steps


def _figures(
    view: str,
    k: int,
    units: str,
    per_unit: Mapping[str, Sequence[int]],
    left_out: dict[str, int],
) -> ViewFigures:
    """A view from per-unit step lengths (tokens per step), units keyed by id."""
    kept = {uid: u for uid, u in per_unit.items() if u}
    nonempty = list(kept.values())
    left = dict(left_out)
    if len(nonempty) < len(per_unit):
        left["no_steps"] = left.get("no_steps", 0) + len(per_unit) - len(nonempty)
    pooled = [n for u in nonempty for n in u]
    cond, joint = _rates_from_lengths(pooled, k)
    tokens = [float(sum(u)) for u in nonempty]
    steps = [float(len(u)) for u in nonempty]
    als = [t / s for t, s in zip(tokens, steps, strict=True)]
    return ViewFigures(
        view=view,
        k=k,
        units=units,
        count=len(nonempty),
        num_steps=int(sum(steps)),
        num_tokens=int(sum(tokens)),
        conditional_ar=cond,
        joint_ar=joint,
        al_token_weighted=sum(tokens) / sum(steps) if steps else NAN,
        al_request_mean=float(np.mean(als)) if als else NAN,
        al_request_mean_ci=mean_ci(als) if als else None,
        al_token_weighted_ci=ratio_ci(tokens, steps) if steps else None,
        left_out={key: n for key, n in left.items() if n},
        per_unit={uid: sum(u) / len(u) for uid, u in kept.items()},
    )


def speed_bench_unit(record: RequestRecord) -> str:
    """The speed_bench view's unit of a record: its question in its run (repeat)."""
    return record.prompt_id if record.repeat == 0 else f"{record.prompt_id}@r{record.repeat}"


def speed_bench_view(
    records: Sequence[RequestRecord], k: int, eos_id: int | None = None
) -> ViewFigures:
    """SPEED-Bench's rules (module docstring): steps per question and run, EOS cut, pooled.

    ``eos_id`` is the tokenizer's EOS when the level stopped at EOS, None with ``ignore_eos``.
    A question with any failed turn is left out whole and named: its pooled AL would mix a
    partial conversation into a per-question mean.
    """
    by_question: dict[str, list[RequestRecord]] = defaultdict(list)
    for r in records:
        by_question[speed_bench_unit(r)].append(r)
    per_question: dict[str, list[int]] = {}
    failed: list[str] = []
    for qid, turns in by_question.items():
        if not all(t.ok for t in turns):
            failed.append(qid)
            continue
        ordered = sorted(turns, key=lambda t: t.turn)
        per_question[qid] = [n for t in ordered for n in speed_bench_turn_steps(t, eos_id)]
    figures = _figures("speed_bench", k, "questions", per_question, {"failed": len(failed)})
    cond, joint = rates_by_length([n for steps in per_question.values() for n in steps])
    return figures.model_copy(
        update={
            "conditional_ar_by_length": cond,
            "joint_ar_by_length": joint,
            "failed_units": sorted(failed),
        }
    )


def stream_view(records: Sequence[RequestRecord], k: int) -> ViewFigures:
    """The stream rule of speedbench: chunks after the prefill one are steps of a + 1 tokens."""
    per_request: dict[str, list[int]] = {}
    failed, merged = 0, 0
    for r in records:
        if not r.ok:
            failed += 1
            continue
        sizes = [c for c in r.chunk_tokens if c > 0][1:]
        if any(c > k + 1 for c in sizes):
            merged += 1
            continue
        per_request[r.request_id] = sizes
    return _figures("stream", k, "requests", per_request, {"failed": failed, "merged": merged})


def engine_view(records: Sequence[RequestRecord], k: int) -> ViewFigures | None:
    """The engine's per-request counts (None when the engine reported none).

    vLLM's per-step accepted counts cover drafted steps only (a step where the n-gram proposer
    found nothing is absent); each is a step of ``accepted + 1`` tokens. Where an engine gives
    only a verify-step count (SGLang's ``spec_verify_ct``), the request is one step count over
    its completion tokens, SGLang's own ``spec_accept_length``, with no per-position rates.
    """
    ok = [r for r in records if r.ok]
    failed = len(records) - len(ok)
    if any(r.engine_accepted is not None for r in ok):
        per_request = {r.request_id: [a + 1 for a in r.engine_accepted or []] for r in ok}
        return _figures("engine", k, "requests", per_request, {"failed": failed})
    pairs = [(r.output_tokens, r.engine_steps) for r in ok if r.engine_steps]
    ids = [r.request_id for r in ok if r.engine_steps]
    if not pairs:
        return None
    tokens = [float(t) for t, _ in pairs]
    steps = [float(n) for _, n in pairs]
    als = [t / s for t, s in pairs]
    return ViewFigures(
        view="engine",
        k=k,
        units="requests",
        count=len(pairs),
        num_steps=int(sum(steps)),
        num_tokens=int(sum(tokens)),
        conditional_ar=[NAN] * k,
        joint_ar=[NAN] * k,
        al_token_weighted=sum(tokens) / sum(steps),
        al_request_mean=float(np.mean(als)),
        al_request_mean_ci=mean_ci(als),
        al_token_weighted_ci=ratio_ci(tokens, steps),
        left_out={key: n for key, n in {"failed": failed}.items() if n},
        per_unit=dict(zip(ids, als, strict=True)),
    )


def counters_view(counters: SpecCounters | None, k: int) -> ViewFigures | None:
    """The engine's counter deltas over the level (None without drafted steps)."""
    if counters is None or counters.num_drafts <= 0:
        return None
    acc = acceptance_from_counters(counters, k)
    return ViewFigures(
        view="counters",
        k=k,
        units="none",
        count=0,
        num_steps=acc.num_steps,
        num_tokens=round(counters.num_drafts + counters.num_accepted_tokens),
        conditional_ar=acc.conditional_ar,
        joint_ar=acc.joint_ar,
        al_token_weighted=acc.al_token_weighted,
        al_request_mean=NAN,
        al_request_mean_ci=None,
        al_token_weighted_ci=None,
        left_out={},
        per_unit={},
    )


def server_view(al: float, k: int) -> ViewFigures:
    """The engine's own running AL as it states it (SGLang's ``avg_spec_accept_length``).

    One figure, read after the level: SGLang recomputes it per log window, so it is not
    necessarily this level's alone; nothing per request or per position.
    """
    return ViewFigures(
        view="server",
        k=k,
        units="none",
        count=0,
        num_steps=0,
        num_tokens=0,
        conditional_ar=[NAN] * k,
        joint_ar=[NAN] * k,
        al_token_weighted=al,
        al_request_mean=NAN,
        al_request_mean_ci=None,
        al_token_weighted_ci=None,
        left_out={},
        per_unit={},
    )


def all_views(
    records: Sequence[RequestRecord],
    counters: SpecCounters | None,
    k: int,
    eos_id: int | None = None,
) -> dict[str, ViewFigures]:
    """Every view the records (and counters) support, by name, in :data:`VIEWS` order.

    ``eos_id``: the EOS the speed_bench view cuts (None: the level ran with ``ignore_eos``).
    """
    views = {
        "speed_bench": speed_bench_view(records, k, eos_id),
        "stream": stream_view(records, k),
        "engine": engine_view(records, k),
        "counters": counters_view(counters, k),
    }
    return {name: v for name, v in views.items() if v is not None}
