#!/bin/bash
# l2load (loads kept): ncu of the load kernel and the attn_out GEMM after it; then 1-slot floor variants.
set -u
# Ran on an NVIDIA H200 on 2026-12-04 (the folder's README.md: commit, command, results). Its inline start (tree
# check, data restore, deps, build, environment) is now bench/device_prelude.sh; as it ran:
# git show 6ce2943:bench/results/2026-12-04-h200-cutlass-gemms-l2-loads/run51.sh
BUILD_BUDGET=300  # seconds for the build (default 200)
source "$(git -C "$(dirname "$0")" rev-parse --show-toplevel)/bench/device_prelude.sh" "$@"
FLASHDLLM_L2_PREFETCH_MODE=load FLASHDLLM_L2_PREFETCH_JOIN=1 timeout 100 $B/tests/test_cuda_forward --gtest_color=no \
  --gtest_filter='*refetch*' > /tmp/f.txt 2>&1; echo "forward prefetch test (load, join) rc=$?"
M="gpu__time_duration.sum,dram__bytes_read.sum,lts__t_sector_hit_rate.pct,lts__t_sectors_srcunit_tex_op_read.sum"
prompts=$(python3 bench/synthetic_prompt_args.py 250 1)
FLASHDLLM_L2_PREFETCH_MB=40 FLASHDLLM_L2_PREFETCH_MAX_WEIGHT_MB=40 FLASHDLLM_L2_PREFETCH_MODE=load FLASHDLLM_L2_PREFETCH_JOIN=1 \
  timeout 150 ncu --csv --log-file $OUT/ncu_load.csv --print-kernel-base demangled --metrics $M \
    --cache-control none --clock-control none --kernel-name regex:'nvjet_sm90_tst_96x64|l2_load' \
    --launch-skip 200 --launch-count 12 $B/flashdllm generate -m data/llada-8b-instruct --load-format dummy --device cuda \
    --gen-length 128 --json --no-live --cache flash --forced-schedule 4 --slots 1 $prompts > /dev/null 2>/tmp/ncu_err.txt
echo "ncu rc=$? at $(( $(date +%s) - t0 )) s"; tail -2 /tmp/ncu_err.txt
python3 - $OUT/ncu_load.csv <<'PY'
import csv, sys, collections, statistics
rows = list(csv.reader(l for l in open(sys.argv[1]) if l.startswith('"')))
h = rows[0]; ii = h.index("ID"); ki = h.index("Kernel Name"); mi = h.index("Metric Name"); ui = h.index("Metric Unit"); vi = h.index("Metric Value")
per = collections.OrderedDict()
for r in rows[1:]:
    per.setdefault((r[ii], r[ki][:48]), {})[r[mi]] = (r[vi], r[ui])
agg = collections.defaultdict(lambda: collections.defaultdict(list))
for (i, k), m in per.items():
    for name, (v, u) in m.items():
        try: agg[k][name + " (" + u + ")"].append(float(v.replace(",", "")))
        except ValueError: pass
for k, ms in agg.items():
    print(k, "x", len(next(iter(ms.values()))))
    for name, v in ms.items(): print(f"   {name:60s} median {statistics.median(v):14.2f}")
PY
run() {  # name, B env...
  local name=$1; shift
  local benv=(); for e in "$@"; do benv+=(--b-env "$e"); done
  timeout 120 python3 bench/iteration_floor.py --a-bin $B/flashdllm --a-env FLASHDLLM_L2_PREFETCH_MB=0 "${benv[@]}" \
    --slots 1 --per-iter 4 --repeats 2 --json $OUT/floor_$name.json > $OUT/floor_$name.md 2>&1
  echo "$name: rc=$? at $(( $(date +%s) - t0 )) s"; grep -E "^\| 1 " $OUT/floor_$name.md
}
run attn_load_join FLASHDLLM_L2_PREFETCH_MB=40 FLASHDLLM_L2_PREFETCH_MAX_WEIGHT_MB=40 FLASHDLLM_L2_PREFETCH_MODE=load FLASHDLLM_L2_PREFETCH_JOIN=1
run attn_loadlast_join FLASHDLLM_L2_PREFETCH_MB=40 FLASHDLLM_L2_PREFETCH_MAX_WEIGHT_MB=40 FLASHDLLM_L2_PREFETCH_MODE=loadlast FLASHDLLM_L2_PREFETCH_JOIN=1
run attn_load_nojoin FLASHDLLM_L2_PREFETCH_MB=40 FLASHDLLM_L2_PREFETCH_MAX_WEIGHT_MB=40 FLASHDLLM_L2_PREFETCH_MODE=load
run all16_load_join FLASHDLLM_L2_PREFETCH_MB=16 FLASHDLLM_L2_PREFETCH_MODE=load FLASHDLLM_L2_PREFETCH_JOIN=1
echo "elapsed $(( $(date +%s) - t0 )) s"
