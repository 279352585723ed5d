"""joch between the official MCP Python SDK client and the reference MCP
server: every call an MCP client makes lands in the ledger, and every
upstream tool is governed."""

from __future__ import annotations

import base64
import json
import re
import subprocess
import urllib.request
from contextlib import asynccontextmanager

import anyio
from mcp import ClientSession, StdioServerParameters, stdio_client, types
from mcp.client.streamable_http import streamable_http_client

from conftest import NAMESPACE, deny, http_everything, policy, stdio_everything, wait_until

TRACEPARENT = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"


@asynccontextmanager
async def http_session(url: str, on_message=None, elicitation=None):
    async with streamable_http_client(url) as (read, write):
        async with ClientSession(
            read, write, message_handler=on_message, elicitation_callback=elicitation
        ) as session:
            await session.initialize()
            yield session


def answer_of(result) -> dict:
    """The JSON text of the first content block (joch's refusals are JSON)."""
    return json.loads(result.content[0].text)


def test_tools_of_an_upstream_server_are_called_and_recorded(joch):
    server = joch.apply(stdio_everything())
    assert server["status"]["phase"] == "Connected", server["status"]

    async def scenario():
        async with http_session(joch.mcp_url()) as session:
            listed = {t.name: t for t in (await session.list_tools()).tools}
            assert {"everything.echo", "everything.get-sum", "everything.get-tiny-image"} <= set(listed)
            assert listed["everything.echo"].annotations.read_only_hint is True
            assert "message" in listed["everything.echo"].input_schema["properties"]

            echo = await session.call_tool(
                "everything.echo", {"message": "hello joch"}, meta={"traceparent": TRACEPARENT}
            )
            assert not echo.is_error
            assert echo.content[0].text == "Echo: hello joch"

            total = await session.call_tool("everything.get-sum", {"a": 2, "b": 40})
            assert not total.is_error
            assert "42" in total.content[0].text

            image = await session.call_tool("everything.get-tiny-image", {})
            images = [c for c in image.content if c.type == "image"]
            assert len(images) == 1 and images[0].mime_type == "image/png"
            assert base64.b64decode(images[0].data).startswith(b"\x89PNG")

    anyio.run(scenario)

    calls = {c["spec"]["toolRef"]["name"]: c for c in joch.calls()}
    echo = calls["everything.echo"]
    assert echo["status"]["phase"] == "Succeeded"
    assert echo["spec"]["input"] == {"message": "hello joch"}
    assert echo["spec"]["traceparent"] == TRACEPARENT
    assert echo["spec"]["sideEffects"] == {"level": "read_only", "idempotent": True}
    assert echo["spec"]["agentRef"]["name"] == "mcp"  # the Python SDK's client name
    assert echo["spec"]["executionRef"]["name"].startswith("mcp-")
    assert echo["status"]["output"]["content"] == [{"type": "text", "text": "Echo: hello joch"}]
    assert echo["status"]["attempts"] == 1
    # One MCP session is one execution.
    assert calls["everything.get-sum"]["spec"]["executionRef"] == echo["spec"]["executionRef"]
    image = calls["everything.get-tiny-image"]["status"]["output"]["content"]
    # Media stays media in the record: typed, with its MIME type, not flattened to text.
    assert [c["type"] for c in image].count("image") == 1
    assert any(c.get("mimeType") == "image/png" for c in image)


def test_a_denial_reaches_the_client_as_an_error_result_with_the_reason(joch):
    joch.apply(stdio_everything())
    joch.apply(policy("no-sums", ["everything.get-sum"], [deny("sums are done by hand here")], version="3"))

    async def scenario():
        async with http_session(joch.mcp_url()) as session:
            denied = await session.call_tool("everything.get-sum", {"a": 1, "b": 2})
            assert denied.is_error
            answer = answer_of(denied)
            assert answer["success"] is False
            assert answer["reason"] == "sums are done by hand here"
            assert answer["tool_call_id"].startswith("mcp-")
            # Other tools still work in the same session.
            assert not (await session.call_tool("everything.echo", {"message": "ok"})).is_error
            return answer["tool_call_id"]

    call_id = anyio.run(scenario)
    record = joch.ok("GET", f"/v1/namespaces/{NAMESPACE}/toolcalls/{call_id}")
    assert record["status"]["phase"] == "Denied"
    decision = record["status"]["hookDecisions"][0]
    assert decision["decision"] == "deny"
    assert decision["policyId"] == "no-sums"
    assert decision["policyVersion"] == "3"


