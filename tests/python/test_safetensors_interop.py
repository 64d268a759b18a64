"""flashdllm's safetensors reader and writer against the Hugging Face `safetensors` package.

Direction 1 (HF writes, we read): BF16, F16 and F32 checkpoints (sharded with an index, and a
single file) are written with the `safetensors` package; flashdllm reads them through the driver
$FLASHDLLM_BINARY_DIR/flashdllm-ckpt-info (apps/make_checkpoint), which prints what
Checkpoint::open sees (--json) and dumps each tensor's mapped bytes (--dump). Names, dtypes,
shapes, shard files and bytes must be identical.
numpy has no bfloat16, so BF16 tensors are handed to the package's own serializer
(`safetensors.serialize_file` with a TensorSpec of dtype "bfloat16" over uint16 bit patterns) —
the same call safetensors.torch uses, so the files are exactly what HF writes; no torch or
ml_dtypes needed.

Direction 2 (we write, HF reads): $FLASHDLLM_BINARY_DIR/flashdllm-make-checkpoint writes a sharded
checkpoint; the HF package (whose Rust core checks the layout: offsets, no holes) must parse every
shard and see the same names, dtypes, shapes and bytes as our reader.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import numpy as np
import pytest
import safetensors
import safetensors.numpy

REPO = Path(os.environ.get("FLASHDLLM_SOURCE_DIR") or Path(__file__).resolve().parents[2])
GOLDEN_CONFIG = Path(os.environ.get("FLASHDLLM_GOLDEN_DIR") or REPO / "tests" / "data" / "golden" / "g1") / "config.json"


def tool(name: str) -> Path:
    bdir = os.environ.get("FLASHDLLM_BINARY_DIR")
    assert bdir, "FLASHDLLM_BINARY_DIR is not set: run through ctest or export it to the build directory"
    path = Path(bdir) / name
    assert path.is_file() and os.access(path, os.X_OK), f"{path} is missing: build target {name}"
    return path


def ckpt_info(ckpt: Path, dump: Path, *extra: str) -> dict:
    proc = subprocess.run([str(tool("flashdllm-ckpt-info")), str(ckpt), "--json", "--dump", str(dump), *extra],
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


def bf16_bits(x: np.ndarray) -> np.ndarray:
    """float32 -> bfloat16 bit patterns (uint16), round to nearest even (finite inputs)."""
    u = np.asarray(x, dtype=np.float32).view(np.uint32)
    return np.asarray((u + 0x7FFF + ((u >> 16) & 1)) >> 16, dtype=np.uint16)


def hf_save_bf16(path: Path, tensors: dict[str, np.ndarray], metadata: dict[str, str] | None = None) -> None:
    """Writes uint16 bit-pattern arrays as BF16 with the HF serializer."""
    specs = {}
    for name, a in tensors.items():
        assert a.dtype == np.uint16 and a.flags.c_contiguous
        if hasattr(safetensors, "TensorSpec"):  # safetensors >= 0.6
            specs[name] = safetensors.TensorSpec(dtype="bfloat16", shape=list(a.shape), data_ptr=a.ctypes.data,
                                                 data_len=a.nbytes)
        else:
            specs[name] = {"dtype": "bfloat16", "shape": list(a.shape), "data": a.tobytes()}
    safetensors.serialize_file(specs, str(path), metadata=metadata)


def write_index(ckpt: Path, placement: dict[str, str], total_size: int) -> None:
    (ckpt / "model.safetensors.index.json").write_text(
        json.dumps({"metadata": {"total_size": total_size}, "weight_map": placement}, indent=2))


def check_same(info: dict, dump: Path, expected: dict[str, tuple[str, np.ndarray, str]]) -> None:
    """expected: name -> (dtype string, array whose bytes are the tensor, file name)."""
    got = {t["name"]: t for t in info["tensors"]}
    assert sorted(got) == sorted(expected)
    assert info["total_bytes"] == sum(a.nbytes for _, a, _ in expected.values())
    for name, (dtype, arr, file) in expected.items():
        t = got[name]
        assert t["dtype"] == dtype, name
        assert t["shape"] == list(arr.shape), name
        assert t["nbytes"] == arr.nbytes, name
        assert t["file"] == file, name
        assert (dump / f"{name}.bin").read_bytes() == arr.tobytes(), name


SHAPES = {
    "model.embed.weight": (37, 16),
    "model.blocks.0.proj.weight": (16, 16),
    "model.blocks.0.norm.weight": (16,),
    "model.blocks.1.odd.weight": (3, 5, 7),
    "model.scalar": (),
    "model.empty": (0, 4),
    "lm_head.weight": (37, 16),
}


def tensors(seed: int) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    return {n: np.asarray(rng.standard_normal(s) * 3, dtype=np.float32) for n, s in SHAPES.items()}


def test_reads_hf_bf16_sharded(tmp_path: Path) -> None:
    ckpt = tmp_path / "ckpt"
    ckpt.mkdir()
    arrays = {n: bf16_bits(a) for n, a in tensors(1).items()}
    arrays["model.blocks.0.proj.weight"][0, :4] = [0x7F80, 0xFF80, 0x7FC1, 0x0001]  # inf, -inf, NaN, subnormal
    names = sorted(arrays)
    placement = {n: f"model-0000{1 + i % 2}-of-00002.safetensors" for i, n in enumerate(names)}
    for shard in sorted(set(placement.values())):
        hf_save_bf16(ckpt / shard, {n: arrays[n] for n in names if placement[n] == shard}, {"format": "pt"})
    write_index(ckpt, placement, sum(a.nbytes for a in arrays.values()))
    info = ckpt_info(ckpt, tmp_path / "dump")
    assert info["sharded"] is True
    check_same(info, tmp_path / "dump", {n: ("BF16", arrays[n], placement[n]) for n in names})


def test_reads_hf_f16_sharded(tmp_path: Path) -> None:
    ckpt = tmp_path / "ckpt"
    ckpt.mkdir()
    arrays = {n: a.astype(np.float16) for n, a in tensors(2).items()}
    names = sorted(arrays)
    placement = {n: f"part-{i % 3}.safetensors" for i, n in enumerate(names)}
    for shard in sorted(set(placement.values())):
        safetensors.numpy.save_file({n: arrays[n] for n in names if placement[n] == shard}, str(ckpt / shard),
                                    metadata={"format": "pt"})
    write_index(ckpt, placement, sum(a.nbytes for a in arrays.values()))
    info = ckpt_info(ckpt, tmp_path / "dump")
    check_same(info, tmp_path / "dump", {n: ("F16", arrays[n], placement[n]) for n in names})


def test_reads_hf_single_file_mixed_dtypes(tmp_path: Path) -> None:
    ckpt = tmp_path / "ckpt"
    ckpt.mkdir()
    arrays = dict(tensors(3))
    arrays["ids"] = np.arange(-5, 6, dtype=np.int64)
    arrays["mask"] = np.array([[True, False], [False, True]])
    arrays["f64"] = np.linspace(-1, 1, 9)
    safetensors.numpy.save_file(arrays, str(ckpt / "model.safetensors"), metadata={"format": "np"})
    info = ckpt_info(ckpt, tmp_path / "dump")
    assert info["sharded"] is False
    dt = {np.dtype(np.float32): "F32", np.dtype(np.int64): "I64", np.dtype(np.bool_): "BOOL",
          np.dtype(np.float64): "F64"}
    check_same(info, tmp_path / "dump", {n: (dt[a.dtype], a, "model.safetensors") for n, a in arrays.items()})


def test_rejects_truncated_hf_file_naming_file_and_tensor(tmp_path: Path) -> None:
    ckpt = tmp_path / "ckpt"
    ckpt.mkdir()
    path = ckpt / "model.safetensors"
    safetensors.numpy.save_file({"a": np.ones(8, np.float32), "z": np.ones(8, np.float32)}, str(path))
    with open(path, "r+b") as f:
        f.truncate(path.stat().st_size - 4)
    proc = subprocess.run([str(tool("flashdllm-ckpt-info")), str(ckpt)], capture_output=True, text=True, timeout=60)
    assert proc.returncode != 0
    assert str(path) in proc.stderr and "'z'" in proc.stderr, proc.stderr


@pytest.mark.parametrize("dtype", ["bf16", "f16"])
def test_hf_reads_our_sharded_checkpoint(tmp_path: Path, dtype: str) -> None:
    cfg = json.loads(GOLDEN_CONFIG.read_text())
    d, f, v = cfg["d_model"], cfg["mlp_hidden_size"], cfg["embedding_size"]
    names = ["model.transformer.wte.weight", "model.transformer.ln_f.weight", "model.transformer.ff_out.weight"]
    for i in range(cfg["n_layers"]):
        names += [f"model.transformer.blocks.{i}.{n}.weight" for n in
                  ("attn_norm", "q_proj", "k_proj", "v_proj", "attn_out", "ff_norm", "ff_proj", "up_proj", "ff_out")]
    placement = {n: f"model-0000{1 + (i * 7) % 4}-of-00004.safetensors" for i, n in enumerate(sorted(names))}
    params = 2 * v * d + cfg["n_layers"] * (4 * d * d + 3 * d * f + 2 * d) + d
    write_index(tmp_path, placement, 2 * params)
    out = tmp_path / "ckpt"
    proc = subprocess.run([str(tool("flashdllm-make-checkpoint")), "--config", str(GOLDEN_CONFIG),
                           "--index", str(tmp_path / "model.safetensors.index.json"), "--out", str(out),
                           "--dtype", dtype, "--seed", "9"], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    ours = ckpt_info(out, tmp_path / "dump", "--config", str(out / "config.json"))
    assert ours["validated"] is True

    seen = {}
    for shard in sorted(set(placement.values())):
        blob = (out / shard).read_bytes()
        for name, t in safetensors.deserialize(blob):  # HF's Rust parser validates the layout
            seen[name] = (shard, t)
        with safetensors.safe_open(str(out / shard), framework="numpy") as fh:
            assert fh.metadata() == {"format": "pt"}
    assert sorted(seen) == sorted(names)
    by_name = {t["name"]: t for t in ours["tensors"]}
    st_dtype = {"bf16": "BF16", "f16": "F16"}[dtype]
    for name, (shard, t) in seen.items():
        assert shard == placement[name] == by_name[name]["file"]
        assert t["dtype"] == st_dtype == by_name[name]["dtype"], t["dtype"]
        assert list(t["shape"]) == by_name[name]["shape"]
        data = bytes(t["data"])
        assert data == (tmp_path / "dump" / f"{name}.bin").read_bytes(), name
        bits = np.frombuffer(data, dtype=np.uint16)
        vals = ((bits.astype(np.uint32) << 16).view(np.float32) if dtype == "bf16"
                else bits.view(np.float16).astype(np.float32))
        if len(t["shape"]) == 1:
            assert np.all(vals == 1.0), name
        else:
            assert abs(float(vals.std()) - 0.02) < 0.02 * 0.05, name
            assert abs(float(vals.mean())) < 0.002, name
