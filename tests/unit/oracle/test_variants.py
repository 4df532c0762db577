"""The draft's pruned vocabularies and static trees, from its teacher-forced pass (exact)."""

from __future__ import annotations

from collections import Counter

import pytest

from speedbench.data.corpora import Document
from speedbench.oracle.draft import teacher_forced_matches
from speedbench.oracle.steps import draft_model_stream, tree_stream
from speedbench.oracle.variants import count_tokens, kept_vocabulary, tree_breadths, tree_size

VOCAB = 48


def _tiny(seed: int):
    import torch
    from transformers import Qwen2Config, Qwen2ForCausalLM

    torch.manual_seed(seed)
    config = Qwen2Config(
        vocab_size=VOCAB, hidden_size=32, intermediate_size=64, num_hidden_layers=1,
        num_attention_heads=2, num_key_value_heads=1, max_position_embeddings=256,
        initializer_range=0.6, tie_word_embeddings=False,
    )  # fmt: skip
    return Qwen2ForCausalLM(config).eval()


def _near(model, seed: int, noise: float):
    """A draft that agrees with ``model`` only in part: its output head perturbed."""
    import copy

    import torch

    torch.manual_seed(seed)
    draft = copy.deepcopy(model)
    with torch.no_grad():
        head = draft.get_output_embeddings().weight
        head.add_(noise * head.std() * torch.randn_like(head))
    return draft


def _logits(model, ids: list[int]):
    import torch

    with torch.inference_mode():
        return model(input_ids=torch.tensor([ids])).logits[0].float()


def _greedy(model, prompt: list[int], n: int) -> list[int]:
    out: list[int] = []
    for _ in range(n):
        out.append(int(_logits(model, prompt + out)[-1].argmax()))
    return out


def test_a_tree_accepts_where_the_answer_ranked_below_each_depths_breadth():
    ranks = [0, 0, 1, 3, 0, 2, 0]
    stream = tree_stream(ranks, [2, 2])
    # Steps from position 1: ranks 0, 1 (both < 2, the depth) -> 3 tokens; 0 then 2 -> 2; the
    # last position alone -> 1, cut where the answer ends.
    assert stream.chunks == [1, 3, 2, 1] and stream.accepted == [2, 1, 1]
    # A chain of k is the tree of breadth 1 at k depths.
    matches = [r == 0 for r in ranks]
    assert tree_stream(ranks, [1, 1, 1]) == draft_model_stream(matches, 3)
    assert (tree_breadths("4x4x2"), tree_size([2, 2, 2]), tree_size([4, 4, 4])) == (
        [4, 4, 2], 14, 84
    )  # fmt: skip
    with pytest.raises(ValueError, match="breadths per depth like 2x2x2, got '4x0'"):
        tree_breadths("4x0")


def test_the_kept_vocabulary_is_the_most_frequent_tokens_ties_to_the_lower_id():
    counts = Counter({5: 10, 3: 10, 7: 2, 1: 1})
    assert kept_vocabulary(counts, 2) == [3, 5]
    assert kept_vocabulary(counts, 3) == [3, 5, 7]
    with pytest.raises(ValueError, match="a vocabulary of 5 asked for, 4 distinct tokens counted"):
        kept_vocabulary(counts, 5)


def test_tokens_are_counted_over_each_corpus_up_to_its_budget(monkeypatch):
    docs = {"a": ["one two three", "four"], "b": ["two two"]}

    class Corpus:
        def __init__(self, name):
            self.name = name

        def documents(self):
            return iter(Document(f"{self.name}{i}", t) for i, t in enumerate(docs[self.name]))

    monkeypatch.setattr("speedbench.data.corpora.get_corpus", Corpus)
    words = {"one": 1, "two": 2, "three": 3, "four": 4}

    def tokenizer(text, add_special_tokens):
        return {"input_ids": [words[w] for w in text.split()]}

    counts, source = count_tokens(tokenizer, ["a", "b"], tokens_per_corpus=3)
    # a: its first document fills the budget of 3, so "four" is not read; b: two tokens.
    assert counts == Counter({2: 3, 1: 1, 3: 1})
    assert (source.corpora, source.documents, source.tokens) == (["a", "b"], 2, 5)


