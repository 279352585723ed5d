"""An OpenAI Agents SDK agent uses joch's MCP endpoint unchanged. The model
is scripted (no network): it calls one allowed and one denied tool, and we
check what it was shown afterwards; and a call deferred to a person, which
the SDK (MCP 2026-07-28, no tasks) reports to the model as failed, never
runs behind the agent's back (docs/integrations.md)."""

from __future__ import annotations

import json
import time

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

from conftest import NAMESPACE, deny, policy, stdio_everything, wait_until
from governed import APPROVER, DEFERRED, WEATHER_ARGS, WEATHER_TEXT, approve_when_pending, govern

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


def test_a_call_the_agent_was_told_failed_never_runs_when_approved_later(joch):
    # The approval's deadline 3 s, so the retry deadline 3 s later. A person
    # approves as soon as the call waits, while the agent goes on.
    govern(joch, approval_routing={"timeoutSeconds": 3})
    model = ScriptedModel([[tool_call("call_weather", DEFERRED, WEATHER_ARGS)], [message("done")]])
    approver = approve_when_pending(joch)

    async def scenario():
        async with MCPServerStreamableHttp(params={"url": joch.mcp_url()}, name="joch") as server:
            agent = Agent(name="support-bot", instructions="Use the tools.", model=model, mcp_servers=[server])
            return await Runner.run(agent, "go")

    result = anyio.run(scenario)
    approver.join(timeout=60)
    assert result.final_output == "done"
    told = [
        item["output"]
        for item in model.seen_inputs[1]
        if isinstance(item, dict)
        and item.get("type") == "function_call_output"
        and item.get("call_id") == "call_weather"
    ]
    # The SDK raises on input_required: the model reads that the tool failed.
    assert told and WEATHER_TEXT not in str(told), told
    assert "error" in str(told).lower(), told

    # Approved, the call does not run: the agent believes it failed.
    (record,) = joch.calls(NAMESPACE, tool=DEFERRED)
    name = record["metadata"]["name"]
    assert record["spec"]["runsOn"] == "retry"
    approval = joch.ok("GET", f"/v1/namespaces/{NAMESPACE}/approvals/{name}")
    assert approval["status"]["phase"] == "Approved", approval["status"]
    assert approval["status"]["decidedBy"] == APPROVER
    time.sleep(0.5)
    waiting = joch.ok("GET", f"/v1/namespaces/{NAMESPACE}/toolcalls/{name}")
    assert waiting["status"]["phase"] == "AwaitingApproval", waiting["status"]

    # Nobody retried: at its retry deadline it ends, never having run.
    ended = wait_until(
        lambda: (c := joch.ok("GET", f"/v1/namespaces/{NAMESPACE}/toolcalls/{name}"))["status"]["phase"]
        != "AwaitingApproval"
        and c,
        "the call to end",
    )
    assert ended["status"]["phase"] == "TimedOut", ended["status"]
    assert ended["status"]["error"]["code"] == "not_retried"
    assert "startedAt" not in ended["status"], ended["status"]
