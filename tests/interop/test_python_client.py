"""The Python client (clients/python, pip-installed by scripts/test) against
a real joch: the REST client, the hook-mode wrapper, and the OpenAI Agents
SDK guardrails with a scripted model."""

from __future__ import annotations

import json
import threading

import anyio
import pytest
from agents import Agent, Runner, function_tool, set_tracing_disabled

from conftest import NAMESPACE, deny, policy, wait_until
from joch import Client, HookDenied, JochError, governed
from joch.agents import joch_guardrails
from test_agents_sdk import ScriptedModel, message, tool_call

set_tracing_disabled(True)


NOOP = {
    "kind": "Tool",
    "metadata": {"name": "nothing"},
    "spec": {"description": "Does nothing.", "inputSchema": {"type": "object"}, "backend": {"type": "noop"}},
}


def test_the_rest_client_calls_reads_and_decides(joch):
    client = Client(joch.base, namespace=NAMESPACE)
    client.apply(NOOP)
    done = client.call("nothing", {"x": 1}, execution="run-1", agent="py")
    assert done["status"]["phase"] == "Succeeded"
    assert client.get_call(done["metadata"]["name"])["spec"]["input"] == {"x": 1}
    assert [c["metadata"]["name"] for c in client.calls(tool="nothing")] == [done["metadata"]["name"]]
    assert [e["type"] for e in client.events("run-1")][-1] == "tool_completed"

    with pytest.raises(JochError) as refused:
        client.call("missing", {})
    assert refused.value.status == 404 and refused.value.code == "tool_not_found"

    client.apply(policy("ask", ["nothing"], [{"name": "person", "require": {"approval": "human"}}]))
    accepted = client.call("nothing", {"x": 2}, wait=False)
    assert accepted["status"]["phase"] == "AwaitingApproval"
    (approval,) = wait_until(client.approvals, "the approval")
    client.approve(approval["metadata"]["name"], by="alice", rationale="fine")
    settled = wait_until(
        lambda: client.get_call(accepted["metadata"]["name"])["status"]["phase"] == "Succeeded"
        and client.get_call(accepted["metadata"]["name"]),
        "the approved call",
    )
    assert settled["spec"]["approval"]["approvedBy"] == "alice"


def test_governed_functions_run_only_when_allowed_and_are_recorded(joch):
    client = Client(joch.base, namespace=NAMESPACE)
    client.apply(
        policy(
            "refunds",
            ["refund"],
            [
                {"name": "cap", "when": {"expr": "input.amount > 100.0"}, "action": {"deny": {"reason": "refunds over 100 need a person"}}},
                {"name": "note", "when": {"input.note": "*"}, "action": {"modify": {"set": {"note": "checked by joch"}}}},
                {"name": "hide", "hook": "toolCallResult", "when": {"output.card": "*"}, "action": {"modify": {"redact": ["card"]}}},
            ],
        )
    )
    ran: list[dict] = []

    @governed(client, agent="billing-bot", session="sess-9")
    def refund(order: str, amount: float, note: str = "") -> dict:
        ran.append({"order": order, "amount": amount, "note": note})
        return {"refunded": amount, "card": "4111 1111 1111 1111"}

    result = refund("o-1", 20.0, note="please")
    assert ran == [{"order": "o-1", "amount": 20.0, "note": "checked by joch"}]
    assert result == {"refunded": 20.0, "card": "[REDACTED]"}

    with pytest.raises(HookDenied) as denied:
        refund("o-2", 500.0)
    assert str(denied.value) == "refunds over 100 need a person"
    assert denied.value.verdict.policy_id == "refunds"
    assert len(ran) == 1, "a denied call never runs"

    records = {c["spec"]["input"]["order"]: c for c in client.calls(tool="refund")}
    allowed = records["o-1"]
    assert allowed["spec"]["mode"] == "hook"
    assert allowed["status"]["phase"] == "Succeeded"
    assert allowed["spec"]["agentRef"]["name"] == "billing-bot"
    assert allowed["spec"]["executionRef"]["name"] == "sess-9"
    assert allowed["status"]["originalInput"]["note"] == "please"
    assert records["o-2"]["status"]["phase"] == "Denied"


def test_an_async_governed_function_that_raises_is_recorded_as_failed(joch):
    client = Client(joch.base, namespace=NAMESPACE)

    @governed(client, tool="fetch.page")
    async def fetch(url: str) -> str:
        raise ConnectionError(f"cannot reach {url}")

    with pytest.raises(ConnectionError):
        anyio.run(fetch, "http://192.0.2.1/")
    (record,) = client.calls(tool="fetch.page")
    assert record["status"]["phase"] == "Failed"
    assert "ConnectionError: cannot reach" in record["status"]["error"]["message"]


def test_agents_sdk_guardrails_let_joch_decide_on_function_tools(joch):
    client = Client(joch.base, namespace=NAMESPACE)
    client.apply(
        policy("no-deletes", ["delete_account"], [deny("accounts are closed by support staff")])
    )
    before, after = joch_guardrails(client)
    executed: list[str] = []
    lock = threading.Lock()

    @function_tool(tool_input_guardrails=[before], tool_output_guardrails=[after])
    def lookup_order(order: str) -> str:
        with lock:
            executed.append(f"lookup {order}")
        return f"order {order}: shipped"

    @function_tool(tool_input_guardrails=[before], tool_output_guardrails=[after])
    def delete_account(user: str) -> str:
        with lock:
            executed.append(f"delete {user}")
        return "deleted"

    model = ScriptedModel(
        [
            [tool_call("call_lookup", "lookup_order", {"order": "A1"}), tool_call("call_delete", "delete_account", {"user": "bob"})],
            [message("done")],
        ]
    )
    agent = Agent(name="support-bot", instructions="Help.", model=model, tools=[lookup_order, delete_account])
    result = anyio.run(Runner.run, agent, "go")
    assert result.final_output == "done"
    assert executed == ["lookup A1"], "the denied tool never ran"

    outputs = {
        item["call_id"]: item["output"]
        for item in model.seen_inputs[1]
        if isinstance(item, dict) and item.get("type") == "function_call_output"
    }
    assert "shipped" in str(outputs["call_lookup"])
    assert json.loads(outputs["call_delete"])["reason"] == "accounts are closed by support staff"

    lookup = client.get_call("call_lookup")
    assert lookup["spec"]["mode"] == "hook"
    assert lookup["spec"]["agentRef"]["name"] == "support-bot"
    assert lookup["status"]["phase"] == "Succeeded"
    assert lookup["status"]["output"] == "order A1: shipped"
    deleted = client.get_call("call_delete")
    assert deleted["status"]["phase"] == "Denied"
    assert deleted["status"]["hookDecisions"][0]["policyId"] == "no-deletes"


def test_the_client_carries_a_bearer_token(tmp_path):
    import os
    import re
    import subprocess

    root = "interop-root-token"
    process = subprocess.Popen(
        [os.environ["JOCH_BIN"], "serve", "--addr", "127.0.0.1:0", "--db", str(tmp_path / "auth.db")],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
        env={**os.environ, "JOCH_ADMIN_TOKEN": root},
    )
    try:
        base = re.search(r"listening on (http://\S+)", process.stdout.readline()).group(1)
        with pytest.raises(JochError) as refused:
            Client(base, namespace=NAMESPACE).calls()
        assert refused.value.status == 401 and refused.value.code == "unauthorized"
        admin = Client(base, namespace=NAMESPACE, token=root)
        admin.apply(NOOP)
        assert admin.call("nothing", {})["status"]["phase"] == "Succeeded"
    finally:
        process.kill()
        process.wait()
