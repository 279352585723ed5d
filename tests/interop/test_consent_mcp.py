"""Per-user tokens on an McpServer, end to end, against an MCP server
protected by the official Python SDK's server-side authorization: joch
lists its tools with its own client_credentials token (`listAuth`); each
user's call waits for that user's consent, then runs over a connection
carrying their own token, and the upstream tool sees who they are. Through
joch's REST API and through its MCP front (the official Python client, the
consent URL sent by URL-mode elicitation). A token refused mid-session is
refreshed once; the connections per user stay within their bound; token
exchange reaches the server too; and no token is found in the SQLite file,
joch's debug log or its exported traces."""

from __future__ import annotations

import json
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import anyio
import httpx2
import pytest
from mcp import ClientSession, types
from mcp.client.streamable_http import streamable_http_client

from conftest import NAMESPACE, start_joch
from otlp import TraceReceiver
from test_consent import (
    CALLS,
    agent,
    as_token,
    assert_not_traced,
    consent,
    consent_through,
    pending_consent,
    start,
    token_requests,
)
from test_credentials import (
    CLIENT_SECRET,
    assert_nowhere,
    assert_postgres_holds_none,
    fresh_postgres_database,
    two_replicas,
    wait_for_tool,
)
from test_mcp_auth import KEY, b64url, hs256
from upstream_oauth import CLIENT_ID, TOKEN_EXCHANGE, AuthorizationServer, ProtectedMcp


def oauth2(authorization: AuthorizationServer, upstream: ProtectedMcp, grant: str) -> dict:
    spec = {
        "grant": grant,
        "tokenUrl": authorization.token_url,
        "clientId": CLIENT_ID,
        "clientSecret": {"env": "UPSTREAM_CLIENT_SECRET"},
        "scopes": ["tools"],
        "resource": upstream.url,
    }
    if grant == "authorization_code":
        spec["perUser"] = True
        spec["authorizationUrl"] = authorization.authorize_url
    return {"oauth2": spec}


def per_user_server(authorization: AuthorizationServer, upstream: ProtectedMcp, grant: str,
                    counted: bool = False) -> dict:
    """`counted`: the test counts joch's connections by the upstream's
    sessions, which the Python SDK has only before protocol 2026-07-28."""
    spec = {"http": {
        "url": upstream.url,
        "auth": oauth2(authorization, upstream, grant),
        "listAuth": oauth2(authorization, upstream, "client_credentials"),
    }}
    if counted:
        spec["protocol"] = "legacy"
    return {"apiVersion": "joch.dev/v1alpha1", "kind": "McpServer", "metadata": {"name": "protected"}, "spec": spec}


def whoami(joch, token: str, wait: bool = True) -> dict:
    path = CALLS if wait else f"{CALLS}?wait=false"
    status, answer = as_token(joch, token, "POST", path, {"spec": {"toolRef": {"name": "protected.whoami"}}})
    assert status in (200, 201, 202), answer
    return answer


def said(call: dict) -> str:
    assert call["status"]["phase"] == "Succeeded", call
    return call["status"]["output"]["content"][0]["text"]


def in_background(joch, token: str) -> tuple[threading.Thread, list[dict]]:
    """A caller waiting for its call's outcome."""
    answers: list[dict] = []
    thread = threading.Thread(target=lambda: answers.append(whoami(joch, token)))
    thread.start()
    return thread, answers


def through_mcp(joch, token: str, user: str) -> tuple[types.CallToolResult, list]:
    """`protected.whoami` called by the official MCP client, which opens
    the consent URL it is sent (URL-mode elicitation) as `user`."""
    asked = []

    async def open_in_browser(context, params):
        asked.append(params)
        answer = await anyio.to_thread.run_sync(lambda: consent(params.url, user))
        assert answer.status_code == 200, answer.text
        return types.ElicitResult(action="accept")

    async def scenario():
        headers = {"authorization": f"Bearer {token}"}
        async with httpx2.AsyncClient(headers=headers, timeout=60) as http:
            async with streamable_http_client(joch.mcp_url(), http_client=http) as (read, write):
                async with ClientSession(read, write, elicitation_callback=open_in_browser) as session:
                    await session.initialize()
                    # A URL never sent would leave the call waiting: fail instead.
                    with anyio.fail_after(30):
                        return await session.call_tool("protected.whoami", {})

    return anyio.run(scenario), asked


