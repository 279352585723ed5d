"""Upstream credentials (`spec.auth`) and the token vault, end to end: joch
obtains tokens from a real OAuth authorization server on loopback and calls
an MCP server protected by the official Python SDK's server-side
authorization, and a protected JSON endpoint; the tokens are kept sealed in
the vault, refreshed once when calls race, listed and revoked; and no token
value is found in joch's database files or its logs."""

from __future__ import annotations

import base64
import contextlib
import glob
import os
import secrets
import shutil
import subprocess
import time
import urllib.parse
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from selenium.webdriver.common.by import By

from conftest import NAMESPACE, start_joch
from test_console import browser, check_page, post_from_page, sign_in, wait  # noqa: F401 (a fixture)
from upstream_oauth import (
    CLIENT_ID,
    CLIENT_SECRET,
    AuthorizationServer,
    ProtectedMcp,
    ProtectedRest,
)

ROOT = "root-secret-for-credentials"
VAULT_KEY = base64.b64encode(bytes(range(32))).decode()
STATIC_BEARER = "static-bearer-never-logged"


@pytest.fixture
def authorization():
    server = AuthorizationServer()
    yield server
    server.stop()


@pytest.fixture
def vaulted(tmp_path: Path):
    env = {
        "JOCH_ADMIN_TOKEN": ROOT,
        "JOCH_VAULT_KEY": VAULT_KEY,
        "JOCH_LOG": "debug",
        "UPSTREAM_CLIENT_SECRET": CLIENT_SECRET,
        "UPSTREAM_BEARER": STATIC_BEARER,
    }
    server = start_joch(tmp_path, env)
    server.token = ROOT
    yield server
    server.process.kill()
    server.process.wait()


def oauth2(authorization: AuthorizationServer | None, resource: str | None = None) -> dict:
    """client_credentials at `authorization`'s token endpoint; with None,
    joch discovers it from the upstream."""
    spec = {
        "grant": "client_credentials",
        "clientId": CLIENT_ID,
        "clientSecret": {"env": "UPSTREAM_CLIENT_SECRET"},
        "scopes": ["tools"],
    }
    if authorization:
        spec["tokenUrl"] = authorization.token_url
    if resource:
        spec["resource"] = resource
    return {"oauth2": spec}


def protected_server(url: str, auth: dict, name: str = "protected") -> dict:
    return {
        "apiVersion": "joch.dev/v1alpha1",
        "kind": "McpServer",
        "metadata": {"name": name},
        "spec": {"http": {"url": url, "auth": auth}},
    }


def wait_for_tool(joch, name: str) -> None:
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        status, _ = joch.api("GET", f"/v1/namespaces/{NAMESPACE}/tools/{name}")
        if status == 200:
            return
        time.sleep(0.1)
    server = joch.ok("GET", f"/v1/namespaces/{NAMESPACE}/mcpservers/protected")
    raise AssertionError(f"tool {name} never appeared: {server.get('status')}")


def call(joch, tool: str, arguments: dict | None = None) -> dict:
    body = {"spec": {"toolRef": {"name": tool}, "input": arguments or {}}}
    return joch.ok("POST", f"/v1/namespaces/{NAMESPACE}/toolcalls", body)


def echo_tool(joch, endpoint: str) -> None:
    joch.ok("POST", f"/v1/namespaces/{NAMESPACE}/tools", {
        "name": f"echo_{endpoint}",
        "parameters": [{"name": "n", "type": "integer"}],
        "actions": [{"type": "webhook", "endpoint": endpoint, "body": {"n": "{{params.n}}"}}],
    })


def endpoint(name: str, url: str, auth: dict) -> dict:
    return {"kind": "Endpoint", "metadata": {"name": name}, "spec": {"url": url, "auth": auth}}


def assert_nowhere(secrets: list[str], tmp_path: Path, joch, present: str) -> None:
    """None of `secrets` in the database files or joch's debug log, where
    `present` (the credential's name) is found: the search can succeed."""
    files = [p for p in tmp_path.rglob("*") if p.is_file()]
    logs = "".join(joch.stderr)
    assert any(present.encode() in p.read_bytes() for p in files), "the search finds records"
    assert "DEBUG" in logs, "joch logged at debug"
    assert secrets
    for secret in secrets:
        for path in files:
            assert secret.encode() not in path.read_bytes(), f"{secret[:6]}... in {path.name}"
        assert secret not in logs, f"{secret[:6]}... in joch's log"


