"""flashdllm's chat templates (src/io/chat_template.cpp on minja, src/io/jinja.cpp) against jinja2.

The reference renders each real `chat_template` text with jinja2 the way
`transformers.apply_chat_template` does: an ImmutableSandboxedEnvironment with trim_blocks,
lstrip_blocks and loopcontrols, the globals raise_exception and strftime_now, transformers' tojson,
and the variables messages, tools=None, documents=None, add_generation_prompt and the special tokens
of the config (bos_token, eos_token, ... and additional_special_tokens). flashdllm renders through
the driver $FLASHDLLM_BINARY_DIR/fdllm_tokenize --chat-config <file>. Outputs must be identical, and
a conversation jinja2 cannot render must be an error for flashdllm too.

Templates: LLaDA-8B-Instruct's (data/llada-8b-instruct), Dream-v0-Instruct-7B's ChatML
(data/dream-v0-instruct-7b), the shipped small model's (models/llada-arith-12m), edited variants of
LLaDA's, and a named-template list. LLaDA-1.5's tokenizer_config.json has no public copy we could
find (data/README.md), so it is not tested here.
"""

from __future__ import annotations

import json
import os
import subprocess
from datetime import datetime
from pathlib import Path

import jinja2.ext
import pytest
from jinja2.sandbox import ImmutableSandboxedEnvironment

REPO = Path(os.environ.get("FLASHDLLM_SOURCE_DIR") or Path(__file__).resolve().parents[2])
LLADA = REPO / "data" / "llada-8b-instruct" / "tokenizer_config.json"
DREAM = REPO / "data" / "dream-v0-instruct-7b" / "tokenizer_config.json"
SMALL = REPO / "models" / "llada-arith-12m" / "tokenizer_config.json"
PY_SPACE = [chr(c) for c in range(0x110000) if chr(c).isspace()]  # what Jinja's trim strips
SPECIAL_KEYS = ["bos_token", "eos_token", "unk_token", "sep_token", "pad_token", "cls_token", "mask_token"]


def driver() -> Path:
    bdir = os.environ.get("FLASHDLLM_BINARY_DIR")
    assert bdir, "FLASHDLLM_BINARY_DIR is not set: run through ctest or export it to the build directory"
    path = Path(bdir) / "fdllm_tokenize"
    assert path.is_file() and os.access(path, os.X_OK), f"driver {path} is missing: build target fdllm_tokenize"
    return path


def run_chat(config: Path, conversations: list[list[dict]], add_generation_prompt: bool = True
             ) -> subprocess.CompletedProcess:
    payload = "".join(json.dumps({"op": "chat", "messages": m, "add_generation_prompt": add_generation_prompt},
                                 ensure_ascii=True) + "\n" for m in conversations)
    return subprocess.run([str(driver()), "--chat-config", str(config)], input=payload.encode("utf-8"),
                          capture_output=True, timeout=300)


def replies(proc: subprocess.CompletedProcess) -> list[dict]:
    assert proc.returncode == 0, proc.stderr.decode("utf-8", "replace")
    return [json.loads(l) for l in proc.stdout.decode("utf-8").split("\n") if l]


def special_tokens(cfg: dict) -> dict:
    """transformers' special_tokens_map as the template sees it (AddedToken objects as their text)."""
    text = lambda v: v["content"] if isinstance(v, dict) else v
    out = {k: text(cfg[k]) for k in SPECIAL_KEYS if cfg.get(k) is not None}
    if cfg.get("additional_special_tokens") is not None:
        out["additional_special_tokens"] = [text(v) for v in cfg["additional_special_tokens"]]
    return out


def hf_environment() -> ImmutableSandboxedEnvironment:
    """transformers.utils.chat_template_utils._compile_jinja_template's environment."""
    def raise_exception(message):
        raise jinja2.exceptions.TemplateError(message)

    def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
        return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)

    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True, extensions=[jinja2.ext.loopcontrols])
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = lambda fmt: datetime.now().strftime(fmt)
    return env


