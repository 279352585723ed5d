"""A Google ADK agent uses joch's MCP endpoint through ADK's `McpToolset`.
The model is a `BaseLlm` subclass that answers from a script (no network):
it calls an allowed, a denied and a deferred tool at once, then answers;
we check what it read (docs/integrations.md)."""

from __future__ import annotations

import json
from collections.abc import AsyncGenerator

import anyio
from google.adk.agents import LlmAgent
from google.adk.models.base_llm import BaseLlm
from google.adk.models.llm_request import LlmRequest
from google.adk.models.llm_response import LlmResponse
from google.adk.runners import InMemoryRunner
from google.adk.tools.mcp_tool import McpToolset, StreamableHTTPConnectionParams
from google.genai import types

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


class ScriptedLlm(BaseLlm):
    """Calls the three tools, then answers; keeps what it was offered and read."""

    offered: list[str] = []
    read: dict[str, object] = {}

    async def generate_content_async(
        self, llm_request: LlmRequest, stream: bool = False
    ) -> AsyncGenerator[LlmResponse, None]:
        self.offered = list(llm_request.tools_dict)
        answers = [
            part.function_response
            for content in llm_request.contents
            for part in content.parts or []
            if part.function_response
        ]
        if not answers:
            calls = [(ALLOWED, ECHO_ARGS), (DENIED, SUM_ARGS), (DEFERRED, WEATHER_ARGS)]
            parts = [types.Part(function_call=types.FunctionCall(name=n, args=a)) for n, a in calls]
            yield LlmResponse(content=types.Content(role="model", parts=parts))
            return
        self.read = {answer.name: answer.response for answer in answers}
        yield LlmResponse(content=types.Content(role="model", parts=[types.Part(text="done")]))


def test_a_google_adk_agent_is_governed_through_joch(joch):
    govern(joch)
    model = ScriptedLlm(model="scripted")
    approver = approve_when_pending(joch)

    async def scenario() -> str:
        toolset = McpToolset(connection_params=StreamableHTTPConnectionParams(url=joch.mcp_url()))
        agent = LlmAgent(name="support_bot", model=model, instruction="Use the tools.", tools=[toolset])
        runner = InMemoryRunner(agent=agent, app_name="joch")
        session = await runner.session_service.create_session(app_name="joch", user_id="user")
        said = ""
        try:
            message = types.Content(role="user", parts=[types.Part(text="go")])
            async for event in runner.run_async(user_id="user", session_id=session.id, new_message=message):
                for part in (event.content and event.content.parts) or []:
                    said += part.text or ""
        finally:
            await toolset.close()
        return said

    said = anyio.run(scenario)
    approver.join(timeout=60)
    assert said == "done"
    assert {ALLOWED, DENIED, DEFERRED} <= set(model.offered), model.offered
    read = {name: json.dumps(answer) for name, answer in model.read.items()}
    assert "Echo: from the agent" in read[ALLOWED], read
    assert DENY_REASON in read[DENIED], read
    assert WEATHER_TEXT in read[DEFERRED], read
    assert_governed(joch)
