"""Build the throughput split: ISL buckets x entropy tiers of real text, plus a random control.

Every prompt is a task over a long real context, made by joining documents of one corpus and
measured in the target's own tokens after the chat template. A prompt lands within ``tolerance``
(1%) of its bucket length: the context is cut at a document, line or sentence boundary, and only
where no such boundary lands in the window is the last sentence cut between two words. Nothing is
ever padded or repeated, and within a bucket no document is used twice, so no two prompts share
a context.

The random-token control mirrors each real prompt's length with uniformly random non-special
token ids inside the same chat template. It exists only to report how much random tokens
overstate SD throughput (random text is hard to draft, but also shifts batch composition).
"""

from __future__ import annotations

import json
import random
import re
import statistics
from pathlib import Path
from typing import Any

from pydantic import Field, field_validator

from speedbench.config import StrictModel
from speedbench.data.corpora import CORPORA, Corpus, Document, Tier, get_corpus
from speedbench.data.prompts import PromptRow
from speedbench.data.qualitative import SPLIT_COLUMNS, allocate
from speedbench.data.sources.base import content_id
from speedbench.tokenize import PromptTokenizer

THROUGHPUT_COLUMNS = [*SPLIT_COLUMNS, "isl_tokens", "entropy_tier"]
DEFAULT_TIERS: dict[Tier, list[str]] = {
    "low": ["python_stdlib"],
    "mixed": ["python_docs", "pydoc_topics", "squad_articles", "wiki_paragraphs"],
    "high": [
        "essays",
        "writing_requests",
        "support_dialogues",
        "writing_requests_zh",
    ],
}


class ThroughputError(ValueError):
    """The throughput split cannot be built as asked. One-line message."""


class ThroughputParams(StrictModel):
    """Knobs of the throughput split (``throughput:`` in params.yaml)."""

    buckets: dict[str, int] = Field(
        default_factory=lambda: {"1k": 1024, "2k": 2048},
        description="Bucket name -> input length in target tokens (SPEED-Bench: 1k..32k).",
    )
    per_tier: int = Field(4, ge=1, description="Prompts per tier per bucket (SPEED-Bench: 512).")
    tiers: dict[Tier, list[str]] = Field(
        default_factory=lambda: {k: list(v) for k, v in DEFAULT_TIERS.items()},
        description="Entropy tier -> corpora whose documents fill its prompts, in turn.",
    )
    seed: int = Field(0, description="Seeds the document order of each bucket and the control.")
    tolerance: float = Field(0.01, gt=0, lt=0.5, description="Allowed relative length error.")
    tokenizer: str = Field(
        "qwen2.5-coder-1.5b-instruct", description="Target model whose tokens measure lengths."
    )
    random_control: bool = Field(True, description="Also write the random-token control.")

    @field_validator("buckets")
    @classmethod
    def _positive(cls, v: dict[str, int]) -> dict[str, int]:
        if not v:
            raise ValueError("at least one bucket is required")
        bad = {k: n for k, n in v.items() if n < 64}
        if bad:
            raise ValueError(f"bucket lengths must be >= 64 tokens, got {bad}")
        return v

    @field_validator("tiers")
    @classmethod
    def _known_corpora(cls, v: dict[str, list[str]]) -> dict[str, list[str]]:
        for tier, names in v.items():
            if not names:
                raise ValueError(f"tier {tier} has no corpora")
            for name in names:
                corpus = CORPORA.get(name)
                if corpus is None:
                    raise ValueError(
                        f"unknown corpus {name!r}; known: {', '.join(sorted(CORPORA))}"
                    )
                if corpus.tier != tier:
                    raise ValueError(f"corpus {name} is {corpus.tier}-entropy, not {tier}")
        return v


_LINE = re.compile(r"[^\n]*\n|[^\n]+")
_SENTENCE = re.compile(r".+?(?:[.!?]+[\"')\]]*\s+|$)", re.S)
_WORD = re.compile(r"\S+\s*|\s+")
LONG_LINE = 300


def pieces(text: str) -> list[str]:
    """Cut points of a document: its lines, and sentences inside lines over ``LONG_LINE`` chars.

    The pieces concatenate back to ``text`` exactly, so any prefix is the document cut at a line
    or sentence boundary.
    """
    out = []
    for line in _LINE.findall(text):
        if len(line) <= LONG_LINE:
            out.append(line)
        else:
            out += [s for s in _SENTENCE.findall(line) if s]
    return out


