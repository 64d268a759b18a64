"""Deterministic generator of grade-school arithmetic word problems written like GSM8K.

Every problem is a JSON record `{"question": str, "answer": str}` (the GSM8K record format):
the answer is a worked solution, one short sentence per arithmetic step with the equation written
out (`4 * 12 = 48`), and a final line `#### <number>`. GSM8K's calculator annotations `<<4*12=48>>`
are left out so a 4-step answer stays well inside a 128-token generation.

Difficulty mix (issue 3, item 1): 1 to 4 operations per problem in the proportions 7:6:4:3
(OP_CYCLE), operators + - * /, every result exact and every number (operand, intermediate and final) an
integer in [1, 999]. Products are a 1-digit factor (2-9) times a number of at most 2 digits; quotients
divide by 2-9 and are at most 2 digits; sums and differences take numbers of up to 3 digits. Free
numbers are drawn 1-, 2- or 3-digit with weights 1:2:1 (DIGIT_CAPS). The model therefore meets easy
problems (one step, small numbers) and hard ones (four chained steps with 3-digit sums).
Four story families with several sentence templates each, 40 names, 20 countable objects, shop
items, activities and containers:
  chain    - one person's count changes step by step (buys, gives away, doubles, splits, boxes of)
  compare  - a second/third person has more/fewer/k times/half as many; ask one of them or a total
  shopping - items at a unit price; total cost, two kinds of items, money left from a budget
  rate     - a quantity per day over several days, extra days, what is left of a goal

Splits are disjoint: `problem_key()` (the numbers of the question in order plus the operators of
the worked answer, names and wording ignored) of every test problem differs from every validation
problem's, and the train split skips every key of test and validation. Each split has its own seed,
so the committed test/validation files are regenerated bit for bit by `generate_split()`.

Command line:
  python3 tools/train/arith_data.py --out DIR [--n-train N]   # writes DIR/{train,validation,test}.jsonl
  python3 tools/train/arith_data.py --check data/arith        # regenerates test/validation and compares
  python3 tools/train/arith_data.py --write-committed data/arith   # (re)writes the committed splits
"""

from __future__ import annotations

import argparse
import json
import random
import re
import sys
from pathlib import Path

# ---------------------------------------------------------------------------------------------
# Split definitions. Changing a seed or a size changes the committed files (data/arith/).
# ---------------------------------------------------------------------------------------------
SPLIT_SEEDS = {"test": 20260301, "validation": 20260302, "train": 20260303}
DEFAULT_SIZES = {"test": 1000, "validation": 500, "train": 400_000}
MAX_VALUE = 999  # every number in a problem is an integer in [1, MAX_VALUE]
MAX_OPS = 4
MAX_FACTOR = 99    # the multi-digit factor of a product (the other factor is 2..9)
MAX_QUOTIENT = 99  # quotients (divisor 2..9)
# Op counts of consecutive problems of every split: 7 x 1, 6 x 2, 4 x 3, 3 x 4 per 20 problems.
OP_CYCLE = (1, 2, 1, 3, 2, 1, 4, 2, 1, 3, 1, 2, 4, 1, 2, 3, 1, 2, 4, 3)
# Upper caps of free numbers and their weights: 1-, 2- and 3-digit numbers 1:2:1.
DIGIT_CAPS = ((9, 1), (99, 2), (999, 1))

