#!/usr/bin/env bash
# Reproduce the small LLaDA (default), Dream (--family dream) or LLaDA-MoE (--family llada-moe) model
# end to end: data -> tokenizer -> training (LLaDA: two stages; Dream, LLaDA-MoE: one) -> export ->
# evaluation -> reference logits.
#
#   tools/train/run.sh OUT_DIR [--family llada|dream|llada-moe] [--smoke | --exact] [--budget SECONDS]
#
# --family llada-moe: LLaDA-MoE-7B-A1B's layout (model_moe.py: per-head QK-norm, 8 experts top-2 of
# width 96, softmax router without renormalisation) with the committed small LLaDA model's tokenizer
# (no tokenizer step), upcycled from models/llada-arith-12m (model_moe.upcycle_from_dense) and trained
# in ONE stage of peak lr 1e-3, inference-state rows 70%, load-balancing loss 0.01, training budget
# 280 s (--budget; the committed model's run), eval on 200 test problems (about 6.5 minutes in all on
# one H100); model dir llada-moe-arith-12m (12.3M parameters, 6.0M active per token, the embedding
# matrix not counted). --smoke: from scratch (2 layers).
#
# --family dream (default llada): the Dream-v0-layout model (model_dream.py, Qwen2 tokenizer files,
# ChatML, logit shift) in ONE stage that fits one 600 s device call: GQA 2 query / 1 KV heads
# (head_dim 128), d_model 256, 13 layers (11.3M parameters, model dir dream-arith-11m), peak lr 1.5e-3,
# inference-state rows 60%, training budget 400 s (--budget), eval on 200 test problems (about
# 9-9.5 minutes in all on one H100/H200: data ~45 s, tokenizer ~10 s, setup ~30 s, training about the
# budget and at most 1.05 x budget, eval + reference logits ~60 s).
#
# Full run (GPU, about 15 minutes on one H200, of which 12.5 training): 400k train problems, 2048-token
# BPE, d_model 256, 13 layers (12.3M parameters, model dir llada-arith-12m).
#   stage 1: from scratch, peak lr 1.5e-3, inference-state rows 50%, 390 s budget   -> OUT_DIR/stage1/
#   stage 2: --init stage 1, peak lr 1e-3 (fresh warm-up + cosine), inference-state rows 70%, 415 s
#            budget, eval on 200 test problems                                       -> OUT_DIR/
# --exact: fixed step counts of the committed model's run (5594 + 5141 steps) instead of time budgets.
# --smoke: 2000 problems, a 2-layer d_model-128 model, 15 s per stage, eval on 4 problems; runs on the
# CPU (a few minutes on a busy 2-core machine); it checks the plumbing only, the model learns nothing.
#
# Dream and LLaDA-MoE write the same files without OUT_DIR/stage1/ (LLaDA-MoE also without OUT_DIR/tokenizer/).
# Writes: OUT_DIR/data/{train,validation,test}.jsonl, OUT_DIR/tokenizer/, OUT_DIR/stage1/ (stage 1's
# log, loss curve and model dir), OUT_DIR/train_log.jsonl (both stages, stage 2's steps continue stage
# 1's), OUT_DIR/loss_curve.png (both stages), OUT_DIR/eval.json, OUT_DIR/<model name>/ (the HF-layout
# model dir to copy to models/), OUT_DIR/run.log (everything printed).
set -euo pipefail

if [[ $# -lt 1 || "$1" == -* ]]; then  # no OUT_DIR (or a flag in its place): the usage
  sed -n '2,/^set -euo/p' "$0" | grep '^#'
  exit 2
fi
OUT=$1
shift
SMOKE=0
EXACT=0
FAMILY=llada
BUDGET=
USAGE="usage: run.sh OUT_DIR [--family llada|dream|llada-moe] [--smoke | --exact] [--budget SECONDS]"
while [[ $# -gt 0 ]]; do
  case "$1" in
    --smoke) SMOKE=1; shift ;;
    --exact) EXACT=1; shift ;;
    --family) FAMILY=${2:-}; shift 2 || { echo "run.sh: --family needs a value ($USAGE)" >&2; exit 2; } ;;
    --budget) BUDGET=${2:-}; shift 2 || { echo "run.sh: --budget needs a value ($USAGE)" >&2; exit 2; } ;;
    *) echo "run.sh: unexpected argument '$1' ($USAGE)" >&2; exit 2 ;;
  esac
done
if [[ $SMOKE == 1 && $EXACT == 1 ]]; then
  echo "run.sh: --smoke and --exact exclude each other ($USAGE)" >&2
  exit 2
fi
if [[ $FAMILY != llada && $FAMILY != dream && $FAMILY != llada-moe ]]; then
  echo "run.sh: --family must be llada, dream or llada-moe, got '$FAMILY'" >&2
  exit 2
