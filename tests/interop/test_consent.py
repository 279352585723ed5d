"""Per-user upstream tokens (`oauth2` `authorization_code`, `perUser`),
end to end: a call whose user has no token waits for their consent (an
Approval of kind `consent` with the authorization URL); a "browser" (plain
HTTP, following redirects, signed in at the authorization server by a
cookie) consents; joch's /oauth/callback exchanges the code with PKCE, and
the waiting caller gets the call's result. Then: the token is reused,
refreshed once when calls race, revoked (consent again), declined, and a
consent that does not come before the deadline ends the call saying what
to do. Forged and replayed states store nothing, and no token, code or
refresh token is found in the SQLite file, joch's debug log or the traces
it exports."""

from __future__ import annotations

import dataclasses
import json
import sqlite3
import threading
import urllib.parse
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
from test_credentials import (
    ROOT,
    VAULT_KEY,
    assert_nowhere,
    assert_postgres_holds_none,
    echo_tool,
    endpoint,
    fresh_postgres_database,
    two_replicas,
)
from test_mcp_auth import KEY, b64url, hs256
from upstream_oauth import CLIENT_ID, CLIENT_SECRET, TOKEN_EXCHANGE, AuthorizationServer, ProtectedRest

CALLS = f"/v1/namespaces/{NAMESPACE}/toolcalls"


@pytest.fixture
def authorization():
    server = AuthorizationServer()
    yield server
    server.stop()


def start(tmp_path: Path, **env: str):
    joch = start_joch(tmp_path, {
        "JOCH_ADMIN_TOKEN": ROOT,
        "JOCH_VAULT_KEY": VAULT_KEY,
        "JOCH_LOG": "debug",
        "UPSTREAM_CLIENT_SECRET": CLIENT_SECRET,
        **env,
    })
    joch.token = ROOT
    return joch


@pytest.fixture
def traces():
    receiver = TraceReceiver()
    yield receiver
    receiver.stop()


@pytest.fixture
def joch(tmp_path: Path, traces: TraceReceiver):
    server = start(tmp_path, **traces.env())
    yield server
    server.process.kill()
    server.process.wait()


def assert_not_traced(secrets: list[str], traces: TraceReceiver, present: str) -> None:
    """None of `secrets` in the traces joch exported, where `present` (a
    call's name) is found: the search can succeed."""
    deadline = time.monotonic() + 10
    while present not in traces.text():
        assert time.monotonic() < deadline, "the call's span was never exported"
        time.sleep(0.05)
    exported = traces.text()
    for secret in secrets:
        assert secret not in exported, f"{secret[:6]}... in the exported traces"


def per_user(authorization: AuthorizationServer) -> dict:
    return {"oauth2": {
        "grant": "authorization_code",
        "perUser": True,
        "tokenUrl": authorization.token_url,
        "authorizationUrl": authorization.authorize_url,
        "clientId": CLIENT_ID,
        "clientSecret": {"env": "UPSTREAM_CLIENT_SECRET"},
        "scopes": ["mail.read"],
    }}


def as_token(joch, token: str | None, method: str, path: str, body=None) -> tuple[int, dict]:
    """A request with another bearer token (a copy: threads share `joch`)."""
    return dataclasses.replace(joch, token=token).api(method, path, body)


def agent(joch, name: str) -> str:
    body = {"name": name, "role": "agent"}
    return joch.ok("POST", f"/v1/namespaces/{NAMESPACE}/tokens", body)["token"]


def body(n: int, caller: str | None = None) -> dict:
    spec = {"toolRef": {"name": "echo_mail"}, "input": {"n": n}}
    if caller:
        spec["callerId"] = caller
    return {"spec": spec}


def call(joch, token: str, n: int, caller: str | None = None, wait: bool = True) -> dict:
    path = CALLS if wait else f"{CALLS}?wait=false"
    status, answer = as_token(joch, token, "POST", path, body(n, caller))
    assert status in (200, 201, 202), answer
    return answer


def in_background(joch, token: str, n: int, caller: str | None = None):
    """A caller waiting for its call's outcome: (thread, [answer])."""
    answers: list[dict] = []
    thread = threading.Thread(target=lambda: answers.append(call(joch, token, n, caller)))
    thread.start()
    return thread, answers


def pending_consent(joch) -> dict:
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        items = joch.ok("GET", f"/v1/namespaces/{NAMESPACE}/approvals?phase=Pending")["items"]
        if items:
            (approval,) = items
            return approval
        time.sleep(0.05)
    raise AssertionError("no consent approval opened")