def test_a_deferred_call_reports_progress_and_ends_with_the_approved_result(joch):
    joch.apply(stdio_everything())
    joch.apply(policy("ask-first", ["everything.echo"], [{"name": "person", "require": {"approval": "human"}}]))
    progress: list[str] = []

    async def on_progress(value: float, total: float | None, message: str | None) -> None:
        progress.append(message or "")

    async def approve_when_asked():
        approval = await anyio.to_thread.run_sync(
            lambda: wait_until(
                lambda: joch.ok("GET", f"/v1/namespaces/{NAMESPACE}/approvals")["items"],
                "the approval",
            )
        )
        await anyio.to_thread.run_sync(lambda: wait_until(lambda: progress, "a progress notification"))
        name = approval[0]["metadata"]["name"]
        await anyio.to_thread.run_sync(lambda: joch.cli("approve", name, "-n", NAMESPACE, "--by", "alice"))

    async def scenario():
        async with http_session(joch.mcp_url()) as session:
            async with anyio.create_task_group() as tasks:
                tasks.start_soon(approve_when_asked)
                result = await session.call_tool(
                    "everything.echo", {"message": "may I?"}, progress_callback=on_progress
                )
            return result

    result = anyio.run(scenario)
    assert not result.is_error
    assert result.content[0].text == "Echo: may I?"
    assert any("waiting for approval" in m for m in progress), progress
    (record,) = joch.calls(tool="everything.echo")
    assert record["status"]["phase"] == "Succeeded"
    assert record["spec"]["approval"]["status"] == "approved"
    assert record["spec"]["approval"]["approvedBy"] == "alice"


def test_clients_are_told_when_the_namespace_tools_change(joch):
    changed = anyio.Event()

    async def on_message(message) -> None:
        if getattr(message, "method", None) == "notifications/tools/list_changed":
            changed.set()

    async def scenario():
        async with http_session(joch.mcp_url(), on_message) as session:
            assert (await session.list_tools()).tools == []
            await anyio.to_thread.run_sync(lambda: joch.apply(stdio_everything()))
            with anyio.fail_after(20):
                await changed.wait()
            names = [t.name for t in (await session.list_tools()).tools]
            assert "everything.echo" in names

    anyio.run(scenario)


def test_joch_mcp_on_stdio_proxies_to_the_server_and_records_the_calls(joch):
    joch.apply(stdio_everything())
    params = StdioServerParameters(
        command=joch.bin, args=["--server", joch.base, "mcp", "--namespace", NAMESPACE]
    )

    async def scenario():
        async with stdio_client(params) as (read, write):
            async with ClientSession(read, write) as session:
                await session.initialize()
                names = [t.name for t in (await session.list_tools()).tools]
                assert "everything.echo" in names
                for i in range(10):
                    result = await session.call_tool("everything.echo", {"message": f"over stdio {i}"})
                    assert result.content[0].text == f"Echo: over stdio {i}"

    accepted = joch.metric("joch_connections_accepted_total")
    anyio.run(scenario)
    records = joch.calls(tool="everything.echo")
    assert len(records) == 10
    assert all(r["status"]["phase"] == "Succeeded" for r in records)
    assert all(r["spec"]["agentRef"]["name"] == "mcp" for r in records)
    # The proxy keeps its connections to joch alive: fewer than one a call
    # (rmcp's default client opens one per request).
    opened = joch.metric("joch_connections_accepted_total") - accepted - 1
    assert opened < 10, f"{opened} connections for 10 calls"


def test_a_dead_upstream_fails_calls_cleanly_until_it_is_back(joch, everything):
    server = joch.apply(http_everything(everything.url))
    assert server["status"]["phase"] == "Connected", server["status"]

    async def call(session, message):
        return await session.call_tool("everything.echo", {"message": message})

    async def scenario():
        async with http_session(joch.mcp_url()) as session:
            assert (await call(session, "before")).content[0].text == "Echo: before"
            everything.kill()
            failed = await call(session, "while down")
            assert failed.is_error
            assert answer_of(failed)["error"] == "mcp_unavailable"
            everything.start()
            assert (await call(session, "after")).content[0].text == "Echo: after"

    anyio.run(scenario)
    by_input = {c["spec"]["input"]["message"]: c for c in joch.calls(tool="everything.echo")}
    assert by_input["before"]["status"]["phase"] == "Succeeded"
    down = by_input["while down"]["status"]
    assert down["phase"] == "Failed"
    assert down["error"]["code"] == "mcp_unavailable"
    assert by_input["after"]["status"]["phase"] == "Succeeded"


