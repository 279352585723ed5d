"""joch as the client under test of the MCP conformance suite's
authorization scenarios (`auth/*`): the suite runs this with the URL of the
scenario's protected MCP server, and it makes that server an McpServer of
a namespace of its own whose tools run with each user's own token
(`authorization_code`, `perUser`, every endpoint discovered), then plays
what the suite's own client does in one process, the way joch splits it:

1. joch lists the server's tools with its own credential (`listAuth`: a
   bearer token the scenario's mock verifier accepts, `test-token-...`;
   joch never lists with a user's token, see docs/credentials.md);
2. a user calls `test-tool` through joch's REST API; joch discovers the
   authorization server (RFC 9728, RFC 8414) and the call waits for the
   user's consent (an Approval of kind `consent` with its URL);
3. the user's browser: plain GETs of the consent URL at the scenario's
   authorization server (which approves at once) and of its redirect to
   joch's `/oauth/callback`, where joch checks `iss` and exchanges the
   code;
4. the call runs with the user's token, or ends with joch's refusal.

For `auth/client-credentials-basic`, joch's own token (`client_credentials`)
lists and calls.

joch registers no client dynamically: the client is configured on the
McpServer, as an operator would, from the scenario's context where it
gives one (`client_id`, `client_secret`), else a pre-registered public
client, with a secret where the scenario's token endpoint wants one, or
joch's Client ID Metadata Document for `auth/basic-cimd`.

Exit status 0 when the steps ran (the suite scores what its servers saw)."""

from __future__ import annotations

import json
import os
import sys
import tempfile
import time
import urllib.error
import urllib.request
from pathlib import Path

JOCH = os.environ["JOCH_URL"].rstrip("/")
SCENARIO = os.environ["MCP_CONFORMANCE_SCENARIO"]
CONTEXT = json.loads(os.environ.get("MCP_CONFORMANCE_CONTEXT") or "{}")
REVISION = os.environ.get("MCP_CONFORMANCE_PROTOCOL_VERSION", "")
# A namespace of each run's own: the user's token kept from another run
# of the scenario would spare joch the flow under test.
SLUG = "".join(c if c.isalnum() else "-" for c in f"{SCENARIO}-{REVISION}").strip("-")[:42]
NAMESPACE = f"conf-{SLUG}-{os.getpid()}"
BASE = f"/v1/namespaces/{NAMESPACE}"
# A pre-registered client (the suite's token endpoints take any id).
CLIENT_ID = "joch-conformance"
# The scenarios whose token endpoint expects a confidential client.
CONFIDENTIAL = {"auth/token-endpoint-auth-basic", "auth/token-endpoint-auth-post"}
SETTLED = {"Succeeded", "Failed", "Denied", "TimedOut", "Cancelled"}


def log(*what: object) -> None:
    """For the suite's saved stderr of the run."""
    print(*what, file=sys.stderr, flush=True)


def api(method: str, path: str, body: object | None = None) -> tuple[int, dict]:
    data = json.dumps(body).encode() if body is not None else None
    request = urllib.request.Request(
        JOCH + path, data=data, method=method, headers={"content-type": "application/json"}
    )
    try:
        with urllib.request.urlopen(request, timeout=60) as response:
            return response.status, json.loads(response.read() or b"{}")
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read() or b"{}")


def secret(directory: Path, name: str, value: str) -> dict:
    """A `{file}` secret reference joch reads when it needs it."""
    path = directory / name
    path.write_text(value)
    return {"file": str(path)}


