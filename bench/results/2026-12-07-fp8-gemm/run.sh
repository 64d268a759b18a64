#!/bin/bash
# The block-scaled FP8 GEMM on Hopper, one device call (<= 600 s):
#  1. tools/diag/cublaslt_fp8_probe.cu: which scale modes, row counts, output leading dimensions and
#     types cuBLASLt 13 offers a block-scaled FP8 GEMM for (heuristic answers only);
#  2. test_cuda_fp8 (the ScaleLayoutProbe against the CPU oracle and the FP8 twins);
#  3. the small Dream model (models/dream-arith-11m) on the 1000-problem arith split, CUDA: Dream's
#     own sampler (--cache none), Flash-Cache, Flash-Cache + Verify (issue 46's accuracy table);
#  4. if the production layout matched: the small model's arith accuracy on the CUDA backend, bf16 vs
#     --quantization fp8 (cuBLASLt route) vs fp8 with FLASHDLLM_FP8_DEQUANTIZE=1, Flash-Cache, the
#     1000-problem test split;
#  5. the LLaDA-8B-shape Flash-Cache iteration, bf16 (A) vs --quantization fp8 (B), dummy weights, 1 and
#     32 slots (bench/iteration_floor.py, one repeat), within the time left.
# Usage (device tool, carry .carry): bash bench/results/2026-12-07-fp8-gemm/run.sh <tree> <label>
# (.carry/dream/model.safetensors: a copy of models/dream-arith-11m/model.safetensors)
PRELUDE_BUILD=0 LIMIT=470
# The small Dream model's weights travel in .carry/dream when the copy lacks them (the copy's git
# objects may predate them).
cd "$(git -C "$(dirname "$0")" rev-parse --show-toplevel)" || exit 1
[[ -f models/dream-arith-11m/model.safetensors ]] || cp .carry/dream/model.safetensors models/dream-arith-11m/ 2>/dev/null
source "$(git -C "$(dirname "$0")" rev-parse --show-toplevel)/bench/device_prelude.sh" "$1" "$2"
nvcc -std=c++17 -o /tmp/fp8probe tools/diag/cublaslt_fp8_probe.cu -lcublasLt && /tmp/fp8probe > "$OUT/cublaslt_probe.txt" 2>&1
head -1 "$OUT/cublaslt_probe.txt"
echo "cases with an algorithm: $(grep -c ', [1-9][0-9]* algorithms' "$OUT/cublaslt_probe.txt") of $(grep -c fp8probe "$OUT/cublaslt_probe.txt")"
grep -E ', [1-9][0-9]* algorithms' "$OUT/cublaslt_probe.txt" | head -40
prelude_build_targets test_cuda_fp8 flashdllm
build-gpu/tests/test_cuda_fp8 > "$OUT/test_cuda_fp8.log" 2>&1
grep -E "probe|^\[ +(OK|FAILED|PASSED|SKIPPED) |rel max err|Failure" "$OUT/test_cuda_fp8.log" | head -60
# The small Dream model (issue 46): Dream's own sampler vs Flash-Cache (+ Verify), 1000 problems, CUDA.
for mode in dream-sampler flash flash-verify; do
  case $mode in
    dream-sampler) args=(--cache none) ;;
    flash) args=(--cache flash) ;;
    flash-verify) args=(--cache flash --verify) ;;
  esac
  build-gpu/flashdllm eval -m models/dream-arith-11m --task arith --device cuda "${args[@]}" --limit 1000 \
    --out "/tmp/dream-$mode" > "/tmp/dream-$mode.log" 2>&1
  echo "dream $mode rc=$? at $(($(date +%s) - t0)) s: $(tail -1 "/tmp/dream-$mode/summary.md" | cut -c1-300)"
done
tar -C /tmp -czf "$OUT/dream-eval.tgz" dream-flash dream-flash-verify dream-sampler 2>/dev/null
grep -q "^\[       OK \] CudaFp8Kernels.ScaleLayoutProbe" "$OUT/test_cuda_fp8.log" || { echo "no matching layout: stop"; exit 0; }
for mode in bf16 fp8 fp8-dequant; do
  args=() env=()
  [[ $mode != bf16 ]] && args=(--quantization fp8)
  [[ $mode == fp8 ]] && env=(FLASHDLLM_FP8_DEQUANTIZE=0)  # the FP8 GEMM (opt-in since 06164d9)
  [[ $mode == fp8-dequant ]] && env=(FLASHDLLM_FP8_DEQUANTIZE=1)
  env "${env[@]}" build-gpu/flashdllm eval --task arith --device cuda "${args[@]}" --limit 1000 --out "/tmp/eval-$mode" \
    > "/tmp/eval-$mode.log" 2>&1
  echo "eval $mode rc=$? at $(($(date +%s) - t0)) s: $(tail -1 "/tmp/eval-$mode/summary.md" | cut -c1-300)"
  cp "/tmp/eval-$mode/summary.json" "$OUT/eval-$mode.json" 2>/dev/null
done
echo "left $(left) s"
if (($(left) > 200)); then
  timeout $(($(left) - 10)) python3 bench/iteration_floor.py --a-bin build-gpu/flashdllm --b-args "--quantization fp8" --b-env FLASHDLLM_FP8_DEQUANTIZE=0 \
    --model data/llada-8b-instruct --slots 32,1 --repeats 1 --json "$OUT/iteration_floor.json" 2>&1 | tail -25
fi
