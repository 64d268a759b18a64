"""Scoring of the flashdllm_arith lm-evaluation-harness task: the same rule as `flashdllm eval --task
arith` (src/eval/tasks.cpp extract_hash_answer / normalize_number): the number after the last
"####", commas, dollars and spaces dropped, trailing dots and fractional zeros removed."""

import re


def normalize_number(s: str) -> str:
    t = "".join(c for c in s if c not in ",$ \t\n\r").rstrip(".")
    if not t:
        return ""
    i = 1 if t[0] in "+-" else 0
    body = t[i:]
    if not body or body.count(".") > 1 or not re.fullmatch(r"[0-9.]*", body) or not re.search(r"[0-9]", body):
        return ""
    if "." in t:
        t = t.rstrip("0").rstrip(".")
    if t[0] == "+":
        t = t[1:]
    sign = "-" if t.startswith("-") else ""
    digits = t[len(sign):]
    int_part, dot, frac = digits.partition(".")
    int_part = int_part.lstrip("0") or "0"
    out = sign + int_part + (dot + frac if dot else "")
    return "0" if out == "-0" else out


def extract_hash_answer(text: str):
    at = text.rfind("####")
    if at < 0:
        return None
    rest = text[at + 4:].lstrip(" \t")
    m = re.match(r"[0-9.,$+\-]*", rest)
    n = normalize_number(m.group(0))
    return n or None


def doc_to_target(doc):
    return extract_hash_answer(doc["answer"])


def process_results(doc, results):
    got = extract_hash_answer(results[0])
    return {"exact_match": int(got is not None and got == extract_hash_answer(doc["answer"]))}
