#!/usr/bin/env bash
# Reproduce the small LLaDA model end to end: data -> tokenizer -> training -> export -> evaluation.
#
#   tools/train/run.sh OUT_DIR [--smoke] [extra train.py flags, e.g. --time-budget 300 --steps N]
#
# Full run (GPU, <= 8 min on one H200): 400k train problems, 2048-token BPE, d_model 256, 13 layers
# (12.3M parameters, model dir llada-arith-12m), 360 s training budget, eval on 200 test problems.
# --smoke: 2000 problems, a 2-layer d_model-128 model trained 15 s, eval on 4 problems; runs on the
# CPU (a few minutes on a busy 2-core machine); it checks the plumbing only, the model learns nothing.
#
# Writes: OUT_DIR/data/{train,validation,test}.jsonl, OUT_DIR/tokenizer/, OUT_DIR/train_log.jsonl,
# OUT_DIR/loss_curve.png, OUT_DIR/eval.json, OUT_DIR/<model name>/ (the HF-layout model dir to copy to
# models/), OUT_DIR/run.log (everything printed).
set -euo pipefail

if [[ $# -lt 1 ]]; then
  sed -n '2,14p' "$0"
  exit 2
fi
OUT=$1
shift
SMOKE=0
if [[ "${1:-}" == "--smoke" ]]; then
  SMOKE=1
  shift
fi
REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
PY=${PYTHON:-python3}
mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)
cd "$REPO"
export PYTHONUNBUFFERED=1

{
  echo "== flashdllm small-model pipeline: $(date -u +%FT%TZ), commit $(git rev-parse --short HEAD 2>/dev/null || echo n/a), smoke=$SMOKE"
  T0=$(date +%s)
  if [[ $SMOKE == 1 ]]; then
    NTRAIN=2000
    TRAIN_FLAGS=(--d-model 128 --n-heads 1 --n-layers 2 --mlp-hidden-size 384 --batch 32 --time-budget 15
                 --measure-steps 5 --warmup 10 --log-every 5 --val-every 50 --eval-n 4 --name smoke-model)
  else
    NTRAIN=400000
    TRAIN_FLAGS=()
  fi

  echo "== 1/4 data (committed test/validation must match the generator)"
  "$PY" tools/train/arith_data.py --check data/arith
  "$PY" tools/train/arith_data.py --out "$OUT/data" --n-train "$NTRAIN"

  echo "== 2/4 tokenizer"
  "$PY" tools/train/build_tokenizer.py --train "$OUT/data/train.jsonl" --out "$OUT/tokenizer"

  echo "== 3/4 training, export, evaluation"
  "$PY" tools/train/train.py --data "$OUT/data" --test data/arith/test.jsonl --tokenizer "$OUT/tokenizer" \
      --out "$OUT" "${TRAIN_FLAGS[@]}" "$@"

  echo "== 4/4 reference logits for the C++ parity test"
  MODEL_DIR=$(cat "$OUT/model_dir.txt")
  "$PY" tools/train/reference_logits.py "$MODEL_DIR" --out "$OUT/reference_logits.safetensors"

  echo "== finished in $(( $(date +%s) - T0 )) s"
  echo "model dir:        $MODEL_DIR"
  echo "loss curve:       $OUT/loss_curve.png"
  echo "eval:             $OUT/eval.json"
  echo "reference logits: $OUT/reference_logits.safetensors"
} 2>&1 | tee "$OUT/run.log"
exit "${PIPESTATUS[0]}"