def consent(url: str, user: str, decision: str = "allow", follow: bool = True) -> httpx2.Response:
    """The user's browser: signed in at the authorization server (its
    session cookie), follows its redirect back to joch."""
    cookie = {"cookie": f"user={user}; consent={decision}"}
    return httpx2.get(url, headers=cookie, follow_redirects=follow, timeout=30)


def token_requests(authorization: AuthorizationServer, grant: str) -> int:
    return sum(1 for r in authorization.requests if r.get("grant_type") == grant)


def consents_kept(tmp_path: Path) -> int:
    """ConsentRequest records in joch's SQLite file."""
    with sqlite3.connect(tmp_path / "joch.db") as db:
        return db.execute("SELECT count(*) FROM objects WHERE kind = 'ConsentRequest'").fetchone()[0]


def users_seen(authorization: AuthorizationServer, rest: ProtectedRest) -> list[str]:
    """Whose token each request the protected endpoint took carried."""
    return [authorization.issued[token]["user"] for token in rest.seen]


def test_a_call_waits_for_its_users_consent_then_runs_once(authorization, joch, tmp_path, traces):
    rest = ProtectedRest(authorization, "unused")
    try:
        joch.apply(endpoint("mail", rest.url, per_user(authorization)))
        echo_tool(joch, "mail")
        alice, bob = agent(joch, "alice"), agent(joch, "bob")

        waiting, answers = in_background(joch, alice, 1)
        approval = pending_consent(joch)
        assert approval["spec"]["action"]["type"] == "consent", approval
        # A second call of alice's waits too; her one consent serves both.
        other = call(joch, alice, 5, wait=False)
        assert other["status"]["phase"] == "AwaitingApproval", other
        url = approval["spec"]["payload"]["consentUrl"]
        assert url.startswith(authorization.authorize_url + "?"), url
        for part in ["code_challenge_method=S256", "scope=mail.read", f"client_id={CLIENT_ID}"]:
            assert part in url, url
        assert rest.seen == [], "nothing ran before the consent"
        assert consents_kept(tmp_path) == 2, "the consents under way are kept server-side"

        browser = consent(url, "alice@upstream")
        assert browser.status_code == 200 and "Consent recorded" in browser.text, browser.text
        waiting.join(timeout=30)
        (done,) = answers
        assert done["status"]["phase"] == "Succeeded", done
        assert done["status"]["upstreamUser"] == "alice"
        assert set(users_seen(authorization, rest)) == {"alice@upstream"}, "alice's own token"
        deadline = time.monotonic() + 20
        while joch.ok("GET", f"{CALLS}/{other['metadata']['name']}")["status"]["phase"] != "Succeeded":
            assert time.monotonic() < deadline, "the other waiting call never ran"
            time.sleep(0.05)
        assert len(rest.seen) == 2, "each call ran once"
        assert consents_kept(tmp_path) == 0, "its state is used up, the other's withdrawn"

        again = call(joch, alice, 2)
        assert again["status"]["phase"] == "Succeeded", again
        assert token_requests(authorization, "authorization_code") == 1, "the kept token was reused"

        # The callback's state works once; one joch never issued stores nothing.
        callback = browser.history[-1].headers["location"]
        for forged in [callback, f"{joch.base}/oauth/callback?state={NAMESPACE}.forged&code=x",
                       f"{joch.base}/oauth/callback?state=nonamespace&code=x"]:
            replayed = httpx2.get(forged, timeout=30)
            assert replayed.status_code == 400, replayed.text
            assert replayed.json()["details"] == {"parameter": "state"}
        status, missing = as_token(joch, None, "GET", "/oauth/callback?state=x")
        assert (status, missing["code"]) == (400, "bad_request"), missing
        assert token_requests(authorization, "authorization_code") == 1

        # Bob is another user: his call waits for his own consent. He may
        # not name alice as the caller in a namespace that does not trust
        # callers to say whose token a call uses.
        assert call(joch, bob, 3, wait=False)["status"]["phase"] == "AwaitingApproval"
        refused = call(joch, bob, 4, caller="alice")
        assert refused["status"]["phase"] == "Denied", refused
        assert refused["status"]["error"]["code"] == "caller_id_not_trusted", refused

        listed = joch.ok("GET", f"/v1/namespaces/{NAMESPACE}/credentials")["items"]
        assert [(c["spec"]["user"], c["spec"]["grant"]) for c in listed] == [("alice", "authorization_code")]
        name = listed[0]["metadata"]["name"]
        secrets = [*authorization.issued, *authorization.other_secrets, CLIENT_SECRET]
        assert len(secrets) >= 4
        assert_nowhere(secrets, tmp_path, joch, name)
        assert_not_traced(secrets, traces, again["metadata"]["name"])
    finally:
        rest.stop()


