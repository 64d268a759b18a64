#!/usr/bin/env python3
"""Independent Python builder of the lm-evaluation-harness 0.4.8 prompts and gold answers that
`flashdllm eval` uses, for checking the C++ implementation (tests/python/test_eval_prompts.py).

It follows lm-eval's procedure with Python's own `random` and `re`, written for this project from
the task definitions (reference-algorithms.md §E):

* gsm8k (v3.0): 5-shot; the few-shot docs are `list(train_split)`, one `random.Random(seed)` per
  lm-eval process (seed 1234 by default), and for every test document in order
  `rnd.sample(train_docs, 5)`; context = for each exemplar "Question: {q}\nAnswer:" + " " + answer
  + "\n\n", then "Question: {q}\nAnswer:". Gold = the answer after lm-eval's exact_match
  preprocessing (regexes ",", "\\$", "(?s).*#### ", "\\.$" removed, lower-cased).
  With N processes, process r evaluates documents r, r+N, ...; document i gets draw i // N.
* math500: 4 fixed Minerva exemplars (first_n), "Problem:\n{p}\n\nSolution:" + " " + solution +
  "\n\n"; gold = Minerva-normalised content of the solution's last \\boxed{}.
* humaneval: the prompt verbatim.
* mbpp: exemplars = task ids 2, 3, 4; "You are an expert Python programmer, and here is your task:
  {text} Your code should pass these tests:\n\n{t0}\n{t1}\n{t2}\n[BEGIN]\n" + code + "\n[DONE]" +
  "\n\n"; test split = task ids 11..510.

Usage: lm_eval_prompts.py TASK DATA_DIR OUT.jsonl [--seed 1234] [--processes 1] [--indices]
(`--indices` adds the GSM8K exemplar indices to each record.)
"""
import argparse
import gzip
import json
import random
import re
from pathlib import Path

GSM8K_UNTIL = ["Question:", "</s>", "<|im_end|>"]
MATH_UNTIL = ["Problem:"]
HUMANEVAL_UNTIL = ["\nclass", "\ndef", "\n#", "\nif", "\nprint"]
MBPP_UNTIL = ["[DONE]"]

# lm-eval 0.4.8 minerva_math list_fewshot_samples() (task data; note the single backslash that
# ends the align rows in that release, reproduced as sent to the model).
MINERVA_EXEMPLARS = [
    ("Find the domain of the expression  $\\frac{\\sqrt{x-2}}{\\sqrt{5-x}}$.}",
     "The expressions inside each square root must be non-negative. Therefore, $x-2 \\ge 0$, so $x\\ge2$, and $5 - x \\ge 0$, so $x \\le 5$. Also, the denominator cannot be equal to zero, so $5-x>0$, which gives $x<5$. Therefore, the domain of the expression is $\\boxed{[2,5)}$.\nFinal Answer: The final answer is $[2,5)$. I hope it is correct."),
    ("If $\\det \\mathbf{A} = 2$ and $\\det \\mathbf{B} = 12,$ then find $\\det (\\mathbf{A} \\mathbf{B}).$",
     "We have that $\\det (\\mathbf{A} \\mathbf{B}) = (\\det \\mathbf{A})(\\det \\mathbf{B}) = (2)(12) = \\boxed{24}.$\nFinal Answer: The final answer is $24$. I hope it is correct."),
    ("Terrell usually lifts two 20-pound weights 12 times. If he uses two 15-pound weights instead, how many times must Terrell lift them in order to lift the same total weight?",
     "If Terrell lifts two 20-pound weights 12 times, he lifts a total of $2\\cdot 12\\cdot20=480$ pounds of weight.  If he lifts two 15-pound weights instead for $n$ times, he will lift a total of $2\\cdot15\\cdot n=30n$ pounds of weight.  Equating this to 480 pounds, we can solve for $n$:\n\\begin{align*}\n30n&=480\\\n\\Rightarrow\\qquad n&=480/30=\\boxed{16}\n\\end{align*}\nFinal Answer: The final answer is $16$. I hope it is correct."),
    ("If the system of equations\n\n\\begin{align*}\n6x-4y&=a,\\\n6y-9x &=b.\n\\end{align*}has a solution $(x, y)$ where $x$ and $y$ are both nonzero,\nfind $\\frac{a}{b},$ assuming $b$ is nonzero.",
     "If we multiply the first equation by $-\\frac{3}{2}$, we obtain\n\n$$6y-9x=-\\frac{3}{2}a.$$Since we also know that $6y-9x=b$, we have\n\n$$-\\frac{3}{2}a=b\\Rightarrow\\frac{a}{b}=\\boxed{-\\frac{2}{3}}.$$\nFinal Answer: The final answer is $-\\frac{2}{3}$. I hope it is correct."),
]


def read_jsonl(path: Path):
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rt", encoding="utf-8") as f:
        return [json.loads(line) for line in f if line.strip()]


def gsm8k_em_normalize(s: str) -> str:
    for pattern in [",", r"\$", r"(?s).*#### ", r"\.$"]:
        s = re.sub(pattern, "", s)
    return s.lower()


def last_boxed(s: str):
    if "\\boxed " in s:
        return "\\boxed " + s.split("\\boxed ")[-1].split("$")[0]
    idx = s.rfind("\\boxed")
    if idx < 0:
        idx = s.rfind("\\fbox")
        if idx < 0:
            return None
    depth = 0
    for i in range(idx, len(s)):
        if s[i] == "{":
            depth += 1
        elif s[i] == "}":
            depth -= 1
            if depth == 0:
                return s[idx:i + 1]
    return None


