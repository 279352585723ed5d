"""A protected upstream on loopback, for joch's upstream credentials:

- `AuthorizationServer`: an OAuth 2.0 authorization server (RFC 8414
  metadata, a token endpoint for the client_credentials, authorization_code
  (with PKCE S256, RFC 7636) and refresh_token grants with HTTP Basic
  client authentication, RFC 8707 `resource`; an authorization endpoint
  where the signed-in user, named by a `user` cookie as a browser session
  would, consents or, with `consent=deny`, declines; token exchange, RFC
  8693, of a JWT signed with `subject_key`), issuing opaque random
  tokens with a lifetime the test sets;
- `ProtectedMcp`: an MCP server built with the official Python SDK's
  server-side authorization (`AuthSettings` + a `TokenVerifier`): 401 with a
  `WWW-Authenticate` challenge and RFC 9728 metadata without a valid token;
- `ProtectedRest`: a plain JSON endpoint that takes the same tokens.

Every issued token is remembered, so that the tests can search joch's
database and logs for them."""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import secrets
import threading
import time
import urllib.parse
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import uvicorn
from mcp.server.auth.provider import AccessToken
from mcp.server.auth.settings import AuthSettings
from mcp.server.mcpserver import MCPServer

from conftest import free_port

TOKEN_EXCHANGE = "urn:ietf:params:oauth:grant-type:token-exchange"
JWT_TYPE = "urn:ietf:params:oauth:token-type:jwt"
CLIENT_ID = "joch-client"
CLIENT_SECRET = "client-secret-never-logged"


def _serve(handler_of) -> ThreadingHTTPServer:
    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args) -> None:
            pass

        def do_GET(self) -> None:
            handler_of(self, "GET")

        def do_POST(self) -> None:
            handler_of(self, "POST")

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


def _answer(request: BaseHTTPRequestHandler, status: int, body: dict) -> None:
    payload = json.dumps(body).encode()
    request.send_response(status)
    request.send_header("content-type", "application/json")
    request.send_header("content-length", str(len(payload)))
    request.end_headers()
    request.wfile.write(payload)


