#!/usr/bin/env bash
# Issue 5's LLaDA-8B-shape grid: none / dual / flash side by side, per-iteration time, tokens/s and peak
# memory, for several slot counts and prompt lengths, dummy (random) weights, forced schedules.
#
#   bench/gpu_grid_8b.sh                 run on a GPU machine; one JSON per point + grid.md in $OUT
#   FLASHDLLM=path/to/flashdllm          binary (default build-gpu/flashdllm)
#   PROMPTS="250 900" SLOTS="1 8 16 32 64 128" METHODS="none dual flash"
#   PER_ITER=8                           tokens committed per iteration (dual and flash)
#   BUDGET=540                           seconds; points that would start after it are skipped (listed)
#   RUN_TIMEOUT=240                      seconds per point
#   OUT=./out                            results folder
#   MODEL=data/llada-8b-instruct DEVICE=cuda   (overridable to try the script on a CPU with a small config)
#
# Per method (gen_length 512; every request runs its whole canvas: none forbids EOS, dual and flash
# with forced schedules do not stop early):
#   none   LLaDA sampler, full recompute of prompt + 512 positions every iteration, block GEN/8, steps 8
#          (64 tokens per iteration at GEN 512). A full-recompute iteration costs the same whatever it commits, so
#          its tokens/s at another schedule is derived from the measured time per iteration
#          (bench/grid_8b_table.py: at PER_ITER tokens and at LLaDA's own 1 token per iteration).
#   dual   Fast-dLLM dual cache, block 32, steps 512/PER_ITER (a full forward at each block start, then
#          block-only forwards over the cached prefix and suffix).
#   flash  Flash-Cache, --forced-schedule PER_ITER, --slots S (S requests, all admitted at once: the first
#          iteration is their full prefill), window 16, tracked 64, masked 64.
# Prompts: S distinct synthetic prompts of P ids each, ids in [100, 2000) (below every special id of
# LLaDA-8B and of the small model; the weights are random, only lengths matter).
# OUT's earlier p*_s*_*.json/.err point files are removed first, so the table shows this run only.
set -u -o pipefail
cd "$(dirname "$0")/.."

F="${FLASHDLLM:-build-gpu/flashdllm}"
PROMPTS="${PROMPTS:-250 900}"
SLOTS="${SLOTS:-1 8 16 32 64 128}"
METHODS="${METHODS:-none dual flash}"
PER_ITER="${PER_ITER:-8}"
BUDGET="${BUDGET:-540}"
RUN_TIMEOUT="${RUN_TIMEOUT:-240}"
OUT="${OUT:-./out}"
MODEL="${MODEL:-data/llada-8b-instruct}"
DEVICE="${DEVICE:-cuda}"
GEN="${GEN:-512}"  # gen_length (overridable only to try the script on a small config)
mkdir -p "$OUT"
[[ -x "$F" ]] || { echo "gpu_grid_8b: no flashdllm binary at '$F' (set FLASHDLLM; relative paths start at $PWD)" >&2; exit 2; }
if ! [[ "$PER_ITER" =~ ^[1-9][0-9]*$ && "$GEN" =~ ^[1-9][0-9]*$ ]] || ((GEN % PER_ITER || GEN % 8 || GEN % 32)); then
  echo "gpu_grid_8b: GEN ($GEN) must be a positive multiple of 32 and of PER_ITER ($PER_ITER >= 1)" >&2
  exit 2
fi
rm -f "$OUT"/p*_s*_*.json "$OUT"/p*_s*_*.err

T0=$(date +%s)
log() { echo "[grid $(($(date +%s) - T0)) s] $*" | tee -a "$OUT/grid.log"; }

method_args() {
  case "$1" in
    none) echo "--cache none --block-length $((GEN / 8)) --steps 8 --logits-eos-inf" ;;
    dual) echo "--cache dual --block-length 32 --steps $((GEN / PER_ITER))" ;;
    flash) echo "--cache flash --forced-schedule $PER_ITER --slots $2" ;;
    *) echo "unknown method $1" >&2; return 1 ;;
  esac
}

nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader > "$OUT/gpu.txt" 2>&1 || true
skipped=()
for P in $PROMPTS; do
  for S in $SLOTS; do
    mapfile -t pa < <(python3 bench/synthetic_prompt_args.py "$P" "$S")
    for M in $METHODS; do
      name="p${P}_s${S}_${M}"
      if (($(date +%s) - T0 > BUDGET)); then skipped+=("$name"); continue; fi
      if ! margs=$(method_args "$M" "$S"); then
        echo "unknown method '$M' (none, dual, flash)" > "$OUT/$name.err"
        log "$name skipped: unknown method"
        continue
      fi
      # shellcheck disable=SC2086
      timeout "$RUN_TIMEOUT" "$F" generate -m "$MODEL" --load-format dummy --device "$DEVICE" --gen-length $GEN --json \
        $margs "${pa[@]}" > "$OUT/$name.json" 2> "$OUT/$name.err"
      rc=$?
      if ((rc == 124 || rc == 137)); then echo "timed out after ${RUN_TIMEOUT} s (rc $rc)" >> "$OUT/$name.err"; fi
      if ((rc != 0)) && [[ ! -s "$OUT/$name.err" ]]; then echo "exit code $rc" > "$OUT/$name.err"; fi
      python3 - "$OUT/$name.json" << 'EOF' || true
import json, sys
p = sys.argv[1]
try:
    d = json.load(open(p))
except Exception:
    sys.exit(0)
for r in d.get("results", []):  # keep the files small: the ids are synthetic
    for k in ("prompt_ids", "canvas_ids", "output_ids"):
        r.pop(k, None)
json.dump(d, open(p, "w"), indent=1)
EOF
      log "$name rc=$rc $(tail -c 300 "$OUT/$name.err" | tr '\n' ' ' | cut -c1-200)"
      [[ -s "$OUT/$name.err" ]] || rm -f "$OUT/$name.err"
    done
  done
done
((${#skipped[@]})) && log "skipped (budget ${BUDGET} s): ${skipped[*]}"
python3 bench/grid_8b_table.py "$OUT" --per-iter "$PER_ITER" --json "$OUT/grid.json" > "$OUT/grid.md" && cat "$OUT/grid.md"
