"""joch as an OAuth client of a protected upstream checks what it is told
before it believes it, as the conformance suite's per-user scenarios do
(issue 36): the upstream's protected-resource metadata must be for the
upstream (RFC 9728 §3.3), found at the path-suffixed well-known URL or,
without one, at the origin's; the authorization server's metadata must
name the issuer it was asked for (RFC 8414 §3.3); and the authorization
response's `iss` must be that issuer, exactly, and present when the
server says it sends one (RFC 9207). Without configured scopes, a
consent asks for the challenge's `scope`, else the metadata's
`scopes_supported` (MCP's scope selection strategy). Every refusal is an
error the user (the callback) and the caller (the call) see; nothing is
discovered from configuration: a real loopback authorization server and a
protected endpoint serve each case. One joch serves every case (a fresh endpoint
each), so the file takes seconds."""

from __future__ import annotations

import itertools
import threading
import time
from urllib.parse import parse_qsl, urlsplit
from http.server import BaseHTTPRequestHandler

import httpx2
import pytest

from conftest import NAMESPACE
from test_consent import CALLS, agent, as_token, consent, start, token_requests
from test_credentials import echo_tool, endpoint
from upstream_oauth import CLIENT_ID, AuthorizationServer, _answer, _serve

NAMES = (f"up{n}" for n in itertools.count())


class Guarded:
    """`POST /echo` with a token of `authorization`, else 401; its RFC 9728
    metadata (for `resource`, its own URL unless told) at the well-known
    URL with its path (`prm="path"`) or at the origin's (`"root"`), named
    by the 401's challenge only with `challenge`."""

    def __init__(self, authorization: AuthorizationServer, prm: str = "path",
                 resource: str | None = None, challenge: bool = True,
                 scope: str | None = None, scopes_supported: list[str] | None = None) -> None:
        self.authorization = authorization
        self.server = _serve(self._serve)
        base = f"http://127.0.0.1:{self.server.server_port}"
        self.url = f"{base}/echo"
        self.prm_path = "/.well-known/oauth-protected-resource" + ("/echo" if prm == "path" else "")
        self.prm_url = base + self.prm_path
        self.resource = resource or self.url
        self.challenge = challenge
        self.scope = scope
        self.scopes_supported = scopes_supported
        self.seen: list[str] = []

    def _serve(self, request: BaseHTTPRequestHandler, method: str) -> None:
        self.seen.append(request.path)
        if (method, request.path) == ("GET", self.prm_path):
            metadata = {"resource": self.resource, "authorization_servers": [self.authorization.issuer]}
            if self.scopes_supported is not None:
                metadata["scopes_supported"] = self.scopes_supported
            return _answer(request, 200, metadata)
        token = request.headers.get("authorization", "").removeprefix("Bearer ")
        if method == "POST" and request.path == "/echo" and self.authorization.valid(token):
            request.rfile.read(int(request.headers.get("content-length") or 0))
            return _answer(request, 200, {"echo": "ok"})
        if method != "POST" or request.path != "/echo":
            return _answer(request, 404, {"error": "not_found"})
        request.send_response(401)
        if self.challenge:
            scope = f', scope="{self.scope}"' if self.scope else ""
            request.send_header("www-authenticate", f'Bearer resource_metadata="{self.prm_url}"{scope}')
        request.send_header("content-length", "0")
        request.end_headers()

    def stop(self) -> None:
        self.server.shutdown()


def discovered_per_user() -> dict:
    """authorization_code per user, every endpoint discovered."""
    return {"oauth2": {"grant": "authorization_code", "perUser": True, "clientId": CLIENT_ID,
                       "clientSecret": {"env": "UPSTREAM_CLIENT_SECRET"}}}


@pytest.fixture(scope="module")
def joch(tmp_path_factory):
    server = start(tmp_path_factory.mktemp("joch"))
    yield server
    server.process.kill()
    server.process.wait()


@pytest.fixture
def authorization():
    server = AuthorizationServer()
    yield server
    server.stop()


def begin(joch, authorization: AuthorizationServer, **guarded) -> tuple[Guarded, threading.Thread, list]:
    """A per-user endpoint behind `Guarded(**guarded)`, and a call of it
    by a new agent, waiting in the background."""
    upstream = Guarded(authorization, **guarded)
    name = next(NAMES)
    joch.apply(endpoint(name, upstream.url, discovered_per_user()))
    echo_tool(joch, name)
    token = agent(joch, f"agent-{name}")
    answers: list[dict] = []
    body = {"spec": {"toolRef": {"name": f"echo_{name}"}, "input": {"n": 1}}}

    def run() -> None:
        answers.append(as_token(joch, token, "POST", CALLS, body)[1])

    thread = threading.Thread(target=run)
    thread.start()
    return upstream, thread, answers


def consent_url(joch, authorization: AuthorizationServer) -> str:
    """The consent URL of the one pending consent to `authorization`."""
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        for approval in joch.ok("GET", f"/v1/namespaces/{NAMESPACE}/approvals?phase=Pending")["items"]:
            url = approval["spec"]["payload"].get("consentUrl", "")
            if url.startswith(authorization.authorize_url):
                return url
        time.sleep(0.05)
    raise AssertionError("no consent approval opened")


