#!/bin/bash
# One device call (<= 600 s), two things side by side:
#  background (GPU, Python): the small LLaDA-MoE model (issue 47 item 5): tools/train/tests/test_moe.py
#    (the PyTorch MoE model vs its NumPy transcription of the upstream layer, upcycling, export), then
#    tools/train/run.sh --family llada-moe (upcycled from models/llada-arith-12m, one stage of BUDGET
#    seconds, export, PyTorch eval on 200 test problems, reference logits for the C++ parity test),
#    then the engine on the trained model, CUDA, 1000 problems: LLaDA's sampler (steps 128),
#    Flash-Cache, Flash-Cache + Verify;
#  foreground (C++): the FP8 GEMM route's twin tests after d9bb7e3 (test_cuda_fp8), the small Dream
#    model on the 1000-problem split on CUDA (Dream's sampler, Flash-Cache, + Verify; issue 46), and,
#    when the layout probe passes, the small LLaDA model's FP8 accuracy on both FP8 routes.
# No timings are taken (the training shares the GPU). The trained run comes back packed in 15 MiB parts
# (rejoin: cat moe.tgz.part-* | tar -xz).
# Usage (device tool, carry .carry): bash bench/results/2026-12-07-moe-model/run.sh <tree> <label> [BUDGET s, 280]
PRELUDE_BUILD=0 LIMIT=580
cd "$(git -C "$(dirname "$0")" rev-parse --show-toplevel)" || exit 1
[[ -f models/dream-arith-11m/model.safetensors ]] || cp .carry/dream/model.safetensors models/dream-arith-11m/ 2>/dev/null
source "$(git -C "$(dirname "$0")" rev-parse --show-toplevel)/bench/device_prelude.sh" "$1" "$2"
echo "still missing: $(git ls-files -d | wc -l) tracked files $(git ls-files -d | head -3 | tr '\n' ' ')"
mkdir -p "$OUT/moe"
(
  python3 -m pytest -q -p no:cacheprovider tools/train/tests/test_moe.py tools/train/tests/test_model.py 2>&1 | tail -15
  echo "== pytest done at $(($(date +%s) - t0)) s"
  timeout $((LIMIT - 110 - ($(date +%s) - t0))) tools/train/run.sh /tmp/moe --family llada-moe --budget "${3:-280}" \
    > /tmp/moe_run.log 2>&1
  echo "train rc=$? at $(($(date +%s) - t0)) s"
  grep -E "^==|accuracy|eval|upcycled|parameters|step time|trained|exported|Error|error" /tmp/moe_run.log | tail -30
  md=$(cat /tmp/moe/model_dir.txt 2>/dev/null)
  while [[ ! -x build-gpu/flashdllm ]] && (($(left) > 40)); do sleep 5; done
  for mode in llada flash flash-verify; do
    case $mode in
      llada) args=(--cache none --steps 128 --block-length 32) ;;
      flash) args=(--cache flash) ;;
      flash-verify) args=(--cache flash --verify) ;;
    esac
    (($(left) > 25)) || break
    timeout $(($(left) - 15)) build-gpu/flashdllm eval -m "$md" --task arith --device cuda "${args[@]}" --limit 1000 \
      --out "/tmp/moe-eval-$mode" > "/tmp/moe-eval-$mode.log" 2>&1
    echo "moe engine $mode rc=$? at $(($(date +%s) - t0)) s: $(tail -1 "/tmp/moe-eval-$mode/summary.md" | cut -c1-300)"
    cp "/tmp/moe-eval-$mode/summary.json" "/tmp/moe/engine-eval-$mode.json" 2>/dev/null
  done
) > /tmp/moe_call.log 2>&1 &
bg=$!
prelude_build_targets test_cuda_fp8 flashdllm
build-gpu/tests/test_cuda_fp8 > /tmp/test_cuda_fp8.log 2>&1
echo "test_cuda_fp8 rc=$?"
grep -E "^\[ +(FAILED|PASSED|SKIPPED) |Failure|probe" /tmp/test_cuda_fp8.log | head -30
gzip -c /tmp/test_cuda_fp8.log > "$OUT/test_cuda_fp8.log.gz"
for mode in dream-sampler flash flash-verify; do
  case $mode in
    dream-sampler) args=(--cache none) ;;
    flash) args=(--cache flash) ;;
    flash-verify) args=(--cache flash --verify) ;;
  esac
  (($(left) > 150)) || break
  timeout 90 build-gpu/flashdllm eval -m models/dream-arith-11m --task arith --device cuda "${args[@]}" --limit 1000 \
    --out "/tmp/dream-$mode" > "/tmp/dream-$mode.log" 2>&1
  echo "dream $mode rc=$? at $(($(date +%s) - t0)) s: $(tail -1 "/tmp/dream-$mode/summary.md" | cut -c1-300)"
done
tar -C /tmp -czf "$OUT/dream-eval.tgz" dream-flash dream-flash-verify dream-sampler 2>/dev/null
if grep -q "^\[       OK \] CudaFp8Kernels.ScaleLayoutProbe" /tmp/test_cuda_fp8.log; then
  for mode in fp8 fp8-dequant; do
    (($(left) > 130)) || break
    v=0; [[ $mode == fp8-dequant ]] && v=1
    FLASHDLLM_FP8_DEQUANTIZE=$v timeout 60 build-gpu/flashdllm eval --task arith --device cuda --quantization fp8 \
      --limit 1000 --out "/tmp/eval-$mode" > "/tmp/eval-$mode.log" 2>&1
    echo "eval $mode rc=$? at $(($(date +%s) - t0)) s: $(tail -1 "/tmp/eval-$mode/summary.md" | cut -c1-300)"
  done
fi
wait $bg
echo "== MoE ($(($(date +%s) - t0)) s)"
cat /tmp/moe_call.log
cp /tmp/moe_call.log "$OUT/moe/"
tar -C /tmp -czf /tmp/moe.tgz --exclude=moe/data moe && split -b 15m /tmp/moe.tgz "$OUT/moe/moe.tgz.part-"
ls -la "$OUT" "$OUT/moe"
