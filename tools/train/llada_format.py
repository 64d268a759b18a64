"""LLaDA conventions shared by the training tools: special-token layout, chat prompt, SFT target.

Token layout of a small LLaDA-style vocabulary (reference-algorithms.md §A.5): N regular byte-level
BPE tokens get ids 0..N-1, then LLaDA's 269 added tokens follow in LLaDA's own order, so every
special id is `N + (real id - 126080)`:
  bos <|startoftext|> = N, eos/pad <|endoftext|> = N+1, mask <|mdm_mask|> = N+256,
  <|start_header_id|> = N+266, <|end_header_id|> = N+267, eot <|eot_id|> = N+268.
The embedding / LM-head rows are rounded up to a multiple of 64 (LLaDA: 126349 used of 126464).

The chat template is LLaDA-8B-Instruct's, read through tools/common/llada_tokenizer_spec.py and
rendered with jinja2 exactly as transformers' apply_chat_template would.

SFT target (LLaDA GUIDELINES.md "SFT", reference §A.4/§A.5): input = prompt ++ answer ++ EOS...EOS up
to the training canvas; the answer is NOT followed by <|eot_id|> (GUIDELINES' example is
`...assistant<end_id>\\nParis.<EOS><EOS>...`); the prompt is never masked; the EOS run is part of the
response and is masked and predicted like any other response token.
"""

from __future__ import annotations

import functools
import sys
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from tools.common import llada_tokenizer_spec as spec  # noqa: E402

N_ADDED = 269
EMBEDDING_MULTIPLE = 64


@functools.lru_cache(maxsize=1)
def _added_offsets() -> dict[str, int]:
    """content -> (LLaDA id - 126080) for LLaDA's added tokens (read once)."""
    return {c: real_id - spec.LLADA_FIRST_ADDED_ID for real_id, c in spec.llada_added_tokens()}


@dataclass(frozen=True)
class FamilySpecialIds:
    """Special ids of a family whose added tokens follow `n_regular` BPE tokens. A subclass sets the
    token contents (EOS, MASK, EOT), `n_added` and implements `of(content)`."""

    n_regular: int
    EOS = MASK = EOT = ""

    def of(self, content: str) -> int:
        raise NotImplementedError

    @property
    def eos(self) -> int:
        return self.of(self.EOS)

    @property
    def pad(self) -> int:
        return self.eos

    @property
    def mask(self) -> int:
        return self.of(self.MASK)

    @property
    def eot(self) -> int:
        return self.of(self.EOT)

    @property
    def stop(self) -> set[int]:
        """Ids that end an answer (decoders cut the output at the first): EOS, end of turn."""
        return {self.eos, self.eot}

    @property
    def n_added(self) -> int:
        raise NotImplementedError

    @property
    def n_tokens(self) -> int:
        """Tokens the tokenizer can produce: regular + added."""
        return self.n_regular + self.n_added

    @property
    def embedding_size(self) -> int:
        """Embedding / LM-head rows: n_tokens rounded up to a multiple of 64."""
        m = EMBEDDING_MULTIPLE
        return (self.n_tokens + m - 1) // m * m


@dataclass(frozen=True)
class SpecialIds(FamilySpecialIds):
    """Ids of LLaDA's special tokens in a vocabulary with `n_regular` BPE tokens before them."""

    EOS, MASK, EOT = "<|endoftext|>", "<|mdm_mask|>", "<|eot_id|>"

    def of(self, content: str) -> int:
        """Id of the added token `content` (e.g. '<|mdm_mask|>'); KeyError if it is not one."""
        offset = _added_offsets().get(content)
        if offset is None:
            raise KeyError(f"{content!r} is not one of LLaDA's added tokens")
        return self.n_regular + offset

    @property
    def n_added(self) -> int:
        return N_ADDED

    @property
    def bos(self) -> int:
        return self.of("<|startoftext|>")

    @property
    def start_header(self) -> int:
        return self.of("<|start_header_id|>")

    @property
    def end_header(self) -> int:
        return self.of("<|end_header_id|>")


@functools.lru_cache(maxsize=1)
def _chat_template():
    import jinja2

    env = jinja2.Environment(undefined=jinja2.StrictUndefined, keep_trailing_newline=True)
    return env.from_string(spec.llada_chat_template())


def render_chat(messages: list[dict]) -> str:
    """LLaDA's chat template applied to `messages` ([{"role", "content"}]), BOS string included.

    The template always ends with the assistant header (it ignores add_generation_prompt)."""
    return _chat_template().render(messages=messages, bos_token="<|startoftext|>", add_generation_prompt=True)


def chat_prompt(question: str) -> str:
    """The prompt string for one user message (reference §A.5)."""
    return render_chat([{"role": "user", "content": question}])


_SENTINEL = "\x00QUESTION\x00"


@functools.lru_cache(maxsize=1)
def _chat_frame() -> tuple[str, str]:
    return chat_frame(chat_prompt)


def chat_prompts(questions: list[str]) -> list[str]:
    """chat_prompt() of many questions (training-set scale), see splice_prompts."""
    return splice_prompts(questions, chat_prompt, _chat_frame())


def splice_prompts(questions: list[str], render, frame: tuple[str, str]) -> list[str]:
    """render(q) of many questions: the template is rendered once (`frame` = the text before and after
    the user message) and each question spliced in; every question is checked against `render`
    (jinja2) where splicing could differ (templates may trim the content), and the first few always
    are. Raises RuntimeError on a mismatch. Shared by the LLaDA and Dream formats."""
    before, after = frame
    out = []
    for i, q in enumerate(questions):
        fast = before + q + after
        if i < 8 or q != q.strip():
            slow = render(q)
            if slow != fast and q == q.strip():
                raise RuntimeError(f"chat template splice differs from jinja2 for {q!r}")
            fast = slow
        out.append(fast)
    return out


def chat_frame(render) -> tuple[str, str]:
    """(text before, text after) the user message in render(question) of a one-message chat."""
    before, sep, after = render(_SENTINEL).partition(_SENTINEL)
    if not sep:
        raise RuntimeError("chat template dropped the user message")
    return before, after


def format_of(family: str):
    """The conventions module of a model family: this module ("llada", and "llada-moe", whose small
    model shares LLaDA's tokenizer and chat template) or dream_format ("dream")."""
    if family == "dream":
        import dream_format

        return dream_format
    if family not in ("llada", "llada-moe"):
        raise ValueError(f"unknown model family {family!r} (llada, llada-moe, dream)")
    return sys.modules[__name__]


def flash_seqlen_k(prompt_len: int, gen_length: int, tile: int = 128) -> int:
    """Flash-dLLM key length of a slot: floor((P+G)/tile)*tile + tile (reference §D.3)."""
    if prompt_len < 0 or gen_length <= 0:
        raise ValueError(f"prompt_len {prompt_len} / gen_length {gen_length} must be >= 0 / > 0")
    return (prompt_len + gen_length) // tile * tile + tile
