#!/usr/bin/env python3
"""Size limits of the source tree: files over --max-file lines and C/C++ function bodies over
--max-function lines (docs/design-guide: keep files under ~600 lines, host functions under ~120).

    scripts/check_sizes.py [--max-file N] [--max-function N] [DIR ...]   (default: src apps include)

Files: every .cpp/.cc/.h/.hpp/.cu/.cuh under the folders. Functions: a brace-matching heuristic on
the text with comments, string and character literals blanked out; a '{' opens a function body when
the text before it (back to the previous ';', '{' or '}') ends in a parameter list ')' (possibly
followed by const, noexcept, override, a trailing return type, or a constructor's initialiser list),
and is not a control statement (if, for, while, switch, catch) or a lambda. Nested bodies (lambdas,
local classes) count toward the function that holds them. Length = lines from the opening line to
the closing brace's line, both included.

Device code (a function marked __global__ or __device__) is listed apart and does not fail the check.
Exit status 1 when a file or a host function is over its limit, 0 otherwise. Standard library only.
"""
import argparse
import os
import re
import sys

EXTS = (".cpp", ".cc", ".h", ".hpp", ".cu", ".cuh")
CONTROL = {"if", "for", "while", "switch", "catch", "return", "sizeof", "decltype", "alignof",
           "static_assert", "defined"}
NAME_RE = re.compile(r"([~A-Za-z_][\w:<>~,\s]*?(?:operator\s*[^\s(]+)?)\s*\($")


def blank_comments_and_strings(text):
    """The text with comments, string and character literals replaced by spaces (newlines kept)."""
    out = []
    i, n = 0, len(text)
    while i < n:
        c = text[i]
        if c == "/" and i + 1 < n and text[i + 1] == "/":
            j = text.find("\n", i)
            j = n if j < 0 else j
            out.append(" " * (j - i))
            i = j
        elif c == "/" and i + 1 < n and text[i + 1] == "*":
            j = text.find("*/", i + 2)
            j = n if j < 0 else j + 2
            out.append(re.sub(r"[^\n]", " ", text[i:j]))
            i = j
        elif c == "R" and text.startswith('R"', i) and (i == 0 or not (text[i - 1].isalnum() or text[i - 1] == "_")):
            k = text.find("(", i + 2)
            delim = text[i + 2:k] if k >= 0 else ""
            j = text.find(")" + delim + '"', k + 1) if k >= 0 else -1
            j = n if j < 0 else j + len(delim) + 2
            out.append('""' + re.sub(r"[^\n]", " ", text[i + 2:j]))
            i = j
        elif c in "\"'":
            # a digit separator (1'000) is not a character literal
            if c == "'" and i > 0 and text[i - 1].isalnum() and i + 1 < n and text[i + 1].isalnum() \
                    and not re.match(r"[uUL8]", text[i - 1]):
                out.append(" ")
                i += 1
                continue
            j = i + 1
            while j < n and text[j] != c and text[j] != "\n":
                j += 2 if text[j] == "\\" else 1
            j = min(j + 1, n)
            out.append(c + " " * max(0, j - i - 2) + (c if j - i >= 2 else ""))
            i = j
        elif c == "#" and (i == 0 or text[i - 1] == "\n" or text[:i].rsplit("\n", 1)[-1].strip() == ""):
            # a preprocessor line (with its continuations): blank it, it holds no bodies
            j = i
            while True:
                k = text.find("\n", j)
                if k < 0:
                    k = n
                    break
                if text[k - 1] == "\\":
                    j = k + 1
                    continue
                break
            out.append(re.sub(r"[^\n]", " ", text[i:k]))
            i = k
        else:
            out.append(c)
            i += 1
    return "".join(out)


def strip_trailer(head):
    """The part of a declaration before its body's '{', minus what may follow the parameter list."""
    head = head.rstrip()
    # constructor initialiser list: `) : a_(x), b_{y}` -- cut at the ':' that follows the ')'
    m = re.search(r"\)\s*(?:noexcept\s*)?:(?!:)", head)
    if m:
        head = head[:m.start() + 1]
    head = re.sub(r"\s*->\s*[\w:<>,\s*&]+$", "", head)  # trailing return type
    prev = None
    while prev != head:
        prev = head
        head = re.sub(r"\s*\b(const|noexcept|override|final|mutable|volatile|&&|&)\s*$", "", head)
        head = re.sub(r"\s*noexcept\s*\([^()]*\)\s*$", "", head)
    return head


