"""Real processes for the interop tests: a joch server on a fresh SQLite
file, and the reference MCP server (@modelcontextprotocol/server-everything)
over streamable HTTP. Everything listens on 127.0.0.1 only.

`scripts/test` sets JOCH_BIN (the joch binary) and MCP_EVERYTHING (the
reference server's dist/index.js)."""

from __future__ import annotations

import json
import os
import re
import shutil
import socket
import subprocess
import threading
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

import pytest

NAMESPACE = "interop"


def _required_env(name: str) -> str:
    value = os.environ.get(name)
    if not value:
        pytest.fail(f"{name} is not set: run the interop tests through scripts/test")
    return value


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _drain(stream, sink: list[str]) -> None:
    for line in iter(stream.readline, ""):
        sink.append(line)


@dataclass
class Joch:
    """A running `joch serve` and a small client for its REST API."""

    process: subprocess.Popen
    base: str
    stderr: list[str] = field(default_factory=list)
    # A bearer token for the REST calls below, once authentication is on.
    token: str | None = None

    @property
    def bin(self) -> str:
        return _required_env("JOCH_BIN")

    def mcp_url(self, namespace: str = NAMESPACE) -> str:
        return f"{self.base}/v1/namespaces/{namespace}/mcp"

    def api(self, method: str, path: str, body: object | None = None) -> tuple[int, dict]:
        data = None if body is None else json.dumps(body).encode()
        headers = {"content-type": "application/json"}
        if self.token:
            headers["authorization"] = f"Bearer {self.token}"
        request = urllib.request.Request(self.base + path, data=data, method=method, headers=headers)
        try:
            with urllib.request.urlopen(request, timeout=60) as response:
                return response.status, json.loads(response.read() or b"{}")
        except urllib.error.HTTPError as e:
            return e.code, json.loads(e.read() or b"{}")

    def ok(self, method: str, path: str, body: object | None = None) -> dict:
        status, answer = self.api(method, path, body)
        assert 200 <= status < 300, f"{method} {path} -> {status} {answer}"
        return answer

    def apply(self, resource: dict, namespace: str = NAMESPACE) -> dict:
        plural = resource["kind"].lower() + ("es" if resource["kind"].endswith("s") else "s")
        if resource["kind"] == "Policy":
            plural = "policies"
        return self.ok("POST", f"/v1/namespaces/{namespace}/{plural}", resource)

    def calls(self, namespace: str = NAMESPACE, **query: str) -> list[dict]:
        qs = "&".join(f"{k}={v}" for k, v in query.items())
        return self.ok("GET", f"/v1/namespaces/{namespace}/toolcalls?{qs}")["items"]

    def metric(self, series: str) -> float:
        """The value of the `/metrics` sample named exactly `series` (0 if absent)."""
        with urllib.request.urlopen(self.base + "/metrics", timeout=60) as response:
            for line in response.read().decode().splitlines():
                name, _, value = line.rpartition(" ")
                if name == series:
                    return float(value)
        return 0.0

    def cli(self, *args: str) -> str:
        done = subprocess.run(
            [self.bin, "--server", self.base, *args],
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert done.returncode == 0, done.stderr
        return done.stdout


def start_joch(tmp_path: Path, env: dict[str, str] | None = None, store: str | None = None) -> Joch:
    """`joch serve` on a free loopback port and a fresh database (or the
    PostgreSQL database `store`, as one of its replicas)."""
    binary = _required_env("JOCH_BIN")
    database = ["--store", store] if store else ["--db", str(tmp_path / "joch.db")]
    process = subprocess.Popen(
        [binary, "serve", "--addr", "127.0.0.1:0", *database],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "JOCH_LOG": "warn", **(env or {})},
    )
    line = process.stdout.readline()
    match = re.search(r"listening on (http://\S+)", line)
    assert match, f"joch did not start: {line!r}"
    server = Joch(process=process, base=match.group(1))
    threading.Thread(target=_drain, args=(process.stdout, []), daemon=True).start()
    threading.Thread(target=_drain, args=(process.stderr, server.stderr), daemon=True).start()
    return server


@pytest.fixture
def joch(tmp_path: Path):
    server = start_joch(tmp_path)
    yield server
    server.process.kill()
    server.process.wait()


class Everything:
    """@modelcontextprotocol/server-everything over streamable HTTP, on a
    fixed port so that it can be killed and started again at the same URL."""

    def __init__(self) -> None:
        self.script = _required_env("MCP_EVERYTHING")
        self.port = free_port()
        self.process: subprocess.Popen | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/mcp"

    def start(self) -> None:
        node = shutil.which("node")
        assert node, "node is not installed"
        self.process = subprocess.Popen(
            [node, self.script, "streamableHttp"],
            env={**os.environ, "PORT": str(self.port)},
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            try:
                socket.create_connection(("127.0.0.1", self.port), timeout=1).close()
                return
            except OSError:
                time.sleep(0.05)
        raise AssertionError("server-everything did not start listening")

    def kill(self) -> None:
        if self.process:
            self.process.kill()
            self.process.wait()
            self.process = None


@pytest.fixture
def everything():
    server = Everything()
    server.start()
    yield server
    server.kill()


def stdio_everything(name: str = "everything") -> dict:
    """An McpServer that joch runs itself, over stdio."""
    return {
        "apiVersion": "joch.dev/v1alpha1",
        "kind": "McpServer",
        "metadata": {"name": name},
        "spec": {"stdio": {"command": "node", "args": [_required_env("MCP_EVERYTHING"), "stdio"]}},
    }


def http_everything(url: str, name: str = "everything", **spec: object) -> dict:
    return {
        "apiVersion": "joch.dev/v1alpha1",
        "kind": "McpServer",
        "metadata": {"name": name},
        "spec": {"http": {"url": url}, **spec},
    }


def policy(name: str, tools: list[str], rules: list[dict], version: str = "1") -> dict:
    """A Policy over `tools`."""
    return {
        "apiVersion": "joch.dev/v1alpha1",
        "kind": "Policy",
        "metadata": {"name": name},
        "spec": {"version": version, "appliesTo": {"tools": tools}, "rules": rules},
    }


def deny(reason: str) -> dict:
    """A rule that denies with `reason`."""
    return {"name": "deny", "action": {"deny": {"reason": reason}}}


def wait_until(condition, what: str, timeout: float = 30.0):
    """Polls `condition` until it returns something truthy; fails naming `what`."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = condition()
        if value:
            return value
        time.sleep(0.05)
    raise AssertionError(f"timed out waiting for {what}")
