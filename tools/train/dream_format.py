"""Dream-v0 conventions for the training tools: special-token layout, ChatML prompt, SFT target.

Token layout of a small Dream-style vocabulary: N regular byte-level BPE tokens (Qwen2 layout: the
256 byte symbols, then one token per merge) get ids 0..N-1, then Dream-v0-Instruct-7B's 24 added
tokens follow in Dream's own order (its tokenizer_config.json added_tokens_decoder, ids 151643..151666),
so every special id is `N + (Dream id - 151643)`:
  <|endoftext|> (eos, pad, and config.json's bos_token_id) = N, <|im_start|> = N+1,
  <|im_end|> (end of turn) = N+2, <|beginoftext|> (tokenizer bos_token) = N+22, <|mask|> = N+23.
config.json's vocab_size (= embedding and LM-head rows) is n_tokens rounded up to a multiple of 64
(llada_format.FamilySpecialIds.embedding_size)
(Dream: 151667 used of 152064).

Chat prompt: Dream's ChatML template (data/dream-v0-instruct-7b/tokenizer_config.json) rendered with
jinja2 as transformers does (trim_blocks, lstrip_blocks, add_generation_prompt=True, no tools); with
no system message it adds Dream's default system turn.

SFT target: prompt ++ answer ++ <|endoftext|> ... up to the canvas (Dream pads with EOS/pad
<|endoftext|>, as LLaDA does); the answer is followed directly by EOS.
"""

from __future__ import annotations

import functools
import json
from dataclasses import dataclass

import llada_format
from llada_format import REPO, flash_seqlen_k  # noqa: F401  (re-exported: one owner, llada_format)

DREAM_DIR = REPO / "data" / "dream-v0-instruct-7b"
DREAM_FIRST_ADDED_ID = 151643


@functools.lru_cache(maxsize=1)
def dream_tokenizer_config() -> dict:
    """Dream-v0-Instruct-7B's real tokenizer_config.json."""
    return json.loads((DREAM_DIR / "tokenizer_config.json").read_text(encoding="utf-8"))


@functools.lru_cache(maxsize=1)
def dream_added_tokens() -> list[tuple[int, dict]]:
    """(Dream id, added_tokens_decoder entry) of Dream's 24 added tokens, in id order (contiguous)."""
    dec = dream_tokenizer_config()["added_tokens_decoder"]
    out = sorted(((int(k), v) for k, v in dec.items()), key=lambda kv: kv[0])
    if [i for i, _ in out] != list(range(DREAM_FIRST_ADDED_ID, DREAM_FIRST_ADDED_ID + len(out))):
        raise RuntimeError(f"{DREAM_DIR}/tokenizer_config.json: added token ids are not contiguous")
    return out


@dataclass(frozen=True)
class SpecialIds(llada_format.FamilySpecialIds):
    """Ids of Dream's added tokens in a vocabulary with `n_regular` BPE tokens before them
    (same interface as llada_format.SpecialIds)."""

    EOS, MASK, EOT = "<|endoftext|>", "<|mask|>", "<|im_end|>"

    def of(self, content: str) -> int:
        """Id of the added token `content` (e.g. '<|mask|>'); KeyError if it is not one."""
        for real_id, t in dream_added_tokens():
            if t["content"] == content:
                return self.n_regular + real_id - DREAM_FIRST_ADDED_ID
        raise KeyError(f"{content!r} is not one of Dream's added tokens")

    @property
    def n_added(self) -> int:
        return len(dream_added_tokens())

    @property
    def bos(self) -> int:
        """config.json's bos_token_id: Dream's is <|endoftext|> (151643), not <|beginoftext|>."""
        return self.eos

    @property
    def im_start(self) -> int:
        return self.of("<|im_start|>")


@functools.lru_cache(maxsize=1)
def _chat_template():
    from jinja2.sandbox import ImmutableSandboxedEnvironment

    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True, keep_trailing_newline=True)
    return env.from_string(dream_tokenizer_config()["chat_template"])


def render_chat(messages: list[dict]) -> str:
    """Dream's ChatML template applied to `messages` ([{"role", "content"}]) with the generation prompt."""
    return _chat_template().render(messages=messages, tools=None, add_generation_prompt=True)


def chat_prompt(question: str) -> str:
    """The prompt string for one user message (Dream's default system turn included)."""
    return render_chat([{"role": "user", "content": question}])


@functools.lru_cache(maxsize=1)
def _chat_frame() -> tuple[str, str]:
    return llada_format.chat_frame(chat_prompt)


def chat_prompts(questions: list[str]) -> list[str]:
    """chat_prompt() of many questions (training-set scale), see llada_format.splice_prompts."""
    return llada_format.splice_prompts(questions, chat_prompt, _chat_frame())
