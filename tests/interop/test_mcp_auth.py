"""MCP authorization discovery: the official MCP Python SDK's OAuth client
meets a joch that accepts an identity provider's JWTs. On joch's 401 it
follows the challenge's `resource_metadata` to joch's protected-resource
metadata (RFC 9728), finds the identity provider there, gets a token for
joch's MCP endpoint from it (RFC 8707 `resource`) and calls a tool with it.

The identity provider is a minimal OAuth authorization server on loopback,
signing HS256 JWTs with a key joch reads from a JWKS file."""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import secrets
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import anyio
import httpx2
import pytest
from mcp import ClientSession
from mcp.client.auth import AuthorizationCodeResult, OAuthClientProvider
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.auth import OAuthClientInformationFull, OAuthClientMetadata, OAuthToken

from conftest import NAMESPACE, start_joch

ROOT = "root-secret-for-interop"
KEY = b"a-shared-secret-of-the-interop-identity-provider"
REDIRECT_URI = "http://127.0.0.1:9/callback"


def b64url(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).decode().rstrip("=")


def hs256(claims: dict) -> str:
    header = {"alg": "HS256", "typ": "JWT", "kid": "idp-1"}
    signing_input = ".".join(b64url(json.dumps(part).encode()) for part in (header, claims))
    signature = hmac.new(KEY, signing_input.encode(), hashlib.sha256).digest()
    return f"{signing_input}.{b64url(signature)}"


class IdentityProvider:
    """An OAuth authorization server: metadata (RFC 8414, and as OpenID
    Connect discovery), dynamic client registration, an authorization
    endpoint that approves at once, and a token endpoint issuing a JWT whose
    `aud` is the `resource` asked for, and for an `openid` scope an ID token
    for the client with the authorization request's nonce."""

    def __init__(self, role: str = "agent", namespace: str | list[str] = NAMESPACE) -> None:
        self.role = role
        self.namespace = namespace
        self.seen: list[tuple[str, str, dict]] = []
        self.codes: dict[str, dict] = {}
        provider = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args) -> None:
                pass

            def do_GET(self) -> None:
                provider.serve(self, "GET")

            def do_POST(self) -> None:
                provider.serve(self, "POST")

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.issuer = f"http://127.0.0.1:{self.server.server_port}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def serve(self, request: BaseHTTPRequestHandler, method: str) -> None:
        url = urllib.parse.urlsplit(request.path)
        length = int(request.headers.get("content-length") or 0)
        body = request.rfile.read(length).decode()
        if request.headers.get("content-type", "").startswith("application/json"):
            params = json.loads(body)
        else:
            params = dict(urllib.parse.parse_qsl(body or url.query))
        self.seen.append((method, url.path, params))
        route = {
            ("GET", "/.well-known/oauth-authorization-server"): self.metadata,
            ("GET", "/.well-known/openid-configuration"): self.metadata,
            ("POST", "/register"): self.register,
            ("GET", "/authorize"): self.authorize,
            ("POST", "/token"): self.token,
        }.get((method, url.path))
        status, headers, answer = route(params) if route else (404, {}, {"error": "not_found"})
        payload = json.dumps(answer).encode()
        request.send_response(status)
        for name, value in {"content-type": "application/json", **headers}.items():
            request.send_header(name, value)
        request.send_header("content-length", str(len(payload)))
        request.end_headers()
        request.wfile.write(payload)

    def metadata(self, _params: dict):
        return 200, {}, {
            "issuer": self.issuer,
            "authorization_endpoint": f"{self.issuer}/authorize",
            "token_endpoint": f"{self.issuer}/token",
            "registration_endpoint": f"{self.issuer}/register",
            "response_types_supported": ["code"],
            "grant_types_supported": ["authorization_code"],
            "code_challenge_methods_supported": ["S256"],
            "token_endpoint_auth_methods_supported": ["none"],
        }

    def register(self, client: dict):
        return 201, {}, {**client, "client_id": "interop-client", "token_endpoint_auth_method": "none"}

    def authorize(self, params: dict):
        code = secrets.token_urlsafe(16)
        self.codes[code] = params
        query = urllib.parse.urlencode({"code": code, "state": params["state"]})
        return 302, {"location": f"{params['redirect_uri']}?{query}"}, {}

    def token(self, params: dict):
        asked = self.codes.pop(params.get("code", ""), None)
        verifier = params.get("code_verifier", "").encode()
        if asked is None or b64url(hashlib.sha256(verifier).digest()) != asked["code_challenge"]:
            return 400, {}, {"error": "invalid_grant"}
        claims = {
            "iss": self.issuer,
            "sub": "carol@example.com",
            "aud": params.get("resource", self.issuer),
            "exp": int(time.time()) + 600,
            "namespace": self.namespace,
            "role": self.role,
        }
        answer = {"access_token": hs256(claims), "token_type": "Bearer", "expires_in": 600}
        if "openid" in asked.get("scope", "").split():
            answer["id_token"] = hs256({**claims, "aud": asked["client_id"], "nonce": asked.get("nonce")})
        return 200, {}, answer

    def jwks(self, path: Path) -> Path:
        path.write_text(json.dumps({"keys": [{"kty": "oct", "kid": "idp-1", "alg": "HS256", "k": b64url(KEY)}]}))
        return path


class MemoryStorage:
    """The SDK's TokenStorage, in memory."""

    def __init__(self) -> None:
        self.tokens: OAuthToken | None = None
        self.client: OAuthClientInformationFull | None = None

    async def get_tokens(self) -> OAuthToken | None:
        return self.tokens

    async def set_tokens(self, tokens: OAuthToken) -> None:
        self.tokens = tokens

    async def get_client_info(self) -> OAuthClientInformationFull | None:
        return self.client

    async def set_client_info(self, client_info: OAuthClientInformationFull) -> None:
        self.client = client_info


