"""The official MCP Python SDK resumes a `tools/call` stream that joch's
answer never finished (2025-11-25 SSE polling: the client reconnects with
`Last-Event-ID`), and gets the tool's result; the call ran once.

The cut is made in the client's own HTTP layer (an httpx transport that
ends the call's response after its first event), as a proxy's timeout or
a dropped connection would: joch, the SDK and the upstream server are the
real ones."""

from __future__ import annotations

import anyio
import httpx2
from mcp import ClientSession
from mcp.client.streamable_http import streamable_http_client

from conftest import stdio_everything


class CutFirstCall(httpx2.AsyncBaseTransport):
    """Passes every request on; the first `tools/call`'s answer stream
    ends after its first event (the priming event, no answer yet)."""

    def __init__(self) -> None:
        self.inner = httpx2.AsyncHTTPTransport()
        self.cut = False
        self.resumed_with: list[str] = []

    async def handle_async_request(self, request: httpx2.Request) -> httpx2.Response:
        if request.method == "GET" and "last-event-id" in request.headers:
            self.resumed_with.append(request.headers["last-event-id"])
        response = await self.inner.handle_async_request(request)
        is_call = request.method == "POST" and b'"tools/call"' in request.content
        if self.cut or not is_call:
            return response
        self.cut = True
        return httpx2.Response(
            response.status_code,
            headers=response.headers,
            stream=FirstEvent(response.stream),
            request=request,
        )

    async def aclose(self) -> None:
        await self.inner.aclose()


class FirstEvent(httpx2.AsyncByteStream):
    """The bytes of a stream up to the end of its first SSE event."""

    def __init__(self, inner) -> None:
        self.inner = inner

    async def __aiter__(self):
        seen = b""
        async for chunk in self.inner:
            seen += chunk
            end = seen.find(b"\n\n")
            if end >= 0:
                yield seen[: end + 2]
                return
        yield seen

    async def aclose(self) -> None:
        await self.inner.aclose()


def test_the_python_sdk_resumes_a_cut_call_stream_and_the_call_runs_once(joch):
    server = joch.apply(stdio_everything())
    assert server["status"]["phase"] == "Connected", server["status"]
    transport = CutFirstCall()

    async def scenario():
        async with httpx2.AsyncClient(transport=transport, timeout=60) as http:
            async with streamable_http_client(joch.mcp_url(), http_client=http) as (read, write):
                async with ClientSession(read, write) as session:
                    await session.initialize()
                    await session.list_tools()
                    with anyio.fail_after(30):
                        return await session.call_tool("everything.echo", {"message": "cut short"})

    result = anyio.run(scenario)
    assert transport.cut
    assert not result.is_error, result
    assert result.content[0].text == "Echo: cut short"
    # The SDK came back with the priming event's id, joch's, naming the call.
    assert len(transport.resumed_with) == 1, transport.resumed_with
    (last,) = transport.resumed_with
    assert last.startswith("jc1."), last
    calls = [c for c in joch.calls() if c["spec"]["toolRef"]["name"] == "everything.echo"]
    assert [c["metadata"]["name"] for c in calls] == [last.split(".")[1]], calls
    assert calls[0]["status"]["phase"] == "Succeeded", calls[0]