def test_an_approver_cannot_consent_for_the_user(authorization, joch):
    rest = ProtectedRest(authorization, "unused")
    try:
        joch.apply(endpoint("mail", rest.url, per_user(authorization)))
        echo_tool(joch, "mail")
        waiting = call(joch, agent(joch, "alice"), 1, wait=False)
        name = waiting["metadata"]["name"]
        # The caller that does not wait reads the URL on the call's record.
        assert waiting["spec"]["approval"]["consentUrl"].startswith(authorization.authorize_url)
        pending_consent(joch)
        status, refused = joch.api("POST", f"/v1/namespaces/{NAMESPACE}/approvals/{name}/approve",
                                   {"approvedBy": "root"})
        assert (status, refused["code"]) == (409, "consent_not_approvable"), refused
    finally:
        rest.stop()


def test_trusted_caller_ids_revoke_and_decline(authorization, joch):
    rest = ProtectedRest(authorization, "unused")
    try:
        joch.ok("PUT", f"/v1/namespaces/{NAMESPACE}", {"spec": {"trustCallerId": True}})
        joch.apply(endpoint("mail", rest.url, per_user(authorization)))
        echo_tool(joch, "mail")
        front = agent(joch, "front-end")
        # A trusted front end names its user in callerId.
        waiting, answers = in_background(joch, front, 1, caller="carol")
        consent(pending_consent(joch)["spec"]["payload"]["consentUrl"], "carol@upstream")
        waiting.join(timeout=30)
        assert answers[0]["status"]["upstreamUser"] == "carol", answers
        assert users_seen(authorization, rest) == ["carol@upstream"]

        (credential,) = joch.ok("GET", f"/v1/namespaces/{NAMESPACE}/credentials")["items"]
        assert credential["spec"]["user"] == "carol"
        joch.ok("DELETE", f"/v1/namespaces/{NAMESPACE}/credentials/{credential['metadata']['name']}")

        # Revoked: the next call asks again; carol declines this time.
        waiting, answers = in_background(joch, front, 2, caller="carol")
        declined = consent(pending_consent(joch)["spec"]["payload"]["consentUrl"], "carol@upstream", "deny")
        assert declined.status_code == 200 and "declined" in declined.text
        waiting.join(timeout=30)
        assert answers[0]["status"]["phase"] == "Denied", answers
        error = answers[0]["status"]["error"]
        assert error["code"] == "consent_required" and "access_denied" in error["message"], error
        assert "call the tool again" in error["message"], error
        assert len(rest.seen) == 1
    finally:
        rest.stop()


def test_a_code_refused_at_the_callback_ends_the_waiting_call_at_once(authorization, joch):
    rest = ProtectedRest(authorization, "unused")
    try:
        joch.apply(endpoint("mail", rest.url, per_user(authorization)))
        echo_tool(joch, "mail")
        waiting, answers = in_background(joch, agent(joch, "alice"), 1)
        url = pending_consent(joch)["spec"]["payload"]["consentUrl"]
        back = consent(url, "alice@upstream", follow=False).headers["location"]
        # The code expires at the authorization server before the browser
        # reaches joch: the exchange is answered invalid_grant.
        authorization.codes.clear()
        started = time.monotonic()
        refused = httpx2.get(back, timeout=30)
        assert refused.status_code == 409 and refused.json()["code"] == "consent_failed", refused.text
        assert "invalid_grant" in refused.json()["message"], refused.text
        waiting.join(timeout=30)
        ended = time.monotonic() - started
        (done,) = answers
        assert done["status"]["phase"] == "Denied", done
        error = done["status"]["error"]
        assert error["code"] == "consent_required", error
        assert "refused the code" in error["message"] and "call the tool again" in error["message"], error
        assert ended < 10, f"the call ended {ended:.1f} s after the callback, not at its deadline"
        assert rest.seen == [] and joch.ok("GET", f"/v1/namespaces/{NAMESPACE}/credentials")["items"] == []
    finally:
        rest.stop()


