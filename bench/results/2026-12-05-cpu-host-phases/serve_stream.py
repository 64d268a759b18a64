"""32 concurrent streamed completions against `flashdllm serve` (dummy weights), then the decode
iterations' host phases from /metrics (us per iteration)."""
import concurrent.futures, json, os, sys, time
from pathlib import Path
os.environ["FLASHDLLM_BINARY_DIR"] = sys.argv[1]
sys.path.insert(0, str(Path(sys.argv[3]) / "tests" / "python"))
import httpx
from server_fixture import Server

s = Server("--slots", "32", "--max-model-len", "512", "--max-queue", "64", "--load-format", "dummy",
           model=Path(sys.argv[2]), timeout=120)
def one(i):
    body = {"model": Path(sys.argv[2]).name, "prompt": f"Request {i}: tell me a long story about the number {i}.", "max_tokens": 128,
            "stream": True}
    n = 0
    with httpx.stream("POST", s.url("/v1/completions"), json=body, timeout=600) as r:
        if r.status_code != 200: raise SystemExit(f"{r.status_code}: {r.read()[:300]}")
        for line in r.iter_lines():
            n += line.startswith("data:")
    return n
try:
    t0 = time.time()
    with concurrent.futures.ThreadPoolExecutor(32) as ex:
        chunks = list(ex.map(one, range(32)))
    wall = time.time() - t0
    m = s.metrics()
finally:
    s.stop()
count = m["flashdllm_decode_iteration_seconds_count"]
phases = {k.split("phase=")[1].rstrip("}"): round(1e6 * v / count, 1) for k, v in m.items()
          if k.startswith("flashdllm_host_phase_seconds_total{kind=decode")}
print(json.dumps({"binary": sys.argv[1], "wall_s": round(wall, 1), "sse_chunks": sum(chunks), "decode_iterations": count,
                  "decode_us_per_iteration": phases}))