def test_client_credentials_reach_the_protected_mcp_server(authorization, vaulted, tmp_path):
    upstream = ProtectedMcp(authorization)
    try:
        vaulted.apply(protected_server(upstream.url, oauth2(authorization, upstream.url)))
        wait_for_tool(vaulted, "protected.whoami")
        first = call(vaulted, "protected.whoami")
        assert first["status"]["phase"] == "Succeeded", first
        assert "hello joch-client" in str(first["status"]["output"])
        # Listing and calling shared one token, asked for joch's client
        # with Basic authentication and the server's URL as the resource.
        assert [r.get("resource") for r in authorization.requests] == [upstream.url]
        assert authorization.requests[0]["scope"] == "tools"
        second = call(vaulted, "protected.whoami")
        assert second["status"]["phase"] == "Succeeded", second
        assert len(authorization.requests) == 1, "the kept token was used again"

        listed = vaulted.ok("GET", f"/v1/namespaces/{NAMESPACE}/credentials")["items"]
        assert [c["metadata"]["name"] for c in listed] == ["mcpserver.protected.service"]
        spec = listed[0]["spec"]
        assert spec["upstream"] == {"kind": "McpServer", "name": "protected"}
        assert spec["grant"] == "client_credentials" and spec["keyId"].startswith("k-")
        assert "sealed" not in spec
        assert_nowhere([*authorization.issued, CLIENT_SECRET], tmp_path, vaulted, "mcpserver.protected.service")
    finally:
        upstream.stop()


def test_the_token_endpoint_and_resource_are_discovered_from_the_401(authorization, vaulted):
    upstream = ProtectedMcp(authorization)
    try:
        # No tokenUrl, no resource: the 401's resource_metadata (RFC 9728)
        # names the authorization server, whose RFC 8414 metadata names
        # the token endpoint; the resource metadata names the resource.
        vaulted.apply(protected_server(upstream.url, oauth2(None)))
        wait_for_tool(vaulted, "protected.whoami")
        done = call(vaulted, "protected.whoami")
        assert done["status"]["phase"] == "Succeeded", done
        assert [r.get("resource") for r in authorization.requests] == [upstream.url]
        assert ("GET", "/.well-known/oauth-authorization-server") in authorization.seen
    finally:
        upstream.stop()


def test_without_auth_the_protected_server_refuses_joch(authorization, vaulted):
    upstream = ProtectedMcp(authorization)
    try:
        server = {**protected_server(upstream.url, {}), "spec": {"http": {"url": upstream.url}}}
        status, answer = vaulted.api("POST", f"/v1/namespaces/{NAMESPACE}/mcpservers", server)
        assert status == 201, answer
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            got = vaulted.ok("GET", f"/v1/namespaces/{NAMESPACE}/mcpservers/protected")
            if got.get("status", {}).get("phase") == "Unavailable":
                break
            time.sleep(0.1)
        assert got["status"]["phase"] == "Unavailable", got
    finally:
        upstream.stop()


def test_a_bearer_secret_and_an_oauth_token_reach_a_protected_endpoint(authorization, vaulted, tmp_path):
    rest = ProtectedRest(authorization, STATIC_BEARER)
    try:
        vaulted.apply(endpoint("static", rest.url, {"bearer": {"env": "UPSTREAM_BEARER"}}))
        vaulted.apply(endpoint("oauth", rest.url, oauth2(authorization)))
        for name in ["static", "oauth"]:
            echo_tool(vaulted, name)
            done = call(vaulted, f"echo_{name}", {"n": 1})
            assert done["status"]["phase"] == "Succeeded", done
        assert rest.seen[0] == STATIC_BEARER
        assert rest.seen[1] in authorization.issued
        assert_nowhere([STATIC_BEARER, *authorization.issued, CLIENT_SECRET], tmp_path, vaulted, "endpoint.oauth.service")
    finally:
        rest.stop()