def test_a_call_a_person_approves_then_waits_for_its_users_consent(authorization, joch, tmp_path):
    rest = ProtectedRest(authorization, "unused")
    try:
        joch.apply(endpoint("mail", rest.url, per_user(authorization)))
        echo_tool(joch, "mail")
        joch.apply({"kind": "Policy", "metadata": {"name": "mail-needs-a-person"}, "spec": {
            "version": "v1", "appliesTo": {"tools": ["echo_mail"]},
            "rules": [{"name": "person", "require": {"approval": "human"}, "reason": "mail is private"}],
        }})
        alice = agent(joch, "alice")
        # Rejected by the person: the user was never sent to consent.
        rejected = call(joch, alice, 0, wait=False)["metadata"]["name"]
        assert pending_consent(joch)["spec"]["action"]["type"] == "tool_call"
        joch.ok("POST", f"/v1/namespaces/{NAMESPACE}/approvals/{rejected}/deny", {"rationale": "no"})
        assert consents_kept(tmp_path) == 0

        waiting, answers = in_background(joch, alice, 1)
        approval = pending_consent(joch)
        assert approval["spec"]["action"]["type"] == "tool_call", approval
        assert consents_kept(tmp_path) == 0, "no consent is asked before the person decides"
        name = approval["metadata"]["name"]
        joch.ok("POST", f"/v1/namespaces/{NAMESPACE}/approvals/{name}/approve", {"rationale": "fine"})
        # Approved: now the call waits for alice's consent, on the same Approval.
        deadline = time.monotonic() + 20
        while (reopened := joch.ok("GET", f"/v1/namespaces/{NAMESPACE}/approvals/{name}"))["status"].get("phase") != "Pending":
            assert time.monotonic() < deadline, reopened
            time.sleep(0.05)
        assert reopened["spec"]["action"]["type"] == "consent", reopened
        assert reopened["spec"]["payload"]["approved"]["rationale"] == "fine", reopened
        paused = joch.ok("GET", f"{CALLS}/{name}")
        assert paused["status"]["phase"] == "AwaitingApproval", paused
        assert paused["spec"]["approval"]["consentUrl"] == reopened["spec"]["payload"]["consentUrl"]
        assert rest.seen == []

        assert consent(reopened["spec"]["payload"]["consentUrl"], "alice@upstream").status_code == 200
        waiting.join(timeout=30)
        (done,) = answers
        assert done["status"]["phase"] == "Succeeded", done
        assert done["spec"]["approval"]["approvedBy"] == "root", "the person approved it"
        assert users_seen(authorization, rest) == ["alice@upstream"], "ran once, as alice"
        assert joch.ok("GET", f"{CALLS}/{rejected}")["status"]["phase"] == "Denied"
    finally:
        rest.stop()


def test_an_expired_user_token_is_refreshed_once_and_a_dead_one_asks_again(joch):
    authorization = AuthorizationServer(lifetime=61)
    rest = ProtectedRest(authorization, "unused")
    try:
        joch.apply(endpoint("mail", rest.url, per_user(authorization)))
        echo_tool(joch, "mail")
        alice = agent(joch, "alice")
        waiting, _ = in_background(joch, alice, 0)
        consent(pending_consent(joch)["spec"]["payload"]["consentUrl"], "alice@upstream")
        waiting.join(timeout=30)
        time.sleep(1.2)
        with ThreadPoolExecutor(max_workers=8) as pool:
            done = list(pool.map(lambda n: call(joch, alice, n), range(1, 9)))
        assert all(d["status"]["phase"] == "Succeeded" for d in done), done
        assert token_requests(authorization, "refresh_token") == 1, "one refresh for eight racing calls"
        assert len(set(rest.seen[1:])) == 1, "they all used the refreshed token"

        # The authorization server forgets the grant: the next call needs consent.
        authorization.revoke_refresh_tokens()
        time.sleep(1.2)
        assert call(joch, alice, 9, wait=False)["status"]["phase"] == "AwaitingApproval"
        assert joch.ok("GET", f"/v1/namespaces/{NAMESPACE}/credentials")["items"] == []
    finally:
        rest.stop()
        authorization.stop()