class PromptFitter:
    """Builds one prompt of an exact token length from a stream of documents."""

    def __init__(self, tokenizer: PromptTokenizer, tolerance: float):
        self.tokenizer = tokenizer
        self.tolerance = tolerance

    def length(self, text: str) -> int:
        """Tokens of ``text`` as a single user turn, after the chat template."""
        return len(self.tokenizer.encode_turn([text]))

    def fit(self, corpus: Corpus, queue: list[Document], target: int) -> tuple[str, int, list[str]]:
        """Take documents from the front of ``queue`` until the prompt is ``target`` tokens.

        Returns:
            The user turn, its exact token length and the ids of the documents it uses. Used
            documents are removed from ``queue``; documents looked at but not used stay.

        Raises:
            ThroughputError: The queue runs dry before the prompt is long enough.
        """
        lo = int(target * (1 - self.tolerance)) + 1
        hi = int(target * (1 + self.tolerance))
        prefix = corpus.instruction + "\n\n"
        units: list[tuple[int, str]] = []  # (document index, piece)
        docs: list[Document] = []
        approx = self.length(prefix)
        while approx < hi + 64:
            if len(docs) == len(queue):
                raise ThroughputError(f"corpus {corpus.name} ran out of documents")
            doc = queue[len(docs)]
            docs.append(doc)
            parts = [*pieces(doc.text), "\n\n"]
            # The heading travels with the first piece, so no cut leaves a heading alone.
            parts[0] = corpus.header.format(doc_id=doc.doc_id) + parts[0]
            units += [(len(docs) - 1, p) for p in parts]
            approx += len(self.tokenizer.tok("".join(parts), add_special_tokens=False)["input_ids"])
        question = docs[0].question
        suffix = f"\n\nQuestion: {question}" if question else ""

        def render(n: int, tail: str = "") -> str:
            body = "".join(p for _, p in units[:n]) + tail
            return prefix + body.rstrip() + suffix

        n = self._closest(lambda m: self.length(render(m)), len(units), target, hi)
        text = render(n)
        if self.length(text) < lo and n < len(units):
            words = _WORD.findall(units[n][1])
            m = self._closest(
                lambda j: self.length(render(n, "".join(words[:j]))), len(words), target, hi
            )
            text = render(n, "".join(words[:m]))
            n_docs = units[n][0] + 1
        else:
            n_docs = units[n - 1][0] + 1 if n else 0
        size = self.length(text)
        if not lo <= size <= hi:
            raise ThroughputError(
                f"corpus {corpus.name}: cannot land within {self.tolerance:.0%} of {target} "
                f"tokens (got {size})"
            )
        used = docs[:n_docs]
        del queue[:n_docs]
        return text, size, [d.doc_id for d in used]

    @staticmethod
    def _closest(f, n_max: int, target: int, limit: int) -> int:
        """The ``n`` in ``[0, n_max]`` with ``f(n)`` closest to ``target`` and at most ``limit``.

        ``f`` is non-decreasing: binary search for the last ``f(n) <= target``, then compare it
        with its successor.
        """
        lo, hi = 0, n_max
        while lo < hi:
            mid = (lo + hi + 1) // 2
            if f(mid) <= target:
                lo = mid
            else:
                hi = mid - 1
        if lo < n_max:
            above = f(lo + 1)
            if above <= limit and above - target < target - f(lo):
                return lo + 1
        return lo


def corpus_queue(name: str, docs: list[Document], seed: int, bucket: str) -> list[Document]:
    """A copy of a corpus's documents in a seeded order specific to the bucket."""
    queue = list(docs)
    random.Random(f"{seed}/{bucket}/{name}").shuffle(queue)
    return queue


