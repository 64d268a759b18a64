"""A request whose logits are not finite fails alone on the server: the embedded model with the
embedding row of one token id set to NaN (bf16 bytes patched in place), a prompt holding that token
next to normal requests. The poisoned request gets a 500 OpenAI error naming the checkpoint and
non-finite logits; the others get exactly their answers alone; a streamed prompt list with the
poisoned prompt ends with the error and [DONE] (the list fails as a whole, as without streaming);
the server keeps serving and /metrics adds up."""

import json
import struct
import threading

import httpx

from server_fixture import MODEL, Server

BAD_TOKEN = "<|reserved_token_8|>"  # id 2060: in the vocabulary, never trained
BAD_ID = 2060
QUESTIONS = ["What is 3 + 4?", "What is 9 - 2?", "What is 6 + 6?"]


def poisoned_copy(tmp_path):
    d = tmp_path / "poisoned"
    d.mkdir()
    for f in MODEL.iterdir():
        if f.name != "model.safetensors":
            (d / f.name).symlink_to(f)
    raw = bytearray((MODEL / "model.safetensors").read_bytes())
    (n,) = struct.unpack("<Q", raw[:8])
    info = json.loads(raw[8:8 + n])["model.transformer.wte.weight"]
    assert info["dtype"] == "BF16", info
    cols = info["shape"][1]
    start = 8 + n + info["data_offsets"][0] + BAD_ID * cols * 2
    raw[start:start + cols * 2] = b"\xc0\x7f" * cols  # bf16 quiet NaN, little endian
    (d / "model.safetensors").write_bytes(bytes(raw))
    return d


def chat(s, q, **kw):
    return httpx.post(s.url("/v1/chat/completions"), json={
        "model": "poisoned", "messages": [{"role": "user", "content": q}], "max_tokens": 32, **kw}, timeout=300)


def test_a_poisoned_request_fails_alone_and_the_server_goes_on(tmp_path):
    d = poisoned_copy(tmp_path)
    s = Server("--slots", "4", "--max-model-len", "256", model=d)
    try:
        alone = {}
        for q in QUESTIONS:
            r = chat(s, q)
            assert r.status_code == 200, r.text
            alone[q] = r.json()["choices"][0]["message"]["content"]
        results = {}

        def post(q):
            results[q] = chat(s, q)

        bad_q = f"What is {BAD_TOKEN} + 4?"
        threads = [threading.Thread(target=post, args=(q,)) for q in QUESTIONS + [bad_q]]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        bad = results[bad_q]
        assert bad.status_code == 500, bad.text
        err = bad.json()["error"]
        assert err["type"] == "server_error" and "non-finite logits" in err["message"], err
        assert "poisoned" in err["message"], err  # the checkpoint is named
        for q in QUESTIONS:
            assert results[q].status_code == 200, results[q].text
            assert results[q].json()["choices"][0]["message"]["content"] == alone[q], q

        # A streamed prompt list with the poisoned prompt: the error, then [DONE]; no usage chunk.
        prompts = [f"<|startoftext|><|start_header_id|>user<|end_header_id|>\n\n{q}<|eot_id|>"
                   "<|start_header_id|>assistant<|end_header_id|>\n\n" for q in (QUESTIONS[0], bad_q)]
        with httpx.stream("POST", s.url("/v1/completions"), json={
                "model": "poisoned", "prompt": prompts, "max_tokens": 32, "stream": True,
                "stream_options": {"include_usage": True}}, timeout=300) as r:
            assert r.status_code == 200
            events = [line[6:] for line in r.iter_lines() if line.startswith("data: ")]
        assert events[-1] == "[DONE]", events
        chunks = [json.loads(e) for e in events[:-1]]
        errors = [c for c in chunks if "error" in c]
        assert len(errors) == 1 and "non-finite logits" in errors[0]["error"]["message"], chunks
        after = chunks[chunks.index(errors[0]) + 1:]
        assert after == [], after  # nothing follows the error but [DONE]

        # Not streamed: one error object for the list; the other prompt is cancelled once the
        # poisoned one failed (or finished first: the two outcomes add up to one).
        before = s.metrics()
        r = httpx.post(s.url("/v1/completions"), json={"model": "poisoned", "prompt": prompts, "max_tokens": 32},
                       timeout=300)
        assert r.status_code == 500 and "non-finite logits" in r.json()["error"]["message"], r.text
        after_m = s.metrics()
        delta = {k: after_m[f"flashdllm_requests_total{{status={k}}}"] - before[f"flashdllm_requests_total{{status={k}}}"]
                 for k in ("stop", "length", "cancelled", "error")}
        assert delta["error"] == 1 and delta["stop"] + delta["length"] + delta["cancelled"] == 1, delta

        r = chat(s, QUESTIONS[1])  # still serving, same answer
        assert r.status_code == 200 and r.json()["choices"][0]["message"]["content"] == alone[QUESTIONS[1]]
        m = s.metrics()
        assert m["flashdllm_slots_busy"] == 0, m
        assert m['flashdllm_requests_total{status=error}'] == 3, m
    finally:
        assert s.stop() == 0
