#!/usr/bin/env bash
# The server benchmark of issue 12 (section 4) on a GPU machine: `flashdllm serve` at LLaDA-8B shape
# (--load-format dummy, forced schedule of 8 tokens per iteration so random weights run a real
# trajectory's shape) under bench/serve_bench.py at concurrency 1, 4, 16, 32, 64 (token-id prompts
# of 250, max_tokens 512), then the same prompts through `flashdllm generate --slots 32` and one
# prompt alone three times, for the ratios; bench/serve_table.py writes the table.
#
#   OUT=out FLASHDLLM_GPU_BUILD_DIR=build-gpu bench/gpu_serve_bench.sh
# Needs a built build-gpu (scripts/gpu_check.sh --build-only or a full check) and python3 + httpx.
set -u -o pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
FDLLM_TAG=gpu_serve_bench
# shellcheck source=scripts/gpu_env.sh
source "$ROOT/scripts/gpu_env.sh"
OUT="${OUT:-$ROOT/out}"
mkdir -p "$OUT"
BUILD="${FLASHDLLM_GPU_BUILD_DIR:-$ROOT/build-gpu}"
FL="$BUILD/flashdllm"
MODEL="$ROOT/data/llada-8b-instruct"
SLOTS="${SLOTS:-32}"
LEVELS="${LEVELS:-1,4,16,32,64}"
fdllm_commit
fdllm_use_carried_deps
[[ -x "$FL" ]] || { echo "no $FL: build first" >&2; exit 2; }
COMMON=(-m "$MODEL" --load-format dummy --device cuda)

"$FL" serve "${COMMON[@]}" --slots "$SLOTS" --max-model-len 768 --forced-schedule 8 --max-queue 256 --port 0 \
  > "$OUT/serve_stdout.log" 2> "$OUT/serve.log" &
SRV=$!
PORT=""
for _ in $(seq 1 600); do
  PORT=$(grep -oE "on http://127.0.0.1:[0-9]+" "$OUT/serve.log" | grep -oE "[0-9]+$" | head -1)
  [[ -n "$PORT" ]] && break
  kill -0 "$SRV" 2> /dev/null || break
  sleep 0.5
done
[[ -n "$PORT" ]] || { echo "the server did not start"; cat "$OUT/serve.log"; exit 1; }
echo "[gpu_serve_bench] server on port $PORT"
PYTHONUNBUFFERED=1 python3 "$ROOT/bench/serve_bench.py" --url "http://127.0.0.1:$PORT" --model llada-8b-instruct \
  --concurrency "$LEVELS" --prompt-len 250 --max-tokens 512 --requests 2x --prompts-out "$OUT/prompts.json" \
  --out "$OUT/serve.json"
rc=$?
kill -TERM "$SRV"
wait "$SRV"
echo "[gpu_serve_bench] server exit $? (bench rc $rc)"

# The baselines on the same prompts: the concurrency-32 level's requests through generate --slots 32,
# and the first prompt alone (the concurrency-1 latency's reference).
mapfile -t ARGS < <(python3 -c "
import json, sys
p = json.load(open('$OUT/prompts.json'))
for q in p[:2 * $SLOTS]:
    print('--prompt-ids'); print(','.join(map(str, q)))")
"$FL" generate "${COMMON[@]}" --slots "$SLOTS" --gen-length 512 --forced-schedule 8 --json "${ARGS[@]}" \
  > "$OUT/generate_slots.json" 2> "$OUT/generate_slots.log"
for i in 1 2 3; do
  "$FL" generate "${COMMON[@]}" --slots 1 --gen-length 512 --forced-schedule 8 --json "${ARGS[0]}" "${ARGS[1]}" \
    > "$OUT/generate_one_$i.json" 2>> "$OUT/generate_slots.log"
done
python3 "$ROOT/bench/serve_table.py" --dir "$OUT" --commit "$FLASHDLLM_COMMIT" --slots "$SLOTS" > "$OUT/serve_bench.md"
cat "$OUT/serve_bench.md"
