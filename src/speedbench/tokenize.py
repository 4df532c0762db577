"""Chat templating and tokenization outside the engine, with one BOS policy.

Every engine receives the same token IDs, so differences in how engines apply chat templates or
add BOS cannot skew a comparison. Policy: the template is rendered to text, encoded without the
tokenizer's automatic special tokens, and then exactly one BOS is present at the start if and
only if the model uses a BOS (its tokenizer adds one, or its template renders one). Two BOS
tokens at the start are a bug we refuse rather than measure.
"""

from __future__ import annotations

from collections.abc import Sequence
from functools import cached_property
from pathlib import Path
from typing import Any


class TokenizationError(ValueError):
    """A prompt cannot be turned into valid token IDs. The message is one line."""


def conversation(user_turns: Sequence[str], answers: Sequence[str] = ()) -> list[dict[str, str]]:
    """Interleave user turns with the model's earlier answers, ending on a user turn.

    ``answers[i]`` is the model's reply to ``user_turns[i]``; there must be exactly one fewer
    answer than user turns, so the conversation asks for the next reply.
    """
    if not user_turns:
        raise TokenizationError("a prompt needs at least one user turn")
    if len(answers) != len(user_turns) - 1:
        raise TokenizationError(
            f"{len(user_turns)} user turns need {len(user_turns) - 1} answers, got {len(answers)}"
        )
    msgs: list[dict[str, str]] = []
    for i, turn in enumerate(user_turns):
        msgs.append({"role": "user", "content": turn})
        if i < len(answers):
            msgs.append({"role": "assistant", "content": answers[i]})
    return msgs


class PromptTokenizer:
    """The target model's tokenizer and chat template, applied once, outside the engine."""

    def __init__(self, tokenizer: Any, system_prompt: str | None = None) -> None:
        self.tok = tokenizer
        self.system_prompt = system_prompt
        if not getattr(tokenizer, "chat_template", None):
            raise TokenizationError("the tokenizer has no chat template")

    @classmethod
    def from_pretrained(cls, path: str, system_prompt: str | None = None) -> PromptTokenizer:
        """Load the tokenizer: a local folder, a hub id already cached, else a hub id's download.

        Offline first: the hub is asked only for a reference shaped like a hub id
        (``owner/name``) that is neither a local folder nor in the local cache.

        Raises:
            TokenizationError: Found nowhere, in one line naming where it was looked for.
        """
        from transformers import AutoTokenizer

        try:
            return cls(AutoTokenizer.from_pretrained(path, local_files_only=True), system_prompt)
        except (OSError, ValueError) as exc:
            local_error = exc
        if Path(path).is_dir():
            reason = (str(local_error).strip().splitlines() or [type(local_error).__name__])[0]
            raise TokenizationError(
                f"the folder {path!r} holds no tokenizer transformers can load: {reason}"
            ) from None
        hub_id = path.count("/") == 1 and not path.startswith((".", "/", "~"))
        if not hub_id or Path(path).exists():
            raise TokenizationError(
                f"no tokenizer at {path!r}: not a packaged model name, not a tokenizer folder "
                "on this machine, not an owner/name hub id; speedbench tokenizes prompts here, "
                "so a model that exists only on the engine's host needs --tokenizer with a "
                "local copy"
            ) from None
        try:
            return cls(AutoTokenizer.from_pretrained(path), system_prompt)
        except (OSError, ValueError) as exc:
            first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
            raise TokenizationError(
                f"no tokenizer for {path!r} in the local Hugging Face cache, and the hub did "
                f"not give one: {first}"
            ) from None

    @property
    def vocab_size(self) -> int:
        """Number of token ids the tokenizer can produce (including added tokens)."""
        return len(self.tok)

    @cached_property
    def bos_id(self) -> int | None:
        """The BOS id if this model uses one, else None."""
        bos = self.tok.bos_token_id
        if bos is None:
            return None
        auto = self.tok("x", add_special_tokens=True)["input_ids"]
        rendered = self._render([{"role": "user", "content": "x"}])
        uses_bos = (auto and auto[0] == bos) or (
            self.tok.bos_token is not None and rendered.startswith(self.tok.bos_token)
        )
        return bos if uses_bos else None

    def _render(self, messages: list[dict[str, str]]) -> str:
        if self.system_prompt:
            messages = [{"role": "system", "content": self.system_prompt}, *messages]
        return self.tok.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)

    def encode_messages(self, messages: list[dict[str, str]]) -> list[int]:
        """Template and encode a conversation that ends on a user turn."""
        ids = list(self.tok(self._render(messages), add_special_tokens=False)["input_ids"])
        bos = self.bos_id
        if bos is not None and (not ids or ids[0] != bos):
            ids.insert(0, bos)
        check_single_bos(ids, self.tok.bos_token_id)
        return ids

    def encode_turn(self, user_turns: Sequence[str], answers: Sequence[str] = ()) -> list[int]:
        """Token IDs asking for the reply to ``user_turns[-1]`` given the earlier answers."""
        return self.encode_messages(conversation(user_turns, answers))

    @cached_property
    def stop_ids(self) -> frozenset[int]:
        """Token ids that end an assistant turn (EOS and the template's end-of-turn tokens)."""
        ids = {self.tok.eos_token_id}
        for name in ("<|im_end|>", "<|eot_id|>", "<|end|>", "<end_of_turn>"):
            tid = self.tok.convert_tokens_to_ids(name)
            if isinstance(tid, int) and tid != self.tok.unk_token_id:
                ids.add(tid)
        return frozenset(i for i in ids if i is not None)

    def answer_text(self, ids: Sequence[int]) -> str:
        """The model's answer as text, cut at its first end-of-turn token.

        A run with ``ignore_eos`` (a fixed output length) generates past the model's own end
        of turn; that text is not part of its answer and must not enter turn 2.
        """
        stop = self.stop_ids
        cut = next((i for i, t in enumerate(ids) if t in stop), len(ids))
        # Ids an engine did not stream (negative placeholders) have no text to give.
        return self.tok.decode([t for t in ids[:cut] if t >= 0], skip_special_tokens=True)


def check_single_bos(ids: Sequence[int], bos_id: int | None) -> None:
    """Raise if ``ids`` starts with two BOS tokens (template and tokenizer both added one)."""
    if bos_id is not None and len(ids) >= 2 and ids[0] == bos_id and ids[1] == bos_id:
        raise TokenizationError(f"double BOS: prompt starts with BOS id {bos_id} twice")


def check_token_ids(ids: Sequence[int], vocab_size: int) -> None:
    """Raise on an empty prompt or any id outside ``[0, vocab_size)``."""
    if not ids:
        raise TokenizationError("empty prompt: no token ids")
    bad = [i for i in ids if not isinstance(i, int) or not 0 <= i < vocab_size]
    if bad:
        raise TokenizationError(
            f"{len(bad)} token id(s) outside the vocabulary [0, {vocab_size}): first {bad[0]!r}"
        )
