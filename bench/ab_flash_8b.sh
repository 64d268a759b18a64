#!/usr/bin/env bash
# A/B of two Flash-Cache configurations at the LLaDA-8B shape (dummy weights) in one run (issue 13):
# the same generate call as bench/gpu_grid_8b.sh's flash points (250-token prompts, gen_length 512,
# --forced-schedule 8, window 16, tracked 64, masked 64), once with A's flags and once with B's,
# alternating REPEATS times per slot count; prints ms per iteration of every run and the medians.
#
#   bench/ab_flash_8b.sh A_ARGS="--query-tile-rows 16" B_ARGS=""      (on the GPU machine)
#   FLASHDLLM=build-gpu/flashdllm   binary of both sides (A_BIN / B_BIN: one each)
#   SLOTS="1 16 32" REPEATS=3 PROMPT=250 GEN=512 PER_ITER=8 OUT=./out
#   MODEL=data/llada-8b-instruct DEVICE=cuda   (a small config and cpu to try the script)
#
# ms/iteration = the median wall time of the iterations without an admission (generate --json's
# iterations.decode.median_ms: the steady state); wall/NFE = the call's wall seconds / its iterations
# (max NFE over the requests), as bench/grid_8b_table.py, which also holds the admission prefill of
# every slot and the first call's warm-up.
set -euo pipefail
cd "$(dirname "$0")/.."
for kv in "$@"; do export "${kv?}"; done
F="${FLASHDLLM:-build-gpu/flashdllm}"
A_BIN="${A_BIN:-$F}"
B_BIN="${B_BIN:-$F}"
A_ARGS="${A_ARGS:-}"
B_ARGS="${B_ARGS:-}"
SLOTS="${SLOTS:-1 16 32}"
REPEATS="${REPEATS:-3}"
PROMPT="${PROMPT:-250}"
GEN="${GEN:-512}"
PER_ITER="${PER_ITER:-8}"
MODEL="${MODEL:-data/llada-8b-instruct}"
DEVICE="${DEVICE:-cuda}"
OUT="${OUT:-./out}"
mkdir -p "$OUT"
: > "$OUT/ab_flash.tsv"
for S in $SLOTS; do
  mapfile -t pa < <(python3 bench/synthetic_prompt_args.py "$PROMPT" "$S")
  for ((r = 1; r <= REPEATS; ++r)); do
    for side in A B; do
      bin_var="${side}_BIN" args_var="${side}_ARGS"
      # shellcheck disable=SC2086
      "${!bin_var}" generate -m "$MODEL" --load-format dummy --device "$DEVICE" --gen-length "$GEN" --json --no-live \
        --cache flash --forced-schedule "$PER_ITER" --slots "$S" ${!args_var} "${pa[@]}" > "$OUT/run.json" 2> "$OUT/run.err" ||
        { echo "ab_flash_8b: $side at $S slots failed:" >&2; tail -5 "$OUT/run.err" >&2; exit 1; }
      python3 - "$OUT/run.json" "$side" "$S" "$r" >> "$OUT/ab_flash.tsv" << 'EOF'
import json, sys
d = json.load(open(sys.argv[1]))
res = d["results"]
sec = max(x["seconds"] for x in res)
it = max(x["nfe"] for x in res)
print(f"{sys.argv[2]}\t{sys.argv[3]}\t{sys.argv[4]}\t{d['iterations']['decode']['median_ms']:.3f}\t"
      f"{d.get('peak_memory_bytes', 0)}\t{1e3 * sec / it:.3f}")
EOF
    done
  done
done
rm -f "$OUT/run.json" "$OUT/run.err"
python3 - "$OUT/ab_flash.tsv" "$A_ARGS" "$B_ARGS" << 'EOF'
import statistics, sys
rows = [l.split("\t") for l in open(sys.argv[1]) if l.strip()]
print(f"A: {sys.argv[2] or '(defaults)'}\nB: {sys.argv[3] or '(defaults)'}\n")
print("| slots | A ms/it (runs) | B ms/it (runs) | A median | B median | A/B | A wall/NFE | B wall/NFE |")
print("|---:|---|---|---:|---:|---:|---:|---:|")
for s in sorted({int(r[1]) for r in rows}):
    v = {side: [float(r[3]) for r in rows if r[0] == side and int(r[1]) == s] for side in "AB"}
    w = {side: [float(r[5]) for r in rows if r[0] == side and int(r[1]) == s] for side in "AB"}
    a, b = statistics.median(v["A"]), statistics.median(v["B"])
    print(f"| {s} | {', '.join(f'{x:.2f}' for x in v['A'])} | {', '.join(f'{x:.2f}' for x in v['B'])} "
          f"| {a:.2f} | {b:.2f} | {a / b:.3f} | {statistics.median(w['A']):.2f} | {statistics.median(w['B']):.2f} |")
EOF
