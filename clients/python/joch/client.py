"""A small, typed client for joch's REST API, on the standard library only."""

from __future__ import annotations

import itertools
import json
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

API_VERSION = "joch.dev/v1alpha1"


class JochError(Exception):
    """A request joch refused: its structured error (`code`, `message`, `details`)."""

    def __init__(self, status: int, code: str, message: str, details: Any = None) -> None:
        super().__init__(f"{status} {code}: {message}")
        self.status = status
        self.code = code
        self.message = message
        self.details = details


@dataclass
class Verdict:
    """joch's answer to a hook-mode request or result."""

    decision: str
    """`allow`, `modify` or `deny`."""
    reason: str | None = None
    policy_id: str | None = None
    policy_version: str | None = None
    modified: Any = None
    """For `modify`: the arguments to run with, or the result to use."""
    call: dict = field(default_factory=dict)
    """`{name, phase}` of the record."""

    @property
    def allowed(self) -> bool:
        return self.decision != "deny"


class Client:
    """joch at `base` (e.g. `http://127.0.0.1:7070`), in one namespace, with
    a bearer `token` when the server requires one."""

    def __init__(
        self,
        base: str = "http://127.0.0.1:7070",
        namespace: str = "default",
        timeout: float = 600,
        token: str | None = None,
    ) -> None:
        self.base = base.rstrip("/")
        self.namespace = namespace
        self.timeout = timeout
        self._auth = {"authorization": f"Bearer {token}"} if token else {}
        self._ids = itertools.count(1)

    # -- plumbing -------------------------------------------------------

    def request(self, method: str, path: str, body: Any = None, headers: dict | None = None) -> Any:
        data = None if body is None else json.dumps(body).encode()
        request = urllib.request.Request(
            self.base + path,
            data=data,
            method=method,
            headers={"content-type": "application/json", **self._auth, **(headers or {})},
        )
        try:
            with urllib.request.urlopen(request, timeout=self.timeout) as response:
                raw = response.read()
        except urllib.error.HTTPError as e:
            try:
                error = json.loads(e.read() or b"{}")
            except ValueError:
                error = {}
            raise JochError(e.code, error.get("code", "error"), error.get("message", str(e)), error.get("details")) from None
        return json.loads(raw) if raw else None

    def _ns(self, namespace: str | None) -> str:
        return f"/v1/namespaces/{urllib.parse.quote(namespace or self.namespace)}"

    # -- resources and calls -------------------------------------------

    def apply(self, resource: dict, namespace: str | None = None) -> dict:
        """Creates a resource (`Tool`, `Policy`, `Endpoint`, `McpServer`...)."""
        kind = resource["kind"]
        plural = {"Policy": "policies"}.get(kind, kind.lower() + "s")
        return self.request("POST", f"{self._ns(namespace)}/{plural}", {"apiVersion": API_VERSION, **resource})

    def call(
        self,
        tool: str,
        input: dict | None = None,
        *,
        call_id: str | None = None,
        execution: str | None = None,
        agent: str | None = None,
        idempotency_key: str | None = None,
        wait: bool = True,
        namespace: str | None = None,
    ) -> dict:
        """Runs a tool through joch (gateway mode) and returns the settled
        ToolCall (with `wait=False`, the record as accepted)."""
        spec: dict[str, Any] = {"toolRef": {"name": tool}, "input": input or {}}
        if execution:
            spec["executionRef"] = {"name": execution}
        if agent:
            spec["agentRef"] = {"name": agent}
        if idempotency_key:
            spec["sideEffects"] = {"idempotencyKey": idempotency_key}
        body = {"metadata": {"name": call_id} if call_id else {}, "spec": spec}
        query = "" if wait else "?wait=false"
        return self.request("POST", f"{self._ns(namespace)}/toolcalls{query}", body)

    def get_call(self, name: str, namespace: str | None = None) -> dict:
        return self.request("GET", f"{self._ns(namespace)}/toolcalls/{urllib.parse.quote(name)}")

    def calls(self, *, tool: str | None = None, phase: str | None = None, execution: str | None = None, namespace: str | None = None) -> list[dict]:
        """Recorded calls, newest first, optionally filtered."""
        query = {k: v for k, v in {"tool": tool, "phase": phase, "execution": execution}.items() if v}
        suffix = "?" + urllib.parse.urlencode(query) if query else ""
        return self.request("GET", f"{self._ns(namespace)}/toolcalls{suffix}")["items"]

    # -- approvals -----------------------------------------------------

    def approvals(self, namespace: str | None = None) -> list[dict]:
        return self.request("GET", f"{self._ns(namespace)}/approvals")["items"]

    def approve(self, name: str, *, by: str, rationale: str | None = None, input: dict | None = None, namespace: str | None = None) -> dict:
        """Approves a waiting call (with `input`, approves these arguments instead)."""
        verb = "edit" if input is not None else "approve"
        body = {"approvedBy": by, "rationale": rationale, **({"input": input} if input is not None else {})}
        return self.request("POST", f"{self._ns(namespace)}/approvals/{urllib.parse.quote(name)}/{verb}", body)

    def deny(self, name: str, *, by: str, message: str | None = None, rationale: str | None = None, namespace: str | None = None) -> dict:
        body = {"approvedBy": by, "message": message, "rationale": rationale}
        return self.request("POST", f"{self._ns(namespace)}/approvals/{urllib.parse.quote(name)}/deny", body)

    # -- events --------------------------------------------------------

    def events(self, execution: str, *, after: int = 0, follow: bool = False, namespace: str | None = None) -> Iterator[dict]:
        """An execution's timeline, oldest first; with `follow`, keeps
        yielding new events as they happen (server-sent events)."""
        path = f"{self._ns(namespace)}/executions/{urllib.parse.quote(execution)}/events?after={after}"
        if not follow:
            yield from self.request("GET", path)["items"]
            return
        request = urllib.request.Request(
            self.base + path + "&follow=true", headers={"accept": "text/event-stream", **self._auth}
        )
        with urllib.request.urlopen(request, timeout=self.timeout) as stream:
            for line in stream:
                line = line.decode().strip()
                if line.startswith("data:"):
                    yield json.loads(line[5:])

    # -- hook mode (AOS guardian JSON-RPC) -------------------------------

    def _rpc(self, method: str, params: dict, namespace: str | None) -> dict:
        message = {"jsonrpc": "2.0", "id": next(self._ids), "method": method, "params": params}
        answer = self.request("POST", f"{self._ns(namespace)}/hooks/aos", message)
        if "error" in answer:
            error = answer["error"]
            data = error.get("data") or {}
            raise JochError(200, data.get("code", str(error.get("code"))), error.get("message", ""), data.get("details"))
        return answer["result"]

    def hook_request(
        self,
        call_id: str,
        tool: str,
        arguments: dict,
        *,
        agent: str | None = None,
        session: str | None = None,
        idempotency_key: str | None = None,
        namespace: str | None = None,
    ) -> Verdict:
        """Asks joch before the agent runs `tool` itself. Blocks while a
        person decides, if a policy asks for one."""
        request = {
            "executionId": call_id,
            "toolId": tool,
            "inputs": [{"name": k, "value": v} for k, v in arguments.items()],
        }
        if idempotency_key:
            request["idempotencyKey"] = idempotency_key
        context: dict[str, Any] = {}
        if agent:
            context["agent"] = {"id": agent, "name": agent}
        if session:
            context["session"] = {"id": session}
        result = self._rpc("steps/toolCallRequest", {"toolCallRequest": request, "context": context}, namespace)
        modified = result.get("modifiedRequest")
        if modified is not None:
            modified = {i["name"]: i.get("value") for i in modified.get("inputs") or []}
        return _verdict(result, modified)

    def hook_result(self, call_id: str, *, output: Any = None, error: str | None = None, namespace: str | None = None) -> Verdict:
        """Tells joch what the tool returned (or how it failed)."""
        report: dict[str, Any] = {"executionId": call_id, "result": output}
        if error is not None:
            report.update(isError=True, error=error)
        result = self._rpc("steps/toolCallResult", {"toolCallResult": report}, namespace)
        return _verdict(result, result.get("modifiedResult"))


def _verdict(result: dict, modified: Any) -> Verdict:
    return Verdict(
        decision=result["decision"],
        reason=result.get("reason"),
        policy_id=result.get("policyId"),
        policy_version=result.get("policyVersion"),
        modified=modified,
        call=result.get("toolCall") or {},
    )
