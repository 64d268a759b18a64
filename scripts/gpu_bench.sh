#!/usr/bin/env bash
# The one-call LLaDA-8B-shape benchmark on a GPU machine (written for an H200), run after
# scripts/gpu_check.sh: same carried dependencies, same configure arguments and build folder
# (scripts/gpu_env.sh), so on a machine gpu_check has just used the build is incremental.
#   build           flashdllm, flashdllm-make-checkpoint, forward_bench, attention_bench, gemm_bench,
#                   test_cuda_fill
#   fill twin test  the device dummy-weight generator against the CPU (seconds)
#   forward_bench   whole forward, LLaDA-8B shape, dummy weights made on the device,
#                   L 256,512,1024,2048 x B 1,8,32: ms, tokens/s, TFLOP/s, roofline floor, GEMM and
#                   attention shares, peak memory; acceptance L=1024 B=8 within 1.5x of the floor
#   attention       bench/attention_vs_sdpa.py (our flash kernel vs PyTorch SDPA; attention_bench
#                   alone without torch)
#   gemm_bench      cuBLASLt at the 8B layer shapes
#   checkpoint      a 16 GB random checkpoint with LLaDA-8B's exact tensor names, shapes and shard
#                   split (flashdllm-make-checkpoint --index) on the local disk with the most room,
#                   flushed and evicted from the page cache, then `flashdllm generate --device cuda`
#                   from it twice (cold: read from disk; warm: page cache) with load seconds and GB/s,
#                   and `flashdllm info`; the checkpoint is deleted at exit in every case
#   summary         step table + key figures, printed and written to $OUT/summary.md
#
# Usage
#   scripts/gpu_bench.sh                 everything (on the GPU machine); <= 8 minutes by budget
#   scripts/gpu_bench.sh --build-only    configure + build only (any machine with nvcc)
#   Device tool: command "scripts/gpu_bench.sh", carry [".carry"] (the .deb files of --fetch-deps).
#
# Environment
#   OUT                           output folder (default ./out); gets at most 7 files: summary.md,
#                                 gpu_bench.log, forward_bench.json, forward_bench.md,
#                                 attention_vs_sdpa.json (or attention_bench.json), gemm_bench.json,
#                                 generate_8b.json (the cold-load generate, --json)
#   FLASHDLLM_GPU_BUILD_DIR       build folder (default ./build-gpu, shared with gpu_check)
#   FLASHDLLM_GPU_BENCH_BUDGET    total seconds allowed (default 460); later steps are skipped
#                                 rather than overrunning
#   FLASHDLLM_PEAK_TFLOPS         bf16 GEMM peak for rooflines (default 760, measured on the H200)
#   FLASHDLLM_PEAK_GBPS           memory bandwidth for rooflines (default 4300, measured copy)
#   FLASHDLLM_CKPT_PARENT         where the 16 GB checkpoint goes (default: the candidate among
#                                 /tmp /var/tmp $ROOT $HOME with the most free space)
#   FLASHDLLM_GPU_DEPS_DIR        carried .deb files (default ./.carry/gpudeps)
set -u -o pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
FDLLM_TAG=gpu_bench
# shellcheck source=scripts/gpu_env.sh
source "$ROOT/scripts/gpu_env.sh"

CONFIG_8B="$ROOT/data/llada-8b-instruct/config.json"
INDEX_8B="$ROOT/data/llada-8b-instruct/model.safetensors.index.json"
# Any ids < 126464 (the weights are random). The two overrides exist to try the steps on a CPU build.
PROMPT_IDS="${FLASHDLLM_BENCH_PROMPT_IDS:-126080,3840,1280,300,4000,2048,777,12,95,126081}"
DEVICE="${FLASHDLLM_BENCH_DEVICE:-cuda}"