NAMES = [
    ("Maya", "she"), ("Liam", "he"), ("Sofia", "she"), ("Noah", "he"), ("Emma", "she"),
    ("Lucas", "he"), ("Olivia", "she"), ("Ethan", "he"), ("Ava", "she"), ("Mason", "he"),
    ("Mia", "she"), ("James", "he"), ("Zoe", "she"), ("Owen", "he"), ("Lily", "she"),
    ("Carlos", "he"), ("Grace", "she"), ("Omar", "he"), ("Hannah", "she"), ("Ravi", "he"),
    ("Chloe", "she"), ("Daniel", "he"), ("Nora", "she"), ("Samuel", "he"), ("Ella", "she"),
    ("Leo", "he"), ("Aisha", "she"), ("Jack", "he"), ("Ruby", "she"), ("Mateo", "he"),
    ("Priya", "she"), ("Ben", "he"), ("Julia", "she"), ("Kofi", "he"), ("Alice", "she"),
    ("Tom", "he"), ("Elena", "she"), ("Hugo", "he"), ("Yuki", "she"), ("Max", "he"),
]
OBJECTS = [
    ("apple", "apples"), ("marble", "marbles"), ("sticker", "stickers"), ("book", "books"),
    ("pencil", "pencils"), ("cookie", "cookies"), ("shell", "shells"), ("card", "cards"),
    ("stamp", "stamps"), ("balloon", "balloons"), ("cupcake", "cupcakes"), ("toy car", "toy cars"),
    ("flower", "flowers"), ("egg", "eggs"), ("orange", "oranges"), ("candle", "candles"),
    ("button", "buttons"), ("crayon", "crayons"), ("rock", "rocks"), ("bead", "beads"),
]
CONTAINERS = [("box", "boxes"), ("bag", "bags"), ("basket", "baskets"), ("jar", "jars"),
              ("pack", "packs"), ("crate", "crates")]
ITEMS = [("notebook", "notebooks"), ("pen", "pens"), ("sandwich", "sandwiches"), ("ticket", "tickets"),
         ("toy", "toys"), ("shirt", "shirts"), ("plant", "plants"), ("comic book", "comic books"),
         ("ball", "balls"), ("mug", "mugs"), ("hat", "hats"), ("puzzle", "puzzles")]
# (third person verb, base verb, unit plural)
ACTIVITIES = [("reads", "read", "pages"), ("bakes", "bake", "cookies"), ("swims", "swim", "laps"),
              ("plants", "plant", "trees"), ("folds", "fold", "paper cranes"), ("writes", "write", "lines"),
              ("walks", "walk", "miles"), ("paints", "paint", "pictures"), ("picks", "pick", "strawberries"),
              ("sells", "sell", "lemonades")]



class Person:
    """A named character with pronoun forms."""

    def __init__(self, name: str, pron: str):
        self.name = name
        self.pron = pron  # he / she
        self.obj = "him" if pron == "he" else "her"
        self.poss = "his" if pron == "he" else "her"

    @property
    def Pron(self) -> str:
        return self.pron.capitalize()


class Reject(Exception):
    """Raised when random choices cannot satisfy the number constraints; the caller retries."""


def _num(rng: random.Random, lo: int, hi: int) -> int:
    """An integer in [lo, hi]; the upper end is first capped at 9, 99 or 999 (DIGIT_CAPS weights,
    caps below `lo` skipped) so that 1-, 2- and 3-digit numbers all occur. Reject if lo > hi."""
    if lo > hi:
        raise Reject()
    caps = [(c, w) for c, w in DIGIT_CAPS if c >= lo] or [(hi, 1)]
    cap = rng.choices([c for c, _ in caps], [w for _, w in caps])[0]
    return rng.randint(lo, min(hi, cap))


def _small(rng: random.Random, lo: int = 2, hi: int = 9) -> int:
    return rng.randint(lo, hi)


def _fmt(op: str) -> str:
    return {"+": "+", "-": "-", "*": "*", "/": "/"}[op]


def _eq(a: int, op: str, b: int) -> tuple[str, int]:
    """Return ('a op b = c', c), checking exactness and the [1, MAX_VALUE] range."""
    if op == "+":
        c = a + b
    elif op == "-":
        c = a - b
    elif op == "*":
        c = a * b
    elif op == "/":
        if b == 0 or a % b:
            raise Reject()
        c = a // b
    else:
        raise ValueError(op)
    if not (1 <= c <= MAX_VALUE) or not (1 <= a <= MAX_VALUE) or not (1 <= b <= MAX_VALUE):
        raise Reject()
    return f"{a} {_fmt(op)} {b} = {c}", c


