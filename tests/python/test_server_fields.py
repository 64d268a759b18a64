"""Issue 49, item 4 (its cheap parts): OpenAI fields that clients send, through the `openai` client.
`GET /v1/models/{id}`; roles `developer` (as system) and `tool`; assistant `content: null`; tools,
metadata, store, service_tier, top_p and top_k accepted where they change nothing and refused,
naming the field, where they would. Every test here failed before (each of these was a 400 or 404)."""

import httpx
import openai
import pytest

from server_fixture import MODEL_ID, Server, client

Q = "Mason has 96 stamps. He gets 4 more. How many now?"


@pytest.fixture(scope="module")
def server():
    s = Server("--slots", "4", "--max-model-len", "256")
    yield s
    assert s.stop() == 0, "".join(s.log)


@pytest.fixture(scope="module")
def oa(server):
    return client(server)


def ask(oa, messages, **kw):
    r = oa.chat.completions.create(model=MODEL_ID, max_tokens=48, messages=messages, **kw)
    return r.choices[0].message.content, r.usage.prompt_tokens


def test_a_model_by_id(server, oa):
    m = oa.models.retrieve(MODEL_ID)
    assert m.id == MODEL_ID and m.object == "model" and m.owned_by == "flashdllm"
    with pytest.raises(openai.NotFoundError) as e:
        oa.models.retrieve("gpt-9")
    assert e.value.body["code"] == "model_not_found" and e.value.body["param"] == "model"
    assert "gpt-9" in e.value.body["message"]
    r = httpx.get(server.url("/v1/models/some/org-model"))
    assert r.status_code == 404 and r.json()["error"]["code"] == "model_not_found"


def test_developer_is_the_system_role(oa):
    plain = ask(oa, [{"role": "system", "content": "Answer briefly."}, {"role": "user", "content": Q}])
    assert ask(oa, [{"role": "developer", "content": "Answer briefly."}, {"role": "user", "content": Q}]) == plain


def test_tool_messages_and_an_assistant_turn_without_content(oa):
    text, tokens = ask(oa, [{"role": "user", "content": Q},
                            {"role": "assistant", "content": None, "tool_calls": []},
                            {"role": "tool", "tool_call_id": "call_1", "content": "100"},
                            {"role": "user", "content": Q}])
    assert isinstance(text, str) and tokens > 0
    # The assistant's empty turn is rendered as an empty message, as content "".
    assert ask(oa, [{"role": "user", "content": Q}, {"role": "assistant", "content": None},
                    {"role": "user", "content": Q}]) == \
        ask(oa, [{"role": "user", "content": Q}, {"role": "assistant", "content": ""}, {"role": "user", "content": Q}])


def test_fields_that_change_nothing_are_accepted_and_change_nothing(oa):
    plain = ask(oa, [{"role": "user", "content": Q}])
    assert ask(oa, [{"role": "user", "content": Q}], tools=[], tool_choice="none", metadata={"run": "a"},
               store=False, service_tier="auto", top_p=1, extra_body={"top_k": -1}) == plain
    assert ask(oa, [{"role": "user", "content": Q}], tool_choice="auto", store=True, service_tier="default",
               parallel_tool_calls=False, extra_body={"top_k": 0}) == plain
    r = oa.completions.create(model=MODEL_ID, prompt="2 + 2 =", max_tokens=8,
                              extra_body={"top_k": -1, "metadata": {"a": "b"}, "store": False})
    assert r.choices[0].finish_reason in ("stop", "length")


TOOL = {"type": "function", "function": {"name": "add", "parameters": {"type": "object", "properties": {}}}}


@pytest.mark.parametrize("kw,param,needle", [
    ({"top_p": 0.95}, "top_p", "apply to Dream's sampler only"),
    ({"extra_body": {"top_k": 40}}, "top_k", "apply to Dream's sampler only"),
    ({"extra_body": {"top_k": -2}}, "top_k", "top_k must be in [0,"),
    ({"tools": [TOOL]}, "tools", "no tool calling"),
    ({"tool_choice": "required"}, "tool_choice", "no tool calling"),
    ({"service_tier": "flex"}, "service_tier", "'auto' or 'default'"),
    ({"metadata": "x"}, "metadata", "must be an object"),
    ({"messages": [{"role": "assistant", "content": None, "tool_calls": [{"id": "c", "type": "function",
                                                                           "function": {"name": "add", "arguments": "{}"}}]}]},
     "messages[0].tool_calls", "no tools"),
    ({"messages": [{"role": "user", "content": None}]}, "messages[0].content", "string or an array"),
    ({"messages": [{"role": "user", "content": "x", "tool_call_id": "c"}]}, "messages[0].tool_call_id", "tool message"),
])
def test_values_that_would_change_the_output_are_refused_naming_the_field(oa, kw, param, needle):
    kw = dict(kw)
    messages = kw.pop("messages", [{"role": "user", "content": Q}])
    with pytest.raises(openai.BadRequestError) as e:
        oa.chat.completions.create(model=MODEL_ID, max_tokens=8, messages=messages, **kw)
    assert e.value.body["param"] == param, e.value.body
    assert needle in e.value.body["message"], e.value.body
