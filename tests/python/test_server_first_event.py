"""A streamed request's first event comes when the request is accepted, not with its first stable
text (issue 49 item 8: 12-36 s of silence under load). One slot, held by a long request: a streamed
request queued behind it gets its first chunk (chat: role "assistant" and content ""; completions:
text "") while the long one still runs, i.e. before it is even admitted to a slot, and well before
its first text; the `openai` client parses that stream into the same answer as without streaming."""

import json
import threading
import time

import httpx
import pytest

from server_fixture import MODEL_ID, Server, client
from test_server_api import rendered

QUESTION = "Mason has 96 stamps. He gets 4 more stamps from Mia. How many stamps does he have at the end?"


@pytest.fixture(scope="module")
def server():
    s = Server("--slots", "1", "--max-model-len", "512", "--max-queue", "4")
    yield s
    assert s.stop() == 0, "".join(s.log)


class Blocker:
    """A long non-streamed request that holds the one slot (threshold 1: one token per step)."""

    def __init__(self, server):
        self.done = threading.Event()
        body = {"model": MODEL_ID, "messages": [{"role": "user", "content": QUESTION}], "max_tokens": 400,
                "threshold": 1.0}
        self.thread = threading.Thread(target=self._run, args=(server, body))
        self.thread.start()
        deadline = time.time() + 30
        while server.metrics()["flashdllm_slots_busy"] < 1:  # admitted: the slot is taken
            assert time.time() < deadline and not self.done.is_set(), "the blocker never ran"
            time.sleep(0.02)

    def _run(self, server, body):
        try:
            httpx.post(server.url("/v1/chat/completions"), json=body, timeout=300)
        finally:
            self.done.set()

    def join(self):
        self.thread.join(timeout=300)


def sse_events(response):
    """(arrival time, parsed JSON or "[DONE]") of each `data:` line of an event stream."""
    for line in response.iter_lines():
        if line.startswith("data: "):
            data = line[len("data: "):]
            yield time.monotonic(), data if data == "[DONE]" else json.loads(data)


@pytest.mark.parametrize("chat", [True, False])
def test_the_first_chunk_comes_while_the_request_waits_for_a_slot(server, chat):
    blocker = Blocker(server)
    path = "/v1/chat/completions" if chat else "/v1/completions"
    body = {"model": MODEL_ID, "max_tokens": 32, "stream": True}
    if chat:
        body["messages"] = [{"role": "user", "content": "What is 3 + 4?"}]
    else:
        body["prompt"] = rendered("What is 3 + 4?")
    try:
        sent = time.monotonic()
        with httpx.stream("POST", server.url(path), json=body, timeout=300) as r:
            assert r.status_code == 200
            events = sse_events(r)
            t_first, first = next(events)
            blocked_then = not blocker.done.is_set()
            rest = list(events)
    finally:
        blocker.join()
    assert blocked_then, "the first chunk came only after the slot was free"
    assert t_first - sent < 5, t_first - sent
    choice = first["choices"][0]
    assert choice["index"] == 0 and choice["finish_reason"] is None
    if chat:
        assert first["object"] == "chat.completion.chunk" and choice["delta"] == {"role": "assistant", "content": ""}
        texts = [(t, e["choices"][0]["delta"].get("content")) for t, e in rest if e != "[DONE]" and e["choices"]]
    else:
        assert first["object"] == "text_completion" and choice["text"] == ""
        texts = [(t, e["choices"][0]["text"]) for t, e in rest if e != "[DONE]" and e["choices"]]
    t_text = next(t for t, x in texts if x)  # the first stable text
    assert t_first < t_text
    assert rest[-1][1] == "[DONE]"


def test_the_openai_client_parses_the_early_chunk(server):
    oa = client(server)
    kw = dict(model=MODEL_ID, messages=[{"role": "user", "content": "What is 3 + 4?"}], max_tokens=32)
    want = oa.chat.completions.create(**kw).choices[0].message.content
    blocker = Blocker(server)
    try:
        stream = oa.chat.completions.create(stream=True, **kw)
        chunks = iter(stream)
        first = next(chunks)
        blocked_then = not blocker.done.is_set()
        rest = list(chunks)
    finally:
        blocker.join()
    assert blocked_then, "the first chunk came only after the slot was free"
    assert first.choices[0].delta.role == "assistant" and first.choices[0].delta.content == ""
    text = "".join(c.choices[0].delta.content or "" for c in rest if c.choices)
    assert text == want and rest[-1].choices[0].finish_reason == "stop"
    assert sum(c.choices[0].delta.role == "assistant" for c in rest if c.choices) == 0
