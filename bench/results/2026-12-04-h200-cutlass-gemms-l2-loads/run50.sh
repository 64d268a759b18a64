#!/bin/bash
# l2load: DRAM bytes and L2 hit rate of the attn_out GEMM at one slot (engine, prefetch off / attn_out loads joined)
# and of the prefetch kernel; and of gemm_bench's repeated attn_out launches at 128 rows.
set -u
# Ran on an NVIDIA H200 on 2026-12-04 (the folder's README.md: commit, command, results). Its inline start (tree
# check, data restore, deps, build, environment) is now bench/device_prelude.sh; as it ran:
# git show 6ce2943:bench/results/2026-12-04-h200-cutlass-gemms-l2-loads/run50.sh
BUILD_BUDGET=300  # seconds for the build (default 200)
source "$(git -C "$(dirname "$0")" rev-parse --show-toplevel)/bench/device_prelude.sh" "$@"
M="gpu__time_duration.sum,dram__bytes_read.sum,lts__t_sector_hit_rate.pct,lts__t_sectors_srcunit_tex_op_read.sum"
prompts=$(python3 bench/synthetic_prompt_args.py 250 1)
for side in off load; do
  if [[ $side == off ]]; then env="FLASHDLLM_L2_PREFETCH_MB=0"; else
    env="FLASHDLLM_L2_PREFETCH_MB=40 FLASHDLLM_L2_PREFETCH_MAX_WEIGHT_MB=40 FLASHDLLM_L2_PREFETCH_MODE=load FLASHDLLM_L2_PREFETCH_JOIN=1"; fi
  env $env timeout 150 ncu --csv --log-file $OUT/ncu_$side.csv --print-kernel-base demangled --metrics $M \
    --cache-control none --clock-control none --kernel-name regex:'nvjet_sm90_tst_96x64|l2_load|wgmma_attention' \
    --launch-skip 300 --launch-count 24 $B/flashdllm generate -m data/llada-8b-instruct --load-format dummy --device cuda \
    --gen-length 128 --json --no-live --cache flash --forced-schedule 4 --slots 1 $prompts > /dev/null 2>/tmp/ncu_err.txt
  echo "engine $side rc=$? at $(( $(date +%s) - t0 )) s"; tail -2 /tmp/ncu_err.txt
done
timeout 120 ncu --csv --log-file $OUT/ncu_bench.csv --print-kernel-base demangled --metrics $M --cache-control none \
  --clock-control none --kernel-name regex:'nvjet' --launch-skip 4 --launch-count 6 \
  $B/bench/gemm_bench --shapes attn_out,down --tokens 128 > /dev/null 2>/tmp/ncu_err.txt
echo "bench rc=$? at $(( $(date +%s) - t0 )) s"; tail -2 /tmp/ncu_err.txt
for f in ncu_off ncu_load ncu_bench; do
  echo "== $f"
  python3 - $OUT/$f.csv <<'PY'
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
    for name, v in ms.items(): print(f"   {name:60s} median {statistics.median(v):14.2f}  min {min(v):14.2f}  max {max(v):14.2f}")
PY
done
echo "elapsed $(( $(date +%s) - t0 )) s"
