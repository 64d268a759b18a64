#!/bin/bash
# Fused QKV epilogue chunks: build, qkv twin tests over every tile (FLASHDLLM_QKV=fused:<tile>),
# memcheck + racecheck of the small qkv tests, qkv_bench (every tile x walk, bare GEMM, unfused),
# iterations default vs forced tiles.
# Usage (repo root): bash .carry/run10.sh <expected tree hash> <commit> [floor tiles, comma-separated]
set -u
# Ran on an NVIDIA H200 on 2026-12-03 (the folder's README.md: commit, command, results). Its inline start (tree
# check, data restore, deps, build, environment) is now bench/device_prelude.sh; as it ran:
# git show 6ce2943:bench/results/2026-12-03-h200-qkv-helper/run.sh
PRELUDE_BUILD=0  # this script builds by itself, below
source "$(git -C "$(dirname "$0")" rev-parse --show-toplevel)/bench/device_prelude.sh" "$@"
FLASHDLLM_GPU_CHECK_BUDGET=120 bash scripts/gpu_check.sh --build-only > $OUT/build.log 2>&1 || { tail -30 $OUT/build.log; exit 1; }
cmake --build build-gpu -j16 --target qkv_bench >> $OUT/build.log 2>&1 || { tail -30 $OUT/build.log; exit 1; }
echo "built $(( $(date +%s) - t0 )) s"
rc=0
for t in test_cuda_ops test_cuda_forward; do
  timeout 150 $B/tests/$t > $OUT/$t.log 2>&1; r=$?; echo "$t rc=$r $(grep -E '^\[  (PASSED|FAILED) ' $OUT/$t.log | tr '\n' ' ')"
  [[ $r == 0 ]] || { rc=1; grep -B3 -A12 "Failure\|FAILED" $OUT/$t.log | head -60; }
done
grep -E "note" $OUT/test_cuda_ops.log | sort | uniq -c | head
CS=$(command -v compute-sanitizer || ls /usr/local/cuda/bin/compute-sanitizer)
timeout 120 $CS --tool memcheck $B/tests/test_cuda_ops --gtest_filter='*Qkv*small' 2>&1 | grep -E "ERROR SUMMARY|PASSED|FAILED" | tr '\n' ' '; echo
timeout 150 $CS --tool racecheck --racecheck-report hazard $B/tests/test_cuda_ops --gtest_filter='*QkvRopeStoreMatchesCpu*small' > $OUT/racecheck.log 2>&1; grep -E "RACECHECK SUMMARY|PASSED|FAILED" $OUT/racecheck.log | tr '\n' ' '; echo; grep -m3 -B2 -A12 "Error: Race\|Warning: Race\|Hazard" $OUT/racecheck.log | head -60
echo "checks done $(( $(date +%s) - t0 )) s"
for sr in ${STORE_ROWS:-shuffled}; do
timeout 200 $B/bench/qkv_bench --slots ${SLOTS:-1,2,4,8,16,32,64} --prefill-tokens ${PREFILL:-256,1024,2048,4096,8192} --iters 10 \
  --store-rows $sr --json $OUT/qkv_bench_$sr.json > $OUT/qkv_bench_$sr.txt 2>&1; echo "qkv_bench $sr rc=$?"
python3 - $OUT/qkv_bench_$sr.json <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
for r in d["results"]:
    us = r["us"]; g = us["gemm"]; best = {}
    for k, v in us.items():
        if k.startswith("fused ") and k != "fused auto":
            t = k.split()[1]; best[t] = min(best.get(t, 1e9), v)
        if k.startswith("cutlass"): best[k.replace("cutlass gemm ", "ref ")] = v
    print(r["shape"], r["T"], "gemm %.1f unf %.3f" % (g, us["unfused"] / g),
          " ".join("%s %.3f" % (t, v / g) for t, v in best.items()), "auto %.3f" % (us["fused auto"] / g))