def test_a_consent_not_given_before_the_deadline_ends_the_call_saying_what_to_do(authorization, tmp_path):
    joch = start(tmp_path, JOCH_APPROVAL_TIMEOUT_SECONDS="1")
    rest = ProtectedRest(authorization, "unused")
    try:
        joch.apply(endpoint("mail", rest.url, per_user(authorization)))
        echo_tool(joch, "mail")
        alice = agent(joch, "alice")
        timed_out = call(joch, alice, 1)
        assert timed_out["status"]["phase"] == "TimedOut", timed_out
        error = timed_out["status"]["error"]
        assert error["code"] == "consent_required", error
        assert "call the tool again" in error["message"], error
        assert consents_kept(tmp_path) == 0, "the consent under way was withdrawn"
        # Too late: the link's consent is refused and nothing is kept.
        (approval,) = joch.ok("GET", f"/v1/namespaces/{NAMESPACE}/approvals")["items"]
        late = consent(approval["spec"]["payload"]["consentUrl"], "alice@upstream")
        assert late.status_code == 400, late.text
        assert joch.ok("GET", f"/v1/namespaces/{NAMESPACE}/credentials")["items"] == []
        assert token_requests(authorization, "authorization_code") == 0
    finally:
        rest.stop()
        joch.process.kill()
        joch.process.wait()


def consent_through(other, approval, user):
    """`user` consents; the authorization server sends the browser back to
    the replica that asked, and a load balancer hands the callback to
    `other`. The callback URL as the authorization server gave it."""
    back = consent(approval["spec"]["payload"]["consentUrl"], user, follow=False).headers["location"]
    to_other = urllib.parse.urlsplit(back)._replace(netloc=urllib.parse.urlsplit(other.base).netloc)
    taken = httpx2.get(urllib.parse.urlunsplit(to_other), timeout=30)
    assert taken.status_code == 200, taken.text
    return back


def test_a_consent_taken_by_replica_b_resumes_a_call_waiting_on_a(tmp_path):
    store, bin_dir = fresh_postgres_database()
    authorization = AuthorizationServer(lifetime=61)
    rest = ProtectedRest(authorization, "unused")
    try:
        with two_replicas(tmp_path, store) as (a, b):
            a.apply(endpoint("mail", rest.url, per_user(authorization)))
            echo_tool(a, "mail")
            alice = agent(a, "alice")
            waiting, answers = in_background(a, alice, 1)
            approval = pending_consent(a)
            paused = a.ok("GET", f"{CALLS}/{approval['metadata']['name']}")
            assert paused["spec"]["approval"]["consentUrl"] == approval["spec"]["payload"]["consentUrl"]

            back = consent_through(b, approval, "alice@upstream")
            waiting.join(timeout=30)
            (done,) = answers
            assert done["status"]["phase"] == "Succeeded", done
            assert done["status"]["replica"] != paused["status"]["replica"], "B ran the call A admitted"
            assert len(rest.seen) == 1, "the call ran once"
            assert httpx2.get(back, timeout=30).status_code == 400, "A refuses the used state"

            # Alice's token nears expiry: calls racing on both replicas refresh it once.
            time.sleep(1.2)
            with ThreadPoolExecutor(max_workers=8) as pool:
                done = list(pool.map(lambda n: call((a, b)[n % 2], alice, n), range(8)))
            assert all(d["status"]["phase"] == "Succeeded" for d in done), done
            assert token_requests(authorization, "refresh_token") == 1, "one refresh across both replicas"
            secrets = [*authorization.issued, *authorization.other_secrets, CLIENT_SECRET]
            assert_postgres_holds_none(bin_dir, store, "authorization_code", secrets)
    finally:
        rest.stop()
        authorization.stop()


