"""Signing in to the console through the identity provider (OpenID Connect,
authorization code with PKCE), in Debian's Chromium, against a real
`joch serve` and the loopback identity provider of test_mcp_auth.py."""

from __future__ import annotations

import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path

import pytest
from selenium.webdriver.common.by import By

from conftest import NAMESPACE, start_joch
from test_console import browser, check_page, wait  # noqa: F401 (a fixture)
from test_mcp_auth import IdentityProvider

CLIENT_ID = "joch-console"


@pytest.fixture(scope="module")
def oidc(tmp_path_factory):
    idp = IdentityProvider(role="approver")
    tmp: Path = tmp_path_factory.mktemp("console-oidc")
    env = {
        "JOCH_JWT_ISSUER": idp.issuer,
        "JOCH_JWT_JWKS": str(idp.jwks(tmp / "jwks.json")),
        "JOCH_OIDC_CLIENT_ID": CLIENT_ID,
    }
    joch = start_joch(tmp, env)
    yield joch, idp
    joch.process.kill()
    joch.process.wait()
    idp.server.shutdown()


def test_signing_in_with_the_issuer_runs_the_code_flow_with_pkce(oidc, browser):
    joch, idp = oidc
    browser.delete_all_cookies()
    browser.get(f"{joch.base}/ui/inbox")
    assert browser.current_url.endswith("/ui/signin")
    link = browser.find_element(By.LINK_TEXT, f"Sign in with {idp.issuer}")
    check_page(browser, "signin-oidc")
    link.click()
    wait(browser, lambda d: d.current_url.startswith(f"{joch.base}/ui/inbox"))
    who = browser.find_element(By.CSS_SELECTOR, ".who").text
    assert "carol@example.com" in who and "approver" in who and NAMESPACE in who
    session = browser.get_cookie("joch_session")
    assert session["httpOnly"] and session["sameSite"] == "Strict"
    assert browser.get_cookie("joch_oidc") is None, "the binding is cleared"

    asked = next(p for m, path, p in idp.seen if path == "/authorize")
    assert asked["client_id"] == CLIENT_ID and asked["scope"] == "openid"
    assert asked["code_challenge_method"] == "S256" and asked["nonce"]
    assert asked["redirect_uri"] == f"{joch.base}/ui/signin/oidc/callback"
    exchanged = next(p for m, path, p in idp.seen if path == "/token")
    assert exchanged["code_verifier"] and "client_secret" not in exchanged

    # The provider's redirect, replayed, signs nobody in: the sign-in was
    # taken once.
    callback = f"{joch.base}/ui/signin/oidc/callback?" + urllib.parse.urlencode(
        {"code": "stolen", "state": asked["state"]}
    )
    browser.delete_all_cookies()
    browser.get(callback)
    alert = browser.find_element(By.CSS_SELECTOR, "p.alert").text
    assert "unknown, expired or was started in another browser" in alert
    browser.get(f"{joch.base}/ui/inbox")
    assert browser.current_url.endswith("/ui/signin")


def test_a_sign_in_started_in_another_browser_is_refused(oidc, browser):
    joch, idp = oidc
    browser.delete_all_cookies()
    browser.get(f"{joch.base}/ui/signin")
    start = f"{joch.base}/ui/signin/oidc"
    # Another browser starts a sign-in and lures this one to its callback.
    class NoRedirect(urllib.request.HTTPRedirectHandler):
        def redirect_request(self, *args, **kwargs):
            return None

    try:
        urllib.request.build_opener(NoRedirect).open(start, timeout=10)
        raise AssertionError("a redirect to the provider was expected")
    except urllib.error.HTTPError as answer:
        assert answer.code == 303, answer.code
        to_provider = answer.headers["location"]
    try:
        urllib.request.build_opener(NoRedirect).open(to_provider, timeout=10)
    except urllib.error.HTTPError as answer:
        callback = answer.headers["location"]
    browser.get(callback)
    assert "started in another browser" in browser.find_element(By.CSS_SELECTOR, "p.alert").text
    browser.get(f"{joch.base}/ui/inbox")
    assert browser.current_url.endswith("/ui/signin")


