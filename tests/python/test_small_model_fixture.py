"""The small-model parity fixtures must belong to the committed small models.

tests/data/small_model{,_dream,_moe}/reference_logits.safetensors (tools/train/reference_logits.py) record the
sha256 of the model.safetensors each was computed from; a retrained model needs a new fixture.
"""
import hashlib
import json
import os
from pathlib import Path

import pytest
from safetensors import safe_open

REPO = Path(os.environ.get("FLASHDLLM_SOURCE_DIR", Path(__file__).resolve().parents[2]))


@pytest.mark.parametrize("model_name,fixture_dir,shift", [("llada-arith-12m", "small_model", "0"),
                                                            ("dream-arith-11m", "small_model_dream", "1"),
                                                            ("llada-moe-arith-12m", "small_model_moe", "0")])
def test_fixture_matches_committed_model(model_name, fixture_dir, shift):
    model = REPO / "models" / model_name / "model.safetensors"
    fixture = REPO / "tests" / "data" / fixture_dir / "reference_logits.safetensors"
    with safe_open(str(fixture), framework="numpy") as f:
        meta = f.metadata()
    assert meta["model_sha256"] == hashlib.sha256(model.read_bytes()).hexdigest(), (
        "reference logits were made from another model: rerun "
        f"`python3 tools/train/reference_logits.py models/{model_name} --out {fixture}`")
    cfg = json.loads((model.parent / "config.json").read_text())
    assert int(meta["mask_token_id"]) == cfg["mask_token_id"]
    assert int(meta["eos_token_id"]) == cfg["eos_token_id"]
    assert meta.get("logit_shift", "0") == shift