# ---------------------------------------------------------------------------- internal steps
# Each runs as its own process under run_step's timeout and ends with a one-line result.
if [[ "${1:-}" == --step ]]; then
  step=$2
  shift 2
  case "$step" in
    make-ckpt)  # BUILD DIR
      out=$("$1/flashdllm-make-checkpoint" --config "$CONFIG_8B" --index "$INDEX_8B" --out "$2" --threads "$JOBS" \
        --force 2>&1) || { echo "$out"; exit 1; }
      ls -l "$2"
      df -h "$2"
      echo "$out" ;;  # last line: "wrote DIR: 291 tensors, 6 file(s), ... GB/s"
    evict)  # DIR: write back, then drop the files from the page cache (no root needed), so the
            # next load reads the disk.
      t=$(date +%s%N)
      sync "$2"/*.safetensors || sync
      echo "flushed to disk in $((($(date +%s%N) - t) / 1000000)) ms"
      python3 - "$2"/*.safetensors << 'EOF' || exit 1
import os, sys
for f in sys.argv[1:]:
    fd = os.open(f, os.O_RDONLY)
    os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    os.close(fd)
print(f"evicted {len(sys.argv) - 1} shards from the page cache (POSIX_FADV_DONTNEED)")
EOF
      if command -v fincore > /dev/null; then
        fincore "$2"/*.safetensors
        echo "resident after eviction: $(fincore -b -n -o RES "$2"/*.safetensors | awk '{s += $1} END {printf "%.2f GB", s / 1e9}')"
      fi ;;
    generate)  # BUILD DIR JSON LABEL
      "$1/flashdllm" generate --device "$DEVICE" -m "$2" --prompt-ids "$PROMPT_IDS" --gen-length 64 --block-length 32 \
        --steps 64 --json > "$3" || { cat "$3"; exit 1; }
      cat "$3"
      python3 - "$3" "$4" << 'EOF'
import json, sys
j = json.load(open(sys.argv[1]))
r = j["results"][0]
print(f"{sys.argv[2]}: load {j['load_seconds']:.2f} s, {j.get('load_gb_per_s') or 0:.2f} GB/s "
      f"({j.get('weight_bytes', 0) / 1e9:.2f} GB); generate {r['seconds']:.2f} s, NFE {r['nfe']}, "
      f"{r['generated_tokens']} tokens")
EOF
      ;;
    *) echo "unknown step $step" >&2; exit 2 ;;
  esac
  exit 0
fi

MODE=all
case "${1:-}" in
  --build-only) MODE=build ;;
  "") ;;
  *) echo "usage: $0 [--build-only]" >&2; exit 2 ;;
esac

OUT="${OUT:-$ROOT/out}"
mkdir -p "$OUT"
LOG="$OUT/gpu_bench.log"
: > "$LOG"
BUILD="${FLASHDLLM_GPU_BUILD_DIR:-$ROOT/build-gpu}"
BUDGET="${FLASHDLLM_GPU_BENCH_BUDGET:-460}"
PEAK="${FLASHDLLM_PEAK_TFLOPS:-760}"
PEAK_GBPS="${FLASHDLLM_PEAK_GBPS:-4300}"
TMPD="$(mktemp -d /tmp/gpu_bench.XXXXXX)"
CKPT=""
fdllm_commit

# shellcheck disable=SC2317  # called by the EXIT trap
cleanup() {
  [[ -n "$CKPT" && -d "$CKPT" ]] && rm -rf "$CKPT" && echo "[gpu_bench] deleted $CKPT"
  rm -rf "$TMPD"
  [[ -n "$STEP_OUT" ]] && rm -f "$STEP_OUT"
}
trap cleanup EXIT

# Key figures of the JSON results (python3; a line saying so where it is missing).
key_figures() {
  command -v python3 > /dev/null || { echo "(python3 missing: see the JSON files)"; return; }
  python3 - "$OUT" "$TMPD" << 'EOF'
import json, os, sys
out, tmp = sys.argv[1], sys.argv[2]
def load(p):
    try:
        with open(p) as f:
            return json.load(f)
    except Exception:
        return None
fb = load(os.path.join(out, "forward_bench.json"))
if fb:
    w = fb["weights"]
    print(f"## Forward, LLaDA-8B shape, dummy weights ({fb['backend']})\n")
    print(f"dummy weights: {w['bytes'] / 2**30:.2f} GiB made on the device in {w['dummy_seconds']:.2f} s; "
          f"peak memory {fb.get('peak_memory_gib', 0):.2f} GiB; floors at {fb['peak_tflops']:.0f} TFLOP/s, "
          f"{fb['peak_gbps']:.0f} GB/s\n")
    print("| L | B | ms | tokens/s | TFLOP/s | floor ms | x floor | GEMM share | attention share | peak GiB |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for r in fb.get("results", []):
        if r.get("status") != "ok":
            print(f"| {r['seqlen']} | {r['batch']} | {r['status'][:60]} |")
            continue
        g = f"{100 * r['gemm_share']:.0f}%" if "gemm_share" in r else "-"
        a = f"{100 * r['attention_share']:.0f}%" if "attention_share" in r else "-"
        print(f"| {r['seqlen']} | {r['batch']} | {r['forward_ms']['median']:.2f} | {r['tokens_per_s']:.0f} | "
              f"{r['tflops']:.0f} | {r['floor_ms']:.2f} ({r['bound']}) | {r['ratio_to_floor']:.2f}x | {g} | {a} | "
              f"{r['peak_memory_gib']:.1f} |")
    acc = fb.get("acceptance")
    if acc:
        print(f"\nacceptance {acc['point']}: {acc['ratio_to_floor']:.2f}x the floor (limit {acc['limit']}x) -> "
              f"{acc['status']}" + (f" ({acc['why']})" if "why" in acc else ""))
    print()
gen = [("cold (disk)", load(os.path.join(out, "generate_8b.json"))), ("warm (page cache)", load(os.path.join(tmp, "generate_8b_warm.json")))]
if any(j for _, j in gen):
    print("## 16 GB random LLaDA-8B checkpoint through the real loader\n")
    print("| load | seconds | GB/s | generate s | NFE | tokens |")
    print("|---|---|---|---|---|---|")
    for label, j in gen:
        if not j:
            continue
        r = j["results"][0]
        print(f"| {label} | {j['load_seconds']:.2f} | {j.get('load_gb_per_s') or 0:.2f} | {r['seconds']:.2f} | "
              f"{r['nfe']} | {r['generated_tokens']} |")
    print()
EOF
}

finish() {
  local s="$OUT/summary.md"
  {
    echo "# gpu_bench summary ($(date -u +%Y-%m-%dT%H:%M:%SZ), commit $FLASHDLLM_COMMIT, $(elapsed)s)"
    echo
    echo "| step | status | seconds | detail |"
    echo "|---|---|---|---|"
    printf '%s\n' "${SUMMARY[@]}"
    echo
    key_figures
    if grep -q "^===== checkpoint_write" "$LOG"; then
      echo "checkpoint: $(sed -n '/^===== checkpoint_write/,/^=====/p' "$LOG" | grep '^wrote ' | cut -c1-220)"
      sed -n '/^===== checkpoint_info/,/^=====/p' "$LOG" | grep -v '^=====' | sed 's/^/    /'
      echo
    fi
    if grep -q "^## Attention" "$LOG"; then
      sed -n '/^## Attention/,/^wrote /p' "$LOG" | grep -v '^wrote '
      echo
    fi
    if grep -q "^| shape | T |" "$LOG"; then
      echo "## cuBLASLt GEMM"
      echo
      sed -n '/^| shape | T |/,/^$/p' "$LOG"
    fi
  } > "$s"
  echo
  cat "$s"
  echo
  echo "[gpu_bench] outputs in $OUT: $(find "$OUT" -maxdepth 1 -type f -printf '%f ')"
  exit "$FAILED"
}

# The local folder with the most free space for the 16 GB checkpoint (needs 17 GiB).
pick_ckpt_parent() {
  if [[ -n "${FLASHDLLM_CKPT_PARENT:-}" ]]; then echo "$FLASHDLLM_CKPT_PARENT"; return; fi
  local best="" best_avail=0 d avail
  for d in /tmp /var/tmp "$ROOT" "${HOME:-/root}"; do
    [[ -d "$d" && -w "$d" ]] || continue
    avail=$(df -Pk "$d" 2> /dev/null | awk 'NR == 2 {print $4}')
    [[ -n "$avail" ]] && ((avail > best_avail)) && best=$d best_avail=$avail
  done
  ((best_avail >= 17 * 1024 * 1024)) && echo "$best"
}

# ---------------------------------------------------------------------------- environment
fdllm_print_env
{
  echo "===== disks ====="
  df -h 2>&1
  echo "===== memory ====="
  free -g 2>&1
} >> "$LOG"

# ---------------------------------------------------------------------------- configure + build
fdllm_use_carried_deps
fdllm_configure_cmd "$BUILD"
run_step configure 120 "${CONFIGURE_CMD[@]}" || finish
run_step build 300 cmake --build "$BUILD" -j "$JOBS" --target flashdllm flashdllm-make-checkpoint forward_bench \
  attention_bench gemm_bench test_cuda_fill || finish
[[ $MODE == build ]] && finish

# ---------------------------------------------------------------------------- benchmarks
run_step fill_twin_test 60 "$BUILD/tests/test_cuda_fill" --gtest_color=no

run_step forward_bench 150 "$BUILD/bench/forward_bench" --device cuda --config "$CONFIG_8B" \
  --seqlens 256,512,1024,2048 --batches 1,8,32 --warmup 1 --reps 5 --peak-tflops "$PEAK" --peak-gbps "$PEAK_GBPS" \
  --json "$OUT/forward_bench.json" --md "$OUT/forward_bench.md"

if python3 -c "import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)" > /dev/null 2>&1; then
  # The script also writes <json>.ours.json: keep it out of $OUT (the main JSON includes it).
  run_step attention_vs_sdpa 100 env PYTHONUNBUFFERED=1 python3 "$ROOT/bench/attention_vs_sdpa.py" \
    --bench "$BUILD/bench/attention_bench" --seqlens 256,512,1024,2048 --batches 1,8,32 --variants m64n64 \
    --iters 10 --peak-tflops "$PEAK" --peak-gbps "$PEAK_GBPS" --json "$TMPD/attention_vs_sdpa.json"
  [[ -f "$TMPD/attention_vs_sdpa.json" ]] && cp "$TMPD/attention_vs_sdpa.json" "$OUT/"
else
  echo "[gpu_bench] torch with CUDA not available: timing our kernel alone" | tee -a "$LOG"
  run_step attention_bench 80 "$BUILD/bench/attention_bench" --seqlens 256,512,1024,2048 --batches 1,8,32 \
    --variants m64n64 --iters 10 --peak-tflops "$PEAK" --peak-gbps "$PEAK_GBPS" \
    --json "$OUT/attention_bench.json"
fi

run_step gemm_bench 60 "$BUILD/bench/gemm_bench" --tokens 256,1024,8192,32768 --iters 5 --peak-tflops "$PEAK" \
  --peak-gbps "$PEAK_GBPS" --json "$OUT/gemm_bench.json"

# ---------------------------------------------------------------------------- 16 GB checkpoint
PARENT="$(pick_ckpt_parent)"
if [[ -z "$PARENT" ]]; then
  SUMMARY+=("| checkpoint | SKIP | 0 | no local folder with 17 GiB free (set FLASHDLLM_CKPT_PARENT) |")
  FAILED=1
else
  CKPT="$PARENT/fdllm-ckpt-8b.$$"
  echo "[gpu_bench] checkpoint folder: $CKPT ($(df -PTh "$PARENT" | awk 'NR == 2 {print $2 ", " $5 " free"}'))" |
    tee -a "$LOG"
  if run_step checkpoint_write 200 bash "$ROOT/scripts/gpu_bench.sh" --step make-ckpt "$BUILD" "$CKPT"; then
    run_step checkpoint_evict 90 bash "$ROOT/scripts/gpu_bench.sh" --step evict x "$CKPT"
    run_step generate_8b_cold 150 bash "$ROOT/scripts/gpu_bench.sh" --step generate "$BUILD" "$CKPT" \
      "$OUT/generate_8b.json" "cold load"
    run_step generate_8b_warm 60 bash "$ROOT/scripts/gpu_bench.sh" --step generate "$BUILD" "$CKPT" \
      "$TMPD/generate_8b_warm.json" "warm load"
    run_step checkpoint_info 60 "$BUILD/flashdllm" info --device cuda -m "$CKPT"
  fi
  rm -rf "$CKPT" && echo "[gpu_bench] deleted $CKPT" && CKPT=""
fi

finish
