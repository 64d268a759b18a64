#!/usr/bin/env python3
"""Writes the seed corpora of the fuzz targets into tests/fuzz/corpus/<target>/seed_*.

Seeds are small on purpose (libFuzzer mutates faster on small inputs and takes its -max_len from the
largest seed): valid examples of each format plus a few near misses. Standard library only. Files
named crash_* in the corpora are reproducers of findings; this script never touches them.
Run: python3 tests/fuzz/make_seeds.py
"""
import json
import struct
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
CORPUS = HERE / "corpus"


def put(target, name, data):
    d = CORPUS / target
    d.mkdir(parents=True, exist_ok=True)
    (d / f"seed_{name}").write_bytes(data if isinstance(data, bytes) else data.encode())


def safetensors(tensors, metadata=None, pad=True):
    """tensors: [(name, dtype, shape, raw bytes)] -> file bytes (data back to back, in order)."""
    header, off, blob = {}, 0, b""
    if metadata:
        header["__metadata__"] = metadata
    for name, dtype, shape, raw in tensors:
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [off, off + len(raw)]}
        off += len(raw)
        blob += raw
    h = json.dumps(header, separators=(",", ":")).encode()
    if pad:
        h += b" " * ((8 - len(h) % 8) % 8)
    return struct.pack("<Q", len(h)) + h + blob


