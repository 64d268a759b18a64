"""The small-model parity fixture must belong to the committed default model.

tests/data/small_model/reference_logits.safetensors (tools/train/reference_logits.py) records the
sha256 of the model.safetensors it was computed from; a retrained model needs a new fixture.
"""
import hashlib
import json
import os
from pathlib import Path

from safetensors import safe_open

REPO = Path(os.environ.get("FLASHDLLM_SOURCE_DIR", Path(__file__).resolve().parents[2]))


def test_fixture_matches_committed_model():
    model = REPO / "models" / "llada-arith-12m" / "model.safetensors"
    fixture = REPO / "tests" / "data" / "small_model" / "reference_logits.safetensors"
    with safe_open(str(fixture), framework="numpy") as f:
        meta = f.metadata()
    assert meta["model_sha256"] == hashlib.sha256(model.read_bytes()).hexdigest(), (
        "reference logits were made from another model: rerun "
        "`python3 tools/train/reference_logits.py models/llada-arith-12m --out " + str(fixture) + "`")
    cfg = json.loads((model.parent / "config.json").read_text())
    assert int(meta["mask_token_id"]) == cfg["mask_token_id"]
    assert int(meta["eos_token_id"]) == cfg["eos_token_id"]
