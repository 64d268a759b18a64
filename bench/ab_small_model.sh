#!/usr/bin/env bash
# A/B of two builds on the embedded model's evaluation throughput (issue 13: per-iteration host work
# at launch-bound shapes): `flashdllm eval --task arith` (the 1000-problem test split, --batch 32
# slots) with Flash-Cache and with Flash-Cache + Flash-Verify, the two binaries alternating REPEATS
# times; prints tokens/s per run and the median per binary and mode.
#   bench/ab_small_model.sh A=build-a/flashdllm B=build-gpu/flashdllm   (on the GPU machine)
#   REPEATS=3 DEVICE=cuda OUT=./out
set -euo pipefail
cd "$(dirname "$0")/.."
for kv in "$@"; do export "${kv?}"; done
A="${A:?A=path to the first flashdllm}"
B="${B:?B=path to the second flashdllm}"
REPEATS="${REPEATS:-3}"
DEVICE="${DEVICE:-cuda}"
OUT="${OUT:-./out}"
mkdir -p "$OUT"
: > "$OUT/ab.tsv"
for ((r = 1; r <= REPEATS; ++r)); do
  for mode in flash verify; do
    for bin in A B; do
      exe=${!bin}
      extra=()
      [[ $mode == verify ]] && extra=(--verify)
      dir="$OUT/${bin}_${mode}_$r"
      "$exe" eval --device "$DEVICE" --task arith --batch 32 "${extra[@]}" --out "$dir" > /dev/null 2> "$dir.err"
      python3 - "$dir/summary.json" "$bin" "$mode" "$r" >> "$OUT/ab.tsv" << 'PY'
import json, sys
s = json.load(open(sys.argv[1]))
def find(d):
    if isinstance(d, dict):
        if "tokens_per_second" in d and "accuracy" in d:
            return d
        for v in d.values():
            f = find(v)
            if f: return f
    if isinstance(d, list):
        for v in d:
            f = find(v)
            if f: return f
m = find(s)
print(f"{sys.argv[2]}\t{sys.argv[3]}\t{sys.argv[4]}\t{m['tokens_per_second']:.0f}\t{m['accuracy']}")
PY
    done
  done
done
python3 - "$OUT/ab.tsv" << 'PY' | tee "$OUT/ab.md"
import statistics, sys
rows = [l.split("\t") for l in open(sys.argv[1]).read().split("\n") if l]
print("| binary | mode | tokens/s per run | median | accuracy |\n|---|---|---|---:|---|")
for b in ("A", "B"):
    for m in ("flash", "verify"):
        v = [float(r[3]) for r in rows if r[0] == b and r[1] == m]
        acc = sorted({r[4] for r in rows if r[0] == b and r[1] == m})
        print(f"| {b} | {m} | {', '.join(f'{x:.0f}' for x in v)} | {statistics.median(v):.0f} | {', '.join(acc)} |")
PY