def test_an_expiring_token_is_refreshed_once_when_calls_race(vaulted):
    # Tokens live 61 s and joch refreshes within 60 s of expiry: each is
    # good for about a second.
    authorization = AuthorizationServer(lifetime=61)
    rest = ProtectedRest(authorization, STATIC_BEARER)
    try:
        vaulted.apply(endpoint("oauth", rest.url, oauth2(authorization)))
        echo_tool(vaulted, "oauth")
        assert call(vaulted, "echo_oauth", {"n": 0})["status"]["phase"] == "Succeeded"
        assert len(authorization.requests) == 1
        time.sleep(1.2)
        with ThreadPoolExecutor(max_workers=8) as pool:
            done = list(pool.map(lambda n: call(vaulted, "echo_oauth", {"n": n}), range(1, 9)))
        assert all(d["status"]["phase"] == "Succeeded" for d in done), done
        assert len(authorization.requests) == 2, "one refresh for eight racing calls"
        assert len(set(rest.seen[1:])) == 1, "they all used the refreshed token"
    finally:
        rest.stop()
        authorization.stop()


def test_a_revoked_credential_is_obtained_again_and_only_admins_manage_them(authorization, vaulted):
    rest = ProtectedRest(authorization, STATIC_BEARER)
    try:
        vaulted.apply(endpoint("oauth", rest.url, oauth2(authorization)))
        echo_tool(vaulted, "oauth")
        call(vaulted, "echo_oauth", {"n": 1})
        listed = vaulted.cli("--token", ROOT, "credentials", "list", "-n", NAMESPACE)
        assert listed.startswith("endpoint.oauth.service\tEndpoint/oauth\t(service)\t"), listed

        agent = vaulted.ok("POST", f"/v1/namespaces/{NAMESPACE}/tokens", {"name": "bot", "role": "approver"})
        vaulted.token = agent["token"]
        status, refused = vaulted.api("GET", f"/v1/namespaces/{NAMESPACE}/credentials")
        assert (status, refused["code"]) == (403, "forbidden"), refused
        status, refused = vaulted.api("DELETE", f"/v1/namespaces/{NAMESPACE}/credentials/endpoint.oauth.service")
        assert status == 403, refused
        vaulted.token = ROOT

        out = vaulted.cli("--token", ROOT, "credentials", "revoke", "endpoint.oauth.service", "-n", NAMESPACE)
        assert "revoked" in out
        assert vaulted.ok("GET", f"/v1/namespaces/{NAMESPACE}/credentials")["items"] == []
        call(vaulted, "echo_oauth", {"n": 2})
        assert len(authorization.requests) == 2, "a new token after the revocation"
        status, missing = vaulted.api("DELETE", f"/v1/namespaces/{NAMESPACE}/credentials/nope")
        assert (status, missing["code"]) == (404, "credential_not_found"), missing
    finally:
        rest.stop()


