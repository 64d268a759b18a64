#!/usr/bin/env python3
"""S synthetic prompts of P token ids for the 8B-shape benchmarks (dummy weights: only lengths matter),
printed as `--prompt-ids` / `a,b,...` line pairs for `mapfile` and `flashdllm generate`. Ids lie in
[100, 2000): below every special id of LLaDA-8B and of the small model. Prompt r is distinct for each r.

  mapfile -t pa < <(python3 bench/synthetic_prompt_args.py P S)
"""
import sys

p, s = int(sys.argv[1]), int(sys.argv[2])
for r in range(s):
    print("--prompt-ids")
    print(",".join(str(100 + (7 * i + 131 * r) % 1900) for i in range(p)))
