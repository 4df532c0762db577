"""Tokenization policy on the real Qwen tokenizer and on a tokenizer that uses BOS."""

import pytest

from speedbench.provision.models import provision
from speedbench.tokenize import (
    PromptTokenizer,
    TokenizationError,
    check_single_bos,
    check_token_ids,
    conversation,
)


@pytest.fixture(scope="module")
def qwen_tok():
    return PromptTokenizer.from_pretrained(str(provision("qwen2.5-coder-0.5b-instruct")))


def test_qwen_uses_no_bos_and_template_is_applied(qwen_tok):
    ids = qwen_tok.encode_turn(["Hello"])
    assert qwen_tok.bos_id is None
    text = qwen_tok.tok.decode(ids)
    assert text.startswith("<|im_start|>system")
    assert text.endswith("<|im_start|>user\nHello<|im_end|>\n<|im_start|>assistant\n")


def test_second_turn_contains_first_answer(qwen_tok):
    t1 = qwen_tok.encode_turn(["Name a fruit."])
    t2 = qwen_tok.encode_turn(["Name a fruit.", "Now another."], ["Banana"])
    assert t2[: len(t1)] == t1
    assert "assistant\nBanana<|im_end|>" in qwen_tok.tok.decode(t2)


def test_answer_is_cut_at_end_of_turn(qwen_tok):
    ids = qwen_tok.tok("Banana", add_special_tokens=False)["input_ids"]
    im_end = qwen_tok.tok.convert_tokens_to_ids("<|im_end|>")
    junk = qwen_tok.tok("I'm sorry", add_special_tokens=False)["input_ids"]
    assert qwen_tok.answer_text([*ids, im_end, *junk]) == "Banana"


def test_conversation_shape_is_checked():
    assert conversation(["a", "b"], ["x"])[1] == {"role": "assistant", "content": "x"}
    with pytest.raises(TokenizationError, match="2 user turns need 1 answers, got 0"):
        conversation(["a", "b"])


def test_double_bos_is_detected():
    check_single_bos([1, 5, 1], 1)
    with pytest.raises(TokenizationError, match="double BOS"):
        check_single_bos([1, 1, 5], 1)


def test_out_of_vocabulary_ids_are_named():
    check_token_ids([0, 5, 9], 10)
    with pytest.raises(
        TokenizationError, match=r"1 token id\(s\) outside the vocabulary \[0, 10\): first 10"
    ):
        check_token_ids([0, 10], 10)
    with pytest.raises(TokenizationError, match="empty prompt"):
        check_token_ids([], 10)


class _BosTokenizer:
    """A tokenizer that adds BOS itself and whose template also renders it (the Llama trap)."""

    bos_token_id = 1
    bos_token = "<s>"
    eos_token_id = 2
    chat_template = "x"

    def __call__(self, text, add_special_tokens=True):
        ids = [1] if add_special_tokens else []
        for piece in text.split():
            ids.append(1 if piece == "<s>" else 3 + len(piece))
        return {"input_ids": ids}

    def apply_chat_template(self, messages, tokenize, add_generation_prompt):
        return "<s> " + " ".join(m["content"] for m in messages)


def test_bos_added_once_when_template_renders_it():
    tok = PromptTokenizer(_BosTokenizer())
    ids = tok.encode_turn(["hi there"])
    assert ids[0] == 1 and ids[1] != 1
    assert ids.count(1) == 1


def test_a_folder_without_a_tokenizer_is_named_with_transformers_reason(tmp_path):
    (tmp_path / "config.json").write_text("{}")
    with pytest.raises(TokenizationError) as err:
        PromptTokenizer.from_pretrained(str(tmp_path))
    message = str(err.value)
    assert message.startswith(f"the folder {str(tmp_path)!r} holds no tokenizer transformers can")
    assert "\n" not in message and message.split(": ", 1)[1].strip()
