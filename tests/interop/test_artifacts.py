"""Artifacts through the MCP front with the official MCP Python SDK: a tool
whose result is not inlined answers a handle, and the forged artifact tools
(listed while the session has handles, callId an enum of them) read it."""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import anyio
import pytest
from mcp import ClientSession
from mcp.client.streamable_http import streamable_http_client

LINES = "".join(
    f'{{"n":{n},"level":"{"error" if n % 1000 == 0 else "info"}","msg":"line {n}"}}\n'
    for n in range(1, 60001)
).encode()


class _Logs(BaseHTTPRequestHandler):
    def do_POST(self) -> None:  # noqa: N802 (http.server's naming)
        self.rfile.read(int(self.headers.get("content-length") or 0))
        self.send_response(200)
        self.send_header("content-type", "application/x-ndjson")
        self.send_header("content-length", str(len(LINES)))
        self.end_headers()
        self.wfile.write(LINES)

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def logs_webhook():
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Logs)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}/logs"
    server.shutdown()


def test_a_handle_is_read_with_artifact_grep_over_mcp(joch, logs_webhook):
    joch.apply(
        {
            "apiVersion": "joch.dev/v1alpha1",
            "kind": "Tool",
            "metadata": {"name": "logs.fetch"},
            "spec": {
                "description": "Fetches the service's logs.",
                "inputSchema": {"type": "object"},
                "sideEffects": {"level": "read_only"},
                "inline": False,
                "backend": {"type": "rest", "endpoint": {"url": logs_webhook}},
            },
        }
    )

    async def scenario() -> None:
        async with streamable_http_client(joch.mcp_url()) as (read, write):
            async with ClientSession(read, write) as session:
                await session.initialize()
                before = {t.name for t in (await session.list_tools()).tools}
                assert before == {"logs.fetch"}, "no artifact tools before a handle exists"

                fetched = await session.call_tool("logs.fetch", {})
                assert not fetched.is_error
                handle = fetched.structured_content["artifact"]
                assert handle["size"] == len(LINES)
                call_id = handle["callId"]

                listed = {t.name: t for t in (await session.list_tools()).tools}
                grep = listed["artifact_grep"]
                assert grep.input_schema["properties"]["callId"]["enum"] == [call_id]

                found = await session.call_tool(
                    "artifact_grep", {"callId": call_id, "pattern": '"level":"error"', "maxMatches": 3}
                )
                assert not found.is_error
                answer = found.structured_content
                assert answer["matches"] == 3 and answer["truncated"] is True
                assert answer["text"].splitlines()[0] == '1000:{"n":1000,"level":"error","msg":"line 1000"}'

                grep_call = next(
                    c["metadata"]["name"]
                    for c in joch.calls()
                    if c["spec"]["toolRef"]["name"] == "artifact_grep"
                )
                listed = {t.name: t for t in (await session.list_tools()).tools}
                assert listed["artifact_grep"].input_schema["properties"]["callId"]["enum"] == [call_id]

                stacked = await session.call_tool("artifact_grep", {"callId": grep_call, "pattern": "x"})
                assert stacked.is_error
                refusal = json.loads(stacked.content[0].text)
                assert refusal["error"] == "artifact_call_not_visible"

    anyio.run(scenario)

    calls = joch.calls()
    forged = [c for c in calls if c["spec"].get("fromArtifactTool")]
    assert sorted(c["status"]["phase"] for c in forged) == ["Failed", "Succeeded"]
    fetched = next(c for c in calls if c["spec"]["toolRef"]["name"] == "logs.fetch")
    assert fetched["status"]["artifacts"][0]["reason"] == "tool"
    assert len(json.dumps(fetched)) < 4096, "the record keeps the handle, not the logs"