def jinja_render(template: str, messages: list[dict], specials: dict, add_generation_prompt: bool) -> str | None:
    """The rendering, or None where jinja2 raises (flashdllm must then answer an error)."""
    try:
        return hf_environment().from_string(template).render(
            messages=messages, tools=None, documents=None, add_generation_prompt=add_generation_prompt, **specials)
    except jinja2.exceptions.TemplateError:
        return None


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
        [{"role": "user", "content": "{{ bos_token }} {% if true %}x{% endif %} <|eot_id|> <|mdm_mask|> <|im_end|>"}],
        [{"role": "user", "content": "emoji 😀👨‍👩‍👧 café e\u0301"}],
        [{"role": "system", "content": " You are helpful. "}, {"role": "user", "content": "Hi\n"}],
        [{"role": "user", "content": "Q1"}, {"role": "assistant", "content": " A1 "}, {"role": "user", "content": "Q2"}],
        [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Q1"},
         {"role": "assistant", "content": "A1"}, {"role": "user", "content": "Q2"},
         {"role": "assistant", "content": "A2"}, {"role": "user", "content": "Q3"}],
        [{"role": "user", "content": "a"}, {"role": "system", "content": "late system"}],
        [{"role": "tool", "content": "out"}, {"role": "tool", "content": "out2"}, {"role": "user", "content": "x"}],
        [{"role": "tool", "content": "out"}, {"role": "", "content": "empty role"}, {"role": "User ", "content": "x"}],
        [],
    ]
    return convs


def check_against_jinja(config: Path, convs: list[list[dict]]) -> None:
    cfg = json.loads(config.read_text(encoding="utf-8"))
    template, specials = cfg["chat_template"], special_tokens(cfg)
    if isinstance(template, list):
        template = next(t["template"] for t in template if t["name"] == "default")
    mismatches, errors_both = [], 0
    for agp in (True, False):
        for conv, rep in zip(convs, replies(run_chat(config, convs, agp))):
            want = jinja_render(template, conv, specials, agp)
            if want is None:
                errors_both += "error" in rep
                if "error" not in rep or rep.get("code") != "invalid argument" or str(config) not in rep["error"]:
                    mismatches.append((conv, agp, rep, "jinja2 raised"))
            elif rep.get("text") != want:
                mismatches.append((conv, agp, rep, want))
    print(f"{config}: {2 * len(convs)} renderings, {errors_both} errors on both sides, {len(mismatches)} mismatches")
    assert not mismatches, mismatches[:5]


@pytest.mark.parametrize("config", [LLADA, DREAM, SMALL], ids=["llada-8b-instruct", "dream-v0-instruct-7b", "small"])
def test_real_templates_match_jinja(config: Path) -> None:
    check_against_jinja(config, conversations())


def test_llada_single_user_message_exact_form() -> None:
    """Reference §A.5: BOS, user header, trimmed message, EOT, assistant header; no newline after EOT."""
    text = replies(run_chat(LLADA, [[{"role": "user", "content": "  What is 2+2?\n"}]]))[0]["text"]
    assert text == ("<|startoftext|><|start_header_id|>user<|end_header_id|>\n\nWhat is 2+2?<|eot_id|>"
                    "<|start_header_id|>assistant<|end_header_id|>\n\n")


def test_dream_chatml_exact_form() -> None:
    conv = [{"role": "user", "content": "What is 2+2?"}]
    on, off = (replies(run_chat(DREAM, [conv], agp))[0]["text"] for agp in (True, False))
    head = "<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n<|im_start|>user\nWhat is 2+2?<|im_end|>\n"
    assert off == head and on == head + "<|im_start|>assistant\n"


def write_config(tmp: Path, template, base: Path = LLADA) -> Path:
    cfg = json.loads(base.read_text(encoding="utf-8"))
    cfg["chat_template"] = template
    path = tmp / "tokenizer_config.json"
    path.write_text(json.dumps(cfg), encoding="utf-8")
    return path


