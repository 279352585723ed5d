"""A PydanticAI agent uses joch's MCP endpoint through its own MCP toolset
(`MCPToolset`, built on FastMCP's client). The model is PydanticAI's
`FunctionModel` (no network): it calls an allowed, a denied and a deferred
tool at once, then answers; we check what it read (docs/integrations.md)."""

from __future__ import annotations

import anyio
from pydantic_ai import Agent
from pydantic_ai.mcp import MCPToolset
from pydantic_ai.messages import (
    ModelRequest,
    ModelResponse,
    RetryPromptPart,
    TextPart,
    ToolCallPart,
    ToolReturnPart,
)
from pydantic_ai.models.function import AgentInfo, FunctionModel

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


class Scripted:
    """The model: calls the three tools, then answers; keeps what it read."""

    def __init__(self) -> None:
        self.offered: list[str] = []
        self.read: dict[str, str] = {}

    def __call__(self, messages, info: AgentInfo) -> ModelResponse:
        self.offered = [t.name for t in info.function_tools]
        if len(messages) == 1:
            return ModelResponse(
                parts=[
                    ToolCallPart(ALLOWED, ECHO_ARGS, tool_call_id="echo"),
                    ToolCallPart(DENIED, SUM_ARGS, tool_call_id="sum"),
                    ToolCallPart(DEFERRED, WEATHER_ARGS, tool_call_id="weather"),
                ]
            )
        for part in messages[-1].parts if isinstance(messages[-1], ModelRequest) else []:
            if isinstance(part, ToolReturnPart | RetryPromptPart):
                self.read[part.tool_call_id] = part.model_response_str() if isinstance(
                    part, ToolReturnPart
                ) else str(part.content)
        return ModelResponse(parts=[TextPart("done")])


def test_a_pydantic_ai_agent_is_governed_through_joch(joch):
    govern(joch)
    model = Scripted()
    approver = approve_when_pending(joch)

    async def scenario():
        agent = Agent(FunctionModel(model), toolsets=[MCPToolset(joch.mcp_url())])
        async with agent:
            return await agent.run("go")

    result = anyio.run(scenario)
    approver.join(timeout=60)
    assert result.output == "done"
    assert {ALLOWED, DENIED, DEFERRED} <= set(model.offered), model.offered
    assert "Echo: from the agent" in model.read["echo"], model.read
    assert DENY_REASON in model.read["sum"], model.read
    assert WEATHER_TEXT in model.read["weather"], model.read
    assert_governed(joch)