def unbox(s: str) -> str:
    if "\\boxed " in s:
        assert s.startswith("\\boxed ")
        return s[len("\\boxed "):]
    assert s.startswith("\\boxed{") and s.endswith("}")
    return s[len("\\boxed{"):-1]


SUBSTITUTIONS = [("an ", ""), ("a ", ""), (".$", "$"), ("\\$", ""), ("\\ ", ""), (" ", ""), ("mbox", "text"),
                 (",\\text{and}", ","), ("\\text{and}", ","), ("\\text{m}", "\\text{}")]
REMOVED = ["square", "ways", "integers", "dollars", "mph", "inches", "ft", "hours", "km", "units", "\\ldots", "sue",
           "points", "feet", "minutes", "digits", "cents", "degrees", "cm", "gm", "pounds", "meters", "meals", "edges",
           "students", "childrentickets", "multiples", "\\text{s}", "\\text{.}", "\\text{\ns}", "\\text{}^2",
           "\\text{}^3", "\\text{\n}", "\\text{}", "\\mathrm{th}", "^\\circ", "^{\\circ}", "\\;", ",\\!", "{,}", '"',
           "\\dots"]


def minerva_normalize(a: str) -> str:
    """Minerva's normalize_final_answer (Lewkowycz et al. 2022, appendix D) with Python `re`."""
    a = a.split("=")[-1]
    for before, after in SUBSTITUTIONS:
        a = a.replace(before, after)
    for expr in REMOVED:
        a = a.replace(expr, "")
    a = re.sub(r"(.*?)(\$)(.*?)(\$)(.*)", "$\\3$", a)
    for head in (r"\\text\{", r"\\textbf\{", r"\\overline\{"):
        a = re.sub("(" + head + r")(.*?)(\})", "\\2", a)
    a = re.sub(r"(\\boxed\{)(.*)(\})", "\\2", a)
    a = re.sub(r"(frac)([^{])(.)", "frac{\\2}{\\3}", a)
    a = re.sub(r"(sqrt)([^{])", "sqrt{\\2}", a)
    a = a.replace("$", "")
    if a.replace(",", "").isdigit():
        a = a.replace(",", "")
    return a


def mbpp_text(d) -> str:
    t = d["test_list"]
    return (f"You are an expert Python programmer, and here is your task: {d['text']} Your code should pass these "
            f"tests:\n\n{t[0]}\n{t[1]}\n{t[2]}\n[BEGIN]\n")


def build(task: str, data_dir: Path, seed: int = 1234, processes: int = 1, indices: bool = False):
    out = []
    if task == "gsm8k":
        train = read_jsonl(data_dir / "gsm8k_train.jsonl")
        test = read_jsonl(data_dir / "gsm8k_test.jsonl")
        rnd = random.Random(seed)
        draws = []
        for i, doc in enumerate(test):
            while len(draws) <= i // processes:
                picked = rnd.sample(train, 5)
                draws.append([next(k for k in range(len(train)) if train[k] is p) for p in picked])
            shots = draws[i // processes]
            ctx = "".join(f"Question: {train[k]['question']}\nAnswer: {train[k]['answer']}\n\n" for k in shots)
            rec = {"id": f"gsm8k/{i}", "prompt": ctx + f"Question: {doc['question']}\nAnswer:",
                   "gold": gsm8k_em_normalize(doc["answer"]), "until": GSM8K_UNTIL}
            if indices:
                rec["fewshot_train_indices"] = shots
            out.append(rec)
    elif task == "math500":
        ctx = "".join(f"Problem:\n{p}\n\nSolution: {s}\n\n" for p, s in MINERVA_EXEMPLARS)
        for i, doc in enumerate(read_jsonl(data_dir / "math500_test.jsonl")):
            out.append({"id": f"math500/{i}", "prompt": ctx + f"Problem:\n{doc['problem']}\n\nSolution:",
                        "gold": minerva_normalize(unbox(last_boxed(doc["solution"]))), "until": MATH_UNTIL})
    elif task == "humaneval":
        for i, doc in enumerate(read_jsonl(data_dir / "HumanEval.jsonl.gz")):
            out.append({"id": f"humaneval/{i}", "prompt": doc["prompt"], "gold": "", "until": HUMANEVAL_UNTIL})
    elif task == "mbpp":
        docs = read_jsonl(data_dir / "mbpp.jsonl")
        by_id = {d["task_id"]: d for d in docs}
        ctx = "".join(mbpp_text(by_id[k]) + by_id[k]["code"] + "\n[DONE]" + "\n\n" for k in (2, 3, 4))
        for d in docs:
            if 11 <= d["task_id"] <= 510:
                out.append({"id": f"mbpp/{d['task_id']}", "prompt": ctx + mbpp_text(d), "gold": "",
                            "until": MBPP_UNTIL})
    else:
        raise SystemExit(f"unknown task {task}")
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("task")
    ap.add_argument("data_dir", type=Path)
    ap.add_argument("out", type=Path)
    ap.add_argument("--seed", type=int, default=1234)
    ap.add_argument("--processes", type=int, default=1)
    ap.add_argument("--indices", action="store_true")
    a = ap.parse_args()
    recs = build(a.task, a.data_dir, a.seed, a.processes, a.indices)
    with open(a.out, "w", encoding="utf-8") as f:
        for r in recs:
            f.write(json.dumps(r) + "\n")
    print(f"{a.task}: {len(recs)} prompts -> {a.out}")


if __name__ == "__main__":
    main()
