#!/bin/bash
# Trains the small Dream-layout model on one GPU (tools/train/run.sh --family dream: data, Qwen2-format
# tokenizer, one training stage of BUDGET seconds, export, eval on 200 test problems, reference
# logits) inside one device call, and packs the run (without its training data) into 15 MiB parts for
# the device tool's 16 MiB-per-file limit. Rejoin: cat dream.tgz.part-* | tar -xz
# Usage (device tool): bash bench/results/2026-12-07-dream-model/run.sh [BUDGET seconds, default 360]
set -u
cd "$(git -C "$(dirname "$0")" rev-parse --show-toplevel)" || exit 1
git ls-files -d -z | xargs -0 -r git checkout -- 2>/dev/null
echo "commit $(git rev-parse --short HEAD), missing tracked files: $(git ls-files -d | wc -l), $(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)"
timeout "${TRAIN_LIMIT:-560}" tools/train/run.sh /tmp/dream --family dream --budget "${1:-360}" > "$OUT/run.log" 2>&1
echo "train rc=$?"
grep -E "^==|accuracy|eval|finished|Error|error" "$OUT/run.log" | tail -25
tar -C /tmp -czf /tmp/dream.tgz --exclude=dream/data dream && split -b 15m /tmp/dream.tgz "$OUT/dream.tgz.part-"
ls -la "$OUT"