PY
done
echo "bench done $(( $(date +%s) - t0 )) s"
if [[ -n "${NCU:-}" ]]; then  # the agreement phase at T = 4096: cuBLAS, every fused config, the refs (1 launch each)
  NC=$(command -v ncu || ls /usr/local/cuda/bin/ncu)
  timeout 240 $NC --csv --page raw -k regex:"device_kernel|nvjet" --launch-count ${NCU_COUNT:-26} --section SpeedOfLight \
    --metrics gpu__time_duration.sum,lts__t_sectors_op_write.sum,lts__t_sectors_op_read.sum,dram__bytes_write.sum,dram__bytes_read.sum,smsp__inst_executed.sum,sm__pipe_tensor_op_gmma_cycles_active.avg.pct_of_peak_sustained_active,smsp__average_warps_issue_stalled_barrier_per_issue_active.ratio,smsp__average_warps_issue_stalled_long_scoreboard_per_issue_active.ratio,smsp__average_warps_issue_stalled_wait_per_issue_active.ratio,launch__shared_mem_per_block_dynamic \
    $B/bench/qkv_bench --slots 32 --prefill-tokens 4096 --iters 1 --warmup 0 > $OUT/ncu.csv 2> $OUT/ncu.err; echo "ncu rc=$?"
  python3 - $OUT/ncu.csv <<'PY'
import csv, sys, re
rows = list(csv.reader(open(sys.argv[1])))
start = next(i for i, r in enumerate(rows) if r and r[0] == "ID")
hdr = rows[start]; data = rows[start + 2:]
want = ["gpu__time_duration.sum", "sm__throughput.avg.pct_of_peak_sustained_elapsed", "sm__pipe_tensor_op_gmma_cycles_active.avg.pct_of_peak_sustained_active",
        "lts__t_sectors_op_write.sum", "dram__bytes_write.sum", "dram__bytes_read.sum", "smsp__inst_executed.sum",
        "smsp__average_warps_issue_stalled_barrier_per_issue_active.ratio", "smsp__average_warps_issue_stalled_long_scoreboard_per_issue_active.ratio",
        "smsp__average_warps_issue_stalled_wait_per_issue_active.ratio", "launch__shared_mem_per_block_dynamic"]
idx = [hdr.index(w) if w in hdr else -1 for w in want]
print("kernel | " + " | ".join(w.split(".")[0].replace("smsp__average_warps_issue_stalled_", "stall_") for w in want))
for r in data:
    name = r[hdr.index("Kernel Name")]
    m = re.search(r"RopeStoreEpilogue<(\d+), (\d+), (\d+)>", name)
    h = re.search(r"RopeHelperEpilogue<(\d+), (\d+)>", name)
    short = ("fused %sx%s c%s" % m.groups()) if m else ("fused %sx%s w" % h.groups()) if h else ("nvjet" if "nvjet" in name else ("ref nosmem" if "NoSmem" in name else ("ref tma" if "Sm90TmaWarpSpecialized" in name or "CollectiveEpilogue" in name else name[:60])))
    st = re.search(r"Cooperative<(\d+)", name)
    short += " st%s" % (st.group(1) if st else "?")
    print(short, "|", " | ".join(r[i] if i >= 0 else "-" for i in idx))
PY
  grep -m3 -i "error\|warn" $OUT/ncu.err
fi
for tile in $(echo "${3:-}" | tr ',' ' '); do
  timeout 100 python3 bench/iteration_floor.py --a-bin $B/flashdllm --b-env FLASHDLLM_QKV=fused:$tile --slots 1,16,32 \
    --repeats 1 --json $OUT/floor_default_vs_fused_$tile.json > $OUT/floor_$tile.log 2>&1; echo "floor $tile rc=$?"; tail -6 $OUT/floor_$tile.log
done
echo "elapsed $(( $(date +%s) - t0 )) s"
exit $rc