class AuthorizationServer:
    def __init__(self, lifetime: int = 3600, subject_key: bytes | None = None) -> None:
        self.lifetime = lifetime
        # The key of the identity provider whose JWTs token exchange takes.
        self.subject_key = subject_key
        self.lock = threading.Lock()
        # token -> {client_id, scopes, resource, exp}
        self.issued: dict[str, dict] = {}
        self.requests: list[dict] = []
        self.seen: list[tuple[str, str]] = []
        # code -> the authorization request it answers; refresh token -> user
        self.codes: dict[str, dict] = {}
        self.refresh_tokens: dict[str, str] = {}
        # Every code and refresh token ever issued, for the searches.
        self.other_secrets: list[str] = []
        # Client ID Metadata Documents fetched, by URL.
        self.documents: dict[str, dict] = {}
        # RFC 9207: what the metadata says of `iss` (None: nothing), the
        # `iss` sent back with a code (None: none); the `issuer` the
        # metadata claims, when not its own (RFC 8414 §3.3 tests).
        self.iss_supported: bool | None = None
        self.iss_sent: str | None = None
        self.metadata_issuer: str | None = None
        self.server = _serve(self._serve)
        self.issuer = f"http://127.0.0.1:{self.server.server_port}"

    @property
    def token_url(self) -> str:
        return f"{self.issuer}/token"

    @property
    def authorize_url(self) -> str:
        return f"{self.issuer}/authorize"

    def _authorize(self, request: BaseHTTPRequestHandler) -> None:
        """The user's consent: a 302 back to the client with a code (or an
        error), bound to the PKCE challenge and the redirect URI."""
        query = dict(urllib.parse.parse_qsl(urllib.parse.urlsplit(request.path).query))
        cookies = dict(c.strip().split("=", 1) for c in request.headers.get("cookie", "").split(";") if "=" in c)
        client = query.get("client_id", "")
        known = client == CLIENT_ID or self._document_allows(client, query.get("redirect_uri", ""))
        if not known or query.get("code_challenge_method") != "S256":
            return _answer(request, 400, {"error": "invalid_request"})
        back = {"state": query["state"]}
        if cookies.get("consent") == "deny":
            back["error"] = "access_denied"
        else:
            code = "code-" + secrets.token_urlsafe(16)
            with self.lock:
                self.codes[code] = {**query, "user": cookies.get("user", "nobody")}
                self.other_secrets.append(code)
            back["code"] = code
        if self.iss_sent is not None:
            back["iss"] = self.iss_sent
        request.send_response(302)
        request.send_header("location", f"{query['redirect_uri']}?{urllib.parse.urlencode(back)}")
        request.send_header("content-length", "0")
        request.end_headers()

    def _document_allows(self, client: str, redirect_uri: str) -> bool:
        """A URL client id (a Client ID Metadata Document): fetched, its
        `client_id` its own URL, the redirect URI one it lists."""
        if not client.startswith("http"):
            return False
        with urllib.request.urlopen(client, timeout=10) as answer:
            document = json.loads(answer.read())
        with self.lock:
            self.documents[client] = document
        return document.get("client_id") == client and redirect_uri in document.get("redirect_uris", [])

    def _grant(self, form: dict) -> tuple[str | None, dict]:
        """The user a code or refresh grant is for, or (None, error)."""
        grant = form.get("grant_type")
        if grant == "client_credentials":
            return CLIENT_ID, {}
        if grant == "refresh_token":
            with self.lock:
                user = self.refresh_tokens.get(form.get("refresh_token", ""))
            return (user, {}) if user else (None, {"error": "invalid_grant"})
        if grant == TOKEN_EXCHANGE:
            return self._exchange(form)
        if grant != "authorization_code":
            return None, {"error": "unsupported_grant_type"}
        with self.lock:
            asked = self.codes.pop(form.get("code", ""), None)
        verifier = form.get("code_verifier", "").encode()
        challenge = base64.urlsafe_b64encode(hashlib.sha256(verifier).digest()).rstrip(b"=").decode()
        same_client = asked and (asked["client_id"] == CLIENT_ID or asked["client_id"] == form.get("client_id"))
        if not same_client or asked["redirect_uri"] != form.get("redirect_uri") or asked["code_challenge"] != challenge:
            return None, {"error": "invalid_grant"}
        form.setdefault("scope", asked.get("scope", ""))
        return asked["user"], {}

    def _exchange(self, form: dict) -> tuple[str | None, dict]:
        """RFC 8693: the subject token must be a JWT this server signed
        (with `subject_key`); the new token acts for its `sub`."""
        subject = form.get("subject_token", "")
        if form.get("subject_token_type") != JWT_TYPE or subject.count(".") != 2 or not self.subject_key:
            return None, {"error": "invalid_request"}
        signing_input, signature = subject.rsplit(".", 1)
        expected = hmac.new(self.subject_key, signing_input.encode(), hashlib.sha256).digest()
        if base64.urlsafe_b64encode(expected).decode().rstrip("=") != signature:
            return None, {"error": "invalid_grant"}
        payload = signing_input.split(".")[1]
        claims = json.loads(base64.urlsafe_b64decode(payload + "=" * (-len(payload) % 4)))
        return claims["sub"], {}

    def refuse_access_tokens(self) -> None:
        """Every access token issued so far stops being valid (as if
        revoked upstream); refresh tokens still work."""
        with self.lock:
            for grant in self.issued.values():
                grant["exp"] = 0

    def revoke_refresh_tokens(self) -> None:
        with self.lock:
            self.refresh_tokens.clear()

    def _serve(self, request: BaseHTTPRequestHandler, method: str) -> None:
        path = urllib.parse.urlsplit(request.path).path
        self.seen.append((method, path))
        if (method, path) == ("GET", "/authorize"):
            return self._authorize(request)
        if (method, path) == ("GET", "/.well-known/oauth-authorization-server"):
            extra = {} if self.iss_supported is None else {
                "authorization_response_iss_parameter_supported": self.iss_supported}
            return _answer(request, 200, {
                **extra,
                "issuer": self.metadata_issuer or self.issuer,
                "token_endpoint": self.token_url,
                "authorization_endpoint": self.authorize_url,
                "grant_types_supported": ["client_credentials", "authorization_code", "refresh_token"],
                "code_challenge_methods_supported": ["S256"],
                "token_endpoint_auth_methods_supported": ["client_secret_basic"],
            })
        if (method, path) != ("POST", "/token"):
            return _answer(request, 404, {"error": "not_found"})
        length = int(request.headers.get("content-length") or 0)
        form = dict(urllib.parse.parse_qsl(request.rfile.read(length).decode()))
        basic = request.headers.get("authorization", "")
        client = base64.b64decode(basic.removeprefix("Basic ")).decode() if basic.startswith("Basic ") else ""
        with self.lock:
            self.requests.append(form)
        public = not basic and form.get("client_id") in self.documents
        if client != f"{CLIENT_ID}:{CLIENT_SECRET}" and not public:
            return _answer(request, 401, {"error": "invalid_client"})
        user, error = self._grant(form)
        if user is None:
            return _answer(request, 400, error)
        # A slow server widens the window in which racing calls could each ask.
        time.sleep(0.2)
        token = "at-" + secrets.token_urlsafe(24)
        answer = {
            "access_token": token,
            "token_type": "Bearer",
            "expires_in": self.lifetime,
            "scope": form.get("scope", ""),
        }
        with self.lock:
            self.issued[token] = {
                "client_id": CLIENT_ID,
                "user": user,
                "scopes": form.get("scope", "").split(),
                "resource": form.get("resource"),
                "exp": int(time.time()) + self.lifetime,
            }
            if form["grant_type"] == TOKEN_EXCHANGE:
                answer["issued_token_type"] = "urn:ietf:params:oauth:token-type:access_token"
            elif form["grant_type"] != "client_credentials":
                # Refresh tokens rotate: the one used is spent.
                self.refresh_tokens.pop(form.get("refresh_token", ""), None)
                answer["refresh_token"] = "rt-" + secrets.token_urlsafe(24)
                self.refresh_tokens[answer["refresh_token"]] = user
                self.other_secrets.append(answer["refresh_token"])
        _answer(request, 200, answer)

    def valid(self, token: str) -> dict | None:
        with self.lock:
            grant = self.issued.get(token)
        return grant if grant and grant["exp"] > time.time() else None

    def stop(self) -> None:
        self.server.shutdown()


