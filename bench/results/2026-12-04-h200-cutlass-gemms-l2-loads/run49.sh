#!/bin/bash
# l2load: ncu kernel durations at one slot, prefetch off vs attn_out loads joined (kernels serialised by ncu:
# the attn_out GEMM then runs after its prefetch has finished).
set -u
# Ran on an NVIDIA H200 on 2026-12-04 (the folder's README.md: commit, command, results). Its inline start (tree
# check, data restore, deps, build, environment) is now bench/device_prelude.sh; as it ran:
# git show 6ce2943:bench/results/2026-12-04-h200-cutlass-gemms-l2-loads/run49.sh
BUILD_BUDGET=300  # seconds for the build (default 200)
source "$(git -C "$(dirname "$0")" rev-parse --show-toplevel)/bench/device_prelude.sh" "$@"
FLASHDLLM_L2_PREFETCH_MB=0 timeout 150 python3 bench/pass_breakdown.py --bin $B/flashdllm --slots 1 --gen-args "" \
  --skip 3000 --count 700 --json $OUT/pb_off > $OUT/pb_off.md 2>&1; echo "off rc=$? at $(( $(date +%s) - t0 )) s"
FLASHDLLM_L2_PREFETCH_MB=40 FLASHDLLM_L2_PREFETCH_MAX_WEIGHT_MB=40 FLASHDLLM_L2_PREFETCH_MODE=load FLASHDLLM_L2_PREFETCH_JOIN=1 \
  timeout 150 python3 bench/pass_breakdown.py --bin $B/flashdllm --slots 1 --gen-args "" \
  --skip 3000 --count 700 --json $OUT/pb_load > $OUT/pb_load.md 2>&1; echo "load rc=$? at $(( $(date +%s) - t0 )) s"
for f in pb_off pb_load; do
  echo "== $f"; head -20 $OUT/$f.md
  xz -dc $OUT/$f.ncu.csv.xz 2>/dev/null | head -0
  python3 - $OUT/$f.ncu.csv <<'PY'
import csv, sys, collections, statistics
rows = list(csv.reader(l for l in open(sys.argv[1]) if l.startswith('"')))
hdr = rows[0]; ki = hdr.index("Kernel Name"); vi = hdr.index("Metric Value"); gi = hdr.index("Grid Size") if "Grid Size" in hdr else None
d = collections.defaultdict(list)
for r in rows[1:]:
    try: d[(r[ki][:70], r[gi] if gi is not None else "")].append(float(r[vi].replace(",", "")))
    except Exception: pass
for (k, g), v in sorted(d.items(), key=lambda kv: -sum(kv[1]))[:14]:
    print(f"{len(v):4d} x median {statistics.median(v)/1e3:8.2f} us  {g:>14}  {k}")
PY
done
echo "elapsed $(( $(date +%s) - t0 )) s"