def main():
    f32 = struct.pack("<4f", 1.0, -2.0, 0.5, 3.0)
    bf16 = struct.pack("<3H", 0x3F80, 0xC000, 0x7F80)
    # safetensors
    put("safetensors", "three_dtypes", safetensors([("w", "F32", [2, 2], f32), ("b", "BF16", [3], bf16),
                                                    ("i", "I64", [1], struct.pack("<q", 7))], {"format": "pt"}))
    put("safetensors", "empty_header", safetensors([]))
    put("safetensors", "scalar_and_empty", safetensors([("s", "F16", [], b"\x00\x3c"), ("e", "F32", [0, 3], b"")], pad=False))
    put("safetensors", "overlap", struct.pack("<Q", 96) + json.dumps(
        {"a": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]},
         "b": {"dtype": "F32", "shape": [2], "data_offsets": [4, 12]}}).encode()[:96].ljust(96) + b"\0" * 12)
    # index next to a.safetensors {x: F32[2], y: F32[1]} and b.safetensors {z: F32[3]}
    idx = {"metadata": {"total_size": 24}, "weight_map": {"x": "a.safetensors", "y": "a.safetensors", "z": "b.safetensors"}}
    put("safetensors_index", "valid", json.dumps(idx))
    put("safetensors_index", "missing_shard", json.dumps({"weight_map": {"x": "a.safetensors", "y": "a.safetensors",
                                                                         "z": "c.safetensors"}}))
    put("safetensors_index", "unmapped", json.dumps({"weight_map": {"x": "a.safetensors", "z": "b.safetensors"}}))
    put("safetensors_index", "path_escape", json.dumps({"weight_map": {"x": "../a.safetensors"}}))
    real = json.loads((REPO / "data" / "llada-8b-instruct" / "model.safetensors.index.json").read_text())
    tiny = {"metadata": {"total_size": 2 * 2704}, "weight_map": {k: v for k, v in real["weight_map"].items()
                                                                 if ".blocks." not in k or ".blocks.0." in k or ".blocks.1." in k}}
    put("safetensors_index", "llada_names", json.dumps(tiny))
    # config.json
    for name, path in [("llada8b", REPO / "data" / "llada-8b-instruct" / "config.json"),
                       ("small_model", REPO / "models" / "llada-arith-12m" / "config.json"),
                       ("dream7b", REPO / "data" / "dream-v0-instruct-7b" / "config.json")]:
        put("config", name, path.read_text())
    cfg = json.loads((REPO / "models" / "llada-arith-12m" / "config.json").read_text())
    cfg.update({"n_heads": 3, "mlp_hidden_size": None, "embedding_size": None, "rope_scaling": None})
    put("config", "odd_heads", json.dumps(cfg))
    # tokenizer.json: the small model's structure with a byte alphabet, a few merges and added tokens
    tok = json.loads((REPO / "models" / "llada-arith-12m" / "tokenizer.json").read_text())
    vocab = {k: v for k, v in tok["model"]["vocab"].items() if v < 300}
    merges = [m for m in tok["model"]["merges"] if "".join(m) in vocab][:40]
    added = [a for a in tok["added_tokens"] if a["id"] < 2052 or a["content"] in ("<|mdm_mask|>", "<|eot_id|>")]
    small = dict(tok, model=dict(tok["model"], vocab=vocab, merges=merges), added_tokens=added)
    put("tokenizer_load", "llada_like", json.dumps(small))
    nfc = dict(small, normalizer={"type": "Sequence", "normalizers": [{"type": "NFC"}]},
               pre_tokenizer={"type": "ByteLevel", "add_prefix_space": True, "use_regex": True},
               post_processor={"type": "TemplateProcessing", "single": [{"SpecialToken": {"id": "<|startoftext|>",
                               "type_id": 0}}, {"Sequence": {"id": "A", "type_id": 0}}],
                               "special_tokens": {"<|startoftext|>": {"id": "<|startoftext|>", "ids": [2048],
                                                                       "tokens": ["<|startoftext|>"]}}})
    put("tokenizer_load", "nfc_template", json.dumps(nfc))
    digits = dict(small, pre_tokenizer={"type": "Sequence", "pretokenizers": [
        {"type": "Digits", "individual_digits": True},
        {"type": "Split", "pattern": {"String": " "}, "behavior": "MergedWithNext", "invert": False},
        {"type": "ByteLevel", "add_prefix_space": False, "use_regex": False}]})
    put("tokenizer_load", "digits_split", json.dumps(digits))
    # arbitrary text for the real tokenizer
    for name, text in [("question", "Mason has 96 stamps. He gets 4 more stamps from Mia. How many stamps does he have?"),
                       ("chat", "<|startoftext|><|start_header_id|>user<|end_header_id|>\n\n1+1?<|eot_id|>"
                                "<|start_header_id|>assistant<|end_header_id|>\n\n"),
                       ("unicode", "caf\u00e9 \u4e2d\u6587 \U0001F600 e\u0301 \u00a0\u2028x"),
                       ("specials", "<|mdm_mask|><|mdm_mask|>2<|endoftext|> <role>a</role>")]:
        put("tokenizer_encode", name, text)
    put("tokenizer_encode", "invalid_utf8", b"ab\xff\xfe\xc3(\xe2\x82\x28 \xf0\x90\x80 12\n\r\t")
    # chat template: tokenizer_config.json, and messages "bos\0role\0content..."
    tc = json.loads((REPO / "models" / "llada-arith-12m" / "tokenizer_config.json").read_text())
    put("chat_template", "config", json.dumps({"chat_template": tc["chat_template"], "bos_token": tc["bos_token"]}))
    put("chat_template", "config_bos_object", json.dumps({"chat_template": tc["chat_template"],
                                                          "bos_token": {"content": "<s>", "lstrip": False}}))
    put("chat_template", "messages", "<|startoftext|>\0system\0  Be brief.\u3000\0user\0 1+1? \n")
    dream = json.loads((REPO / "data" / "dream-v0-instruct-7b" / "tokenizer_config.json").read_text())
    put("chat_template", "config_chatml", json.dumps({k: dream[k] for k in ("chat_template", "bos_token", "eos_token")}))
    put("chat_template", "template_dream", dream["chat_template"])
    put("chat_template", "template_features",
        "{%- macro m(x, y=2) -%}{{ x ~ y }}{%- endmacro -%}{% set ns = namespace(k=0) %}"
        "{% for msg in messages[::-1] if msg.role != 'tool' %}{% set ns.k = ns.k + 1 %}{{ loop.index0 }}"
        "{{ m(msg.role | upper, y=msg.content | trim | length) }}{% if loop.last %}{{ bos_token }}{% endif %}"
        "{% else %}none{% endfor %}{{ range(3) | join(',') }}{# c #}{{ raise_exception('x') if not messages }}")


if __name__ == "__main__":
    main()
