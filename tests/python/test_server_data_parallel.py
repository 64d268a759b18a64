"""`flashdllm serve --data-parallel 2`: two CPU replicas of the model behind one endpoint and one
queue (issue 14 #2). Concurrent requests spread over both replicas (per-replica /metrics), every
answer equals the same request's answer served alone, slots and capacity add up over the replicas,
and SIGTERM drains both."""

import threading

import httpx

from server_fixture import MODEL_ID, Server

QUESTIONS = [f"Tom has {3 + i} apples and buys {7 * i + 2} more. How many apples does he have?" for i in range(6)]


def chat(s: Server, q: str) -> httpx.Response:
    return httpx.post(s.url("/v1/chat/completions"), json={
        "model": MODEL_ID, "messages": [{"role": "user", "content": q}], "max_tokens": 48}, timeout=300)


def test_two_replicas_share_the_queue_and_answer_as_one():
    s = Server("--data-parallel", "2", "--slots", "2", "--max-model-len", "512", "--max-queue", "4")
    try:
        m = s.metrics()
        assert m["flashdllm_replicas"] == 2 and m["flashdllm_slots"] == 4, m
        assert "2 data-parallel replicas" in "".join(s.log) and "4 slots" in "".join(s.log), s.log
        alone = {}
        for q in QUESTIONS:  # one at a time: the least loaded replica is always replica 0
            r = chat(s, q)
            assert r.status_code == 200, r.text
            alone[q] = r.json()["choices"][0]["message"]["content"]
        before = s.metrics()
        assert before['flashdllm_replica_iterations_total{replica=1}'] == 0, before

        results = {}

        def post(q):
            results[q] = chat(s, q)

        threads = [threading.Thread(target=post, args=(q,)) for q in QUESTIONS]  # 4 slots + 2 queued
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        for q in QUESTIONS:
            assert results[q].status_code == 200, results[q].text
            assert results[q].json()["choices"][0]["message"]["content"] == alone[q], q
        after = s.metrics()
        assert after['flashdllm_replica_iterations_total{replica=1}'] > 0, "replica 1 never ran: " + str(after)
        assert after['flashdllm_replica_iterations_total{replica=0}'] > before['flashdllm_replica_iterations_total{replica=0}']
        assert after["flashdllm_slots_busy"] == 0 and after["flashdllm_queue_depth"] == 0
        assert after['flashdllm_requests_total{status=stop}'] + after['flashdllm_requests_total{status=length}'] == 12

        # More prompts in one request than 4 slots + 4 queued can ever hold: 400 naming the total.
        r = httpx.post(s.url("/v1/completions"), json={"model": MODEL_ID, "prompt": [[5, 6, 7]] * 9,
                                                        "max_tokens": 8}, timeout=60)
        assert r.status_code == 400 and "(4 slots + 4 queued)" in r.json()["error"]["message"], r.text
    finally:
        assert s.stop() == 0, "".join(s.log)