class Browser:
    """The user's browser: opens the authorization URL and hands the
    redirect's code back to the client, as a callback server would."""

    class _NoRedirect(urllib.request.HTTPRedirectHandler):
        def redirect_request(self, *args, **kwargs):
            return None

    def __init__(self) -> None:
        self.opened: list[str] = []
        self.redirect: dict[str, str] = {}

    async def open(self, url: str) -> None:
        self.opened.append(url)
        try:
            urllib.request.build_opener(self._NoRedirect).open(url, timeout=10)
        except urllib.error.HTTPError as answer:
            assert answer.code == 302, answer
            location = urllib.parse.urlsplit(answer.headers["location"])
            self.redirect = dict(urllib.parse.parse_qsl(location.query))

    async def callback(self) -> AuthorizationCodeResult:
        return AuthorizationCodeResult(code=self.redirect["code"], state=self.redirect["state"])


@pytest.fixture
def idp():
    provider = IdentityProvider()
    yield provider
    provider.server.shutdown()


@pytest.fixture
def joch_with_idp(tmp_path: Path, idp: IdentityProvider):
    env = {
        "JOCH_JWT_ISSUER": idp.issuer,
        "JOCH_JWT_JWKS": str(idp.jwks(tmp_path / "jwks.json")),
        "JOCH_ADMIN_TOKEN": ROOT,
    }
    server = start_joch(tmp_path, env)
    server.token = ROOT
    yield server
    server.process.kill()
    server.process.wait()


def ping_tool() -> dict:
    return {
        "apiVersion": "joch.dev/v1alpha1",
        "kind": "Tool",
        "metadata": {"name": "ping"},
        "spec": {"description": "Answers.", "inputSchema": {"type": "object"}, "backend": {"type": "noop"}},
    }


def test_the_client_discovers_the_identity_provider_from_the_challenge(joch_with_idp, idp):
    joch = joch_with_idp
    joch.apply(ping_tool())
    url = joch.mcp_url()
    browser = Browser()
    provider = OAuthClientProvider(
        server_url=url,
        client_metadata=OAuthClientMetadata(
            client_name="joch interop",
            redirect_uris=[REDIRECT_URI],
            grant_types=["authorization_code"],
            response_types=["code"],
            token_endpoint_auth_method="none",
        ),
        storage=MemoryStorage(),
        redirect_handler=browser.open,
        callback_handler=browser.callback,
    )

    exchanges: list[tuple[str, int, str]] = []

    async def record(response: httpx2.Response) -> None:
        challenge = response.headers.get("www-authenticate", "")
        exchanges.append((str(response.request.url), response.status_code, challenge))

    async def scenario():
        hooks = {"response": [record]}
        async with httpx2.AsyncClient(auth=provider, timeout=30, event_hooks=hooks) as http:
            async with streamable_http_client(url, http_client=http) as (read, write):
                async with ClientSession(read, write) as session:
                    await session.initialize()
                    assert [t.name for t in (await session.list_tools()).tools] == ["ping"]
                    assert not (await session.call_tool("ping", {})).is_error

    anyio.run(scenario)

    # The first request met joch's challenge; the client fetched the metadata it names.
    metadata_url = f"{joch.base}/.well-known/oauth-protected-resource/v1/namespaces/{NAMESPACE}/mcp"
    assert exchanges[0] == (url, 401, f'Bearer resource_metadata="{metadata_url}"'), exchanges[0]
    assert exchanges[1][:2] == (metadata_url, 200), exchanges[1]
    # joch's metadata named the endpoint and the provider.
    metadata = provider.context.protected_resource_metadata
    assert metadata is not None
    assert str(metadata.resource) == url
    assert [str(s) for s in metadata.authorization_servers] == [idp.issuer]
    assert str(provider.context.oauth_metadata.issuer) == idp.issuer
    # The token was asked for joch's MCP endpoint, and joch accepted it.
    tokens = [params for method, path, params in idp.seen if path == "/token"]
    assert [t["resource"] for t in tokens] == [url]
    assert browser.opened and f"resource={urllib.parse.quote(url, safe='')}" in browser.opened[0]
    [call] = joch.calls()
    assert call["spec"]["toolRef"]["name"] == "ping"
    assert call["status"]["phase"] == "Succeeded"


def test_a_token_for_another_resource_is_refused_with_the_challenge(joch_with_idp, idp):
    joch = joch_with_idp
    url = joch.mcp_url()
    claims = {"iss": idp.issuer, "sub": "mallory", "exp": int(time.time()) + 600, "namespace": NAMESPACE, "role": "agent"}
    initialize = json.dumps(
        {
            "jsonrpc": "2.0",
            "id": 1,
            "method": "initialize",
            "params": {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "t", "version": "0"}},
        }
    ).encode()

    def status_for(audience: str) -> tuple[int, str]:
        request = urllib.request.Request(
            url,
            data=initialize,
            method="POST",
            headers={
                "content-type": "application/json",
                "accept": "application/json, text/event-stream",
                "authorization": f"Bearer {hs256({**claims, 'aud': audience})}",
            },
        )
        try:
            with urllib.request.urlopen(request, timeout=30) as answer:
                return answer.status, ""
        except urllib.error.HTTPError as answer:
            return answer.code, answer.headers.get("www-authenticate", "")

    status, challenge = status_for("https://another.example/mcp")
    assert status == 401
    expected = f'{joch.base}/.well-known/oauth-protected-resource/v1/namespaces/{NAMESPACE}/mcp'
    assert f'resource_metadata="{expected}"' in challenge
    assert status_for(url) == (200, "")
