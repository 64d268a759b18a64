"""Issue 49, item 5: web page safety and the API key. A page on another site must not reach the
server through a visitor's browser: by DNS rebinding (a foreign Host, 421), or by a cross-origin
`text/plain` POST that needs no CORS preflight (403 before any generation); CORS headers only for
the origins named by --cors-origin; --api-key guards the /v1/ routes. Every test here failed before
(the flags did not exist, the foreign Host and Origin were served)."""

import httpx
import openai
import pytest

from server_fixture import MODEL_ID, Server

KEY = "sk-test-0123456789"
APP = "https://app.example"
BODY = '{"model": "%s", "messages": [{"role": "user", "content": "2 + 2?"}], "max_tokens": 8}' % MODEL_ID


@pytest.fixture(scope="module")
def server():
    s = Server("--slots", "2", "--max-model-len", "256", "--api-key", KEY, "--cors-origin", APP,
               "--allowed-host", "good.example")
    yield s
    assert s.stop() == 0, "".join(s.log)


def post(server, headers, body=BODY, auth=True):
    h = {"Content-Type": "application/json", **headers}
    if auth:
        h["Authorization"] = "Bearer " + KEY
    return httpx.post(server.url("/v1/chat/completions"), content=body, headers=h, timeout=60)


def finished(server) -> float:
    m = server.metrics()
    return sum(v for k, v in m.items() if k.startswith("flashdllm_requests_total"))


def test_the_api_key_guards_v1_only(server):
    ok = openai.OpenAI(base_url=server.url("/v1"), api_key=KEY, max_retries=0)
    assert ok.chat.completions.create(model=MODEL_ID, max_tokens=8,
                                      messages=[{"role": "user", "content": "2 + 2?"}]).choices[0].finish_reason
    assert ok.models.retrieve(MODEL_ID).id == MODEL_ID
    bad = openai.OpenAI(base_url=server.url("/v1"), api_key="sk-wrong", max_retries=0)
    with pytest.raises(openai.AuthenticationError) as e:
        bad.models.list()
    assert e.value.body["code"] == "invalid_api_key"
    r = httpx.get(server.url("/v1/models"))
    assert r.status_code == 401 and "Authorization: Bearer" in r.json()["error"]["message"]
    for path in ("/health", "/metrics", "/"):
        assert httpx.get(server.url(path)).status_code == 200, path


@pytest.mark.parametrize("host,status", [
    ("evil.example", 421), ("evil.example:%d", 421), ("good.example:%d", 200), ("localhost:%d", 200),
    ("127.0.0.1:%d", 200), ("[::1]:%d", 200), ("GOOD.example", 200),
])
def test_foreign_host_names_are_refused(server, host, status):
    host = host % server.port if "%d" in host else host
    r = httpx.get(server.url("/health"), headers={"Host": host})
    assert r.status_code == status, r.text
    if status == 421:
        assert r.json()["error"]["code"] == "host_not_allowed" and "--allowed-host evil.example" in r.text


def test_a_cross_origin_text_post_starts_no_generation(server):
    before = finished(server)
    r = post(server, {"Origin": "http://evil.example", "Content-Type": "text/plain"}, auth=False)
    assert r.status_code == 403 and r.json()["error"]["code"] == "origin_not_allowed", r.text
    assert "access-control-allow-origin" not in r.headers
    r = post(server, {"Origin": "null"})
    assert r.status_code == 403
    assert finished(server) == before  # nothing ran
    # The server's own page (same origin) and a configured origin are served.
    r = post(server, {"Origin": f"http://127.0.0.1:{server.port}"})
    assert r.status_code == 200 and "access-control-allow-origin" not in r.headers, r.text
    r = post(server, {"Origin": APP})
    assert r.status_code == 200 and r.headers["access-control-allow-origin"] == APP, r.text


def test_cors_preflight_only_for_configured_origins(server):
    r = httpx.options(server.url("/v1/chat/completions"),
                      headers={"Origin": APP, "Access-Control-Request-Method": "POST",
                               "Access-Control-Request-Headers": "authorization, content-type"})
    assert r.status_code == 204 and r.headers["access-control-allow-origin"] == APP
    assert "POST" in r.headers["access-control-allow-methods"]
    assert "authorization" in r.headers["access-control-allow-headers"].lower()
    r = httpx.options(server.url("/v1/chat/completions"),
                      headers={"Origin": "https://other.example", "Access-Control-Request-Method": "POST"})
    assert r.status_code == 403 and "access-control-allow-origin" not in r.headers
    assert "access-control-allow-origin" not in httpx.get(server.url("/health")).headers