fi
if [[ -n $BUDGET && ! $BUDGET =~ ^[0-9]+$ ]]; then
  echo "run.sh: --budget must be a whole number of seconds, got '$BUDGET'" >&2
  exit 2
fi
if [[ $FAMILY != llada && $EXACT == 1 ]]; then
  echo "run.sh: --exact fixes the committed LLaDA model's step counts; not for --family $FAMILY" >&2
  exit 2
fi
REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
PY=${PYTHON:-python3}
mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)
cd "$REPO"
export PYTHONUNBUFFERED=1

{
  echo "== flashdllm small-model pipeline: $(date -u +%FT%TZ), commit $(git rev-parse --short HEAD 2>/dev/null || echo n/a), family=$FAMILY smoke=$SMOKE"
  T0=$(date +%s)
  STAGE2=(--lr 1e-3 --warmup 100 --suffix-frac 0.7)
  if [[ $SMOKE == 1 ]]; then
    NTRAIN=2000
    TRAIN_FLAGS=(--d-model 128 --n-heads 1 --n-layers 2 --mlp-hidden-size 384 --batch 32
                 --measure-steps 5 --log-every 5 --val-every 50 --name smoke-model)
    STAGE1=(--time-budget 15 --warmup 10 --eval-n 0)
    STAGE2=(--time-budget 15 --warmup 10 --suffix-frac 0.7 --eval-n 4)
  elif [[ $EXACT == 1 ]]; then
    NTRAIN=400000
    TRAIN_FLAGS=()
    STAGE1=(--steps 5594 --eval-n 0)
    STAGE2+=(--steps 5141)
  else
    NTRAIN=400000
    TRAIN_FLAGS=()
    STAGE1=(--time-budget 390 --eval-n 0)
    STAGE2+=(--time-budget 415)
  fi

  echo "== 1/4 data (committed test/validation must match the generator)"
  "$PY" tools/train/arith_data.py --check data/arith
  "$PY" tools/train/arith_data.py --out "$OUT/data" --n-train "$NTRAIN"

  if [[ $FAMILY == llada-moe ]]; then
    echo "== 2/4 tokenizer: the small LLaDA model's (models/llada-arith-12m)"
  else
    echo "== 2/4 tokenizer"
    "$PY" tools/train/build_tokenizer.py --train "$OUT/data/train.jsonl" --out "$OUT/tokenizer" --family "$FAMILY"
  fi

  if [[ $FAMILY == llada-moe ]]; then
    DENSE=models/llada-arith-12m
    if [[ $SMOKE == 1 ]]; then  # from scratch: the smoke model's sizes differ from the dense model's
      echo "== 3/4 training (one stage, from scratch: --smoke), export, evaluation"
      MOE=(--time-budget "${BUDGET:-15}" --warmup 10 --suffix-frac 0.7 --eval-n 4)
    else
      echo "== 3/4 training (one stage, upcycled from the dense model), export, evaluation"
      MOE=(--upcycle "$DENSE" --time-budget "${BUDGET:-280}" --lr 1e-3 --warmup 100 --suffix-frac 0.7)
    fi
    "$PY" tools/train/train.py --family llada-moe --data "$OUT/data" --test data/arith/test.jsonl \
        --tokenizer "$DENSE" --out "$OUT" "${TRAIN_FLAGS[@]}" "${MOE[@]}"
  elif [[ $FAMILY == dream ]]; then
    echo "== 3/4 training (one stage, from scratch), export, evaluation"
    if [[ $SMOKE == 1 ]]; then
      DREAM=(--n-kv-heads 1 --time-budget "${BUDGET:-15}" --warmup 10 --suffix-frac 0.6 --eval-n 4)
    else
      DREAM=(--n-kv-heads 1 --time-budget "${BUDGET:-400}" --suffix-frac 0.6)
    fi
    "$PY" tools/train/train.py --family dream --data "$OUT/data" --test data/arith/test.jsonl \
        --tokenizer "$OUT/tokenizer" --out "$OUT" "${TRAIN_FLAGS[@]}" "${DREAM[@]}"
  else
  [[ -n $BUDGET ]] && STAGE1+=(--time-budget "$BUDGET") && STAGE2+=(--time-budget "$BUDGET")
  echo "== 3/4 training stage 1 (from scratch), stage 2 (continued), export, evaluation"
  "$PY" tools/train/train.py --data "$OUT/data" --test data/arith/test.jsonl --tokenizer "$OUT/tokenizer" \
      --out "$OUT/stage1" "${TRAIN_FLAGS[@]}" "${STAGE1[@]}"
  STAGE1_DIR=$(cat "$OUT/stage1/model_dir.txt")
  "$PY" tools/train/train.py --data "$OUT/data" --test data/arith/test.jsonl --tokenizer "$OUT/tokenizer" \
      --out "$OUT" --init "$STAGE1_DIR" --prev-log "$OUT/stage1/train_log.jsonl" "${TRAIN_FLAGS[@]}" "${STAGE2[@]}"
  fi

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
