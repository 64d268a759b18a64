"""Issue 49, item 4 (the rest): `logprobs` / `top_logprobs` of the committed tokens and `response_format`,
through the `openai` client and raw HTTP. Before this change every one of these requests was a 400
(logprobs and response_format were refused)."""

import json
import math

import httpx
import openai
import pytest

from server_fixture import MODEL_ID, Server, client

Q = "Mason has 96 stamps. He gets 4 more. How many now?"
NUMBER_PROMPT = "What is 7 * 8? 7 * 8 = "  # the arith model answers it with a number (several when sampled)


@pytest.fixture(scope="module")
def server():
    s = Server("--slots", "4", "--max-model-len", "256")
    yield s
    assert s.stop() == 0, "".join(s.log)


@pytest.fixture(scope="module")
def oa(server):
    return client(server)


def chat(oa, **kw):
    return oa.chat.completions.create(model=MODEL_ID, max_tokens=24, messages=[{"role": "user", "content": Q}], **kw)


def test_chat_logprobs_are_the_answers_tokens_with_their_alternatives(oa):
    r = chat(oa, logprobs=True, top_logprobs=3)
    c = r.choices[0]
    entries = c.logprobs.content
    assert c.message.content and entries
    assert "".join(e.token for e in entries) == c.message.content
    assert r.usage.completion_tokens == len(entries)
    for e in entries:
        assert e.bytes == list(e.token.encode())
        assert e.logprob <= 0
        assert len(e.top_logprobs) == 3
        # Greedy decoding commits each row's most probable token.
        assert e.top_logprobs[0].token == e.token and e.top_logprobs[0].logprob == e.logprob
        lps = [t.logprob for t in e.top_logprobs]
        assert lps == sorted(lps, reverse=True)
        assert sum(math.exp(x) for x in lps) <= 1 + 1e-6
    # logprobs without alternatives, and none when not asked.
    r0 = chat(oa, logprobs=True)
    assert [e.token for e in r0.choices[0].logprobs.content] == [e.token for e in entries]
    assert all(e.top_logprobs == [] for e in r0.choices[0].logprobs.content)
    assert chat(oa).choices[0].logprobs is None


@pytest.mark.parametrize("stop", [None, ["="]])
def test_streamed_logprobs_equal_the_whole_answers(oa, stop):
    # With a stop string the entries wait for the answer's end: none of a token the stop cuts.
    r = chat(oa, logprobs=True, top_logprobs=2, stop=stop)
    whole = r.choices[0]
    assert len(whole.logprobs.content) == r.usage.completion_tokens
    if stop:
        assert whole.finish_reason == "stop" and "=" not in whole.message.content
        # The answer's tokens (usage's count) run to the one holding the stop string's start.
        assert "".join(e.token for e in whole.logprobs.content).startswith(whole.message.content)
    streamed, text = [], ""
    for ch in chat(oa, logprobs=True, top_logprobs=2, stop=stop, stream=True):
        if not ch.choices:
            continue
        text += ch.choices[0].delta.content or ""
        if ch.choices[0].logprobs:
            streamed += ch.choices[0].logprobs.content
    assert text == whole.message.content
    assert [(e.token, e.logprob, [(t.token, t.logprob) for t in e.top_logprobs]) for e in streamed] == \
        [(e.token, e.logprob, [(t.token, t.logprob) for t in e.top_logprobs]) for e in whole.logprobs.content]


def test_completion_logprobs_shape(oa):
    prompt = "Mason has 96 stamps. He gets 4 more. After that, he has 96 + 4 = "
    r = oa.completions.create(model=MODEL_ID, prompt=prompt, max_tokens=8, logprobs=2)
    c = r.choices[0]
    lp = c.logprobs
    assert c.text and "".join(lp.tokens) == c.text
    assert len(lp.tokens) == len(lp.token_logprobs) == len(lp.top_logprobs) == len(lp.text_offset)
    assert lp.text_offset == [sum(len(t) for t in lp.tokens[:i]) for i in range(len(lp.tokens))]
    for tok, val, top in zip(lp.tokens, lp.token_logprobs, lp.top_logprobs):
        assert 1 <= len(top) <= 2 and top[tok] == val == max(top.values())
    streamed = {"tokens": [], "offsets": []}
    for ch in oa.completions.create(model=MODEL_ID, prompt=prompt, max_tokens=8, logprobs=2, stream=True):
        if ch.choices and ch.choices[0].logprobs:
            streamed["tokens"] += ch.choices[0].logprobs.tokens
            streamed["offsets"] += ch.choices[0].logprobs.text_offset
    assert streamed == {"tokens": lp.tokens, "offsets": lp.text_offset}
    assert oa.completions.create(model=MODEL_ID, prompt=prompt, max_tokens=8).choices[0].logprobs is None


