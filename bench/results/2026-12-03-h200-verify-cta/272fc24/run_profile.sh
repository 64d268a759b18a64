#!/bin/bash
# In-engine per-op profile of the verify pass at 32 slots (issue 13). Usage: bash .carry/run21.sh <tree> <commit>
set -u
# Ran on an NVIDIA H200 on 2026-12-03 (the folder's README.md: commit, command, results). Its inline start (tree
# check, data restore, deps, build, environment) is now bench/device_prelude.sh; as it ran:
# git show 6ce2943:bench/results/2026-12-03-h200-verify-cta/272fc24/run_profile.sh
PRELUDE_BUILD=0  # this script builds by itself, below
source "$(git -C "$(dirname "$0")" rev-parse --show-toplevel)/bench/device_prelude.sh" "$@"
FLASHDLLM_GPU_CHECK_BUDGET=140 bash scripts/gpu_check.sh --build-only > /tmp/build.log 2>&1 || { tail -30 /tmp/build.log; exit 1; }
echo "built $(( $(date +%s) - t0 )) s"
export LD_LIBRARY_PATH=/tmp/fdllm-deps/usr/lib/x86_64-linux-gnu/openblas-openmp:/tmp/fdllm-deps/usr/lib/x86_64-linux-gnu:${LD_LIBRARY_PATH:-}
mapfile -t P < <(python3 bench/synthetic_prompt_args.py 250 32 | grep .)
timeout 150 build-gpu/flashdllm generate -m data/llada-8b-instruct --load-format dummy --device cuda --gen-length 512 \
  --json --no-live --cache flash --forced-schedule 4 --slots 32 --profile-ops --verify --verify-kept commits "${P[@]}" > /tmp/prof.json 2> $OUT/prof.err
echo "profile rc=$? at $(( $(date +%s) - t0 )) s"
python3 -c "
import json
d=json.load(open('/tmp/prof.json'))
print('nfe', max(r['nfe'] for r in d['results']), 'passes', max(r['forward_passes'] for r in d['results']))
for e in sorted(d['op_profile'], key=lambda e: -e['seconds'])[:14]: print(f\"{e['op']:32s} {e['calls']:7d} {e['seconds']*1e3:10.1f} ms  {e['seconds']*1e6/e['calls']:8.1f} us/call\")" | tee $OUT/op_profile.txt