@pytest.fixture
def authorization():
    server = AuthorizationServer()
    yield server
    server.stop()


@pytest.fixture
def upstream(authorization):
    server = ProtectedMcp(authorization)
    yield server
    server.stop()


def test_each_user_reaches_the_mcp_server_with_their_own_token(authorization, upstream, tmp_path):
    traces = TraceReceiver()
    joch = start(tmp_path, JOCH_MAX_MCP_USER_CONNECTIONS="2", **traces.env())
    try:
        joch.apply(per_user_server(authorization, upstream, "authorization_code", counted=True))
        wait_for_tool(joch, "protected.whoami")
        assert token_requests(authorization, "client_credentials") == 1, "listed with joch's own token"
        alice, bob, carol = agent(joch, "alice"), agent(joch, "bob"), agent(joch, "carol")

        # REST: alice's call waits for her consent, then runs once, as her.
        waiting, answers = in_background(joch, alice)
        approval = pending_consent(joch)
        assert approval["spec"]["action"]["type"] == "consent", approval
        url = approval["spec"]["payload"]["consentUrl"]
        assert consent(url, "alice@upstream").status_code == 200
        waiting.join(timeout=30)
        (done,) = answers
        assert said(done) == "hello joch-client as alice@upstream", done
        assert done["status"]["upstreamUser"] == "alice"
        assert said(whoami(joch, alice)) == "hello joch-client as alice@upstream"
        assert token_requests(authorization, "authorization_code") == 1, "her kept token was reused"

        # MCP front: bob is sent the URL by elicitation; his call answers as bob.
        result, asked = through_mcp(joch, bob, "bob@upstream")
        assert not result.is_error, result
        assert result.content[0].text == "hello joch-client as bob@upstream"
        (question,) = asked
        assert question.mode == "url" and question.url.startswith(authorization.authorize_url)

        # A third user: the bound (2) closes the least recently used idle
        # per-user connection instead of opening a third.
        waiting, answers = in_background(joch, carol)
        consent(pending_consent(joch)["spec"]["payload"]["consentUrl"], "carol@upstream")
        waiting.join(timeout=30)
        assert said(answers[0]) == "hello joch-client as carol@upstream"
        deadline = time.monotonic() + 10
        while upstream.sessions() > 3:
            assert time.monotonic() < deadline, f"{upstream.sessions()} sessions upstream"
            time.sleep(0.05)
        assert said(whoami(joch, alice)) == "hello joch-client as alice@upstream", "reopened for alice"

        # The server stops taking the tokens it issued (revoked upstream):
        # alice's next call is refused mid-session, refreshed once, sent again.
        authorization.refuse_access_tokens()
        assert said(whoami(joch, alice)) == "hello joch-client as alice@upstream"
        assert token_requests(authorization, "refresh_token") == 1, "one refresh"

        listed = joch.ok("GET", f"/v1/namespaces/{NAMESPACE}/credentials")["items"]
        users = sorted(c["spec"].get("user") or "(service)" for c in listed)
        assert users == ["(service)", "alice", "bob", "carol"], users

        # Refused again, and the refresh token too: the call fails saying
        # consent is required, and alice's next call asks for it.
        authorization.refuse_access_tokens()
        authorization.revoke_refresh_tokens()
        failed = whoami(joch, alice)
        assert failed["status"]["phase"] == "Failed", failed
        assert failed["status"]["error"]["code"] == "consent_required", failed
        assert whoami(joch, alice, wait=False)["status"]["phase"] == "AwaitingApproval"
        secrets = [*authorization.issued, *authorization.other_secrets, CLIENT_SECRET]
        assert_nowhere(secrets, tmp_path, joch, "mcpserver.protected.service")
        assert_not_traced(secrets, traces, done["metadata"]["name"])
    finally:
        joch.process.kill()
        joch.process.wait()
        traces.stop()