def test_joch_mcp_with_db_runs_the_engine_in_process(joch, tmp_path):
    # Prepare a ledger with a running server, then stop it: `--db` needs none.
    joch.apply(
        {
            "apiVersion": "joch.dev/v1alpha1",
            "kind": "Tool",
            "metadata": {"name": "nothing"},
            "spec": {"description": "Does nothing.", "inputSchema": {"type": "object"}, "backend": {"type": "noop"}},
        }
    )
    joch.process.kill()
    joch.process.wait()
    params = StdioServerParameters(
        command=joch.bin,
        args=["mcp", "--namespace", NAMESPACE, "--db", str(tmp_path / "joch.db")],
    )

    async def scenario():
        async with stdio_client(params) as (read, write):
            async with ClientSession(read, write) as session:
                await session.initialize()
                assert [t.name for t in (await session.list_tools()).tools] == ["nothing"]
                result = await session.call_tool("nothing", {})
                assert not result.is_error
                assert result.structured_content == {}

    anyio.run(scenario)
    # The call is in the ledger the server reads when it starts again.
    process = subprocess.Popen(
        [joch.bin, "serve", "--addr", "127.0.0.1:0", "--db", str(tmp_path / "joch.db")],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    try:
        base = re.search(r"listening on (http://\S+)", process.stdout.readline()).group(1)
        with urllib.request.urlopen(f"{base}/v1/namespaces/{NAMESPACE}/toolcalls") as response:
            (record,) = json.loads(response.read())["items"]
        assert record["spec"]["toolRef"]["name"] == "nothing"
        assert record["status"]["phase"] == "Succeeded"
    finally:
        process.kill()
        process.wait()


def test_upstream_progress_is_streamed_as_output_chunks(joch):
    """The reference server reports progress when a call carries a progress
    token: joch asks for it on calls that belong to an execution, and each
    report becomes an `output_chunk` event before the call completes."""
    joch.apply(stdio_everything())
    call = {
        "spec": {
            "toolRef": {"name": "everything.trigger-long-running-operation"},
            "executionRef": {"name": "long-run"},
            "input": {"duration": 1, "steps": 3},
        }
    }
    settled = joch.ok("POST", f"/v1/namespaces/{NAMESPACE}/toolcalls", call)
    assert settled["status"]["phase"] == "Succeeded", settled
    assert "Steps: 3" in json.dumps(settled["status"]["output"])
    events = joch.ok("GET", f"/v1/namespaces/{NAMESPACE}/executions/long-run/events")["items"]
    kinds = [e["type"] for e in events]
    chunks = [c for e in events if e["type"] == "output_chunk" for c in e["data"]["chunks"]]
    # The last report races the result itself (rmcp handles the two
    # concurrently); chunks are for watchers, the result is the record.
    assert [c["progress"] for c in chunks] in ([1, 2], [1, 2, 3]), events
    assert all(c["total"] == 3 for c in chunks)
    last_chunk = max(i for i, k in enumerate(kinds) if k == "output_chunk")
    assert last_chunk < kinds.index("tool_completed"), kinds


# MCP elicitation: a client that declares it may be asked to decide a call
# that waits for a person (when the policy says askUser) or to give the
# value a userInput requirement asks for.


def ask_user_policy(tools: list[str]) -> dict:
    return policy(
        "ask-the-user",
        tools,
        [
            {
                "name": "person",
                "require": {"approval": "human", "approvalRouting": {"askUser": True}},
                "reason": "echoes need a yes",
                "approverReason": "Echoes are loud.",
            }
        ],
        version="2",
    )


class Asked:
    """An elicitation callback that answers with `answer(params)` and keeps what it was asked."""

    def __init__(self, answer) -> None:
        self.answer = answer
        self.questions: list = []

    async def __call__(self, context, params):
        self.questions.append(params)
        return await self.answer(params)


def approval_of(joch, name: str) -> dict:
    return joch.ok("GET", f"/v1/namespaces/{NAMESPACE}/approvals/{name}")


def test_elicitation_approves_a_deferred_call_when_the_policy_asks_the_user(joch):
    joch.apply(stdio_everything())
    joch.apply(ask_user_policy(["everything.echo"]))

    async def yes(params):
        return types.ElicitResult(action="accept", content={"approve": True, "reason": "fine by me"})

    asked = Asked(yes)

    async def scenario():
        async with http_session(joch.mcp_url(), elicitation=asked) as session:
            return await session.call_tool("everything.echo", {"message": "may I?"})

    result = anyio.run(scenario)
    assert not result.is_error, result
    assert result.content[0].text == "Echo: may I?"
    (question,) = asked.questions
    assert '"everything.echo"' in question.message
    assert '{"message":"may I?"}' in question.message
    assert "Echoes are loud. (policy ask-the-user, version 2)" in question.message
    schema = question.requested_schema
    assert schema["properties"]["approve"]["type"] == "boolean"
    assert schema["properties"]["reason"]["type"] == "string"
    assert schema["required"] == ["approve"]

    (record,) = joch.calls(tool="everything.echo")
    assert record["status"]["phase"] == "Succeeded"
    # The Python SDK's client name is "mcp".
    assert record["spec"]["approval"]["status"] == "approved"
    assert record["spec"]["approval"]["approvedBy"] == "mcp-elicitation:mcp"
    approval = approval_of(joch, record["metadata"]["name"])
    assert approval["status"]["phase"] == "Approved"
    assert approval["status"]["decidedBy"] == "mcp-elicitation:mcp"
    assert approval["status"]["rationale"] == "fine by me"
    allowed = [d for d in record["status"]["hookDecisions"] if d.get("policyId") == "ask-the-user"]
    assert [d["decision"] for d in allowed] == ["defer", "allow"], allowed
    assert allowed[1]["reason"] == "approved by mcp-elicitation:mcp"


def test_declining_the_elicitation_denies_the_call(joch):
    joch.apply(stdio_everything())
    joch.apply(ask_user_policy(["everything.echo"]))

    async def no(params):
        return types.ElicitResult(action="decline")

    async def scenario():
        async with http_session(joch.mcp_url(), elicitation=Asked(no)) as session:
            return await session.call_tool("everything.echo", {"message": "may I?"})

    result = anyio.run(scenario)
    assert result.is_error
    answer = answer_of(result)
    assert answer["success"] is False
    assert answer["error"] == "Denied by approver"
    assert answer["reason"] == "the user declined in the MCP client"
    record = joch.ok("GET", f"/v1/namespaces/{NAMESPACE}/toolcalls/{answer['tool_call_id']}")
    assert record["status"]["phase"] == "Denied"
    assert record["spec"]["approval"]["status"] == "rejected"
    approval = approval_of(joch, answer["tool_call_id"])
    assert approval["status"]["phase"] == "Rejected"
    assert approval["status"]["decidedBy"] == "mcp-elicitation:mcp"


def test_elicitation_gives_the_value_a_user_input_policy_asks_for(joch):
    joch.apply(stdio_everything())
    joch.apply(
        policy(
            "ask-for-values",
            ["everything.echo", "everything.get-sum"],
            [
                {"when": {"tool.name": "everything.echo"}, "require": {"userInput": {"targetArg": "message", "prompt": "What should be echoed?"}}},
                {"when": {"tool.name": "everything.get-sum"}, "require": {"userInput": {"targetArg": "b", "prompt": "Add what?"}}},
            ],
        )
    )
    values = {"message": "from the user", "b": 40}

    async def give(params):
        (arg,) = params.requested_schema["required"]
        return types.ElicitResult(action="accept", content={arg: values[arg]})

    asked = Asked(give)

    async def scenario():
        async with http_session(joch.mcp_url(), elicitation=asked) as session:
            echoed = await session.call_tool("everything.echo", {"message": "placeholder"})
            summed = await session.call_tool("everything.get-sum", {"a": 2, "b": 0})
            return echoed, summed

    echoed, summed = anyio.run(scenario)
    assert not echoed.is_error, echoed
    assert echoed.content[0].text == "Echo: from the user"
    assert not summed.is_error, summed
    assert "42" in summed.content[0].text
    text, number = asked.questions
    assert "What should be echoed?" in text.message
    assert text.requested_schema["properties"]["message"]["type"] == "string"
    # The tool declares `b` a number, so the form asks for one.
    assert number.requested_schema["properties"]["b"]["type"] == "number"

    calls = {c["spec"]["toolRef"]["name"]: c for c in joch.calls()}
    assert calls["everything.echo"]["spec"]["input"] == {"message": "from the user"}
    assert calls["everything.get-sum"]["spec"]["input"] == {"a": 2, "b": 40}
    for call in calls.values():
        assert call["status"]["phase"] == "Succeeded"
        assert call["spec"]["approval"]["approvedBy"] == "mcp-elicitation:mcp"


def test_without_ask_user_a_deferred_call_waits_for_an_approver_even_if_the_client_could_be_asked(joch):
    joch.apply(stdio_everything())
    joch.apply(policy("ask-first", ["everything.echo"], [{"name": "person", "require": {"approval": "human"}}]))

    async def never(params):
        raise AssertionError("the policy did not ask the user")

    asked = Asked(never)

    async def approve_when_asked():
        (approval,) = await anyio.to_thread.run_sync(
            lambda: wait_until(
                lambda: joch.ok("GET", f"/v1/namespaces/{NAMESPACE}/approvals")["items"], "the approval"
            )
        )
        name = approval["metadata"]["name"]
        await anyio.to_thread.run_sync(lambda: joch.cli("approve", name, "-n", NAMESPACE, "--by", "alice"))

    async def scenario():
        async with http_session(joch.mcp_url(), elicitation=asked) as session:
            async with anyio.create_task_group() as tasks:
                tasks.start_soon(approve_when_asked)
                return await session.call_tool("everything.echo", {"message": "may I?"})

    result = anyio.run(scenario)
    assert result.content[0].text == "Echo: may I?"
    assert asked.questions == []
    (record,) = joch.calls(tool="everything.echo")
    assert record["spec"]["approval"]["approvedBy"] == "alice"


def test_a_question_the_client_fails_leaves_the_call_to_the_approvers(joch):
    joch.apply(stdio_everything())
    joch.apply(ask_user_policy(["everything.echo"]))

    async def broken(params):
        return types.ErrorData(code=types.INTERNAL_ERROR, message="no screen to ask on")

    asked = Asked(broken)

    async def approve_when_asked():
        def approve():
            wait_until(lambda: asked.questions, "the question")
            (approval,) = joch.ok("GET", f"/v1/namespaces/{NAMESPACE}/approvals")["items"]
            assert approval["status"]["phase"] == "Pending"
            joch.cli("approve", approval["metadata"]["name"], "-n", NAMESPACE, "--by", "alice")

        await anyio.to_thread.run_sync(approve)

    async def scenario():
        async with http_session(joch.mcp_url(), elicitation=asked) as session:
            async with anyio.create_task_group() as tasks:
                tasks.start_soon(approve_when_asked)
                return await session.call_tool("everything.echo", {"message": "may I?"})

    result = anyio.run(scenario)
    assert result.content[0].text == "Echo: may I?"
    (record,) = joch.calls(tool="everything.echo")
    assert record["spec"]["approval"]["approvedBy"] == "alice"


def test_an_approver_who_decides_first_wins_over_the_elicitation(joch):
    joch.apply(stdio_everything())
    joch.apply(ask_user_policy(["everything.echo"]))

    async def no_once_alice_said_yes(params):
        def approved_by_alice():
            (approval,) = joch.ok("GET", f"/v1/namespaces/{NAMESPACE}/approvals")["items"]
            name = approval["metadata"]["name"]
            joch.cli("approve", name, "-n", NAMESPACE, "--by", "alice")
            return wait_until(lambda: approval_of(joch, name)["status"].get("decidedBy"), "the decision")

        await anyio.to_thread.run_sync(approved_by_alice)
        # joch may withdraw the question first (notifications/cancelled);
        # if this answer does arrive, it is too late to count.
        return types.ElicitResult(action="decline")

    async def scenario():
        async with http_session(joch.mcp_url(), elicitation=Asked(no_once_alice_said_yes)) as session:
            first = await session.call_tool("everything.echo", {"message": "may I?"})
            # The session still works after the losing answer.
            second = await session.call_tool("everything.get-sum", {"a": 2, "b": 40})
            return first, second

    first, second = anyio.run(scenario)
    assert not first.is_error, first
    assert first.content[0].text == "Echo: may I?"
    assert not second.is_error and "42" in second.content[0].text
    (record,) = joch.calls(tool="everything.echo")
    approval = approval_of(joch, record["metadata"]["name"])
    assert approval["status"]["phase"] == "Approved"
    assert approval["status"]["decidedBy"] == "alice"
    assert record["status"]["phase"] == "Succeeded"


def test_the_question_is_withdrawn_when_an_approver_decides_first(joch):
    joch.apply(stdio_everything())
    joch.apply(ask_user_policy(["everything.echo"]))
    seen: list[str] = []

    async def never_answers(context, params):
        seen.append("asked")
        try:
            await anyio.sleep(60)
        except anyio.get_cancelled_exc_class():
            # joch's notifications/cancelled, once the call no longer waits.
            seen.append("withdrawn")
            raise
        return types.ElicitResult(action="decline")

    async def alice_approves():
        def approve():
            (approval,) = wait_until(
                lambda: joch.ok("GET", f"/v1/namespaces/{NAMESPACE}/approvals")["items"], "the approval"
            )
            wait_until(lambda: seen, "the question")
            joch.cli("approve", approval["metadata"]["name"], "-n", NAMESPACE, "--by", "alice")

        await anyio.to_thread.run_sync(approve)

    async def scenario():
        async with http_session(joch.mcp_url(), elicitation=never_answers) as session:
            async with anyio.create_task_group() as tasks:
                tasks.start_soon(alice_approves)
                result = await session.call_tool("everything.echo", {"message": "may I?"})
            await anyio.to_thread.run_sync(lambda: wait_until(lambda: "withdrawn" in seen, "the withdrawal"))
            return result

    result = anyio.run(scenario)
    assert result.content[0].text == "Echo: may I?"
    (record,) = joch.calls(tool="everything.echo")
    assert record["spec"]["approval"]["approvedBy"] == "alice"


def test_joch_mcp_on_stdio_passes_the_question_on_to_its_client(joch):
    joch.apply(stdio_everything())
    joch.apply(ask_user_policy(["everything.echo"]))
    params = StdioServerParameters(
        command=joch.bin, args=["--server", joch.base, "mcp", "--namespace", NAMESPACE]
    )

    async def yes(params):
        return types.ElicitResult(action="accept", content={"approve": True})

    asked = Asked(yes)

    async def scenario():
        async with stdio_client(params) as (read, write):
            async with ClientSession(read, write, elicitation_callback=asked) as session:
                await session.initialize()
                return await session.call_tool("everything.echo", {"message": "over stdio"})

    result = anyio.run(scenario)
    assert result.content[0].text == "Echo: over stdio"
    assert len(asked.questions) == 1
    (record,) = joch.calls(tool="everything.echo")
    # The proxy names its own client as the agent.
    assert record["spec"]["approval"]["approvedBy"] == "mcp-elicitation:mcp"


def test_a_stdio_server_gets_no_joch_secret_from_the_environment(tmp_path):
    """joch's own settings (its admin token, its vault key) stay out of the
    servers it runs; what the McpServer names in `env` reaches them."""
    from conftest import start_joch

    secrets = {"JOCH_ADMIN_TOKEN": "admin-token-not-for-servers", "JOCH_VAULT_KEY": "A" * 43 + "="}
    joch = start_joch(tmp_path, env=secrets)
    joch.token = secrets["JOCH_ADMIN_TOKEN"]
    try:
        server = stdio_everything()
        server["spec"]["stdio"]["env"] = {"GIVEN_TO_THE_SERVER": "yes"}
        applied = joch.apply(server)
        assert applied["status"]["phase"] == "Connected", applied["status"]
        call = joch.ok(
            "POST",
            f"/v1/namespaces/{NAMESPACE}/toolcalls",
            {"spec": {"toolRef": {"name": "everything.get-env"}, "input": {}}},
        )
        assert call["status"]["phase"] == "Succeeded", call["status"]
        text = call["status"]["output"]["content"][0]["text"]
        env = json.loads(text)
        assert env["GIVEN_TO_THE_SERVER"] == "yes"
        assert "PATH" in env
        assert not [k for k in env if k.startswith("JOCH_")], sorted(env)
        for value in secrets.values():
            assert value not in text
    finally:
        joch.process.kill()
        joch.process.wait()