def test_the_console_lists_and_revokes_credentials_for_admins_only(authorization, vaulted, browser):
    rest = ProtectedRest(authorization, STATIC_BEARER)
    try:
        vaulted.apply(endpoint("oauth", rest.url, oauth2(authorization)))
        echo_tool(vaulted, "oauth")
        call(vaulted, "echo_oauth", {"n": 1})
        token = next(t for t in rest.seen if authorization.valid(t))
        approver, agent = (
            vaulted.ok("POST", f"/v1/namespaces/{NAMESPACE}/tokens", {"name": name, "role": role})
            for name, role in [("alice", "approver"), ("bot", "agent")]
        )

        sign_in(browser, vaulted.base, ROOT)
        browser.get(f"{vaulted.base}/ui/credentials?ns={NAMESPACE}")
        row = browser.find_element(By.XPATH, "//tr[td[text()='endpoint.oauth.service']]")
        assert "Endpoint/oauth" in row.text and "client_credentials" in row.text and "joch (service)" in row.text
        assert token not in browser.page_source, "the token is never shown"
        check_page(browser, "credentials")
        csrf_less = post_from_page(browser, "/ui/credentials/endpoint.oauth.service/revoke", {}, {})
        assert csrf_less["status"] == 403, csrf_less
        browser.find_element(By.CSS_SELECTOR, "button[aria-label='Revoke endpoint.oauth.service']").click()
        wait(browser, lambda d: "No credential in this namespace." in d.find_element(By.ID, "main").text)
        assert vaulted.ok("GET", f"/v1/namespaces/{NAMESPACE}/credentials")["items"] == []

        call(vaulted, "echo_oauth", {"n": 2})
        for secret in (approver["token"], agent["token"]):
            sign_in(browser, vaulted.base, secret)
            assert not browser.find_elements(By.LINK_TEXT, "Credentials"), "not in their menu"
            csrf = browser.find_element(By.CSS_SELECTOR, "meta[name=csrf-token]").get_attribute("content")
            revoke = "/ui/credentials/endpoint.oauth.service/revoke"
            refused = post_from_page(browser, revoke, {}, {"x-csrf-token": csrf})
            assert (refused["status"], refused["body"]["code"]) == (403, "forbidden"), refused
            browser.get(f"{vaulted.base}/ui/credentials?ns={NAMESPACE}")
            assert "cannot read credentials" in browser.page_source
        assert len(vaulted.ok("GET", f"/v1/namespaces/{NAMESPACE}/credentials")["items"]) == 1
    finally:
        rest.stop()


def test_a_failing_token_request_fails_the_call_saying_why(authorization, tmp_path):
    joch = start_joch(tmp_path, {"JOCH_VAULT_KEY": VAULT_KEY, "UPSTREAM_CLIENT_SECRET": "wrong"})
    rest = ProtectedRest(authorization, STATIC_BEARER)
    try:
        joch.apply(endpoint("oauth", rest.url, oauth2(authorization)))
        echo_tool(joch, "oauth")
        failed = call(joch, "echo_oauth", {"n": 1})
        assert failed["status"]["phase"] == "Failed", failed
        message = failed["status"]["error"]["message"]
        assert "HTTP 401: invalid_client" in message, message
        assert "wrong" not in str(failed)
    finally:
        rest.stop()
        joch.process.kill()


def test_auth_mistakes_are_named_at_their_paths(vaulted):
    bad = protected_server("http://127.0.0.1:9/mcp", {"oauth2": {
        "grant": "token_exchange", "perUser": True, "tokenUrl": "ftp://as", "clientId": "",
        "clientSecret": {"env": "A", "file": "/b"},
    }})
    status, answer = vaulted.api("POST", f"/v1/namespaces/{NAMESPACE}/mcpservers", bad)
    assert (status, answer["code"]) == (422, "invalid_resource"), answer
    fields = [f["field"] for f in answer["details"]["fields"]]
    assert fields == [
        "spec.http.auth.oauth2.perUser",
        "spec.http.auth.oauth2.tokenUrl",
        "spec.http.auth.oauth2.clientId",
        "spec.http.auth.oauth2.clientSecret",
        "spec.http.listAuth",
    ], answer
    assert "lists the server's tools with its own credential" in answer["details"]["fields"][-1]["message"]
    status, answer = vaulted.api("POST", f"/v1/namespaces/{NAMESPACE}/endpoints",
                                 endpoint("e", "http://127.0.0.1:9/", {}))
    assert [f["field"] for f in answer["details"]["fields"]] == ["spec.auth"], answer