def test_token_exchange_reaches_the_mcp_server_as_each_caller(tmp_path):
    authorization = AuthorizationServer(subject_key=KEY)
    upstream = ProtectedMcp(authorization)
    jwks = tmp_path / "jwks.json"
    jwks.write_text(json.dumps({"keys": [{"kty": "oct", "kid": "idp-1", "alg": "HS256", "k": b64url(KEY)}]}))
    joch = start(tmp_path, JOCH_JWT_ISSUER=authorization.issuer, JOCH_JWT_JWKS=str(jwks), JOCH_JWT_AUDIENCE="joch",
                 JOCH_MAX_MCP_USER_CONNECTIONS="3")

    def jwt(sub: str) -> str:
        return hs256({"iss": authorization.issuer, "sub": sub, "aud": "joch", "exp": int(time.time()) + 600,
                      "namespace": NAMESPACE, "role": "agent"})

    try:
        joch.apply(per_user_server(authorization, upstream, "token_exchange", counted=True))
        wait_for_tool(joch, "protected.whoami")
        dave, erin = jwt("dave"), jwt("erin")
        assert said(whoami(joch, dave)) == "hello joch-client as dave"
        assert said(whoami(joch, erin)) == "hello joch-client as erin"
        assert said(whoami(joch, dave)) == "hello joch-client as dave"
        assert token_requests(authorization, TOKEN_EXCHANGE) == 2, "dave's token was kept"
        # Many users, one after another: joch keeps at most 3 per-user
        # connections (and the listing's) open upstream, not one per user.
        for n in range(12):
            assert said(whoami(joch, jwt(f"user{n}"))) == f"hello joch-client as user{n}"
        deadline = time.monotonic() + 10
        while upstream.sessions() > 4:
            assert time.monotonic() < deadline, f"{upstream.sessions()} sessions upstream for 14 users"
            time.sleep(0.05)
        refused = whoami(joch, agent(joch, "alice"))
        assert refused["status"]["phase"] == "Failed", refused
        assert "did not authenticate with a JWT" in refused["status"]["error"]["message"], refused
        assert_nowhere([dave, erin, *authorization.issued, CLIENT_SECRET], tmp_path, joch,
                       "mcpserver.protected.service")
    finally:
        joch.process.kill()
        joch.process.wait()
        upstream.stop()
        authorization.stop()


def test_a_per_user_server_needs_list_auth(authorization, upstream, tmp_path):
    joch = start(tmp_path)
    try:
        server = per_user_server(authorization, upstream, "authorization_code")
        del server["spec"]["http"]["listAuth"]
        status, refused = joch.api("POST", f"/v1/namespaces/{NAMESPACE}/mcpservers", server)
        assert (status, refused["code"]) == (422, "invalid_resource"), refused
        assert [f["field"] for f in refused["details"]["fields"]] == ["spec.http.listAuth"], refused
        server["spec"]["http"]["listAuth"] = server["spec"]["http"]["auth"]
        status, refused = joch.api("POST", f"/v1/namespaces/{NAMESPACE}/mcpservers", server)
        assert [f["field"] for f in refused["details"]["fields"]] == ["spec.http.listAuth.oauth2.grant"], refused
    finally:
        joch.process.kill()
        joch.process.wait()