def format_call(server, response_format, **kw):
    body = {"model": MODEL_ID, "prompt": NUMBER_PROMPT, "max_tokens": 4, "response_format": response_format, **kw}
    r = httpx.post(server.url("/v1/completions"), json=body, timeout=120)
    assert r.status_code == 200, r.text
    return r.json()["choices"]


def schema(s):
    return {"type": "json_schema", "json_schema": {"name": "answer", "schema": s}}


def test_an_invalid_answer_is_drawn_again_with_a_fresh_seed_until_it_is_valid(server, oa):
    # Attempt a of a choice is seeded seed + a * n: with n = 1, the answers of seeds S, S+1, S+2, S+3,
    # which one request with n = 4 shows. A schema accepting only the first of them that differs
    # from the first attempt must take exactly that many attempts and return that answer.
    for seed in range(1, 30):
        answers = [c.text for c in oa.completions.create(model=MODEL_ID, prompt=NUMBER_PROMPT, max_tokens=4, n=4,
                                                          seed=seed, temperature=1.5).choices]

        def as_int(t):
            try:
                v = json.loads(t)
            except ValueError:
                return None
            return v if isinstance(v, int) and not isinstance(v, bool) else None
        m = next((i for i in range(1, 4) if as_int(answers[i]) is not None and as_int(answers[i]) != as_int(answers[0])),
                 None)
        if m is None:
            continue
        got = format_call(server, schema({"type": "integer", "const": as_int(answers[m])}), seed=seed,
                          temperature=1.5)[0]
        assert got["text"] == answers[m]
        assert got["response_format"] == {"valid": True, "attempts": m + 1}
        # A schema no answer meets: every attempt, then the last answer with the reason.
        got = format_call(server, schema({"const": 123456789}), seed=seed, temperature=1.5)[0]
        assert got["text"] == answers[3]
        assert got["response_format"]["valid"] is False and got["response_format"]["attempts"] == 4
        assert "const" in got["response_format"]["error"] or "not JSON" in got["response_format"]["error"]
        assert got["finish_reason"] in ("stop", "length")
        return
    pytest.fail("no seed in 1..29 gave two different integer answers among four draws")


def test_greedy_answers_get_one_attempt_and_say_why_they_fail(oa):
    r = chat(oa, response_format={"type": "json_object"})
    c = r.choices[0]
    assert c.message.content  # the answer as generated
    assert c.model_extra["response_format"]["valid"] is False
    assert c.model_extra["response_format"]["attempts"] == 1
    assert "not JSON" in c.model_extra["response_format"]["error"]
    # text is the no-op; a valid answer says so.
    assert "response_format" not in (chat(oa, response_format={"type": "text"}).choices[0].model_extra or {})


def test_a_valid_greedy_answer_passes(server):
    (c,) = format_call(server, schema({"type": "integer", "minimum": 0}))
    assert json.loads(c["text"]) >= 0, c
    assert c["response_format"] == {"valid": True, "attempts": 1}


@pytest.mark.parametrize("rf,param", [
    (schema({"type": "object", "properties": {"a": {"type": "string", "pattern": "^x"}}}),
     "response_format.json_schema.schema.properties.a.pattern"),
    (schema({"type": "int"}), "response_format.json_schema.schema.type"),
    (schema({"$ref": "#/$defs/missing"}), "response_format.json_schema.schema.$ref"),
    ({"type": "json_schema", "json_schema": {"schema": {}}}, "response_format.json_schema.name"),
    ({"type": "json_schema"}, "response_format.json_schema"),
    ({"type": "xml"}, "response_format.type"),
])
def test_bad_response_formats_are_400s_naming_the_path(oa, rf, param):
    with pytest.raises(openai.BadRequestError) as e:
        chat(oa, response_format=rf)
    assert e.value.body["param"] == param, e.value.body


def test_response_format_is_not_streamed(oa):
    with pytest.raises(openai.BadRequestError) as e:
        chat(oa, response_format={"type": "json_object"}, stream=True)
    assert e.value.body["param"] == "response_format" and "streamed" in e.value.body["message"]