def test_a_rotated_vault_key_opens_old_tokens_and_seals_them_again(authorization, tmp_path):
    rest = ProtectedRest(authorization, STATIC_BEARER)
    env = {"JOCH_ADMIN_TOKEN": ROOT, "UPSTREAM_CLIENT_SECRET": CLIENT_SECRET}
    first = start_joch(tmp_path, {**env, "JOCH_VAULT_KEY": VAULT_KEY})
    first.token = ROOT
    try:
        first.apply(endpoint("oauth", rest.url, oauth2(authorization)))
        echo_tool(first, "oauth")
        call(first, "echo_oauth", {"n": 1})
        (old,) = first.ok("GET", f"/v1/namespaces/{NAMESPACE}/credentials")["items"]
        first.process.kill()
        first.process.wait()

        new_key = base64.b64encode(bytes(range(32, 64))).decode()
        keys = tmp_path / "vault-keys"
        keys.write_text(f"{new_key}\n# the previous key, until every token is sealed again\n{VAULT_KEY}\n")
        second = start_joch(tmp_path, {**env, "JOCH_VAULT_KEY_FILE": str(keys)})
        second.token = ROOT
        done = call(second, "echo_oauth", {"n": 2})
        assert done["status"]["phase"] == "Succeeded", done
        assert len(authorization.requests) == 1, "the old key still opened the token"
        (now,) = second.ok("GET", f"/v1/namespaces/{NAMESPACE}/credentials")["items"]
        assert now["spec"]["keyId"] != old["spec"]["keyId"], "sealed again under the new key"
        second.process.kill()
        second.process.wait()
    finally:
        rest.stop()


def fresh_postgres_database() -> tuple[str, str]:
    """A new database on the test cluster (JOCH_TEST_POSTGRES): its URL and
    the psql binary's directory."""
    url = os.environ.get("JOCH_TEST_POSTGRES")
    if not url:
        pytest.skip("JOCH_TEST_POSTGRES is not set (scripts/test sets it)")
    bins = sorted(glob.glob("/usr/lib/postgresql/*/bin"))
    bin_dir = os.path.dirname(shutil.which("psql") or "") or (bins[-1] if bins else "")
    name = f"credentials_{secrets.token_hex(4)}"
    subprocess.run([f"{bin_dir}/psql", url, "-qc", f"CREATE DATABASE {name}"], check=True)
    parts = urllib.parse.urlsplit(url)
    return urllib.parse.urlunsplit(parts._replace(path=f"/{name}")), bin_dir


@contextlib.contextmanager
def two_replicas(tmp_path, store):
    """Replicas `a` and `b` of joch on one PostgreSQL store, with the root
    token, the vault key and the upstream client's secret; killed after."""
    env = {"JOCH_ADMIN_TOKEN": ROOT, "JOCH_VAULT_KEY": VAULT_KEY, "UPSTREAM_CLIENT_SECRET": CLIENT_SECRET}
    replicas = []
    try:
        for name in ["a", "b"]:
            (tmp_path / name).mkdir()
            replica = start_joch(tmp_path / name, env, store=store)
            replica.token = ROOT
            replicas.append(replica)
        yield replicas[0], replicas[1]
    finally:
        for replica in replicas:
            replica.process.kill()
            replica.process.wait()


def assert_postgres_holds_none(bin_dir, store, written, secrets):
    """The store's dump holds `written` (so the dump is of the right
    database) and none of `secrets`."""
    dump = subprocess.run([f"{bin_dir}/pg_dump", store], check=True, capture_output=True, text=True).stdout
    assert written in dump
    for secret in secrets:
        assert secret not in dump, f"{secret[:6]}... in PostgreSQL"


def test_replicas_refresh_once_and_postgres_holds_no_token(tmp_path):
    store, bin_dir = fresh_postgres_database()
    authorization = AuthorizationServer(lifetime=61)
    rest = ProtectedRest(authorization, STATIC_BEARER)
    try:
        with two_replicas(tmp_path, store) as (a, b):
            a.apply(endpoint("oauth", rest.url, oauth2(authorization)))
            echo_tool(a, "oauth")
            assert call(a, "echo_oauth", {"n": 0})["status"]["phase"] == "Succeeded"
            assert call(b, "echo_oauth", {"n": 0})["status"]["phase"] == "Succeeded"
            assert len(authorization.requests) == 1, "b used the token a kept"
            time.sleep(1.2)
            with ThreadPoolExecutor(max_workers=8) as pool:
                done = list(pool.map(lambda n: call((a, b)[n % 2], "echo_oauth", {"n": n}), range(8)))
            assert all(d["status"]["phase"] == "Succeeded" for d in done), done
            assert len(authorization.requests) == 2, "one refresh across both replicas"
            assert_postgres_holds_none(bin_dir, store, "endpoint.oauth.service", [*authorization.issued, CLIENT_SECRET])
    finally:
        rest.stop()
        authorization.stop()