def _divisors(x: int, lo: int = 2, hi: int = 9) -> list[int]:
    """Divisors k in [lo, hi] of x whose quotient is in [1, MAX_QUOTIENT]."""
    return [k for k in range(lo, hi + 1) if x % k == 0 and 1 <= x // k <= MAX_QUOTIENT]


def _factors(x: int) -> list[int]:
    """Factors k in 2..9 with x * k <= MAX_VALUE, if x may be the multi-digit factor (x <= MAX_FACTOR)."""
    if not 1 <= x <= MAX_FACTOR:
        return []
    return [k for k in range(2, 10) if x * k <= MAX_VALUE]


# ---------------------------------------------------------------------------------------------
# Family: chain
# ---------------------------------------------------------------------------------------------
def _chain(rng: random.Random, n_ops: int) -> tuple[str, list[str], int]:
    p = Person(*rng.choice(NAMES))
    f = Person(*rng.choice([n for n in NAMES if n[0] != p.name]))
    one, many = rng.choice(OBJECTS)
    c1, cs = rng.choice(CONTAINERS)
    q: list[str] = []
    a: list[str] = []

    x = _num(rng, 2, MAX_VALUE)
    q.append(rng.choice([
        f"{p.name} has {x} {many}.",
        f"{p.name} collected {x} {many}.",
        f"{p.name} starts the week with {x} {many}.",
        f"There are {x} {many} in {p.name}'s room.",
    ]))
    # Step kinds: 1-op add/sub/mul/div, 2-op addbox/subbox; each step picks among the kinds the
    # current count x allows (mul needs x <= MAX_FACTOR, div a divisor 2..9 with quotient <= 99).
    left = n_ops
    final_each = False
    while left > 0:
        kinds = ["add", "sub"] + (["mul"] if _factors(x) else []) + (["div"] if _divisors(x) else [])
        if left >= 2:
            kinds += ["addbox", "subbox"]
        kind = rng.choice(kinds)
        left -= 2 if kind.endswith("box") else 1
        last = left == 0
        if last and kind == "div":
            final_each = rng.random() < 0.4  # "how many in each container?"
        if kind == "add":
            b = _num(rng, 1, MAX_VALUE - x)
            e, y = _eq(x, "+", b)
            q.append(rng.choice([
                f"{p.Pron} buys {b} more {many}.",
                f"{f.name} gives {p.obj} {b} {many}.",
                f"Then {p.pron} finds {b} more {many}.",
                f"{p.Pron} gets {b} more {many} from {f.name}.",
                f"Later, {p.pron} receives {b} {many} as a gift.",
            ]))
            a.append(rng.choice([f"{p.name} now has {e} {many}.", f"After that, {p.pron} has {e} {many}."]))
        elif kind == "sub":
            b = _num(rng, 1, x - 1)
            e, y = _eq(x, "-", b)
            q.append(rng.choice([
                f"{p.Pron} gives {b} {many} to {f.name}.",
                f"{p.Pron} sells {b} of the {many}.",
                f"Then {p.pron} loses {b} {many}.",
                f"{p.Pron} uses {b} {many} for a school project.",
                f"{f.name} borrows {b} {many} from {p.obj}.",
            ]))
            a.append(rng.choice([f"{p.name} has {e} {many} left.", f"Then {p.pron} has {e} {many}."]))
        elif kind == "mul":
            k = rng.choice(_factors(x))
            e, y = _eq(x, "*", k)
            if k == 2 and rng.random() < 0.5:
                q.append(f"Then the number of {many} {p.pron} has doubles.")
            elif k == 3 and rng.random() < 0.5:
                q.append(f"Then the number of {many} {p.pron} has triples.")
            else:
                q.append(rng.choice([
                    f"Then {p.pron} ends up with {k} times as many {many} as before.",
                    f"After a trade, {p.pron} has {k} times as many {many} as before.",
                ]))
            a.append(f"{p.name} then has {e} {many}.")
        elif kind == "div":
            k = rng.choice(_divisors(x))
            e, y = _eq(x, "/", k)
            if last and final_each:
                q.append(f"{p.Pron} puts all of {p.poss} {many} equally into {k} {cs}.")
                a.append(f"Each {c1} gets {e} {many}.")
            elif k == 2 and rng.random() < 0.5:
                q.append(f"{p.Pron} gives half of {p.poss} {many} to {f.name}.")
                a.append(f"{p.name} keeps {e} {many}.")
            else:
                q.append(f"{p.Pron} splits {p.poss} {many} into {k} equal groups and keeps one group.")
                a.append(f"{p.name} keeps {e} {many}.")
        elif kind == "addbox":
            k = _small(rng)
            b = _num(rng, 2, min(MAX_FACTOR, (MAX_VALUE - x) // k))
            e1, m = _eq(k, "*", b)
            e2, y = _eq(x, "+", m)
            q.append(rng.choice([
                f"{p.Pron} buys {k} {cs} of {many} with {b} {many} in each {c1}.",
                f"{f.name} gives {p.obj} {k} {cs} that hold {b} {many} each.",
            ]))
            a.append(f"The {cs} hold {e1} {many}.")
            a.append(f"{p.name} now has {e2} {many}.")
        elif kind == "subbox":
            k = _small(rng)
            b = _num(rng, 2, min(MAX_FACTOR, (x - 1) // k))
            e1, m = _eq(k, "*", b)
            e2, y = _eq(x, "-", m)
            if rng.random() < 0.5:
                q.append(f"{p.Pron} fills {k} {cs} with {b} {many} each and gives them away.")
                a.append(f"{p.Pron} gives away {e1} {many}.")
            else:
                q.append(f"{p.Pron} sells {k} {cs} of {many} with {b} {many} in each {c1}.")
                a.append(f"{p.Pron} sells {e1} {many}.")
            a.append(f"{p.name} has {e2} {many} left.")
        else:
            raise ValueError(kind)
        x = y
    if final_each:
        q.append(f"How many {many} are in each {c1}?")
    else:
        q.append(rng.choice([
            f"How many {many} does {p.name} have now?",
            f"How many {many} does {p.pron} have at the end?",
            f"How many {many} does {p.name} have in the end?",
        ]))
    return " ".join(q), a, x


# ---------------------------------------------------------------------------------------------
# Family: compare
# ---------------------------------------------------------------------------------------------
def _relation(rng: random.Random, base: int, other: Person, ref: Person, many: str) -> tuple[str, str, int]:
    """Person `other` has some relation to `ref` (who has `base`): (sentence, equation line, value)."""
    kind = rng.choice(["more", "fewer", "times", "half"])
    if kind == "more":
        b = _num(rng, 1, MAX_VALUE - base)
        e, v = _eq(base, "+", b)
        s = f"{other.name} has {b} more {many} than {ref.name}."
    elif kind == "fewer":
        b = _num(rng, 1, base - 1)
        e, v = _eq(base, "-", b)
        s = f"{other.name} has {b} fewer {many} than {ref.name}."
    elif kind == "times":
        ks = _factors(base)
        if not ks:
            raise Reject()
        k = rng.choice(ks)
        e, v = _eq(base, "*", k)
        s = (f"{other.name} has twice as many {many} as {ref.name}." if k == 2 and rng.random() < 0.5
             else f"{other.name} has {k} times as many {many} as {ref.name}.")
    else:
        ks = _divisors(base, 2, 4)
        if not ks:
            raise Reject()
        k = rng.choice(ks)
        e, v = _eq(base, "/", k)
        word = {2: "half", 3: "a third", 4: "a quarter"}[k]
        s = f"{other.name} has {word} as many {many} as {ref.name}."
    return s, f"{other.name} has {e} {many}.", v


def _compare(rng: random.Random, n_ops: int) -> tuple[str, list[str], int]:
    people = [Person(*n) for n in rng.sample(NAMES, 3)]
    A, B, C = people
    one, many = rng.choice(OBJECTS)
    a0 = _num(rng, 2, MAX_VALUE)
    q = [f"{A.name} has {a0} {many}."]
    ans: list[str] = []
    s1, l1, b0 = _relation(rng, a0, B, A, many)
    q.append(s1)
    ans.append(l1)
    if n_ops == 1:
        q.append(f"How many {many} does {B.name} have?")
        return " ".join(q), ans, b0
    shape = {2: rng.choice(["chain", "total2"]), 3: rng.choice(["chain_total2", "total3"]),
             4: "chain_total3"}[n_ops]
    if shape == "total2":
        e, t = _eq(a0, "+", b0)
        q.append(f"How many {many} do {A.name} and {B.name} have together?")
        ans.append(f"Together they have {e} {many}.")
        return " ".join(q), ans, t
    if shape == "total3":
        # C is related to A as well; ask for B and C together (2 relations + 1 addition).
        s2, l2, c0 = _relation(rng, a0, C, A, many)
        q.append(s2)
        ans.append(l2)
        e, t = _eq(b0, "+", c0)
        q.append(f"How many {many} do {B.name} and {C.name} have together?")
        ans.append(f"Together they have {e} {many}.")
        return " ".join(q), ans, t
    s2, l2, c0 = _relation(rng, b0, C, B, many)
    q.append(s2)
    ans.append(l2)
    if shape == "chain":
        q.append(f"How many {many} does {C.name} have?")
        return " ".join(q), ans, c0
    if shape == "chain_total2":
        e, t = _eq(b0, "+", c0)
        q.append(f"How many {many} do {B.name} and {C.name} have together?")
        ans.append(f"Together they have {e} {many}.")
        return " ".join(q), ans, t
    # chain_total3: 2 relations + 2 additions
    e1, s = _eq(a0, "+", b0)
    e2, t = _eq(s, "+", c0)
    q.append(f"How many {many} do {A.name}, {B.name} and {C.name} have in total?")
    ans.append(f"{A.name} and {B.name} have {e1} {many}.")
    ans.append(f"All three have {e2} {many}.")
    return " ".join(q), ans, t


# ---------------------------------------------------------------------------------------------
# Family: shopping
# ---------------------------------------------------------------------------------------------
def _shopping(rng: random.Random, n_ops: int) -> tuple[str, list[str], int]:
    p = Person(*rng.choice(NAMES))
    (i1, i1s), (i2, i2s) = rng.sample(ITEMS, 2)
    k1 = _small(rng, 2, 9)
    c1 = _num(rng, 1, min(MAX_FACTOR, MAX_VALUE // k1))
    e1, s1 = _eq(k1, "*", c1)
    buy1 = rng.choice([f"{p.Pron} buys {k1} {i1s} for {c1} dollars each.",
                       f"{p.Pron} buys {k1} {i1s} that cost {c1} dollars each.",
                       f"Each {i1} costs {c1} dollars and {p.pron} buys {k1} of them."])
    line1 = f"The {i1s} cost {e1} dollars."
    if n_ops == 1:
        q = [f"{p.name} goes to the store.", buy1, f"How many dollars does {p.pron} spend?"]
        return " ".join(q), [line1], s1
    if n_ops == 2:
        m = _num(rng, s1 + 1, MAX_VALUE)
        e2, r = _eq(m, "-", s1)
        q = [f"{p.name} has {m} dollars.", buy1, f"How many dollars does {p.pron} have left?"]
        return " ".join(q), [line1, f"{p.name} has {e2} dollars left."], r
    k2 = _small(rng, 2, 9)
    c2 = _num(rng, 1, min(MAX_FACTOR, max(1, (MAX_VALUE - s1) // k2)))
    e2, s2 = _eq(k2, "*", c2)
    e3, tot = _eq(s1, "+", s2)
    buy2 = f"{p.Pron} also buys {k2} {i2s} for {c2} dollars each."
    lines = [line1, f"The {i2s} cost {e2} dollars.", f"In total {p.pron} spends {e3} dollars."]
    if n_ops == 3:
        q = [f"{p.name} goes shopping.", buy1, buy2, f"How many dollars does {p.pron} spend in total?"]
        return " ".join(q), lines, tot
    m = _num(rng, tot + 1, MAX_VALUE)
    e4, r = _eq(m, "-", tot)
    q = [f"{p.name} has {m} dollars.", buy1, buy2, f"How many dollars does {p.pron} have left?"]
    return " ".join(q), lines + [f"{p.name} has {e4} dollars left."], r


# ---------------------------------------------------------------------------------------------
# Family: rate
# ---------------------------------------------------------------------------------------------
def _rate(rng: random.Random, n_ops: int) -> tuple[str, list[str], int]:
    p = Person(*rng.choice(NAMES))
    verb, base, unit = rng.choice(ACTIVITIES)
    if n_ops == 1 and rng.random() < 0.4:
        # division: a goal split over days
        d = _small(rng, 2, 9)
        b = _num(rng, 1, min(MAX_QUOTIENT, MAX_VALUE // d))
        goal = b * d
        e, v = _eq(goal, "/", d)
        q = [f"{p.name} wants to {base} {goal} {unit} in {d} days.",
             f"{p.Pron} {verb} the same number of {unit} every day.",
             f"How many {unit} does {p.pron} {base} each day?"]
        return " ".join(q), [f"Each day {p.pron} {verb} {e} {unit}."], v
    d1 = _small(rng, 2, 9)
    b1 = _num(rng, 1, min(MAX_FACTOR, MAX_VALUE // d1))
    e1, s1 = _eq(b1, "*", d1)
    q = [rng.choice([f"{p.name} {verb} {b1} {unit} every day for {d1} days.",
                     f"For {d1} days, {p.name} {verb} {b1} {unit} each day."])]
    lines = [f"In {d1} days {p.pron} {verb} {e1} {unit}."]
    if n_ops == 1:
        q.append(f"How many {unit} does {p.pron} {base} in total?")
        return " ".join(q), lines, s1
    if n_ops == 2:
        if rng.random() < 0.5:
            c = _num(rng, 1, MAX_VALUE - s1)
            e2, t = _eq(s1, "+", c)
            q.append(f"On the next day {p.pron} {verb} {c} more {unit}.")
            q.append(f"How many {unit} does {p.pron} {base} in total?")
            return " ".join(q), lines + [f"Altogether {p.pron} {verb} {e2} {unit}."], t
        goal = _num(rng, s1 + 1, MAX_VALUE)
        e2, r = _eq(goal, "-", s1)
        q.insert(0, f"{p.name} wants to {base} {goal} {unit}.")
        q.append(f"How many more {unit} does {p.pron} need to {base}?")
        return " ".join(q), lines + [f"{p.Pron} still needs {e2} {unit}."], r
    d2 = _small(rng, 2, 9)
    b2 = _num(rng, 1, min(MAX_FACTOR, max(1, (MAX_VALUE - s1) // d2)))
    e2, s2 = _eq(b2, "*", d2)
    e3, t = _eq(s1, "+", s2)
    q.append(f"Then {p.pron} {verb} {b2} {unit} every day for {d2} more days.")
    lines += [f"In the next {d2} days {p.pron} {verb} {e2} {unit}.", f"Altogether {p.pron} {verb} {e3} {unit}."]
    if n_ops == 3:
        q.append(f"How many {unit} does {p.pron} {base} in total?")
        return " ".join(q), lines, t
    goal = _num(rng, t + 1, MAX_VALUE)
    e4, r = _eq(goal, "-", t)
    q.insert(0, f"{p.name} wants to {base} {goal} {unit}.")
    q.append(f"How many more {unit} does {p.pron} need to {base} to reach the goal?")
    return " ".join(q), lines + [f"{p.Pron} still needs {e4} {unit}."], r


FAMILIES = {"chain": _chain, "compare": _compare, "shopping": _shopping, "rate": _rate}
FAMILY_WEIGHTS = {"chain": 0.4, "compare": 0.2, "shopping": 0.2, "rate": 0.2}

_EQ_RE = re.compile(r"(\d+) ([-+*/]) (\d+) = (\d+)")
_NUM_RE = re.compile(r"\d+")
_FINAL_RE = re.compile(r"#### (-?[0-9.,]+)")


def make_problem(rng: random.Random, n_ops: int | None = None) -> dict:
    """One problem as {"question", "answer"}; `n_ops` (1..4) defaults to a draw from OP_CYCLE."""
    if n_ops is None:
        n_ops = rng.choice(OP_CYCLE)
    if not 1 <= n_ops <= MAX_OPS:
        raise ValueError(f"n_ops must be in [1, {MAX_OPS}], got {n_ops}")
    names = list(FAMILY_WEIGHTS)
    weights = [FAMILY_WEIGHTS[n] for n in names]
    for _ in range(1000):
        fam = rng.choices(names, weights)[0]
        try:
            q, lines, result = FAMILIES[fam](rng, n_ops)
        except Reject:
            continue
        ans = "\n".join(lines + [f"#### {result}"])
        rec = {"question": q, "answer": ans}
        if count_ops(rec) != n_ops:  # guards the templates' op bookkeeping
            raise AssertionError(f"{fam}: expected {n_ops} ops, got {count_ops(rec)}: {rec}")
        return rec
    raise RuntimeError("could not satisfy the number constraints in 1000 tries")


def count_ops(rec: dict) -> int:
    """Number of equations `a op b = c` in the worked answer."""
    return len(_EQ_RE.findall(rec["answer"]))


def final_answer(text: str) -> str | None:
    """The number after the first `#### ` (GSM8K strict match), commas removed; None if absent."""
    m = _FINAL_RE.search(text)
    if not m:
        return None
    return m.group(1).replace(",", "").rstrip(".")


def problem_key(rec: dict) -> tuple:
    """Wording-independent identity: numbers of the question in order + operators of the answer."""
    nums = tuple(int(x) for x in _NUM_RE.findall(rec["question"]))
    ops = tuple(m[1] for m in _EQ_RE.findall(rec["answer"]))
    return nums, ops


def check_problem(rec: dict) -> None:
    """Validate one record: equations correct and exact, numbers in range, final line consistent."""
    lines = rec["answer"].split("\n")
    if not lines[-1].startswith("#### "):
        raise ValueError(f"answer does not end with '#### N': {rec!r}")
    eqs = _EQ_RE.findall(rec["answer"])
    if not 1 <= len(eqs) <= MAX_OPS:
        raise ValueError(f"{len(eqs)} equations: {rec!r}")
    for a, op, b, c in eqs:
        a, b, c = int(a), int(b), int(c)
        want = {"+": a + b, "-": a - b, "*": a * b, "/": a // b if b and a % b == 0 else None}[op]
        if want != c:
            raise ValueError(f"wrong equation {a} {op} {b} = {c}: {rec!r}")
        if op == "*" and not ((2 <= a <= 9 and b <= MAX_FACTOR) or (2 <= b <= 9 and a <= MAX_FACTOR)):
            raise ValueError(f"product {a} * {b} is not a 1-digit factor (2-9) times <= {MAX_FACTOR}: {rec!r}")
        if op == "/" and not (2 <= b <= 9 and c <= MAX_QUOTIENT):
            raise ValueError(f"quotient {a} / {b} is not a division by 2-9 with result <= {MAX_QUOTIENT}: {rec!r}")
    for n in _NUM_RE.findall(rec["question"] + " " + rec["answer"]):
        if not 1 <= int(n) <= MAX_VALUE:
            raise ValueError(f"number {n} out of range: {rec!r}")
    if final_answer(rec["answer"]) != eqs[-1][3]:
        raise ValueError(f"final answer is not the last equation's result: {rec!r}")


def generate_split(name: str, n: int, exclude: set | None = None) -> list[dict]:
    """`n` problems of split `name` from its fixed seed, skipping keys in `exclude` and repeats.

    The op count follows OP_CYCLE, so every split holds the exact 7:6:4:3 mix of 1..4 operations
    (exact for n a multiple of len(OP_CYCLE))."""
    rng = random.Random(SPLIT_SEEDS[name])
    seen: set = set(exclude or ())
    out: list[dict] = []
    i = 0
    while len(out) < n:
        rec = make_problem(rng, OP_CYCLE[i % len(OP_CYCLE)])
        key = problem_key(rec)
        if key in seen:
            continue
        seen.add(key)
        out.append(rec)
        i += 1
    return out


def generate_all(n_train: int, n_test: int = DEFAULT_SIZES["test"],
                 n_val: int = DEFAULT_SIZES["validation"]) -> dict[str, list[dict]]:
    """All three splits, disjoint by problem_key()."""
    test = generate_split("test", n_test)
    val = generate_split("validation", n_val, {problem_key(r) for r in test})
    excl = {problem_key(r) for r in test} | {problem_key(r) for r in val}
    train = generate_split("train", n_train, excl)
    return {"train": train, "validation": val, "test": test}


def write_jsonl(path: Path, recs: list[dict]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w", encoding="utf-8") as fh:
        for r in recs:
            fh.write(json.dumps({"question": r["question"], "answer": r["answer"]}, ensure_ascii=False) + "\n")


def read_jsonl(path: Path) -> list[dict]:
    with open(path, encoding="utf-8") as fh:
        return [json.loads(line) for line in fh if line.strip()]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", type=Path, help="write train/validation/test.jsonl here")
    ap.add_argument("--n-train", type=int, default=DEFAULT_SIZES["train"])
    ap.add_argument("--check", type=Path, help="regenerate test/validation and compare with DIR's files")
    ap.add_argument("--write-committed", type=Path, help="write only test/validation.jsonl into DIR")
    args = ap.parse_args(argv)
    if args.check or args.write_committed:
        test = generate_split("test", DEFAULT_SIZES["test"])
        val = generate_split("validation", DEFAULT_SIZES["validation"], {problem_key(r) for r in test})
        if args.write_committed:
            for name, recs in (("test", test), ("validation", val)):
                for r in recs:
                    check_problem(r)
                write_jsonl(args.write_committed / f"{name}.jsonl", recs)
                print(f"wrote {args.write_committed / (name + '.jsonl')}: {len(recs)} problems")
            return 0
        ok = True
        for name, recs in (("test", test), ("validation", val)):
            got = read_jsonl(args.check / f"{name}.jsonl")
            same = got == recs
            ok &= same
            print(f"{name}: {len(got)} records, {'identical to' if same else 'DIFFERENT from'} the generator")
        return 0 if ok else 1
    if not args.out:
        ap.error("--out or --check is required")
    splits = generate_all(args.n_train)
    for name, recs in splits.items():
        for r in recs:
            check_problem(r)
        write_jsonl(args.out / f"{name}.jsonl", recs)
        print(f"wrote {args.out / (name + '.jsonl')}: {len(recs)} problems")
    return 0


if __name__ == "__main__":
    sys.exit(main())
