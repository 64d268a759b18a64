"""Golden routing decisions of LLaDA2's MoE router, recorded by running the upstream gate class itself.

The oracle is `LLaDA2MoeGate` (sigmoid scores, a per-expert selection bias, group-limited top-k:
a group's score is the sum of its two best keys, the best `topk_group` groups hold the candidates,
weights = the chosen experts' sigmoid scores renormalised and times `routed_scaling_factor`) from a
copy of inclusionAI/LLaDA2.0-mini's `modeling_llada2_moe.py`. The file is not in this repository:
pass its path. Only that class is executed (its source is taken out of the module with `ast`, so the
module's transformers imports are not needed); its gating weight is set to the identity, so the
router logits it sees are the recorded `logits` rows.

    python tools/diag/llada2_router_golden.py --upstream /path/to/modeling_llada2_moe.py \
        --provenance "<repo> @ <commit>, <path> (blob <sha>)" --out tests/data/golden/llada2_router.json

Needs torch (CPU is enough: the gate runs in fp32). The C++ test that reads the output:
tests/model/test_moe_routing.cpp.
"""

from __future__ import annotations

import argparse
import ast
import json
import math
import platform
from datetime import date
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

# (name, experts, top_k, n_group, topk_group, scaling, bias std, logit std, rows)
CASES = [
    ("llada2_mini_shape", 256, 8, 8, 4, 2.5, 0.05, 1.5, 24),
    ("small_groups", 32, 4, 4, 2, 2.5, 0.1, 2.0, 16),
    ("one_group", 16, 3, 1, 1, 1.0, 0.2, 1.0, 12),
    ("top1_no_renorm", 12, 1, 3, 2, 1.5, 0.1, 1.0, 10),
]


def upstream_gate_class(path: Path):
    tree = ast.parse(path.read_text(encoding="utf-8"))
    cls = next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "LLaDA2MoeGate")
    scope = {"torch": torch, "nn": nn, "F": F, "math": math}
    exec(compile(ast.Module(body=[cls], type_ignores=[]), str(path), "exec"), scope)
    return scope["LLaDA2MoeGate"]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--upstream", type=Path, required=True, help="modeling_llada2_moe.py (a copy of the hub file)")
    ap.add_argument("--provenance", required=True, help="where that file came from (repo, commit, path, blob)")
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--seed", type=int, default=48)
    a = ap.parse_args()
    Gate = upstream_gate_class(a.upstream)
    rng = np.random.default_rng(a.seed)
    cases = []
    for name, E, k, n_group, topk_group, scaling, bias_std, logit_std, T in CASES:
        cfg = SimpleNamespace(num_experts_per_tok=k, num_experts=E, n_group=n_group, topk_group=topk_group,
                              hidden_size=E, routed_scaling_factor=scaling)
        gate = Gate(cfg)
        bias = rng.normal(0, bias_std, E).astype(np.float32)
        logits = rng.normal(0, logit_std, (T, E)).astype(np.float32)
        with torch.no_grad():
            gate.weight.copy_(torch.eye(E))
            gate.expert_bias.copy_(torch.from_numpy(bias))
            idx, weight, seen = gate(torch.from_numpy(logits))
        assert torch.equal(seen, torch.from_numpy(logits)), "the identity gating weight changed the logits"
        # Selection keys of the chosen experts, to check the test's tie margin.
        keys = torch.sigmoid(torch.from_numpy(logits)) + torch.from_numpy(bias)
        cases.append({"name": name, "n_experts": E, "top_k": k, "n_group": n_group, "topk_group": topk_group,
                      "routed_scaling_factor": scaling, "expert_bias": bias.tolist(), "logits": logits.tolist(),
                      "expert_ids": idx.tolist(), "expert_weights": weight.tolist(),
                      "min_key_gap": float(torch.diff(torch.sort(keys, dim=1).values, dim=1).min())})
    a.out.write_text(json.dumps({
        "what": "LLaDA2MoeGate (upstream) routing on random logits: sigmoid, expert bias, group-limited top-k",
        "upstream": a.provenance, "generator": "tools/diag/llada2_router_golden.py", "seed": a.seed,
        "torch": torch.__version__, "python": platform.python_version(), "date": date.today().isoformat(),
        "note": "expert_ids in the gate's output order (torch.topk of the masked keys: descending key)",
        "cases": cases}, indent=1) + "\n")


if __name__ == "__main__":
    main()
