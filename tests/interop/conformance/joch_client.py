"""joch as the client under test of the MCP conformance suite's client
scenarios: the suite runs this with the URL of the scenario's server
(`conformance client --command "python joch_client.py"`), and it makes
that server an McpServer of a namespace of its own on the joch at
$JOCH_URL, then does through joch's MCP front what the suite's own client
(examples/clients/typescript/everything-client.ts) does directly, so that
what reaches the scenario's server is joch's doing.

The downstream client is a session (protocol 2025-11-25, the Python SDK)
for scenarios whose server asks during a call, else plain requests of
protocol 2026-07-28. Exit status 0 when the steps ran (the suite scores
what its server saw)."""

from __future__ import annotations

import json
import os
import sys
import time
import urllib.error
import urllib.request

JOCH = os.environ["JOCH_URL"].rstrip("/")
SCENARIO = os.environ["MCP_CONFORMANCE_SCENARIO"]
CONTEXT = json.loads(os.environ.get("MCP_CONFORMANCE_CONTEXT") or "{}")
REVISION = os.environ.get("MCP_CONFORMANCE_PROTOCOL_VERSION", "")
NAMESPACE = "conf-" + "".join(c if c.isalnum() else "-" for c in f"{SCENARIO}-{REVISION}").strip("-")[:50]
MCP = f"{JOCH}/v1/namespaces/{NAMESPACE}/mcp"


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


def register(url: str) -> None:
    """The scenario's server as McpServer `scenario`, its names unprefixed;
    waits until joch has listed it (or given up on it)."""
    server = {
        "apiVersion": "joch.dev/v1alpha1",
        "kind": "McpServer",
        "metadata": {"name": "scenario"},
        "spec": {"http": {"url": url}, "toolPrefix": ""},
    }
    status, body = api("POST", f"/v1/namespaces/{NAMESPACE}/mcpservers", server)
    assert status in (200, 201), body
    for _ in range(100):
        _, server = api("GET", f"/v1/namespaces/{NAMESPACE}/mcpservers/scenario")
        if server.get("status", {}).get("phase"):
            return
        time.sleep(0.1)


def forget() -> None:
    api("DELETE", f"/v1/namespaces/{NAMESPACE}/mcpservers/scenario")


_ids = iter(range(1, 1_000_000))


def stateless(method: str, params: dict | None = None, capabilities: dict | None = None) -> dict:
    """One request of protocol 2026-07-28 to joch's front: its JSON-RPC answer."""
    params = dict(params or {})
    params["_meta"] = {
        "io.modelcontextprotocol/protocolVersion": "2026-07-28",
        "io.modelcontextprotocol/clientInfo": {"name": "conformance-through-joch", "version": "1"},
        "io.modelcontextprotocol/clientCapabilities": capabilities
        if capabilities is not None
        else {"elicitation": {}, "sampling": {}, "roots": {}},
    }
    headers = {
        "content-type": "application/json",
        "accept": "application/json, text/event-stream",
        "mcp-protocol-version": "2026-07-28",
        "mcp-method": method,
    }
    name = params.get("name") or params.get("uri")
    if method in ("tools/call", "prompts/get", "resources/read") and name:
        headers["mcp-name"] = name
    body = {"jsonrpc": "2.0", "id": next(_ids), "method": method, "params": params}
    request = urllib.request.Request(MCP, data=json.dumps(body).encode(), headers=headers)
    try:
        with urllib.request.urlopen(request, timeout=60) as response:
            text = response.read().decode()
    except urllib.error.HTTPError as e:
        text = e.read().decode()
    try:
        answer = json.loads(text)
    except json.JSONDecodeError:
        events = [line[5:].strip() for line in text.splitlines() if line.startswith("data:")]
        answer = json.loads(events[-1])
    # What joch answered, for the suite's saved stderr.
    print(f"{method} {name or ''}: {json.dumps(answer)[:500]}", file=sys.stderr)
    return answer


def answer_questions(asked: dict) -> dict:
    """What a user (accepting), a model and a workspace answer."""
    answers = {}
    for key, question in (asked or {}).items():
        method = question.get("method")
        if method == "elicitation/create":
            answers[key] = {"action": "accept", "content": {"confirmed": True}}
        elif method == "sampling/createMessage":
            answers[key] = {"role": "assistant", "model": "m", "content": {"type": "text", "text": "ok"}}
        elif method == "roots/list":
            answers[key] = {"roots": []}
    return answers


def call_answering(name: str, arguments: dict, rounds: int = 5) -> dict:
    """`tools/call`, answering the rounds of questions it comes back with."""
    params = {"name": name, "arguments": arguments}
    for _ in range(rounds):
        answer = stateless("tools/call", params)
        result = answer.get("result") or {}
        if result.get("resultType") != "input_required":
            return answer
        params = {"name": name, "arguments": arguments,
                  "inputResponses": answer_questions(result.get("inputRequests"))}
        if result.get("requestState") is not None:
            params["requestState"] = result["requestState"]
    return answer


