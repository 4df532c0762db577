"""SPEED-Bench's acceptance figures recomputed from records by specdec_bench's own rules.

An independent second implementation, written here from what NVIDIA Model-Optimizer's
``examples/specdec_bench`` does (no code of it is copied), so the ``speed_bench`` view of
:mod:`speedbench.metrics.views` can be checked against it rule by rule:

- ``specdec_bench/models/vllm.py``, ``VLLMModel.run`` (commit 036649e7): the engine yields the
  cumulative output length after every step; an output that adds nothing is skipped; at the
  last output, if the last token is ``end_id`` (the tokenizer's ``eos_token_id``; ``-1`` with
  ``--ignore_eos``, so never), a last output that added exactly one token is dropped and a
  longer one loses its last token.
- ``specdec_bench/metrics/specbench.py``, ``SpecBench.process_final`` (commit 55bcd7b8): the
  lengths of all turns of a question are chained; Request_AL is their mean, Category_AL the
  mean of Request_AL within a category, Average_AL the mean of Request_AL; failed requests are
  skipped.
- ``specdec_bench/metrics/acceptance_rate.py``, ``AcceptanceRate._process_lengths`` (commit
  037a9f69): the pooled histogram of lengths, sorted by length; walking it upwards, the
  conditional rate at each length is (count of lengths >= it) / total / the previous ratio.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from statistics import mean

from speedbench.records import RequestRecord


def turn_lengths(record: RequestRecord, end_id: int) -> list[int]:
    """One turn's step lengths as ``VLLMModel.run`` reformats them (end_id -1: no EOS)."""
    cumulative, total = [], 0
    for chunk in record.chunk_tokens:
        total += chunk
        cumulative.append(total)
    tokens = record.output_token_ids
    lengths: list[int] = []
    start = 0
    for i, length in enumerate(cumulative):
        if length == start:
            continue
        if i == len(cumulative) - 1 and tokens[-1] == end_id:
            if length - start != 1:
                lengths.append(length - 1 - start)
            break
        lengths.append(length - start)
        start = length
    return lengths


def specbench_figures(records: Sequence[RequestRecord], end_id: int) -> dict[str, object]:
    """Average_AL, Category_AL and the conditional rates, as specdec_bench reports them."""
    questions: dict[str, list[RequestRecord]] = defaultdict(list)
    for r in records:
        questions[r.prompt_id].append(r)
    request_al, category_of, lengths = {}, {}, defaultdict(int)
    for qid, turns in questions.items():
        if not all(t.ok for t in turns):
            continue  # failed_request_ids
        chained = [n for t in sorted(turns, key=lambda t: t.turn) for n in turn_lengths(t, end_id)]
        request_al[qid] = mean(chained)
        category_of[qid] = turns[0].category
        for n in chained:
            lengths[n] += 1
    per_category = defaultdict(list)
    for qid, al in request_al.items():
        per_category[category_of[qid]].append(al)
    total = sum(lengths.values())
    running, prev_ratio, conditional = total, 1.0, {}
    for length, count in sorted(lengths.items()):
        conditional[length] = running / total / prev_ratio
        prev_ratio = running / total
        running -= count
    return {
        "Average_AL": mean(request_al.values()),
        "Category_AL": {c: mean(v) for c, v in sorted(per_category.items())},
        "Conditional_Acceptance_Rate": conditional,
        "Request_AL": request_al,
    }
