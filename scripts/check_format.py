#!/usr/bin/env python3
"""Reports lines a change touched that do not follow .clang-format (see scripts/check_format.sh).

Only the changed lines count: clang-format is run with --lines on the changed ranges, and of the
edits it wants only those that overlap a changed line are reported (clang-format reflows a whole
statement, so an edit inside a long initializer would otherwise flag its untouched neighbours).
Usage: check_format.py BASE [--fix]. Exit 1 when something is off (0 with --fix, after rewriting).
"""
import difflib
import re
import subprocess
import sys
from pathlib import Path

EXTS = {".c", ".cc", ".cpp", ".cxx", ".h", ".hh", ".hpp", ".cu", ".cuh"}


def git(*args):
    return subprocess.run(["git", *args], check=True, capture_output=True, text=True).stdout


def changed_lines(base, path):
    """1-based line numbers of `path` (working tree) added or modified since `base`."""
    tracked = subprocess.run(["git", "cat-file", "-e", f"{base}:{path}"], capture_output=True).returncode == 0
    if not tracked:
        return set(range(1, len(Path(path).read_text(errors="replace").splitlines()) + 1))
    lines = set()
    for m in re.finditer(r"^@@ -\S+ \+(\d+)(?:,(\d+))? @@", git("diff", "-U0", base, "--", path), re.M):
        start, count = int(m.group(1)), int(m.group(2) if m.group(2) is not None else 1)
        lines.update(range(start, start + count))
    return lines


def ranges(lines):
    out, run = [], []
    for n in sorted(lines):
        if run and n == run[-1] + 1:
            run.append(n)
        else:
            if run:
                out.append((run[0], run[-1]))
            run = [n]
    if run:
        out.append((run[0], run[-1]))
    return out


def main():
    base, fix = sys.argv[1], "--fix" in sys.argv[2:]
    files = set(git("diff", "--name-only", "--diff-filter=AM", base).split())
    files |= set(git("ls-files", "--others", "--exclude-standard").split())
    bad = 0
    for path in sorted(f for f in files if Path(f).suffix in EXTS and Path(f).is_file()):
        lines = changed_lines(base, path)
        if not lines:
            continue
        original = Path(path).read_text(errors="replace")
        cmd = ["clang-format", "--style=file", f"--assume-filename={path}"]
        cmd += [f"--lines={a}:{b}" for a, b in ranges(lines)]
        formatted = subprocess.run(cmd, input=original, check=True, capture_output=True, text=True).stdout
        a, b = original.splitlines(keepends=True), formatted.splitlines(keepends=True)
        fixed, edits = [], 0
        for tag, i1, i2, j1, j2 in difflib.SequenceMatcher(None, a, b, autojunk=False).get_opcodes():
            touched = range(i1 + 1, max(i2, i1 + 1) + 1)
            if tag == "equal" or not any(n in lines for n in touched):
                fixed += a[i1:i2]  # unchanged, or an edit of lines the change did not touch: kept as they are
                continue
            edits += 1
            fixed += b[j1:j2]
            if not fix:
                print(f"--- {path}:{i1 + 1}")
                print("".join(f"-{line}" for line in a[i1:i2]), end="")
                print("".join(f"+{line}" for line in b[j1:j2]), end="")
        if fix and edits:
            Path(path).write_text("".join(fixed))
            print(f"[format] reformatted {edits} place(s) in {path}")
        elif not fix:
            bad += edits
    if bad:
        print(f"[format] {bad} place(s) among the lines changed since {base[:10]} do not follow .clang-format",
              file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
