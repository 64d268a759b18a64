"""`flashdllm serve` against careless and hostile HTTP clients, past what test_server_connections.py
covers: heads with bare LF line ends, `Expect: 100-continue` from HTTP/1.0 clients or with the body
already sent, and a flood of connections past --max-connections where the open-file limit is just
what the server asked for.

Before: a bare-LF head was waited for until --read-timeout and answered 408; a 100 Continue was sent
to HTTP/1.0 clients (RFC 9110, 10.1.1 forbids it) and ahead of every response whose request carried
the header; a flood past the limit exhausted the descriptors (refused connections linger 1 s while
their 503 is sent), and a new client then waited seconds in the listen backlog for its 503."""

import json
import resource
import socket
import time

import httpx
import pytest

from server_fixture import MODEL_ID, Server
from test_server_connections import connect, read_all


def chat_body() -> bytes:
    return json.dumps({"model": MODEL_ID, "messages": [{"role": "user", "content": "12+7="}],
                       "max_tokens": 8}).encode()


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


def test_no_100_continue_to_an_http10_client_or_after_the_body(server):
    body = chat_body()
    head = b"POST /v1/chat/completions HTTP/1.%d\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n" \
           b"Content-Length: %d\r\nExpect: 100-continue\r\n\r\n"
    # The body sent with the head (HTTP/1.0 and 1.1): the answer is the response, no 100 before it.
    for minor in (0, 1):
        s = connect(server.port)
        s.sendall(head % (minor, len(body)) + body)
        out = read_all(s) if minor == 0 else s.recv(65536)
        s.close()
        assert out.startswith(b"HTTP/1.1 200"), (minor, out[:200])
    # HTTP/1.0 waiting with its body: no 100 (the client sends it after a while anyway).
    s = connect(server.port)
    s.sendall(head % (0, len(body)))
    s.settimeout(0.7)
    with pytest.raises(socket.timeout):
        s.recv(65536)
    s.sendall(body)
    out = read_all(s)
    s.close()
    assert out.startswith(b"HTTP/1.1 200") and b"100 Continue" not in out, out[:200]


def test_a_flood_past_the_connection_limit_gets_503_at_once():
    """The open-file limit at what a server of --max-connections N used to ask for (N + 128): N held
    connections, then 3 N more that never read their 503."""
    n = 200
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (n + 128, hard))  # inherited by the server
    try:
        srv = Server("--slots", "1", "--max-model-len", "256", "--max-connections", str(n),
                     "--keep-alive-timeout", "30", "--read-timeout", "30")
    finally:
        resource.setrlimit(resource.RLIMIT_NOFILE, (max(soft, min(hard, 8192)), hard))
    held = []
    try:
        try:
            time.sleep(0.5)
            for _ in range(4 * n):
                held.append(connect(srv.port))
            time.sleep(1.3)  # the refusals' 1 s linger is over (during it, a flood's excess is closed unanswered)
            s = connect(srv.port)
            t0 = time.time()
            s.sendall(b"GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
            s.settimeout(10)
            first = s.recv(65536)
            dt = time.time() - t0
            s.close()
            assert first.startswith(b"HTTP/1.1 503") and dt < 1.0, (first[:100], dt)
        finally:
            for h in held:
                h.close()
        time.sleep(0.3)  # closed on the server's side too: served again
        assert httpx.get(srv.url("/health"), timeout=10).status_code == 200
    finally:
        assert srv.stop() == 0, "".join(srv.log)


def test_buffered_bodies_have_a_memory_budget():
    # Before: every connection could hold a whole --max-body-mb body being read (8192 x 8 MiB by
    # default); 40 clients each sending 8 MiB minus one byte raised RSS by 345 MB. Now the declared
    # bodies read or served at once have a budget (--max-buffered-body-mb): past it a body gets 503.
    s = Server("--slots", "2", "--max-model-len", "256", "--max-body-mb", "1", "--max-buffered-body-mb", "2",
               "--read-timeout", "20")
    try:
        mib = 1 << 20
        head = (b"POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
                b"Content-Length: %d\r\n\r\n" % mib)
        holders = []
        for _ in range(2):  # two 1 MiB bodies on their way fill the 2 MiB budget
            c = connect(s.port)
            c.sendall(head + b" " * 1000)
            holders.append(c)
        time.sleep(0.3)
        third = connect(s.port)
        third.sendall(head + b" " * 1000)
        third.settimeout(10)
        out = third.recv(65536)
        third.close()
        assert out.startswith(b"HTTP/1.1 503"), out[:300]
        assert b"--max-buffered-body-mb" in out and b"server_busy" in out, out[:600]
        assert httpx.get(s.url("/health"), timeout=10).status_code == 200  # a request without a body passes
        holders.pop().close()  # its reservation is released: a body fits again
        time.sleep(0.3)
        r = httpx.post(s.url("/v1/chat/completions"), timeout=60, content=chat_body(),
                       headers={"Content-Type": "application/json"})
        assert r.status_code == 200, r.text
        for c in holders:
            c.close()
    finally:
        assert s.stop() == 0, "".join(s.log)


def test_the_body_budget_must_hold_a_largest_body():
    import subprocess
    from server_fixture import BUILD, MODEL
    p = subprocess.run([str(BUILD / "flashdllm"), "serve", "-m", str(MODEL), "--port", "0", "--max-body-mb", "8",
                        "--max-buffered-body-mb", "4"], capture_output=True, text=True, timeout=60)
    assert p.returncode != 0
    assert "--max-buffered-body-mb 4 must be at least --max-body-mb 8" in p.stderr, p.stderr
