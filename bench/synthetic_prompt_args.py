#!/usr/bin/env python3
"""S synthetic prompts of P token ids for the 8B-shape benchmarks (dummy weights: only lengths matter),
printed as `--prompt-ids` / `a,b,...` line pairs for `mapfile` and `flashdllm generate`. Ids lie in
[100, 2000): below every special id of LLaDA-8B and of the small model. Prompt r is distinct for each r.

  mapfile -t pa < <(python3 bench/synthetic_prompt_args.py P S)

Imported, it is also the one place the benches (iteration_floor.py, gpu_gaps.py, pass_breakdown.py)
build their forced-schedule `flashdllm generate` run from.
"""
import os
import sys


def prompt_args(p, s):
    """The `--prompt-ids a,b,...` argument pairs of s prompts of p ids each."""
    out = []
    for r in range(s):
        out += ["--prompt-ids", ",".join(str(100 + (7 * i + 131 * r) % 1900) for i in range(p))]
    return out


def add_workload_args(ap, gen_args_default=""):
    """The options of one forced-schedule generate run (binary, model, slots, prompt, gen, per-iter, extra)."""
    here = os.path.dirname(os.path.abspath(__file__))
    ap.add_argument("--bin", default=os.path.join(here, "..", "build-gpu", "flashdllm"))
    ap.add_argument("--model", default=os.path.join(here, "..", "data", "llada-8b-instruct"))
    ap.add_argument("--slots", type=int, default=32)
    ap.add_argument("--prompt", type=int, default=250)
    ap.add_argument("--gen", type=int, default=128)
    ap.add_argument("--per-iter", type=int, default=4)
    ap.add_argument("--gen-args", default=gen_args_default, help="extra generate arguments")


def generate_command(binary, model, slots, prompt, gen, per_iter, extra=()):
    """`flashdllm generate` at the model's shape with dummy weights on CUDA, Flash-Cache with the forced
    schedule of per_iter commits per iteration, `slots` slots, that many synthetic prompts of `prompt`
    ids, gen_length `gen`, --json; `extra` arguments before the prompts."""
    cmd = [binary, "generate", "-m", model, "--load-format", "dummy", "--device", "cuda", "--gen-length", str(gen),
           "--json", "--no-live", "--cache", "flash", "--forced-schedule", str(per_iter), "--slots", str(slots)]
    return cmd + list(extra) + prompt_args(prompt, slots)


if __name__ == "__main__":
    for line in prompt_args(int(sys.argv[1]), int(sys.argv[2])):
        print(line)