def test_sign_ins_share_one_fetch_of_the_discovery_document(oidc, browser):
    joch, idp = oidc
    for _ in range(2):
        browser.delete_all_cookies()
        browser.get(f"{joch.base}/ui/signin")
        browser.find_element(By.LINK_TEXT, f"Sign in with {idp.issuer}").click()
        wait(browser, lambda d: d.current_url.startswith(f"{joch.base}/ui/inbox"))
    tokens = [path for _, path, _ in idp.seen if path == "/token"]
    discoveries = [path for _, path, _ in idp.seen if path == "/.well-known/openid-configuration"]
    assert len(tokens) >= 2, "two sign-ins ran to the end"
    assert len(discoveries) == 1, f"fetched {len(discoveries)} times: kept for its TTL"


def test_a_jwt_of_several_namespaces_switches_between_them(tmp_path, browser):
    """A JWT whose `namespace` claim lists two acts in both: the console
    suggests exactly those two, opens a call waiting in the second, and
    shows nothing of a namespace it does not claim."""
    idp = IdentityProvider(role="approver", namespace=[NAMESPACE, "payments"])
    env = {
        "JOCH_JWT_ISSUER": idp.issuer,
        "JOCH_JWT_JWKS": str(idp.jwks(tmp_path / "jwks.json")),
        "JOCH_OIDC_CLIENT_ID": CLIENT_ID,
        "JOCH_ADMIN_TOKEN": "root-of-the-several-namespaces-test",
    }
    joch = start_joch(tmp_path, env)
    try:
        joch.token = "root-of-the-several-namespaces-test"
        for ns in ("payments", "elsewhere"):
            joch.apply({
                "apiVersion": "joch.dev/v1alpha1",
                "kind": "Tool",
                "metadata": {"name": "wire"},
                "spec": {
                    "description": "Sends money.",
                    "inputSchema": {"type": "object"},
                    "sideEffects": {"level": "financial", "requiresApproval": True},
                    "backend": {"type": "noop"},
                },
            }, namespace=ns)
            joch.ok("POST", f"/v1/namespaces/{ns}/toolcalls?wait=false",
                    {"spec": {"toolRef": {"name": "wire"}, "input": {}}})

        browser.delete_all_cookies()
        browser.get(f"{joch.base}/ui/signin")
        browser.find_element(By.LINK_TEXT, f"Sign in with {idp.issuer}").click()
        wait(browser, lambda d: d.current_url.startswith(f"{joch.base}/ui/inbox"))
        offered = sorted(o.get_attribute("value")
                         for o in browser.find_elements(By.CSS_SELECTOR, "datalist#namespaces option"))
        assert offered == sorted([NAMESPACE, "payments"]), offered
        waiting = browser.find_element(By.LINK_TEXT, "payments")
        assert "1 waiting" in waiting.find_element(By.XPATH, "..").text
        assert not browser.find_elements(By.LINK_TEXT, "elsewhere"), "a namespace it does not claim"
        waiting.click()
        wait(browser, lambda d: "ns=payments" in d.current_url)
        assert "namespace payments" in browser.find_element(By.CSS_SELECTOR, ".who").text
        check_page(browser, "inbox-jwt-namespaces")

        # Switching to a namespace it does not claim shows its first one.
        field = browser.find_element(By.ID, "switch-ns")
        field.clear()
        field.send_keys("elsewhere")
        field.submit()
        wait(browser, lambda d: "ns=elsewhere" in d.current_url)
        assert f"namespace {sorted([NAMESPACE, 'payments'])[0]}" in browser.find_element(By.CSS_SELECTOR, ".who").text
    finally:
        joch.process.kill()
        joch.process.wait()
        idp.server.shutdown()