def test_token_exchange_acts_for_the_jwt_caller_and_is_kept_per_user(tmp_path):
    authorization = AuthorizationServer(subject_key=KEY)
    rest = ProtectedRest(authorization, "unused")
    jwks = tmp_path / "jwks.json"
    jwks.write_text(json.dumps({"keys": [{"kty": "oct", "kid": "idp-1", "alg": "HS256", "k": b64url(KEY)}]}))
    joch = start(tmp_path, JOCH_JWT_ISSUER=authorization.issuer, JOCH_JWT_JWKS=str(jwks), JOCH_JWT_AUDIENCE="joch")

    def jwt(sub: str) -> str:
        return hs256({"iss": authorization.issuer, "sub": sub, "aud": "joch", "exp": int(time.time()) + 600,
                      "namespace": NAMESPACE, "role": "agent"})

    try:
        joch.apply(endpoint("mail", rest.url, {"oauth2": {
            "grant": "token_exchange",
            "tokenUrl": authorization.token_url,
            "clientId": CLIENT_ID,
            "clientSecret": {"env": "UPSTREAM_CLIENT_SECRET"},
            "scopes": ["mail.read"],
            "resource": rest.url,
        }}))
        echo_tool(joch, "mail")
        dave, erin = jwt("dave"), jwt("erin")
        for n, caller in enumerate([dave, dave, erin]):
            done = call(joch, caller, n)
            assert done["status"]["phase"] == "Succeeded", done
        assert users_seen(authorization, rest) == ["dave", "dave", "erin"], "each caller's own token"
        assert done["status"]["upstreamUser"] == "erin"
        assert token_requests(authorization, TOKEN_EXCHANGE) == 2, "dave's token was kept for his second call"
        assert all(r.get("resource") == rest.url for r in authorization.requests)

        # A caller with an API token has no JWT to exchange.
        refused = call(joch, agent(joch, "alice"), 9)
        assert refused["status"]["phase"] == "Failed", refused
        assert "did not authenticate with a JWT" in refused["status"]["error"]["message"], refused
        listed = joch.ok("GET", f"/v1/namespaces/{NAMESPACE}/credentials")["items"]
        assert sorted(c["spec"]["user"] for c in listed) == ["dave", "erin"]
        assert_nowhere([dave, erin, *authorization.issued, CLIENT_SECRET], tmp_path, joch, listed[0]["metadata"]["name"])
    finally:
        rest.stop()
        authorization.stop()
        joch.process.kill()
        joch.process.wait()


def test_joch_identifies_itself_by_its_client_id_metadata_document(authorization, joch):
    rest = ProtectedRest(authorization, "unused")
    try:
        document_url = f"{joch.base}/oauth/client-metadata.json"
        document = httpx2.get(document_url, timeout=10).json()
        assert document["client_id"] == document_url
        assert document["redirect_uris"] == [f"{joch.base}/oauth/callback"]
        assert document["token_endpoint_auth_method"] == "none"

        auth = per_user(authorization)
        for key in ["clientId", "clientSecret"]:
            del auth["oauth2"][key]
        auth["oauth2"]["clientMetadata"] = True
        joch.apply(endpoint("mail", rest.url, auth))
        echo_tool(joch, "mail")
        waiting, answers = in_background(joch, agent(joch, "alice"), 1)
        url = pending_consent(joch)["spec"]["payload"]["consentUrl"]
        assert urllib.parse.parse_qs(urllib.parse.urlsplit(url).query)["client_id"] == [document_url]
        assert consent(url, "alice@upstream").status_code == 200
        waiting.join(timeout=30)
        assert answers[0]["status"]["phase"] == "Succeeded", answers
        assert list(authorization.documents) == [document_url], "the server fetched the document"
        (exchange,) = [r for r in authorization.requests if r.get("grant_type") == "authorization_code"]
        assert exchange["client_id"] == document_url, "a public client names itself in the body"

        both = {"oauth2": {**auth["oauth2"], "clientId": "x"}}
        status, refused = joch.api("POST", f"/v1/namespaces/{NAMESPACE}/endpoints", endpoint("e", rest.url, both))
        assert status == 422 and refused["details"]["fields"][0]["field"] == "spec.auth.oauth2.clientMetadata"
    finally:
        rest.stop()


def test_an_mcp_client_is_sent_the_consent_url_and_its_call_then_answers(authorization, joch):
    rest = ProtectedRest(authorization, "unused")
    try:
        joch.apply(endpoint("mail", rest.url, per_user(authorization)))
        echo_tool(joch, "mail")
        alice = agent(joch, "alice")
        asked = []

        async def open_in_browser(context, params):
            # The client shows the URL; its user consents in their browser.
            asked.append(params)
            answer = await anyio.to_thread.run_sync(lambda: consent(params.url, "alice@upstream"))
            assert answer.status_code == 200, answer.text
            return types.ElicitResult(action="accept")

        async def scenario():
            headers = {"authorization": f"Bearer {alice}"}
            async with httpx2.AsyncClient(headers=headers, timeout=60) as http:
                async with streamable_http_client(joch.mcp_url(), http_client=http) as (read, write):
                    async with ClientSession(read, write, elicitation_callback=open_in_browser) as session:
                        await session.initialize()
                        return await session.call_tool("echo_mail", {"n": 1})

        result = anyio.run(scenario)
        assert not result.is_error, result
        (question,) = asked
        assert question.mode == "url" and question.url.startswith(authorization.authorize_url)
        assert users_seen(authorization, rest) == ["alice@upstream"], "the call ran once, as alice"
    finally:
        rest.stop()
