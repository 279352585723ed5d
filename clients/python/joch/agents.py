"""OpenAI Agents SDK integration: tool guardrails backed by joch.

    from agents import function_tool
    from joch import Client
    from joch.agents import joch_guardrails

    before, after = joch_guardrails(Client(namespace="support"))

    @function_tool(tool_input_guardrails=[before], tool_output_guardrails=[after])
    def refund(order: str) -> str: ...

Before the tool runs, joch records the call (named by the model's tool call
id) and decides: a denial reaches the model as the tool's output, a JSON
refusal it can act on, and the function does not run. A deferred call
waits for a person. After it runs, joch records the output; a policy that
withholds or redacts it replaces what the model sees.

Guardrails cannot rewrite a tool's arguments: a policy that modifies them
is answered by refusing the call and telling the model the arguments joch
would accept. Use `joch.governed` where arguments must be rewritten.
"""

from __future__ import annotations

import asyncio
import json

from agents import (
    ToolGuardrailFunctionOutput,
    ToolInputGuardrailData,
    ToolOutputGuardrailData,
    tool_input_guardrail,
    tool_output_guardrail,
)

from .client import Client


def joch_guardrails(client: Client, *, agent: str | None = None):
    """The (input, output) guardrail pair to put on function tools."""

    @tool_input_guardrail
    async def joch_request(data: ToolInputGuardrailData) -> ToolGuardrailFunctionOutput:
        ctx = data.context
        try:
            arguments = json.loads(ctx.tool_arguments or "{}")
        except ValueError:
            arguments = {"arguments": ctx.tool_arguments}
        verdict = await asyncio.to_thread(
            client.hook_request,
            ctx.tool_call_id,
            ctx.tool_name,
            arguments if isinstance(arguments, dict) else {"arguments": arguments},
            agent=agent or data.agent.name,
        )
        if verdict.decision == "allow":
            return ToolGuardrailFunctionOutput.allow(output_info=verdict)
        refusal = {"success": False, "error": "Denied by joch", "reason": verdict.reason, "tool_call_id": ctx.tool_call_id}
        if verdict.decision == "modify":
            refusal.update(error="Arguments changed by joch", accepted_arguments=verdict.modified)
            # Nothing runs: the record must not wait for a result.
            await asyncio.to_thread(client.hook_result, ctx.tool_call_id, error="not run: arguments were modified")
        return ToolGuardrailFunctionOutput.reject_content(json.dumps(refusal), output_info=verdict)

    @tool_output_guardrail
    async def joch_result(data: ToolOutputGuardrailData) -> ToolGuardrailFunctionOutput:
        output = data.output
        try:
            json.dumps(output)
        except TypeError:
            output = str(output)
        verdict = await asyncio.to_thread(client.hook_result, data.context.tool_call_id, output=output)
        if verdict.decision == "allow":
            return ToolGuardrailFunctionOutput.allow(output_info=verdict)
        if verdict.decision == "modify":
            return ToolGuardrailFunctionOutput.reject_content(json.dumps(verdict.modified), output_info=verdict)
        refusal = {"success": False, "error": "Result withheld by joch", "reason": verdict.reason}
        return ToolGuardrailFunctionOutput.reject_content(json.dumps(refusal), output_info=verdict)

    return joch_request, joch_result
