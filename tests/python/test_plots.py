"""tools/plots/plot_bench.py: the three PNG figures from a fabricated `flashdllm bench` summary
(non-empty, valid PNG, the size asked for), curve grouping (Flash-Verify curves run along gamma,
one per threshold), skipping and --require, bad input; and the plot step of a real tiny
`flashdllm bench --plot` run when the binary and the small model exist."""
import json
import os
import struct
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(os.environ.get("FLASHDLLM_SOURCE_DIR", Path(__file__).resolve().parents[2]))
SCRIPT = REPO / "tools" / "plots" / "plot_bench.py"
sys.path.insert(0, str(SCRIPT.parent))
import plot_bench  # noqa: E402

PNGS = ["fig5_accuracy_vs_throughput.png", "fig4_throughput_memory_vs_batch.png", "table1_speedup.png"]


def metrics(tps, tpi, mem=64 << 20):
    vals = sorted(tps)
    med = vals[len(vals) // 2]
    def m(values):
        s = sorted(values)
        return {"median": s[len(s) // 2], "min": s[0], "max": s[-1], "values": values}
    return {"tokens_per_second": m(tps), "tokens_per_second_released": m([2 * t for t in tps]),
            "tokens_per_iteration": m([tpi]), "mean_nfe": m([128 / tpi]), "peak_memory_bytes": m([mem]),
            "seconds": m([100 / med])}


def point(pid, method, swept, acc, tps, tpi, batch=16, timing=False, table1=False, speedup=None, task="arith",
          mem=64 << 20):
    return {"id": pid, "group": "g", "label": method, "method": method, "task": task, "timing_only": timing,
            "batch": batch, "repeats": len(tps), "swept": swept, "options": {"gen_length": 128},
            "n": 50 if not timing else batch, "accuracy": None if timing else acc,
            "metrics": metrics(tps, tpi, mem), "peak_memory_kind": "host peak RSS", "table1": table1,
            "speedup": speedup, "speedup_released": None if speedup is None else 0.9 * speedup}


def fabricated():
    pts = []
    i = 0
    for method, base in [("none", 40.0), ("dual", 100.0)]:
        for eps in [0.7, 0.8, 0.9]:
            i += 1
            pts.append(point(f"p{i:02}", method, {"threshold": eps}, 0.06 + eps / 100, [base * (1.7 - eps)], 8 - eps,
                             table1=eps == 0.9, speedup=base / 40.0))
    for track in [2, 4]:
        for eps in [0.7, 0.8, 0.9]:
            i += 1
            pts.append(point(f"p{i:02}", "flash", {"threshold": eps, "track_num": track}, 0.05 + eps / 50,
                             [30.0 - 10 * eps, 31.0 - 10 * eps, 29.0], 4 - eps, table1=(eps, track) == (0.9, 4),
                             speedup=0.8))
    for eps in [0.7, 0.9]:
        for gamma in [0.7, 0.8, 0.9]:
            i += 1
            pts.append(point(f"p{i:02}", "flash+verify", {"threshold": eps, "gamma": gamma}, 0.06, [28.0 + gamma], 4.5 - gamma,
                             table1=(eps, gamma) == (0.9, 0.8), speedup=0.75))
    pts.append(point("p90", "none", {"threshold": 0.9}, 0.2, [10.0], 5, task="gsm8k", table1=True, speedup=1.0))
    pts.append(point("p91", "flash", {"threshold": 0.9}, 0.2, [30.0], 5, task="gsm8k", table1=True, speedup=3.0))
    for method in ["none", "dual", "flash", "flash+verify"]:
        for b in [1, 4, 16]:
            i += 1
            pts.append(point(f"p{i:02}", method, {}, None, [10.0 * b ** 0.5, 11.0 * b ** 0.5, 9.0 * b ** 0.5], 3,
                             batch=b, timing=True, mem=(60 + 4 * b) << 20))
    return {"tool": "flashdllm bench", "command": "flashdllm bench --grid g.json", "commit": "abc123", "date": "2026-11-30T00:00:00Z",
            "model": "/models/llada-arith-12m", "hardware": {"backend": "cpu (1 threads)", "cpu_model": "x"}, "points": pts}


def png_size(path):
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n", path
    width, height = struct.unpack(">II", data[16:24])
    return width, height


def test_plots_from_fabricated_summary(tmp_path):
    (tmp_path / "summary.json").write_text(json.dumps(fabricated()))
    assert plot_bench.main([str(tmp_path / "summary.json"), "--out", str(tmp_path / "png"), "--require",
                            "fig5,fig4,table1"]) == 0
    for name in PNGS:
        p = tmp_path / "png" / name
        assert p.stat().st_size > 10_000, name
        w, h = png_size(p)
        assert w >= 900 and h >= 500, (name, w, h)
    # Figure 5 has one row per task (arith, gsm8k): twice the height of one row.
    assert png_size(tmp_path / "png" / PNGS[0])[1] > 1.8 * png_size(tmp_path / "png" / PNGS[1])[1]
    # The released definition draws too (a different figure).
    assert plot_bench.main([str(tmp_path / "summary.json"), "--out", str(tmp_path / "rel"), "--released"]) == 0
    assert (tmp_path / "rel" / PNGS[2]).read_bytes() != (tmp_path / "png" / PNGS[2]).read_bytes()


def test_curves_follow_gamma_for_verify_and_threshold_otherwise():
    pts = [p for p in fabricated()["points"] if p["task"] == "arith" and not p["timing_only"]]
    c = plot_bench.curves(pts)
    keys = {ident: (key, [p["id"] for p in cp]) for ident, (key, cp) in c.items()}
    assert keys[("none", (), None)][0] == "threshold"
    assert len(keys[("none", (), None)][1]) == 3
    flash = [k for k in keys if k[0] == "flash"]
    assert flash == [("flash", (("track_num", 2),), None), ("flash", (("track_num", 4),), None)]
    assert keys[flash[0]][0] == "threshold"
    verify = [k for k in keys if k[0] == "flash+verify"]
    assert verify == [("flash+verify", (("threshold", 0.7),), None), ("flash+verify", (("threshold", 0.9),), None)]
    assert all(keys[k][0] == "gamma" and len(keys[k][1]) == 3 for k in verify)
    assert plot_bench.curve_label(verify[1]) == "Flash-Cache + Flash-Verify (ε=0.9)"


def test_missing_points_are_skipped_unless_required(tmp_path, capsys):
    s = fabricated()
    s["points"] = [p for p in s["points"] if not p["timing_only"]]
    for p in s["points"]:
        p["batch"] = 16
    (tmp_path / "s.json").write_text(json.dumps(s))
    assert plot_bench.main([str(tmp_path / "s.json")]) == 0
    assert "fig4: no points" in capsys.readouterr().out
    assert not (tmp_path / PNGS[1]).exists()
    assert (tmp_path / PNGS[0]).exists()
    assert plot_bench.main([str(tmp_path / "s.json"), "--require", "fig4"]) == 1
    assert plot_bench.main([str(tmp_path / "s.json"), "--require", "fig9"]) == 2
    (tmp_path / "bad.json").write_text("{\"task\": \"arith\"}")
    assert plot_bench.main([str(tmp_path / "bad.json")]) == 2
    assert "not a flashdllm bench summary" in capsys.readouterr().err


def test_bench_cli_plot_step(tmp_path):
    binary = Path(os.environ.get("FLASHDLLM_BINARY_DIR", REPO / "build")) / "flashdllm"
    model = REPO / "models" / "llada-arith-12m" / "model.safetensors"
    if not binary.exists() or not model.exists():
        pytest.skip(f"needs {binary} and {model}")
    out = tmp_path / "run"
    env = dict(os.environ, OMP_NUM_THREADS="1", FLASHDLLM_COMMIT="test")
    p = subprocess.run([str(binary), "bench", "--threads", "1", "--limit", "2", "--gen-length", "32", "--block-length",
                        "16", "--threshold", "0.9", "--methods", "none,flash", "--batches", "1,2", "--repeats", "1",
                        "--warmup", "0", "--out", str(out), "--plot", "--python", sys.executable],
                       capture_output=True, text=True, timeout=300, env=env)
    assert p.returncode == 0, p.stdout + p.stderr
    for name in PNGS:  # the accuracy points at two batch sizes also feed the batch figure
        assert (out / name).stat().st_size > 10_000, name
        png_size(out / name)