def test_ranks_and_pruned_argmaxes_are_the_full_logits_read_another_way():
    import torch

    draft = _tiny(1)
    prompts = [[3, 9, 12, 4], [7, 7, 30]]
    answers = [[5, 11, 2, 40, 8, 8], [1, 33, 20]]
    kept = {8: [1, 2, 5, 8, 11, 20, 33, 40], 4: [2, 5, 8, 47]}
    passed = teacher_forced_matches(draft, prompts, answers, kept=kept, show_progress=False)
    for i, (prompt, answer) in enumerate(zip(prompts, answers, strict=True)):
        logits = _logits(draft, prompt + answer)[len(prompt) - 1 : len(prompt) - 1 + len(answer)]
        order = [torch.argsort(-row, stable=True).tolist() for row in logits]
        assert passed.ranks[i] == [o.index(t) for o, t in zip(order, answer, strict=True)]
        assert passed.matches[i] == [r == 0 for r in passed.ranks[i]]
        for size, ids in kept.items():
            best = [ids[int(row[ids].argmax())] for row in logits]
            assert passed.pruned[size][i] == [b == t for b, t in zip(best, answer, strict=True)]
    # Where the answer token is not kept, the pruned draft never proposes it.
    assert not any(passed.pruned[4][1])


@pytest.mark.parametrize("breadths", [[2, 2, 2], [3, 2], [4, 4, 4, 4]])
def test_the_tree_stream_is_what_greedy_tree_sd_with_the_real_models_does(breadths):
    # An independent tree-SD run: a draft builds the full tree from its own top-b proposals
    # (each node conditioned on its own path), the target takes its argmax at each node it
    # reaches (what one pass with a tree attention mask computes), and the step emits the
    # accepted path plus the target's next token. Its steps must be those the teacher-forced
    # ranks predict.
    target = _tiny(2)
    draft = _near(target, 3, 1.0)
    multi = beyond_argmax = 0
    for prompt in ([4, 17, 9, 30, 2], [11, 11, 6], [40, 1]):
        answer = _greedy(target, prompt, 24)
        (ranks,) = teacher_forced_matches(draft, [prompt], [answer], show_progress=False).ranks
        chunks, p, context = [1], 1, prompt + answer[:1]
        while p < len(answer):
            path: list[int] = []
            for depth, breadth in enumerate(breadths):
                children = _logits(draft, context + path)[-1].argsort(descending=True, stable=True)
                wanted = int(_logits(target, context + path)[-1].argmax())
                if wanted not in children[:breadth].tolist() or p + depth >= len(answer):
                    break
                path.append(wanted)
            step = min(len(path) + 1, len(answer) - p)
            emitted = [*path, int(_logits(target, context + path)[-1].argmax())][:step]
            assert emitted == answer[p : p + step]  # greedy tree SD is lossless
            chunks.append(step)
            context += emitted
            p += step
        assert chunks == tree_stream(ranks, breadths).chunks
        multi += sum(c > 1 for c in chunks)
        beyond_argmax += chunks != draft_model_stream([r == 0 for r in ranks], len(breadths)).chunks
    # The runs accepted paths, and ones a chain of the draft's argmax would not have.
    assert multi > 0 and beyond_argmax > 0


def test_variants_of_a_prediction_read_like_the_full_drafts_levels():
    from speedbench.oracle.draft import DraftPass
    from speedbench.oracle.predict import OracleLevel, Prediction, figures_at
    from speedbench.oracle.variants import VocabSource, draft_variants
    from speedbench.pipeline.stages import variant_metrics
    from speedbench.records import RequestRecord

    def record(pid, answer, prompt, category):
        return RequestRecord(
            request_id=pid, prompt_id=pid, category=category, prompt_token_ids=prompt,
            output_token_ids=answer, chunk_tokens=[1] * len(answer), finish_reason="length",
        )  # fmt: skip

    requests = [record("a", [9, 5, 6, 7, 8, 1], [5, 6], "code"), record("b", [3] * 4, [3], "chat")]
    ranks = [[1, 0, 0, 2, 0, 0], [0, 0, 1, 0]]
    matches = [[r == 0 for r in rs] for rs in ranks]
    # Kept {3, 5}: only a's 5 and b's 3s can be proposed; b's third position ranked 5 first.
    pruned = {2: [[False, True, False, False, False, False], [True, True, False, True]]}
    passed = DraftPass(matches, 0.0, 0, ranks, pruned)
    full = Prediction(requests, {3: [draft_model_stream(m, 3) for m in matches]}, {}, 0.0, 0,
                      passed)  # fmt: skip
    level = OracleLevel.of(full, "draft_model", [figures_at(full, "draft_model", 3, None)], "b")
    source = VocabSource(corpora=["x"], documents=1, tokens=10)
    variants = draft_variants(full, passed, [3], {2: [3, 5]}, source, ["2x2"], None)
    (vocab,) = variants.vocabs
    # Coverage: a keeps 1 of 6 tokens, b 4 of 4.
    assert (vocab.coverage, vocab.coverage_by_category) == (0.5, {"chat": 1.0, "code": 1 / 6})
    # Stream view, token-weighted over the steps after the prefill: full a [3, 2], b [2, 1]
    # -> 8 / 4; pruned a [2, 1, 1, 1], b [2, 1] -> 8 / 6; the 2x2 tree a [3, 2], b [3] -> 8 / 3.
    stream = lambda f: f.views["stream"].al_token_weighted  # noqa: E731
    assert stream(level.by_k[0]) == pytest.approx(8 / 4)
    assert stream(vocab.by_k[0]) == pytest.approx(8 / 6)
    (tree,) = variants.trees
    assert (stream(tree.figures), tree.tokens_per_step, tree.figures.k) == (
        pytest.approx(8 / 3),
        6,
        2,
    )
    metrics = variant_metrics(level.model_copy(update={"variants": variants}))
    sb = lambda f: f.views["speed_bench"].al_request_mean  # noqa: E731
    k3 = metrics["draft_vocab"]["2"]["k3"]
    assert k3["al"] == pytest.approx(sb(vocab.by_k[0]))
    assert k3["loss"] == pytest.approx(sb(vocab.by_k[0]) / sb(level.by_k[0]) - 1)
    assert k3["by_category"]["code"]["coverage"] == pytest.approx(1 / 6)
    assert metrics["trees"]["2x2"]["tokens_per_step"] == 6


