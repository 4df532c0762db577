"""Throughput split: exact length targeting on real text, the random control, clear errors."""

import pytest

from speedbench.data.corpora import CORPORA, Document, get_corpus, register_corpus
from speedbench.data.throughput import (
    PromptFitter,
    ThroughputError,
    ThroughputParams,
    build_bucket,
    pieces,
    random_control,
    special_ids,
    template_frame,
)
from speedbench.provision.models import provision
from speedbench.tokenize import PromptTokenizer


@pytest.fixture(scope="module")
def tok():
    return PromptTokenizer.from_pretrained(str(provision("qwen2.5-coder-0.5b-instruct")))


@pytest.fixture(scope="module")
def small_corpus():
    """A small real corpus: twelve language-reference topics of the running Python."""
    from pydoc_data.topics import topics

    names = sorted(topics)[:12]
    register_corpus("test_pydoc12", "mixed", "Explain the last entry.", header="Topic: {doc_id}\n")(
        lambda: iter(Document(n, topics[n].strip()) for n in names)
    )
    yield get_corpus("test_pydoc12")
    del CORPORA["test_pydoc12"]


def test_pieces_concatenate_back_and_split_long_lines_at_sentences():
    text = "short line\n" + "A sentence. " * 40 + "End.\nlast"
    parts = pieces(text)
    assert "".join(parts) == text
    assert parts[0] == "short line\n" and parts[-1] == "last"
    assert parts[1] == "A sentence. "
    assert max(len(p) for p in parts) <= 300


@pytest.mark.parametrize("target", [300, 777, 1500])
def test_length_is_exact_within_one_token_at_tight_tolerance(tok, small_corpus, target):
    fitter = PromptFitter(tok, tolerance=0.001)
    queue = list(small_corpus.documents())
    text, size, used = fitter.fit(small_corpus, queue, target)
    assert size == len(tok.encode_turn([text]))  # the reported length is the real one
    assert abs(size - target) <= 1
    assert text.startswith("Explain the last entry.\n\nTopic: " + used[0] + "\n")
    all_ids = [d.doc_id for d in small_corpus.documents()]
    assert used == all_ids[: len(used)]  # taken from the front of the queue, in order
    assert [d.doc_id for d in queue] == all_ids[len(used) :]  # and removed from it


def test_bucket_prompts_are_within_one_percent_and_share_no_document(tok, small_corpus):
    params = ThroughputParams(
        buckets={"tiny": 400}, per_tier=3, tiers={"mixed": ["test_pydoc12"]}, tokenizer="x"
    )
    rows = build_bucket("tiny", 400, params, tok)
    assert len(rows) == 3
    docs = [d for r in rows for d in r["src_id"].split("+")]
    assert len(docs) == len(set(docs))
    for r in rows:
        assert abs(r["isl_tokens"] - 400) <= 4
        assert r["isl_tokens"] == len(tok.encode_turn(r["turns"]))
        assert r["entropy_tier"] == "mixed" and r["source"] == "test_pydoc12"


def test_an_impossible_bucket_says_how_much_text_there_is(tok, small_corpus):
    params = ThroughputParams(
        buckets={"32k": 32768}, per_tier=2, tiers={"mixed": ["test_pydoc12"]}, tokenizer="x"
    )
    with pytest.raises(ThroughputError) as err:
        build_bucket("32k", 32768, params, tok)
    msg = str(err.value)
    assert msg.startswith(
        "bucket 32k (32768 tokens), mixed tier: 2 prompts need about 65536 tokens of distinct "
        "text, but its corpora hold 12 documents, about "
    )
    assert "(test_pydoc12 ~" in msg
    assert "\n" not in msg


def test_random_control_has_the_same_lengths_and_no_special_tokens(tok):
    rows = [
        {"question_id": f"q{i:016x}", "isl_tokens": n, "turns": ["x"], "entropy_tier": "low"}
        for i, n in enumerate([200, 1024])
    ]
    control = random_control(rows, tok, seed=0)
    pre, post = template_frame(tok)
    banned = special_ids(tok)
    assert 151643 in banned and 151645 in banned  # <|endoftext|>, <|im_end|>
    for row, ctl in zip(rows, control, strict=True):
        ids = ctl["prompt_token_ids"]
        assert len(ids) == row["isl_tokens"]
        assert ids[: len(pre)] == pre and ids[-len(post) :] == post
        body = ids[len(pre) : -len(post)]
        assert not banned & set(body)
        assert max(body) < tok.tok.vocab_size
        assert len(set(body)) > len(body) * 0.9  # uniform over ~150k ids: few repeats
    assert control == random_control(rows, tok, seed=0)
    assert (
        control[0]["prompt_token_ids"] != random_control(rows, tok, seed=1)[0]["prompt_token_ids"]
    )


@pytest.mark.parametrize(
    ("params", "message"),
    [
        ({"buckets": {}}, "at least one bucket"),
        ({"buckets": {"1k": 10}}, "must be >= 64 tokens"),
        ({"tiers": {"low": ["nope"]}}, "unknown corpus 'nope'"),
        ({"tiers": {"low": ["essays"]}}, "corpus essays is high-entropy, not low"),
        ({"tiers": {"medium": ["essays"]}}, "tiers"),
        ({"per_tier": 0}, "per_tier"),
    ],
)
def test_bad_params_are_rejected(params, message):
    from speedbench.config import ConfigError, load_config

    with pytest.raises(ConfigError, match=message):
        load_config(ThroughputParams, params)


def test_availability_is_checked_before_any_prompt_is_built(tok, small_corpus, tmp_path):
    from speedbench.data.throughput import build_throughput

    params = ThroughputParams(
        buckets={"1k": 1024, "32k": 32768},
        per_tier=2,
        tiers={"mixed": ["test_pydoc12"]},
        tokenizer="x",
    )
    with pytest.raises(ThroughputError, match=r"^bucket 32k .* 2 prompts need about 65536 tokens"):
        build_throughput(params, tmp_path, tok, progress=False)
    assert not list(tmp_path.iterdir())  # the 1k bucket was not built either