def function_name(head):
    """The name of the function whose declaration is `head` (ending in its parameter list), or None."""
    if not head.endswith(")"):
        return None
    depth = 0
    for k in range(len(head) - 1, -1, -1):
        if head[k] == ")":
            depth += 1
        elif head[k] == "(":
            depth -= 1
            if depth == 0:
                before = head[:k].rstrip()
                if not before or before.endswith("]") or before.endswith(">") and "operator" not in before:
                    return None  # a lambda, or a template call
                m = re.search(r"(operator\s*(?:\(\)|[^\s\w(]+|\w+)|[~\w]+(?:::[~\w]+)*)$", before)
                if not m:
                    return None
                name = m.group(1)
                if name.split("::")[-1] in CONTROL:
                    return None
                return name
    return None


def functions(path, text):
    """(line, name, length, is_device) of every function body in the file."""
    clean = blank_comments_and_strings(text)
    line_of = []
    line = 1
    for ch in clean:
        line_of.append(line)
        if ch == "\n":
            line += 1
    found = []
    stack = []  # (index of '{', is function, name, start line, device)
    seg_start = 0
    inside_fn = 0
    for i, ch in enumerate(clean):
        if ch == "{":
            head = clean[seg_start:i]
            is_fn, name, device = False, None, False
            if inside_fn == 0:
                h = " ".join(head.split())
                h = re.sub(r"^(?:public|private|protected)\s*:\s*", "", h)
                name = function_name(strip_trailer(h))
                is_fn = name is not None and not re.match(r"^(?:struct|class|union|enum|namespace)\b", h)
                device = bool(re.search(r"\b__(?:global|device)__\b", h))
                # the head's first line: the first non-blank character of the segment
                lead = len(head) - len(head.lstrip())
                start = line_of[seg_start + lead] if is_fn else line_of[i]
            else:
                start = line_of[i]
            stack.append((is_fn, name, start, device))
            if is_fn:
                inside_fn += 1
            seg_start = i + 1
        elif ch == "}":
            if stack:
                is_fn, name, start, device = stack.pop()
                if is_fn:
                    inside_fn -= 1
                    found.append((start, name, line_of[i] - start + 1, device))
            seg_start = i + 1
        elif ch == ";":
            seg_start = i + 1
    return found


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--max-file", type=int, default=600, help="most lines a file may have (600)")
    ap.add_argument("--max-function", type=int, default=120, help="most lines a host function may have (120)")
    ap.add_argument("dirs", nargs="*", default=["src", "apps", "include"])
    args = ap.parse_args()
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    over_files, over_fns, device_fns = [], [], []
    for d in args.dirs:
        base = d if os.path.isabs(d) else os.path.join(root, d)
        if os.path.isfile(base):
            paths = [base]
        else:
            paths = [os.path.join(dp, f) for dp, _, fs in os.walk(base) for f in fs]
        for p in sorted(paths):
            if not p.endswith(EXTS):
                continue
            with open(p, encoding="utf-8", errors="replace") as fh:
                text = fh.read()
            rel = os.path.relpath(p, root)
            nlines = text.count("\n") + (0 if text.endswith("\n") or not text else 1)
            if nlines > args.max_file:
                over_files.append((rel, nlines))
            for line, name, length, device in functions(p, text):
                if length > args.max_function:
                    (device_fns if device else over_fns).append((rel, line, name, length))
    for rel, n in over_files:
        print(f"file     {rel}: {n} lines (max {args.max_file})")
    for rel, line, name, length in over_fns:
        print(f"function {rel}:{line}: {name}: {length} lines (max {args.max_function})")
    for rel, line, name, length in device_fns:
        print(f"device   {rel}:{line}: {name}: {length} lines (device code, not checked)")
    bad = len(over_files) + len(over_fns)
    print(f"[sizes] {len(over_files)} file(s) over {args.max_file} lines, {len(over_fns)} host "
          f"function(s) over {args.max_function} lines, {len(device_fns)} device function(s) listed")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