def test_a_waiting_mcp_client_is_sent_the_consent_url_once_a_person_approved(authorization, upstream, tmp_path):
    """The call waits for a person first (a policy), then, approved by REST,
    for its user's consent: the MCP client still waiting on it is sent the
    URL then. Unused for a second, the user's connection upstream closes."""
    joch = start(tmp_path, JOCH_MCP_USER_CONNECTION_IDLE_SECONDS="1")
    try:
        joch.apply(per_user_server(authorization, upstream, "authorization_code", counted=True))
        joch.apply({"kind": "Policy", "metadata": {"name": "whoami-needs-a-person"}, "spec": {
            "version": "v1", "appliesTo": {"tools": ["protected.whoami"]},
            "rules": [{"name": "person", "require": {"approval": "human"}, "reason": "it acts as the user"}],
        }})
        wait_for_tool(joch, "protected.whoami")
        bob = agent(joch, "bob")

        def approve() -> str:
            approval = pending_consent(joch)
            assert approval["spec"]["action"]["type"] == "tool_call", approval
            name = approval["metadata"]["name"]
            joch.ok("POST", f"/v1/namespaces/{NAMESPACE}/approvals/{name}/approve", {"rationale": "fine"})
            return name

        with ThreadPoolExecutor(max_workers=1) as pool:
            approver = pool.submit(approve)
            result, asked = through_mcp(joch, bob, "bob@upstream")
            name = approver.result(timeout=30)
        assert not result.is_error, result
        assert result.content[0].text == "hello joch-client as bob@upstream"
        (question,) = asked
        assert question.mode == "url" and question.url.startswith(authorization.authorize_url), question
        done = joch.ok("GET", f"{CALLS}/{name}")
        assert done["status"]["phase"] == "Succeeded", done
        assert done["spec"]["approval"]["approvedBy"] == "root", done
        assert upstream.answered == ["bob@upstream"], "the call ran once, as bob"

        # Bob's connection upstream, unused for a second, is closed (the
        # listing's stays); his next call opens one again.
        joch.ok("DELETE", f"/v1/namespaces/{NAMESPACE}/policies/whoami-needs-a-person")
        deadline = time.monotonic() + 10
        while upstream.sessions() > 1:
            assert time.monotonic() < deadline, f"{upstream.sessions()} sessions upstream"
            time.sleep(0.05)
        assert said(whoami(joch, bob)) == "hello joch-client as bob@upstream"
        assert upstream.sessions() == 2
        assert "idle per-user MCP connections closed" in "".join(joch.stderr)
        secrets = [*authorization.issued, *authorization.other_secrets, CLIENT_SECRET]
        assert_nowhere(secrets, tmp_path, joch, "mcpserver.protected.service")
    finally:
        joch.process.kill()
        joch.process.wait()


def test_a_consent_taken_by_replica_b_resumes_an_mcp_tool_call_waiting_on_a(authorization, upstream, tmp_path):
    store, bin_dir = fresh_postgres_database()
    with two_replicas(tmp_path, store) as (a, b):
        a.apply(per_user_server(authorization, upstream, "authorization_code"))
        wait_for_tool(a, "protected.whoami")
        wait_for_tool(b, "protected.whoami")
        alice = agent(a, "alice")
        waiting, answers = in_background(a, alice)
        approval = pending_consent(a)
        paused = a.ok("GET", f"{CALLS}/{approval['metadata']['name']}")

        # B takes the callback and runs the call over its own connection
        # carrying alice's token.
        back = consent_through(b, approval, "alice@upstream")
        waiting.join(timeout=30)
        (done,) = answers
        assert said(done) == "hello joch-client as alice@upstream", done
        assert done["status"]["replica"] != paused["status"]["replica"], "B ran the call A admitted"
        assert upstream.answered == ["alice@upstream"], "the call ran once"
        assert httpx2.get(back, timeout=30).status_code == 400, "A refuses the used state"
        # A uses the token B stored.
        assert said(whoami(a, alice)) == "hello joch-client as alice@upstream"
        assert token_requests(authorization, "authorization_code") == 1
        secrets = [*authorization.issued, *authorization.other_secrets, CLIENT_SECRET]
        assert_postgres_holds_none(bin_dir, store, "protected.whoami", secrets)
