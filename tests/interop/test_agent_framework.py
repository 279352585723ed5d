"""A Microsoft Agent Framework agent uses joch's MCP endpoint through the
framework's `MCPStreamableHTTPTool`. The model is a chat client subclass
that answers from a script (no network): it calls an allowed, a denied
and a deferred tool at once, then answers; we check what it read
(docs/integrations.md)."""

from __future__ import annotations

import anyio
from agent_framework import (
    Agent,
    BaseChatClient,
    ChatResponse,
    Content,
    FunctionInvocationLayer,
    MCPStreamableHTTPTool,
    Message,
)

from governed import (
    ALLOWED,
    DEFERRED,
    DENIED,
    DENY_REASON,
    ECHO_ARGS,
    SUM_ARGS,
    WEATHER_ARGS,
    WEATHER_TEXT,
    approve_when_pending,
    assert_governed,
    govern,
)

CALLS = {"echo": (ALLOWED, ECHO_ARGS), "sum": (DENIED, SUM_ARGS), "weather": (DEFERRED, WEATHER_ARGS)}


class ScriptedClient(FunctionInvocationLayer, BaseChatClient):
    """Calls the three tools, then answers; keeps what it was offered and
    read. The framework's function-invocation layer runs the calls."""

    def __init__(self) -> None:
        # Without detailed errors the model reads only "Error: Function
        # failed." for an isError result, not joch's reason.
        super().__init__(function_invocation_configuration={"include_detailed_errors": True})
        self.offered: list[str] = []
        self.read: dict[str, str] = {}

    async def _inner_get_response(self, *, messages, stream, options, **kwargs):
        self.offered = [getattr(t, "name", "") for t in options.get("tools") or []]
        results = [c for m in messages for c in m.contents if c.type == "function_result"]
        if not results:
            calls = [
                Content.from_function_call(call_id, name, arguments=args)
                for call_id, (name, args) in CALLS.items()
            ]
            return ChatResponse(messages=[Message(role="assistant", contents=calls)])
        self.read = {c.call_id: str(c.result if c.result is not None else c.exception) for c in results}
        return ChatResponse(messages=[Message(role="assistant", contents=["done"])])


def test_an_agent_framework_agent_is_governed_through_joch(joch):
    govern(joch)
    client = ScriptedClient()
    approver = approve_when_pending(joch)

    async def scenario() -> str:
        async with MCPStreamableHTTPTool(name="joch", url=joch.mcp_url()) as tools:
            agent = Agent(client=client, name="support_bot", instructions="Use the tools.", tools=tools)
            return (await agent.run("go")).text

    said = anyio.run(scenario)
    approver.join(timeout=60)
    assert said == "done"
    assert {ALLOWED, DENIED, DEFERRED} <= set(client.offered), client.offered
    assert "Echo: from the agent" in client.read["echo"], client.read
    assert DENY_REASON in client.read["sum"], client.read
    assert WEATHER_TEXT in client.read["weather"], client.read
    assert_governed(joch)