def ended(thread: threading.Thread, answers: list) -> dict:
    thread.join(timeout=30)
    assert answers, "the call never answered"
    return answers[0]


@pytest.mark.parametrize("iss_supported,iss", [(True, "issuer"), (None, None)])
def test_a_matching_or_unpromised_iss_lets_the_consent_complete(joch, authorization, iss_supported, iss):
    authorization.iss_supported = iss_supported
    authorization.iss_sent = authorization.issuer if iss else None
    upstream, thread, answers = begin(joch, authorization)
    try:
        assert consent(consent_url(joch, authorization), "alice").status_code == 200
        done = ended(thread, answers)
        assert done["status"]["phase"] == "Succeeded", done
        assert token_requests(authorization, "authorization_code") == 1
    finally:
        upstream.stop()


@pytest.mark.parametrize("iss_supported,iss,said", [
    (True, None, "carried no iss"),
    (True, "https://evil.example.com", '"https://evil.example.com"'),
    (None, "https://evil.example.com", '"https://evil.example.com"'),
    # A trailing slash is another string: no URL normalisation.
    (True, "slash", "/\", not"),
])
def test_an_authorization_response_from_another_issuer_is_refused(joch, authorization, iss_supported, iss, said):
    authorization.iss_supported = iss_supported
    authorization.iss_sent = f"{authorization.issuer}/" if iss == "slash" else iss
    upstream, thread, answers = begin(joch, authorization)
    try:
        back = consent(consent_url(joch, authorization), "alice", follow=False).headers["location"]
        refused = httpx2.get(back, timeout=30)
        assert refused.status_code == 409, refused.text
        error = refused.json()
        assert error["code"] == "consent_failed" and said in error["message"], error
        assert "RFC 9207" in error["message"], error
        done = ended(thread, answers)
        assert done["status"]["phase"] == "Denied", done
        assert "RFC 9207" in done["status"]["error"]["message"], done
        # The code never reached the token endpoint.
        assert token_requests(authorization, "authorization_code") == 0
    finally:
        upstream.stop()


def test_metadata_for_another_issuer_is_not_used(joch, authorization):
    authorization.metadata_issuer = "https://attacker.example.com"
    upstream, thread, answers = begin(joch, authorization)
    try:
        done = ended(thread, answers)
        assert done["status"]["phase"] == "Failed", done
        error = done["status"]["error"]
        assert error["code"] == "upstream_auth_failed", error
        assert "attacker.example.com" in error["message"] and "RFC 8414" in error["message"], error
        assert ("GET", "/.well-known/oauth-authorization-server") in authorization.seen
        assert ("GET", "/authorize") not in authorization.seen
    finally:
        upstream.stop()


def test_resource_metadata_for_another_resource_is_not_used(joch, authorization):
    upstream, thread, answers = begin(joch, authorization, resource="https://evil.example.com/echo")
    try:
        done = ended(thread, answers)
        assert done["status"]["phase"] == "Failed", done
        error = done["status"]["error"]
        assert error["code"] == "upstream_auth_failed", error
        assert "evil.example.com" in error["message"] and "RFC 9728" in error["message"], error
        assert upstream.prm_path in upstream.seen
        # Its authorization server was never asked.
        assert authorization.seen == []
    finally:
        upstream.stop()


def test_resource_metadata_is_found_at_the_origin_without_a_challenge(joch, authorization):
    upstream, thread, answers = begin(joch, authorization, prm="root", challenge=False,
                                      resource=None)
    try:
        url = consent_url(joch, authorization)
        assert "resource=" in url
        assert consent(url, "alice").status_code == 200
        done = ended(thread, answers)
        assert done["status"]["phase"] == "Succeeded", done
        # The path-suffixed URL first, then the origin's.
        tried = [p for p in upstream.seen if p.startswith("/.well-known/")]
        assert tried[:2] == ["/.well-known/oauth-protected-resource/echo",
                             "/.well-known/oauth-protected-resource"], tried
        (asked,) = [r for r in authorization.requests if r.get("grant_type") == "authorization_code"]
        assert asked["resource"] == upstream.url
    finally:
        upstream.stop()


@pytest.mark.parametrize("guarded,asked", [
    ({"scope": "mcp:basic", "scopes_supported": ["mcp:read", "mcp:write"]}, "mcp:basic"),
    ({"scopes_supported": ["mcp:read", "mcp:write"]}, "mcp:read mcp:write"),
    ({}, None),
])
def test_without_configured_scopes_the_consent_asks_for_the_upstreams(joch, authorization, guarded, asked):
    """MCP's scope selection strategy: the challenge's `scope`, else the
    protected-resource metadata's `scopes_supported`, else none."""
    upstream, thread, answers = begin(joch, authorization, **guarded)
    try:
        url = consent_url(joch, authorization)
        query = dict(parse_qsl(urlsplit(url).query))
        assert query.get("scope") == asked, url
        assert consent(url, "alice").status_code == 200
        assert ended(thread, answers)["status"]["phase"] == "Succeeded"
    finally:
        upstream.stop()