@pytest.mark.parametrize(
    "edit",
    [
        lambda t: t.replace("{%", "{%  ").replace("%}", "\n %}").replace(" = ", "=").replace("+ ", " +  "),
        lambda t: t.replace("<|end_header_id|>\n\n", "<|end_header_id|>\n"),  # a literal changed
        lambda t: t.replace("| trim", ""),  # no trimming
        lambda t: t.replace("loop.index0 == 0", "loop.index0 == 1"),
        lambda t: t + "\n",  # text outside tags is output (the last newline is dropped, as in jinja2)
        lambda t: t + "\n\n",
        lambda t: "{{ bos_token }}" + t,
        lambda t: "{# comment #}  \n  {%- if add_generation_prompt -%} G {%- endif %}\n" + t,
        lambda t: "{% for m in messages[::-1] %}{{ loop.index }}{{ m.role | upper }}{% endfor %}" + t,
        lambda t: "{% if messages | length > 1 and messages[0].role == 'system' %}{{ eos_token }}{% endif %}" + t,
    ],
)
def test_edited_templates_match_jinja(tmp_path: Path, edit) -> None:
    template = json.loads(LLADA.read_text(encoding="utf-8"))["chat_template"]
    changed = edit(template)
    assert changed != template
    convs = [c for c in conversations() if all(m["content"].isascii() for m in c)][-40:]
    check_against_jinja(write_config(tmp_path, changed), convs)


def test_named_template_list_uses_default(tmp_path: Path) -> None:
    template = json.loads(LLADA.read_text(encoding="utf-8"))["chat_template"]
    path = write_config(tmp_path, [{"name": "tool_use", "template": "TOOLS"}, {"name": "default", "template": template}])
    check_against_jinja(path, conversations()[-12:])
    no_default = write_config(tmp_path, [{"name": "tool_use", "template": "TOOLS"}])
    proc = run_chat(no_default, [[{"role": "user", "content": "x"}]])
    assert proc.returncode == 2 and "default" in proc.stderr.decode() and str(no_default) in proc.stderr.decode()


@pytest.mark.parametrize("template", [None, 5, ["not an object"]])
def test_missing_or_malformed_template_names_the_file(tmp_path: Path, template) -> None:
    path = write_config(tmp_path, template)
    proc = run_chat(path, [[{"role": "user", "content": "x"}]])
    err = proc.stderr.decode("utf-8")
    assert proc.returncode == 2 and str(path) in err and "chat_template" in err, err


@pytest.mark.parametrize("template", ["{% if %}x{% endif %}", "{{ 'unterminated }}", "{% for m in messages %}",
                                      "{% endif %}", "{{ (1 + }}"])
def test_syntax_error_names_the_file(tmp_path: Path, template: str) -> None:
    path = write_config(tmp_path, template)
    proc = run_chat(path, [[{"role": "user", "content": "x"}]])
    err = proc.stderr.decode("utf-8")
    assert proc.returncode == 2 and str(path) in err and "does not parse" in err, err


@pytest.mark.parametrize(
    "template, what",
    [
        ("{% if messages[0].role != 'system' %}{{ raise_exception('System first!') }}{% endif %}", "System first!"),
        ("{% for i in range(10**9) %}{% endfor %}", "range()"),
        ("{% for i in range(1500) %}{% for j in range(1500) %}{% endfor %}{% endfor %}", "range()"),
        ("{% macro f(n) %}{{ f(n + 1) }}{% endmacro %}{{ f(0) }}", "cost bound"),
        ("{% for m in messages %}{% for a in messages %}{% for b in messages %}{% for c in messages %}"
         "{{ bos_token }}{% endfor %}{% endfor %}{% endfor %}{% endfor %}", "cost bound"),
        ("{{ messages.no_such_method() }}", "rendering the template failed"),
    ],
)
def test_render_errors_name_the_file_and_stay_bounded(tmp_path: Path, template: str, what: str) -> None:
    path = write_config(tmp_path, template)
    conv = [{"role": "user", "content": "x"}] * (60 if "for c in" in template else 1)
    rep = replies(run_chat(path, [conv]))[0]
    assert rep.get("code") == "invalid argument" and str(path) in rep["error"] and what in rep["error"], rep


def test_template_size_is_bounded(tmp_path: Path) -> None:
    path = write_config(tmp_path, "x" * (32 * 1024 + 1))
    proc = run_chat(path, [[{"role": "user", "content": "x"}]])
    assert proc.returncode == 2 and str(path) in proc.stderr.decode() and "bytes" in proc.stderr.decode()
