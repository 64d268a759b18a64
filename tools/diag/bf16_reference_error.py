"""How far a straightforward bf16 LLaDA forward lands from the fp32 golden logits.

Runs tools/train/model.py (an independent PyTorch LLaDA, reference §A.3) with bf16 weights and
activations on the golden fixture inputs and prints max|Δ|/max|ref| and argmax agreement against
the upstream fp32 logits. This is the yardstick for the CUDA backend's bf16 error: our kernels should
land near these numbers, not near fp32 ones.

    python3 tools/diag/bf16_reference_error.py [golden_dir] [--device cuda]
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np
import torch
from safetensors.numpy import load_file

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "tools" / "train"))
from model import load_checkpoint  # noqa: E402


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("golden", nargs="?", default=str(REPO / "tests/data/golden/g1"))
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    a = ap.parse_args()
    g = Path(a.golden)
    fx = load_file(str(g / "forward.safetensors"))
    for dtype in (torch.float32, torch.bfloat16):
        m = load_checkpoint(g, device=a.device, dtype=dtype).eval()
        for key in ("L7", "L64", "L200", "L333"):
            ids = torch.from_numpy(fx[f"input_ids.{key}"]).to(a.device)[None]
            ref = fx[f"logits.{key}"]
            with torch.no_grad():
                got = m(ids)[0].float().cpu().numpy()
            err = np.abs(got - ref).max() / np.abs(ref).max()
            agree = (got.argmax(-1) == ref.argmax(-1)).mean()
            print(f"{str(dtype):15s} {key:5s} rel max err {err:.3e}  argmax agreement {agree:.4f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