def tools() -> list[dict]:
    return (stateless("tools/list").get("result") or {}).get("tools", [])


def basic() -> None:
    listed = tools()
    if listed:
        stateless("tools/call", {"name": listed[0]["name"], "arguments": {"a": 2, "b": 3}})


def list_only() -> None:
    tools()


def schema_echo() -> None:
    focal = next(t for t in tools() if t["name"] == "json_schema_2020_12_tool")
    stateless("tools/call", {"name": "json_schema_echo", "arguments": {"schema": focal["inputSchema"]}})


def custom_headers() -> None:
    tools()
    for call in CONTEXT.get("toolCalls", []):
        stateless("tools/call", {"name": call["name"], "arguments": call["arguments"]})


def standard_headers() -> None:
    for tool in tools():
        stateless("tools/call", {"name": tool["name"], "arguments": {}})
    listed = stateless("resources/list").get("result") or {}
    for resource in listed.get("resources", []):
        stateless("resources/read", {"uri": resource["uri"]})
    prompts = stateless("prompts/list").get("result") or {}
    for prompt in prompts.get("prompts", []):
        stateless("prompts/get", {"name": prompt["name"], "arguments": {}})


def sample_arguments(schema: dict) -> dict:
    """A value of its type for each required property of an input schema."""
    samples = {"string": "x", "integer": 1, "number": 1, "boolean": True}
    properties = (schema or {}).get("properties", {})
    return {
        name: samples.get(properties.get(name, {}).get("type"), "x")
        for name in (schema or {}).get("required", [])
    }


def call_every_tool() -> None:
    for tool in tools():
        arguments = sample_arguments(tool.get("inputSchema"))
        stateless("tools/call", {"name": tool["name"], "arguments": arguments})


def mrtr() -> None:
    tools()
    first = stateless("tools/call", {"name": "test_mrtr_echo_state", "arguments": {}})
    result = first.get("result") or {}
    if result.get("resultType") == "input_required":
        # Another call between the rounds carries none of their state.
        stateless("tools/call", {"name": "test_mrtr_unrelated", "arguments": {}})
        retry = {"name": "test_mrtr_echo_state", "arguments": {},
                 "inputResponses": answer_questions(result.get("inputRequests"))}
        if result.get("requestState") is not None:
            retry["requestState"] = result["requestState"]
        stateless("tools/call", retry)
    call_answering("test_mrtr_no_state", {})
    stateless("tools/call", {"name": "test_mrtr_no_result_type", "arguments": {}})


def defaults(schema: dict) -> dict:
    """The SEP-1034 defaults of a requested schema, as the TypeScript SDK
    fills them in for a client that declares `applyDefaults`."""
    return {
        name: prop["default"]
        for name, prop in (schema or {}).get("properties", {}).items()
        if "default" in prop
    }


async def elicitation_defaults() -> None:
    # Imported here: the SDK takes seconds to import, and only this needs it.
    from mcp import ClientSession, types
    from mcp.client.streamable_http import streamable_http_client

    async def elicit(_context, params):
        content = defaults(getattr(params, "requested_schema", None) or {})
        return types.ElicitResult(action="accept", content=content)

    async with streamable_http_client(MCP) as (read, write):
        async with ClientSession(read, write, elicitation_callback=elicit) as session:
            await session.initialize()
            await session.call_tool("test_client_elicitation_defaults", {})


def with_session(run):
    def session() -> None:
        import anyio

        anyio.run(run)

    return session


SCENARIOS = {
    "initialize": basic,
    "tools_call": basic,
    "tools-call": basic,
    "json-schema-ref-no-deref": list_only,
    "json-schema-2020-12-preservation": schema_echo,
    "http-custom-headers": custom_headers,
    "http-standard-headers": standard_headers,
    "http-invalid-tool-headers": call_every_tool,
    "sep-2322-client-request-state": mrtr,
    "elicitation-defaults": with_session(elicitation_defaults),
    "elicitation-sep1034-client-defaults": with_session(elicitation_defaults),
    "sse-retry": lambda: call_answering("test_reconnection", {}),
    "request-metadata": basic,
}


def main() -> int:
    url = sys.argv[-1]
    run = SCENARIOS.get(SCENARIO)
    if run is None:
        print(f"no steps for scenario {SCENARIO}", file=sys.stderr)
        return 2
    register(url)
    try:
        run()
    finally:
        forget()
    return 0


if __name__ == "__main__":
    sys.exit(main())
