"""Starts and stops `flashdllm serve` on loopback for the server tests (a free port, the embedded model)."""

import os
import re
import signal
import subprocess
import time
from pathlib import Path

import httpx

REPO = Path(os.environ.get("FLASHDLLM_SOURCE_DIR", Path(__file__).resolve().parents[2]))
BUILD = Path(os.environ.get("FLASHDLLM_BINARY_DIR", REPO / "build"))
MODEL = REPO / "models" / "llada-arith-12m"
MODEL_ID = "llada-arith-12m"


class Server:
    """A `flashdllm serve` process: base_url, url(path), pid, rss_kb(), stop()."""

    def __init__(self, *args: str, timeout: float = 60.0, model: Path = MODEL):
        exe = BUILD / "flashdllm"
        assert exe.exists(), f"{exe} is not built"
        env = dict(os.environ, OMP_NUM_THREADS="1", OMP_WAIT_POLICY="passive")
        self.proc = subprocess.Popen([str(exe), "serve", "-m", str(model), "--port", "0", "--threads", "1", *args],
                                     stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
        self.log = []
        deadline = time.time() + timeout
        port = None
        while time.time() < deadline:
            line = self.proc.stderr.readline()
            if not line:
                if self.proc.poll() is not None:
                    raise RuntimeError("the server exited: " + "".join(self.log) + self.proc.stderr.read())
                continue
            self.log.append(line)
            m = re.search(r"serving '.*' on http://127\.0\.0\.1:(\d+)", line)
            if m:
                port = int(m.group(1))
                break
        assert port, "no startup line: " + "".join(self.log)
        self.port = port
        self.base_url = f"http://127.0.0.1:{port}"
        while time.time() < deadline:
            try:
                if httpx.get(self.url("/health"), timeout=2).status_code == 200:
                    break
            except httpx.HTTPError:
                time.sleep(0.05)

    def url(self, path: str) -> str:
        return self.base_url + path

    def rss_kb(self, field: str = "VmRSS") -> int:
        """Resident memory now (VmHWM: the peak so far), from /proc/PID/status."""
        with open(f"/proc/{self.proc.pid}/status") as f:
            for line in f:
                if line.startswith(field + ":"):
                    return int(line.split()[1])
        return -1

    def peak_rss_kb(self) -> int:
        return self.rss_kb("VmHWM")

    def metrics(self) -> dict:
        """/metrics as {name{labels}: value} (parsed by prometheus_client, the format's reference parser)."""
        from prometheus_client.parser import text_string_to_metric_families
        text = httpx.get(self.url("/metrics"), timeout=10).text
        out = {}
        for fam in text_string_to_metric_families(text):
            for s in fam.samples:
                key = s.name + ("{" + ",".join(f"{k}={v}" for k, v in sorted(s.labels.items())) + "}" if s.labels else "")
                out[key] = s.value
        return out

    def stop(self, sig=signal.SIGTERM, timeout: float = 60.0) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
        try:
            self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self.log.append(self.proc.stderr.read())
        return self.proc.returncode


def client(server: Server):
    """An `openai` client for the server, without retries (a 429 must surface)."""
    import openai
    return openai.OpenAI(base_url=server.url("/v1"), api_key="unused", max_retries=0, timeout=120)