def availability(docs: list[Document], tokenizer: PromptTokenizer) -> tuple[int, int]:
    """Documents and approximate tokens of text a corpus holds (for quotas and errors)."""
    sample = docs[:: max(1, len(docs) // 50)]
    chars = sum(len(d.text) for d in docs)
    sample_chars = sum(len(d.text) for d in sample) or 1
    sample_tokens = sum(len(tokenizer.tok(d.text)["input_ids"]) for d in sample)
    return len(docs), int(chars * sample_tokens / sample_chars)


def shortage_message(
    bucket: str, target: int, tier: str, per_tier: int, held: dict[str, tuple[int, int]]
) -> str:
    """The one-line error for a tier whose corpora cannot fill its prompts of a bucket."""
    docs = sum(d for d, _ in held.values())
    tokens = sum(t for _, t in held.values())
    each = ", ".join(f"{name} ~{t}" for name, (_, t) in held.items())
    return (
        f"bucket {bucket} ({target} tokens), {tier} tier: {per_tier} prompts need about "
        f"{per_tier * target} tokens of distinct text, but its corpora hold {docs} documents, "
        f"about {tokens} tokens ({each}). Lower per_tier or the bucket length, or add a corpus "
        "to the tier"
    )


# Documents are cut at boundaries and the last one is often left partly unused, so a corpus is
# only counted on for this share of its tokens.
USABLE_SHARE = 0.9


class Availability:
    """Each corpus's documents and approximate size, read once per build (not once per bucket)."""

    def __init__(self, tokenizer: PromptTokenizer):
        self.tokenizer = tokenizer
        self.held: dict[str, tuple[int, int]] = {}
        self._docs: dict[str, list[Document]] = {}

    def documents(self, name: str) -> list[Document]:
        """The documents of corpus ``name`` in the corpus's own order."""
        if name not in self._docs:
            self._docs[name] = list(get_corpus(name).documents())
        return self._docs[name]

    def __call__(self, name: str) -> tuple[int, int]:
        """(documents, approximate tokens) of corpus ``name``."""
        if name not in self.held:
            self.held[name] = availability(self.documents(name), self.tokenizer)
        return self.held[name]

    def quotas(self, bucket: str, target: int, tier: str, names: list[str], n: int) -> dict:
        """Prompts per corpus: even where text allows, the rest to corpora with text to spare."""
        capacity = {c: int(USABLE_SHARE * self(c)[1] / target) for c in names}
        quota = allocate(capacity, n)
        if sum(quota.values()) < n:
            held = {c: self(c) for c in names}
            raise ThroughputError(shortage_message(bucket, target, tier, n, held))
        return quota


def check_availability(params: ThroughputParams, avail: Availability) -> None:
    """Fail before any work if some tier clearly holds too little text for its prompts."""
    for bucket, target in params.buckets.items():
        for tier, names in params.tiers.items():
            avail.quotas(bucket, target, tier, names, params.per_tier)


def build_bucket(
    name: str,
    target: int,
    params: ThroughputParams,
    tokenizer: PromptTokenizer,
    avail: Availability | None = None,
) -> list[dict[str, Any]]:
    """All prompts of one bucket: ``per_tier`` per tier, the tier's corpora taking turns."""
    avail = avail or Availability(tokenizer)
    fitter = PromptFitter(tokenizer, params.tolerance)
    rows: list[dict[str, Any]] = []
    for tier, names in params.tiers.items():
        quota = avail.quotas(name, target, tier, names, params.per_tier)
        queues = {
            n: corpus_queue(n, avail.documents(n), params.seed, name) for n in names if quota[n]
        }
        order = [n for k in range(max(quota.values())) for n in names if k < quota[n]]
        for corpus_name in order:
            corpus = get_corpus(corpus_name)
            try:
                text, size, doc_ids = fitter.fit(corpus, queues[corpus_name], target)
            except ThroughputError as exc:
                if "ran out" not in str(exc):
                    raise
                held = {c: avail(c) for c in names}
                msg = shortage_message(name, target, tier, params.per_tier, held)
                raise ThroughputError(f"{msg} ({corpus_name} ran out first)") from None
            rows.append(
                {
                    "question_id": content_id([text]),
                    "category": tier,
                    "sub_category": corpus.name,
                    "turns": [text],
                    "source": corpus.name,
                    "src_id": "+".join(doc_ids),
                    "difficulty": "",
                    "multiturn": False,
                    "isl_tokens": size,
                    "entropy_tier": tier,
                }
            )
    return rows


def special_ids(tokenizer: PromptTokenizer) -> set[int]:
    """Every id a random control must not use: special tokens and all added tokens."""
    tok = tokenizer.tok
    ids = set(tok.all_special_ids)
    ids |= {i for i in tok.get_added_vocab().values()}
    return ids


def template_frame(tokenizer: PromptTokenizer) -> tuple[list[int], list[int]]:
    """The chat template's token ids before and after a user message's content."""
    mark = "\x00SPEEDBENCH\x00"
    rendered = tokenizer._render([{"role": "user", "content": mark}])
    before, after = rendered.split(mark)
    pre = list(tokenizer.tok(before, add_special_tokens=False)["input_ids"])
    post = list(tokenizer.tok(after, add_special_tokens=False)["input_ids"])
    bos = tokenizer.bos_id
    if bos is not None and (not pre or pre[0] != bos):
        pre.insert(0, bos)
    return pre, post


def random_control(
    rows: list[dict[str, Any]], tokenizer: PromptTokenizer, seed: int
) -> list[dict[str, Any]]:
    """One random-token prompt per real prompt, the same length, inside the same template.

    Each is in the category ``random_<its real prompt's category>``, so a level that takes the
    first prompt of each category sends one random prompt per real one it mirrors (and has
    enough questions for verify-reference's paired test), not a single random prompt.
    """
    pre, post = template_frame(tokenizer)
    banned = special_ids(tokenizer)
    allowed = [i for i in range(tokenizer.tok.vocab_size) if i not in banned]
    out = []
    for row in rows:
        rng = random.Random(f"{seed}/random/{row['question_id']}")
        body = rng.choices(allowed, k=row["isl_tokens"] - len(pre) - len(post))
        ids = pre + body + post
        out.append(
            {
                **row,
                "question_id": "r" + row["question_id"][1:],
                "sub_category": "random_tokens",
                "source": "random_tokens",
                "src_id": row["question_id"],
                "turns": [f"<{len(body)} uniformly random token ids>"],
                "category": f"random_{row['category']}" if row.get("category") else "random",
                "entropy_tier": "random",
                "prompt_token_ids": ids,
            }
        )
    return out


def length_stats(rows: list[dict[str, Any]]) -> dict[str, dict[str, float]]:
    """Min, median and max ISL per entropy tier."""
    by_tier: dict[str, list[int]] = {}
    for r in rows:
        by_tier.setdefault(r["entropy_tier"], []).append(r["isl_tokens"])
    return {
        t: {"n": len(v), "min": min(v), "median": statistics.median(v), "max": max(v)}
        for t, v in by_tier.items()
    }


def build_throughput(
    params: ThroughputParams,
    out_dir: str | Path,
    tokenizer: PromptTokenizer,
    progress: bool = True,
    report_path: str | Path | None = None,
) -> dict[str, Any]:
    """Build every bucket into ``out_dir``; return the length report.

    The report's per-bucket length statistics are written as JSON to ``report_path`` (default
    ``out_dir/throughput_report.json``), a file DVC reads as metrics.
    """
    from tqdm import tqdm

    out_dir = Path(out_dir)
    avail = Availability(tokenizer)
    check_availability(params, avail)
    report: dict[str, Any] = {"params": params.model_dump(), "buckets": {}}
    for name, target in tqdm(params.buckets.items(), desc="buckets", disable=not progress):
        rows = build_bucket(name, target, params, tokenizer, avail)
        write_rows(rows, out_dir / f"throughput_{name}.parquet")
        entry = {"target": target, "lengths": length_stats(rows)}
        if params.random_control:
            control = random_control(rows, tokenizer, params.seed)
            write_rows(control, out_dir / f"throughput_{name}_random.parquet")
            entry["random_lengths"] = length_stats(control)
        report["buckets"][name] = entry
    report_file = Path(report_path) if report_path else out_dir / "throughput_report.json"
    report_file.parent.mkdir(parents=True, exist_ok=True)
    report_file.write_text(json.dumps(report["buckets"], indent=2) + "\n")
    return report


def write_rows(rows: list[dict[str, Any]], path: Path) -> Path:
    """Write split rows (validated as ``PromptRow``) to Parquet."""
    import pandas as pd

    for r in rows:
        PromptRow.model_validate(r)
    path.parent.mkdir(parents=True, exist_ok=True)
    cols = THROUGHPUT_COLUMNS + (
        ["prompt_token_ids"] if rows and "prompt_token_ids" in rows[0] else []
    )
    tmp = path.with_suffix(".parquet.tmp")
    pd.DataFrame(rows, columns=cols).to_parquet(tmp, index=False)
    tmp.replace(path)
    return path


def format_report(report: dict[str, Any]) -> str:
    """Length statistics per bucket and tier, as a console table."""
    lines = [
        f"{'bucket':>7} {'target':>7} {'tier':>7} {'n':>5} {'min':>7} {'median':>8} {'max':>7}"
    ]
    for name, b in report["buckets"].items():
        for tier, s in b["lengths"].items():
            lines.append(
                f"{name:>7} {b['target']:>7} {tier:>7} {s['n']:>5} {s['min']:>7} "
                f"{s['median']:>8} {s['max']:>7}"
            )
    return "\n".join(lines)