def test_the_findings_rows_judge_direction_from_the_figures():
    from speedbench.figures import ViewFigures
    from speedbench.oracle.predict import (
        DraftVariants,
        OracleK,
        OracleLevel,
        TreeFigures,
        VocabFigures,
    )
    from speedbench.report.findings import pruning_row, tree_row

    def k3(al: dict[str, float], overall: float) -> OracleK:
        def view(al: float) -> dict[str, ViewFigures]:
            return {"speed_bench": ViewFigures(
                view="speed_bench", k=3, units="questions", count=1, num_steps=1, num_tokens=1,
                conditional_ar=[], joint_ar=[], al_token_weighted=al, al_request_mean=al,
            )}  # fmt: skip

        per_category = {c: view(v) for c, v in al.items()}
        return OracleK(k=3, views=view(overall), per_category=per_category, drafted_fraction=1.0)

    full = k3({"multilingual": 2.0, "coding": 3.0}, 2.5)
    pruned = k3({"multilingual": 1.6, "coding": 2.94}, 2.25)
    trees = [
        TreeFigures(shape=f"{b}x{b}x{b}", breadths=[b] * 3, tokens_per_step=b + b * b + b**3,
                    figures=k3({}, al))
        for b, al in ((2, 3.1), (4, 3.3), (8, 3.25))
    ]  # fmt: skip
    coverage = {"multilingual": 0.8, "coding": 0.95}
    vocab = VocabFigures(size=32768, kept_sha256="x", coverage=0.9,
                         coverage_by_category=coverage, by_k=[pruned])  # fmt: skip
    level = OracleLevel(drafter="draft_model", split="q", batch_size=32, baseline="b", requests=2,
                        questions=2, seconds=1.0, tokens=10, by_k=[full],
                        variants=DraftVariants(vocabs=[vocab], trees=trees))  # fmt: skip
    row = pruning_row([level])
    # Average_AL 2.25 / 2.5 - 1 = -10 %; multilingual 1.6 / 2.0 - 1 = -20 %: it loses more.
    assert "Average_AL -10.0 %" in row and "most lost: multilingual -20.0 %, coding -2.0 %" in row
    assert row.endswith("| holds: multilingual -20.0 % against -10.0 % |")
    # 3.1, 3.3 then 3.25: not rising all the way.
    assert tree_row([level]).endswith("| does not hold |")


def test_two_zipped_teacher_forced_passes_leave_autograd_on_in_the_callers_thread():
    import torch

    from speedbench.oracle.draft import answer_logits

    target, draft = _tiny(0), _near(_tiny(0), 1, 0.5)
    prompts = [[1, 2, 3], [4, 5, 6, 7], [8, 9]]
    answers = [_greedy(target, p, 4) for p in prompts]
    passes = zip(
        answer_logits(target, prompts, answers, tokens_per_batch=8, show_progress=False),
        answer_logits(draft, prompts, answers, tokens_per_batch=8, show_progress=False),
        strict=True,
    )
    seen = [i for (i, _), (j, _) in passes if i == j]
    assert sorted(seen) == [0, 1, 2]
    assert torch.is_grad_enabled() and not torch.is_inference_mode_enabled()