def oauth2(directory: Path) -> dict:
    """The McpServer's client for this scenario: per user, but for the
    client credentials scenario (joch's own token, from the context)."""
    if SCENARIO == "auth/client-credentials-basic":
        return {"oauth2": {"grant": "client_credentials", "clientId": CONTEXT["client_id"],
                           "clientSecret": secret(directory, "client-secret", CONTEXT["client_secret"])}}
    spec: dict = {"grant": "authorization_code", "perUser": True}
    if SCENARIO == "auth/basic-cimd":
        spec["clientMetadata"] = True
    elif CONTEXT.get("client_id"):
        spec["clientId"] = CONTEXT["client_id"]
        if CONTEXT.get("client_secret"):
            spec["clientSecret"] = secret(directory, "client-secret", CONTEXT["client_secret"])
    else:
        spec["clientId"] = CLIENT_ID
        if SCENARIO in CONFIDENTIAL:
            spec["clientSecret"] = secret(directory, "client-secret", "joch-conformance-secret")
    return {"oauth2": spec}


def register(url: str, directory: Path) -> None:
    http = {"url": url, "auth": oauth2(directory)}
    if http["auth"]["oauth2"].get("perUser"):
        http["listAuth"] = {"bearer": secret(directory, "listing-token", "test-token-joch-listing")}
    server = {
        "apiVersion": "joch.dev/v1alpha1",
        "kind": "McpServer",
        "metadata": {"name": "scenario"},
        "spec": {"http": http, "toolPrefix": ""},
    }
    status, body = api("POST", f"{BASE}/mcpservers", server)
    assert status in (200, 201), body


def wait_for_tool(name: str) -> bool:
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        if api("GET", f"{BASE}/tools/{name}")[0] == 200:
            return True
        time.sleep(0.1)
    log("tool never listed:", api("GET", f"{BASE}/mcpservers/scenario")[1].get("status"))
    return False


def call() -> dict:
    status, answer = api("POST", f"{BASE}/toolcalls?wait=false", {"spec": {"toolRef": {"name": "test-tool"}}})
    assert status in (200, 201, 202), answer
    return answer


def consent_url(name: str) -> str | None:
    """The consent URL the call `name` waits on, or None once it settled
    without one (joch refused to send the user anywhere)."""
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        _, record = api("GET", f"{BASE}/toolcalls/{name}")
        url = (record.get("spec", {}).get("approval") or {}).get("consentUrl")
        if url:
            return url
        if record.get("status", {}).get("phase") in SETTLED:
            log("settled without a consent:", json.dumps(record.get("status"))[:800])
            return None
        time.sleep(0.05)
    raise AssertionError(f"call {name} asked for no consent")


def browse(url: str) -> None:
    """The user's browser: the authorization server approves at once and
    redirects to joch's callback, which answers the page the user sees."""
    try:
        with urllib.request.urlopen(url, timeout=30) as page:
            log("consent page:", page.status, page.read()[:300])
    except urllib.error.HTTPError as e:
        log("consent page:", e.code, e.read()[:500])


def settle(name: str) -> dict:
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        _, record = api("GET", f"{BASE}/toolcalls/{name}")
        if record.get("status", {}).get("phase") in SETTLED:
            return record
        time.sleep(0.05)
    raise AssertionError(f"call {name} never settled")


def run(url: str, directory: Path) -> None:
    register(url, directory)
    if not wait_for_tool("test-tool"):
        return
    name = call()["metadata"]["name"]
    if SCENARIO == "auth/client-credentials-basic":
        log("call:", json.dumps(settle(name).get("status"))[:800])
        return
    consent = consent_url(name)
    if consent is None:
        return
    log("consent url:", consent)
    browse(consent)
    done = settle(name)
    log("call:", json.dumps(done.get("status"))[:800])
    if done["status"]["phase"] == "Succeeded":
        # The user's next call reuses the kept token.
        log("again:", json.dumps(settle(call()["metadata"]["name"]).get("status"))[:300])


def main() -> int:
    url = sys.argv[-1]
    with tempfile.TemporaryDirectory() as directory:
        try:
            run(url, Path(directory))
        finally:
            api("DELETE", f"{BASE}/mcpservers/scenario")
    return 0


if __name__ == "__main__":
    sys.exit(main())
