#!/bin/bash
# Host phases of a Flash-Cache step on the CPU backend: a 1-layer model at the 8B vocabulary (the LLaDA-8B
# config with d_model 128, 1 head, 1 layer, MLP 256; dummy weights), 32 slots, 250-token prompts, gen 512,
# forced 4 commits per iteration, flash and flash + verify (--verify-kept commits), one run each.
# Usage: bash run.sh <label> <flashdllm binary>...   (prints one JSON line per binary and mode)
set -eu
here=$(cd "$(dirname "$0")" && pwd); repo=$(cd "$here/../../.." && pwd); export REPO=$repo
model=$(mktemp -d); trap 'rm -rf "$model"' EXIT
python3 - "$repo/data/llada-8b-instruct/config.json" "$model/config.json" <<'PY'
import json, sys
c = json.load(open(sys.argv[1]))
c.update(d_model=128, n_heads=1, n_kv_heads=1, n_layers=1, mlp_hidden_size=256)
json.dump(c, open(sys.argv[2], "w"), indent=1)
PY
label=$1; shift
for bin in "$@"; do
  for mode in flash verify; do
    extra=(); [[ $mode == verify ]] && extra=(--verify --verify-kept commits)
    python3 - "$bin" "$model" "$label" "$mode" "${extra[@]}" <<'PY'
import json, subprocess, sys
binary, model, label, mode, extra = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4], sys.argv[5:]
sys.path.insert(0, __import__("os").path.join(__import__("os").environ["REPO"], "bench"))
import synthetic_prompt_args as s
cmd = s.generate_command(binary, model, 32, 250, 512, 4, extra)
cmd[cmd.index("cuda")] = "cpu"
d = json.loads(subprocess.run(cmd, capture_output=True, text=True, check=True).stdout)
dec = d["iterations"]["decode"]
print(json.dumps({"label": label, "binary": binary, "mode": mode, "decode_count": dec["count"],
                  "decode_median_ms": round(dec["median_ms"], 2),
                  "host_phase_us": {k: round(1e3 * v, 1) for k, v in dec["host_phase_ms"].items()}}))
PY
  done
done
