#!/usr/bin/env bash
# Device run (session 2026-12-03 b): run9.sh TREE COMMIT PHASE
#   PHASE a: build, GPU tests (gpu_check --tests-only), iteration floors of verify released / commits
#   PHASE b: embedded-model grid (flash vs flash+verify released / commits) on a built tree
set -u
cd "$(dirname "$0")/.."
ROOT=$PWD
want_tree=$1 commit=$2 phase=$3
git add -A > /dev/null 2>&1
have_tree=$(git write-tree 2> /dev/null)
if [[ "$have_tree" == "$want_tree" ]]; then export FLASHDLLM_COMMIT=$commit; else export FLASHDLLM_COMMIT="$commit-dirty"; fi
echo "tree $have_tree (want $want_tree) -> label $FLASHDLLM_COMMIT"
for d in cutlass cudnn-frontend; do
  [[ -d .deps/$d ]] || { mkdir -p .deps && tar -xJf .carry/$d.tar.xz -C .deps; }
done
OUT=${OUT:-$ROOT/out}
mkdir -p "$OUT"
nvidia-smi --query-gpu=name,clocks.max.sm,memory.total --format=csv | tee "$OUT/gpu.txt"
if [[ $phase == a || $phase == ap ]]; then
  OUT="$OUT/check" FLASHDLLM_GPU_CHECK_BUDGET=${CHECK_BUDGET:-330} bash scripts/gpu_check.sh --tests-only > "$OUT/gpu_check.stdout" 2>&1
  echo "gpu_check rc=$?"; tail -n 45 "$OUT/gpu_check.stdout"
  FDLLM_TAG=run9 LOG=/dev/null; source scripts/gpu_env.sh; fdllm_use_carried_deps > /dev/null 2>&1
  for f in ${FLOORS:-8:released 8:commits 4:released 4:commits}; do
    pi=${f%%:*} kept=${f##*:}
    {
      timeout 150 python3 bench/iteration_floor.py --a-bin build-gpu/flashdllm --b-args="--verify --verify-kept $kept" \
        --slots 1,32 --per-iter $pi --repeats 1 --json "$OUT/floor_pi${pi}_$kept.json" > "$OUT/floor_pi${pi}_$kept.md" 2>&1
      echo "floor pi=$pi kept=$kept rc=$?"; grep -E '^\|' "$OUT/floor_pi${pi}_$kept.md"
    }
  done
fi
if [[ $phase != a ]]; then
  FDLLM_TAG=run9 LOG=/dev/null; source scripts/gpu_env.sh; fdllm_use_carried_deps > /dev/null 2>&1
  [[ -x build-gpu/flashdllm ]] || { OUT="$OUT/check" bash scripts/gpu_check.sh --build-only > "$OUT/build.log" 2>&1; echo "build rc=$?"; }
fi
if [[ $phase == b || $phase == bp ]]; then
  timeout 500 build-gpu/flashdllm bench --device cuda -m models/llada-arith-12m --grid .carry/verify_kept_grid.json \
    --out "$OUT/grid" > "$OUT/grid.log" 2>&1
  echo "grid rc=$?"; tail -n 30 "$OUT/grid.log"
fi
if [[ $phase == p || $phase == bp || $phase == ap ]]; then
  mapfile -t P < <(python3 bench/synthetic_prompt_args.py 250 32 | grep .)
  for side in ${PROF_SIDES:-flash released commits}; do
    extra=(); [[ $side != flash ]] && extra=(--verify --verify-kept $side)
    timeout 120 build-gpu/flashdllm generate -m data/llada-8b-instruct --load-format dummy --device cuda --gen-length 512 \
      --json --no-live --cache flash --forced-schedule 4 --slots 32 --profile-ops "${extra[@]}" "${P[@]}" > "$OUT/prof_$side.json" 2> "$OUT/prof_$side.err"
    echo "profile $side rc=$?"
    python3 -c "
import json,sys
d=json.load(open('$OUT/prof_$side.json'))
print('nfe', max(r['nfe'] for r in d['results']), 'passes', max(r['forward_passes'] for r in d['results']))
for e in sorted(d['op_profile'], key=lambda e: -e['seconds'])[:14]: print(f\"{e['op']:32s} {e['calls']:7d} {e['seconds']*1e3:10.1f} ms\")"
  done
fi

