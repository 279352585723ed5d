"""An OpenAI Agents SDK agent uses joch's MCP endpoint unchanged. The model
is scripted (no network): it calls one allowed and one denied tool, and we
check what it was shown afterwards."""

from __future__ import annotations

import json

import anyio
from agents import Agent, Runner, set_tracing_disabled
from agents.items import ModelResponse
from agents.mcp import MCPServerStreamableHttp
from agents.models.interface import Model
from agents.usage import Usage
from openai.types.responses import (
    ResponseFunctionToolCall,
    ResponseOutputMessage,
    ResponseOutputText,
)

from conftest import NAMESPACE, deny, policy, stdio_everything

set_tracing_disabled(True)


class ScriptedModel(Model):
    """Answers each turn from a script, and keeps what it was given."""

    def __init__(self, turns: list[list]) -> None:
        self.turns = turns
        self.seen_inputs: list = []
        self.seen_tools: list[str] = []

    async def get_response(self, system_instructions, input, model_settings, tools, *args, **kwargs):
        self.seen_inputs.append(input)
        self.seen_tools = [t.name for t in tools]
        return ModelResponse(output=self.turns.pop(0), usage=Usage(), response_id=None)

    def stream_response(self, *args, **kwargs):
        raise NotImplementedError("the test runs the agent without streaming")


def tool_call(call_id: str, name: str, arguments: dict) -> ResponseFunctionToolCall:
    return ResponseFunctionToolCall(
        id=f"fc_{call_id}",
        call_id=call_id,
        name=name,
        arguments=json.dumps(arguments),
        type="function_call",
        status="completed",
    )


def message(text: str) -> ResponseOutputMessage:
    return ResponseOutputMessage(
        id="msg_1",
        role="assistant",
        status="completed",
        type="message",
        content=[ResponseOutputText(text=text, type="output_text", annotations=[])],
    )


def test_an_agents_sdk_agent_gets_answers_and_denials_through_joch(joch):
    joch.apply(stdio_everything())
    joch.apply(policy("no-sums", ["everything.get-sum"], [deny("sums are off limits")]))
    model = ScriptedModel(
        [
            [
                tool_call("call_echo", "everything.echo", {"message": "from the agent"}),
                tool_call("call_sum", "everything.get-sum", {"a": 1, "b": 2}),
            ],
            [message("done")],
        ]
    )

    async def scenario():
        async with MCPServerStreamableHttp(params={"url": joch.mcp_url()}, name="joch") as server:
            agent = Agent(name="support-bot", instructions="Use the tools.", model=model, mcp_servers=[server])
            return await Runner.run(agent, "go")

    result = anyio.run(scenario)
    assert result.final_output == "done"
    assert "everything.echo" in model.seen_tools

    # What the model saw on its second turn: the tool outputs, by call id.
    outputs = {
        item["call_id"]: item["output"]
        for item in model.seen_inputs[1]
        if isinstance(item, dict) and item.get("type") == "function_call_output"
    }
    assert "Echo: from the agent" in str(outputs["call_echo"])
    assert "sums are off limits" in str(outputs["call_sum"])

    calls = {c["spec"]["toolRef"]["name"]: c for c in joch.calls(NAMESPACE)}
    assert calls["everything.echo"]["status"]["phase"] == "Succeeded"
    denied = calls["everything.get-sum"]
    assert denied["status"]["phase"] == "Denied"
    assert denied["status"]["hookDecisions"][0]["policyId"] == "no-sums"
