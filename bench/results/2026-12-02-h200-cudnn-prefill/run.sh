#!/bin/bash
# Rerun at a clean commit (build only, no GPU check): prefill attention, admissions, steady iterations.
# default) and steady iterations (default vs route on every tile) with the linear raw-importance kernel.
set -u
cd "$(dirname "$0")/.."
[[ -f .deps/cudnn-frontend/include/cudnn_frontend.h ]] || tar -xJf .carry/cudnn-frontend.tar.xz
git rev-parse HEAD; git status --short | head -3
bash scripts/gpu_check.sh --build-only > /tmp/build.log 2>&1; tail -3 /tmp/build.log
rc=$?
rm -f $OUT/batch_invariance.json
export LD_LIBRARY_PATH=/tmp/fdllm-deps/usr/lib/x86_64-linux-gnu/openblas-openmp:/tmp/fdllm-deps/usr/lib/x86_64-linux-gnu:${LD_LIBRARY_PATH:-}
B=build-gpu
echo "== prefill attention" | tee $OUT/tables.md
python3 bench/attention_vs_sdpa.py --bench $B/bench/attention_bench --seqlens 1024,2048 --batches 8 \
  --variants m64n64,cudnn --json $OUT/prefill_attention.json > /tmp/prefill.md 2>&1
cat /tmp/prefill.md >> $OUT/tables.md; tail -12 /tmp/prefill.md
echo "== admissions: 64 requests x P-token prompts, 32 slots, gen 256, forced 8/iteration"
printf "route\tprompt\trun\tadmissions\tadmission_min_ms\tadmission_max_ms\tdecode_median_ms\twall_s\n" > $OUT/admission_ab.tsv
for P in 1000 2000; do
  prompts=$(python3 bench/synthetic_prompt_args.py $P 64)
  for rep in 1 2; do for side in off prefill; do
    t0=$(date +%s.%N)
    FLASHDLLM_CUDNN_ATTENTION=$side $B/flashdllm generate -m data/llada-8b-instruct --load-format dummy --device cuda \
      --gen-length 256 --json --no-live --cache flash --forced-schedule 8 --slots 32 $prompts > /tmp/r.json 2>/tmp/r.err ||
      { tail -5 /tmp/r.err; continue; }
    t1=$(date +%s.%N)
    python3 -c "
import json,sys; d=json.load(open('/tmp/r.json')); a=d['iterations']['admission']
print('$side',$P,$rep,a['count'],round(a['min_ms'],1),round(a['max_ms'],1),round(d['iterations']['decode']['median_ms'],2),round($t1-$t0,1),sep='\t')" >> $OUT/admission_ab.tsv
  done; done
done
cat $OUT/admission_ab.tsv
echo "== steady iterations: A default (prefill route), B FLASHDLLM_CUDNN_ATTENTION=all"
python3 bench/iteration_floor.py --a-bin $B/flashdllm --b-env FLASHDLLM_CUDNN_ATTENTION=all --slots 1,32 \
  --repeats 1 --json $OUT/floor_cudnn_all.json > /tmp/floor.md 2>&1
cat /tmp/floor.md >> $OUT/tables.md; tail -8 /tmp/floor.md
exit $rc
