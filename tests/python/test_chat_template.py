"""flashdllm's LLaDA chat template renderer (src/io/chat_template.cpp) against jinja2.

The reference renders the real `chat_template` text of data/llada-8b-instruct/tokenizer_config.json
with jinja2 the way `transformers.apply_chat_template` does (sandboxed environment, trim_blocks,
lstrip_blocks, loopcontrols; bos_token from the config). flashdllm renders through the driver
$FLASHDLLM_BINARY_DIR/fdllm_tokenize --chat-config <that file>. Outputs must be identical.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import jinja2.ext
import pytest
from jinja2.sandbox import ImmutableSandboxedEnvironment

REPO = Path(os.environ.get("FLASHDLLM_SOURCE_DIR") or Path(__file__).resolve().parents[2])
CONFIG = REPO / "data" / "llada-8b-instruct" / "tokenizer_config.json"
PY_SPACE = [chr(c) for c in range(0x110000) if chr(c).isspace()]  # what Jinja's trim strips


def driver() -> Path:
    bdir = os.environ.get("FLASHDLLM_BINARY_DIR")
    assert bdir, "FLASHDLLM_BINARY_DIR is not set: run through ctest or export it to the build directory"
    path = Path(bdir) / "fdllm_tokenize"
    assert path.is_file() and os.access(path, os.X_OK), f"driver {path} is missing: build target fdllm_tokenize"
    return path


def run_chat(config: Path, conversations: list[list[dict]]) -> subprocess.CompletedProcess:
    payload = "".join(json.dumps({"op": "chat", "messages": m}, ensure_ascii=True) + "\n" for m in conversations)
    return subprocess.run([str(driver()), "--chat-config", str(config)], input=payload.encode("utf-8"),
                          capture_output=True, timeout=300)


def jinja_render(template: str, messages: list[dict], bos: str, add_generation_prompt: bool) -> str:
    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True, extensions=[jinja2.ext.loopcontrols])
    return env.from_string(template).render(
        messages=messages, bos_token=bos, eos_token="<|endoftext|>", pad_token="<|endoftext|>",
        add_generation_prompt=add_generation_prompt,
    )


def conversations() -> list[list[dict]]:
    convs: list[list[dict]] = []
    with open(REPO / "data" / "gsm8k_test.jsonl", encoding="utf-8") as f:
        for i, line in enumerate(f):
            if i >= 300:
                break
            convs.append([{"role": "user", "content": json.loads(line)["question"]}])
    for ch in PY_SPACE + ["\u180e", "\u200b", "\ufeff", "\u2060", "a"]:
        convs.append([{"role": "user", "content": f"{ch}{ch} What is 2+2? {ch}{ch}"}])
        convs.append([{"role": "user", "content": f"{ch}"}])
    convs += [
        [{"role": "user", "content": ""}],
        [{"role": "user", "content": "".join(PY_SPACE)}],
        [{"role": "user", "content": "  \n\n  multi\nline\r\n  text \t\n"}],
        [{"role": "user", "content": "{{ bos_token }} {% if true %}x{% endif %} <|eot_id|> <|mdm_mask|>"}],
        [{"role": "user", "content": "emoji 😀👨‍👩‍👧 café e\u0301"}],
        [{"role": "system", "content": " You are helpful. "}, {"role": "user", "content": "Hi\n"}],
        [{"role": "user", "content": "Q1"}, {"role": "assistant", "content": " A1 "}, {"role": "user", "content": "Q2"}],
        [{"role": "tool", "content": "out"}, {"role": "", "content": "empty role"}, {"role": "User ", "content": "x"}],
        [],
    ]
    return convs


def test_renderer_matches_jinja_on_real_template() -> None:
    cfg = json.loads(CONFIG.read_text(encoding="utf-8"))
    template, bos = cfg["chat_template"], cfg["bos_token"]
    convs = conversations()
    proc = run_chat(CONFIG, convs)
    assert proc.returncode == 0, proc.stderr.decode("utf-8", "replace")
    replies = [json.loads(l) for l in proc.stdout.decode("utf-8").split("\n") if l]
    assert len(replies) == len(convs)
    mismatches = []
    for conv, rep in zip(convs, replies):
        want = jinja_render(template, conv, bos, add_generation_prompt=True)
        # The template ignores add_generation_prompt (reference §A.5).
        assert want == jinja_render(template, conv, bos, add_generation_prompt=False)
        if rep.get("text") != want:
            mismatches.append((conv, rep, want))
    print(f"{len(convs)} conversations, {len(mismatches)} mismatches")
    assert not mismatches, mismatches[:5]


def test_single_user_message_exact_form() -> None:
    """Reference §A.5: BOS, user header, trimmed message, EOT, assistant header; no newline after EOT."""
    proc = run_chat(CONFIG, [[{"role": "user", "content": "  What is 2+2?\n"}]])
    assert proc.returncode == 0, proc.stderr
    text = json.loads(proc.stdout.decode("utf-8").split("\n")[0])["text"]
    assert text == ("<|startoftext|><|start_header_id|>user<|end_header_id|>\n\nWhat is 2+2?<|eot_id|>"
                    "<|start_header_id|>assistant<|end_header_id|>\n\n")


def write_config(tmp: Path, template: str) -> Path:
    cfg = json.loads(CONFIG.read_text(encoding="utf-8"))
    cfg["chat_template"] = template
    path = tmp / "tokenizer_config.json"
    path.write_text(json.dumps(cfg), encoding="utf-8")
    return path


def test_whitespace_variant_of_template_is_accepted(tmp_path: Path) -> None:
    template = json.loads(CONFIG.read_text(encoding="utf-8"))["chat_template"]
    spaced = template.replace("{%", "{%  ").replace("%}", "\n %}").replace(" = ", "=").replace("+ ", " +  ")
    assert spaced != template
    conv = [{"role": "user", "content": " hi "}]
    proc = run_chat(write_config(tmp_path, spaced), [conv])
    assert proc.returncode == 0, proc.stderr
    text = json.loads(proc.stdout.decode("utf-8").split("\n")[0])["text"]
    assert text == jinja_render(spaced, conv, "<|startoftext|>", True)


@pytest.mark.parametrize(
    "edit",
    [
        lambda t: t.replace("<|end_header_id|>\n\n", "<|end_header_id|>\n"),  # a literal changed
        lambda t: t.replace("| trim", ""),  # no trimming
        lambda t: t.replace("loop.index0 == 0", "loop.index0 == 1"),
        lambda t: t + "\n",  # text outside tags is output
        lambda t: "{{ bos_token }}" + t,
    ],
)
def test_other_templates_are_rejected(tmp_path: Path, edit) -> None:
    template = json.loads(CONFIG.read_text(encoding="utf-8"))["chat_template"]
    changed = edit(template)
    assert changed != template
    path = write_config(tmp_path, changed)
    proc = run_chat(path, [[{"role": "user", "content": "x"}]])
    assert proc.returncode == 2
    err = proc.stderr.decode("utf-8")
    assert str(path) in err and "chat_template" in err and "--raw" in err, err
