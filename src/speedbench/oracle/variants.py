"""Drafters the oracle derives from one draft pass: a pruned vocabulary and static trees.

SPEED-Bench reports two properties of EAGLE3-style drafters that a chain of the draft's argmax
does not show (arXiv 2604.09557): **vocabulary pruning** (the draft head predicts only the ~32k
most frequent tokens; a pruned vocabulary covers fewer of a multilingual answer's tokens, so
such categories lose more AL), and **tree drafting** (more candidates per depth raise AL, at the
price of more tokens to verify per step). Both follow exactly, under greedy decoding, from the
teacher-forced pass the draft-model oracle makes anyway (:mod:`speedbench.oracle.draft`):

- a pruned draft proposes the argmax over its kept tokens, so a step accepts a position where
  that masked argmax equals the answer token (``DraftPass.pruned``);
- a static tree keeping the draft's top ``b_d`` children of every node at depth ``d`` holds the
  answer's path to depth ``d`` where each of its tokens ranked below ``b_d``
  (``DraftPass.ranks``; :func:`~speedbench.oracle.steps.tree_stream`).

The kept vocabulary is counted over text the project ships offline (the throughput split's
corpora, :mod:`speedbench.data.corpora`), never over the answers being measured, and recorded
(corpora, tokens counted, a hash of the kept ids). Dynamic trees chosen by cumulative
probability (EAGLE-2, SGLang's ``--speculative-eagle-topk`` with ``num_draft_tokens``) are not
covered: which nodes they keep depends on the draft's probabilities along paths the answer did
not take, which a pass along the answer does not see.
"""

from __future__ import annotations

import dataclasses
import hashlib
import itertools
import re
from collections import Counter, defaultdict
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from speedbench.config import TREE_SHAPE
from speedbench.oracle.draft import DraftPass
from speedbench.oracle.predict import (
    DraftVariants,
    Prediction,
    TreeFigures,
    VocabFigures,
    VocabSource,
    figures_at,
)
from speedbench.oracle.steps import draft_model_stream, tree_stream

# The throughput split's corpora whose text does not depend on what is installed here.
VOCAB_CORPORA = (
    "python_stdlib", "python_docs", "pydoc_topics", "squad_articles", "wiki_paragraphs",
    "essays", "writing_requests", "support_dialogues", "writing_requests_zh",
)  # fmt: skip
# Tokens counted per corpus: enough for the head of the distribution to settle.
VOCAB_TOKENS_PER_CORPUS = 200_000


def tree_breadths(shape: str) -> list[int]:
    """``"4x4x2"`` -> ``[4, 4, 2]``: the breadth at each depth.

    Raises:
        ValueError: Not such a shape.
    """
    if not re.fullmatch(TREE_SHAPE, shape):
        raise ValueError(f"a tree shape is breadths per depth like 2x2x2, got {shape!r}")
    return [int(b) for b in shape.split("x")]


def tree_size(breadths: Sequence[int]) -> int:
    """The tokens a full tree of these breadths gives the target to verify per step."""
    return sum(itertools.accumulate(breadths, lambda a, b: a * b))


def count_tokens(
    tokenizer: Any,
    corpora: Sequence[str] = VOCAB_CORPORA,
    tokens_per_corpus: int = VOCAB_TOKENS_PER_CORPUS,
) -> tuple[Counter[int], VocabSource]:
    """Token frequencies over the corpora's documents, up to ``tokens_per_corpus`` each.

    Raises:
        speedbench.data.corpora.CorpusError: A corpus is unknown or unavailable.
    """
    from speedbench.data.corpora import get_corpus

    counts: Counter[int] = Counter()
    documents = tokens = 0
    for name in corpora:
        taken = 0
        for doc in get_corpus(name).documents():
            ids = tokenizer(doc.text, add_special_tokens=False)["input_ids"]
            ids = ids[: tokens_per_corpus - taken]
            counts.update(ids)
            taken += len(ids)
            documents += 1
            if taken >= tokens_per_corpus:
                break
        tokens += taken
    return counts, VocabSource(corpora=list(corpora), documents=documents, tokens=tokens)


def kept_vocabulary(counts: Mapping[int, int], size: int) -> list[int]:
    """The ``size`` most frequent token ids (ties to the lower id), sorted by id.

    Raises:
        ValueError: Fewer distinct tokens were counted than asked for.
    """
    if size > len(counts):
        raise ValueError(f"a vocabulary of {size} asked for, {len(counts)} distinct tokens counted")
    ranked = sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))
    return sorted(token for token, _ in ranked[:size])


@dataclasses.dataclass(frozen=True)
class PrunedVocab:
    """The kept token ids of every size asked for, and what they were counted on."""

    kept: dict[int, list[int]]
    source: VocabSource


def pruned_vocab(tokenizer_dir: str, sizes: Sequence[int]) -> PrunedVocab:
    """The draft's pruned vocabularies: its tokenizer over :data:`VOCAB_CORPORA`."""
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(tokenizer_dir, local_files_only=True)
    counts, source = count_tokens(tokenizer)
    return PrunedVocab({n: kept_vocabulary(counts, n) for n in sorted(set(sizes))}, source)


def _sha(ids: Iterable[int]) -> str:
    return hashlib.sha256(",".join(map(str, ids)).encode()).hexdigest()


def _coverage(answers: Iterable[Sequence[int]], kept: set[int]) -> float | None:
    tokens = [t for a in answers for t in a]
    return sum(t in kept for t in tokens) / len(tokens) if tokens else None


def draft_variants(
    prediction: Prediction,
    passed: DraftPass,
    ks: Sequence[int],
    kept: Mapping[int, Sequence[int]],
    source: VocabSource | None,
    trees: Sequence[str],
    eos_id: int | None,
) -> DraftVariants:
    """Every pruned vocabulary at every k and every tree, read like the full draft's levels."""
    answers = [r.output_token_ids for r in prediction.requests]
    by_cat: dict[str, list[list[int]]] = defaultdict(list)
    for r in prediction.requests:
        by_cat[r.category].append(r.output_token_ids)
    vocabs = []
    for size, ids in sorted(kept.items()):
        streams = {k: [draft_model_stream(m, k) for m in passed.pruned[size]] for k in ks}
        pruned = dataclasses.replace(prediction, streams=streams)
        keep = set(ids)
        vocabs.append(
            VocabFigures(
                size=size,
                kept_sha256=_sha(ids),
                coverage=_coverage(answers, keep),
                coverage_by_category={c: _coverage(a, keep) for c, a in sorted(by_cat.items())},
                by_k=[figures_at(pruned, "draft_model", k, eos_id) for k in ks],
            )
        )
    out = []
    for shape in trees:
        breadths = tree_breadths(shape)
        depth = len(breadths)
        streams = {depth: [tree_stream(r, breadths) for r in passed.ranks]}
        tree = dataclasses.replace(prediction, streams=streams)
        out.append(
            TreeFigures(
                shape=shape,
                breadths=breadths,
                tokens_per_step=tree_size(breadths),
                figures=figures_at(tree, "draft_model", depth, eos_id),
            )
        )
    return DraftVariants(vocab_source=source if kept else None, vocabs=vocabs, trees=out)
