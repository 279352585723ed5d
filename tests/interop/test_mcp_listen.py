"""An upstream of protocol 2026-07-28 from another SDK (the Python SDK's
MCPServer) tells joch its tools changed on the `subscriptions/listen`
stream joch keeps open (the default `protocol: auto`): joch lists them
again and adopts the new one, as it does for a legacy session's
`notifications/tools/list_changed`."""

from __future__ import annotations

import threading
import time

import uvicorn
from mcp.server import MCPServer
from mcp.server.mcpserver import Context

from conftest import NAMESPACE, free_port, wait_until


def late() -> str:
    """Listed only once `grow` ran."""
    return "late"


class Growing:
    """Serves `grow`, which adds the tool `late` and says so to listeners."""

    def __init__(self) -> None:
        self.url = f"http://127.0.0.1:{free_port()}/mcp"
        server = MCPServer(name="growing", log_level="WARNING")

        @server.tool()
        async def grow(ctx: Context) -> str:
            """Adds `late`."""
            server.add_tool(late)
            await ctx.notify_tools_changed()
            return "grown"

        port = int(self.url.split(":")[2].split("/")[0])
        config = uvicorn.Config(server.streamable_http_app(), host="127.0.0.1", port=port, log_level="error",
                                # joch holds a stream open: do not wait for it to close.
                                timeout_graceful_shutdown=0.2)
        self.uvicorn = uvicorn.Server(config)
        self.thread = threading.Thread(target=self.uvicorn.run, daemon=True)
        self.thread.start()
        deadline = time.monotonic() + 20
        while not self.uvicorn.started:
            assert time.monotonic() < deadline, "the Python MCP server did not start"
            time.sleep(0.05)

    def stop(self) -> None:
        self.uvicorn.should_exit = True
        self.thread.join(timeout=10)


def test_a_python_sdk_server_of_2026_07_28_tells_joch_its_tools_changed(joch):
    upstream = Growing()
    try:
        joch.apply({"apiVersion": "joch.dev/v1alpha1", "kind": "McpServer", "metadata": {"name": "py"},
                    "spec": {"http": {"url": upstream.url}}})
        tool = f"/v1/namespaces/{NAMESPACE}/tools"
        wait_until(lambda: joch.api("GET", f"{tool}/py.grow")[0] == 200, "py.grow")
        assert joch.api("GET", f"{tool}/py.late")[0] == 404
        # The stream is opened just after the first listing.
        time.sleep(0.5)
        call = joch.ok("POST", f"/v1/namespaces/{NAMESPACE}/toolcalls", {"spec": {"toolRef": {"name": "py.grow"}}})
        assert call["status"]["phase"] == "Succeeded", call
        wait_until(lambda: joch.api("GET", f"{tool}/py.late")[0] == 200, "py.late adopted", timeout=10)
    finally:
        upstream.stop()