class Verifier:
    """The SDK's TokenVerifier over the authorization server's tokens."""

    def __init__(self, authorization: AuthorizationServer) -> None:
        self.authorization = authorization

    async def verify_token(self, token: str) -> AccessToken | None:
        grant = self.authorization.valid(token)
        if grant is None:
            return None
        return AccessToken(
            token=token,
            client_id=grant["client_id"],
            scopes=grant["scopes"],
            expires_at=grant["exp"],
            resource=grant["resource"],
            subject=grant["user"],
        )


class ProtectedMcp:
    """An MCP server requiring a token of `authorization` with scope `tools`
    issued for its own URL (RFC 8707)."""

    def __init__(self, authorization: AuthorizationServer) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}/mcp"
        # Whose token each `whoami` it answered carried.
        self.answered: list[str] = []
        server = MCPServer(
            name="protected",
            log_level="WARNING",
            token_verifier=Verifier(authorization),
            auth=AuthSettings(
                issuer_url=authorization.issuer,
                resource_server_url=self.url,
                required_scopes=["tools"],
                # A token issued for another resource is refused (RFC 8707).
                validate_token_resource=True,
            ),
        )

        @server.tool()
        def whoami() -> str:
            """Says which client's token reached it."""
            from mcp.server.auth.middleware.auth_context import get_access_token

            token = get_access_token()
            if token is None:
                return "hello nobody"
            self.answered.append(token.subject)
            return f"hello {token.client_id} as {token.subject}"

        config = uvicorn.Config(
            server.streamable_http_app(),
            host="127.0.0.1",
            port=self.port,
            log_level="error",
            # joch holds a stream open: do not wait for it to close.
            timeout_graceful_shutdown=0.2,
        )
        self.server = server
        self.uvicorn = uvicorn.Server(config)
        self.thread = threading.Thread(target=self.uvicorn.run, daemon=True)
        self.thread.start()
        deadline = time.monotonic() + 20
        while not self.uvicorn.started:
            assert time.monotonic() < deadline, "the protected MCP server did not start"
            time.sleep(0.05)

    def sessions(self) -> int:
        """MCP sessions open on this server now."""
        return len(self.server.session_manager._server_instances)

    def stop(self) -> None:
        self.uvicorn.should_exit = True
        self.thread.join(timeout=10)


class ProtectedRest:
    """POST /echo answers the body, given a valid token of `authorization`
    or the static `bearer`."""

    def __init__(self, authorization: AuthorizationServer, bearer: str) -> None:
        self.authorization = authorization
        self.bearer = bearer
        self.seen: list[str] = []
        self.server = _serve(self._serve)
        self.url = f"http://127.0.0.1:{self.server.server_port}/echo"

    def _serve(self, request: BaseHTTPRequestHandler, method: str) -> None:
        length = int(request.headers.get("content-length") or 0)
        body = json.loads(request.rfile.read(length) or b"{}")
        token = request.headers.get("authorization", "").removeprefix("Bearer ")
        self.seen.append(token)
        grant = self.authorization.valid(token)
        if token != self.bearer and grant is None:
            return _answer(request, 401, {"error": "invalid_token"})
        _answer(request, 200, {"echo": body, "user": (grant or {}).get("user")})

    def stop(self) -> None:
        self.server.shutdown()
