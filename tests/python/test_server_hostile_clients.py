"""`flashdllm serve` against careless and hostile HTTP clients, past what test_server_connections.py
covers: heads with bare LF line ends.

Before: a bare-LF head was waited for until --read-timeout and answered 408."""

import socket
import time

import httpx
import pytest

from server_fixture import Server
from test_server_connections import connect, read_all


@pytest.fixture(scope="module")
def server():
    s = Server("--slots", "2", "--max-model-len", "256", "--read-timeout", "5")
    yield s
    assert s.stop() == 0, "".join(s.log)


@pytest.mark.parametrize("head", [b"GET /health HTTP/1.1\nHost: 127.0.0.1\n\n",
                                  b"GET /health HTTP/1.1\r\nHost: 127.0.0.1\n\r\n",
                                  b"GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\n\n"])
def test_a_head_with_bare_lf_line_ends_is_answered_at_once(server, head):
    s = connect(server.port)
    t0 = time.time()
    s.sendall(head)
    s.settimeout(10)
    out = s.recv(65536)  # the connection stays open after a 400 (cpp-httplib keeps it alive)
    dt = time.time() - t0
    s.close()
    assert out.startswith(b"HTTP/1.1 "), out[:200]
    assert not out.startswith(b"HTTP/1.1 408") and dt < 2.0, (out[:200], dt)
    assert httpx.get(server.url("/health"), timeout=10).status_code == 200
