"""The Claude Agent SDK drives the real Claude Code (the CLI the SDK
bundles), offline: its model is a scripted stand-in for the Anthropic
Messages API on 127.0.0.1 (fake_anthropic.py, `ANTHROPIC_BASE_URL`). Two
ways to govern it through joch (docs/integrations.md):
- MCP: joch is an MCP server of the agent; an allowed, a denied and a
  deferred tool are called;
- hooks: the agent runs its own tools (Bash), and an SDK hook callback
  asks joch before each and reports after (`/hooks/claude`)."""

from __future__ import annotations

import asyncio
import json
import urllib.request
from pathlib import Path

import anyio
from claude_agent_sdk import ClaudeAgentOptions, HookMatcher, ResultMessage, query

from conftest import NAMESPACE, policy
from fake_anthropic import FakeAnthropic
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


def options(fake: FakeAnthropic, cwd: Path, **more) -> ClaudeAgentOptions:
    """Claude Code on the scripted model, with nothing of the machine's own
    configuration; Claude Code lets the agent use joch's tools and Bash
    without asking (joch decides: `bypassPermissions` is refused to root)."""
    home = cwd / "home"
    home.mkdir(exist_ok=True)
    env = {
        "HOME": str(home),
        "ANTHROPIC_BASE_URL": fake.url,
        "ANTHROPIC_API_KEY": "sk-offline",
        "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
        "DISABLE_TELEMETRY": "1",
        "DISABLE_AUTOUPDATER": "1",
        # MCP tools offered to the model at once, not found through a search.
        "ENABLE_TOOL_SEARCH": "false",
    }
    return ClaudeAgentOptions(
        env=env, cwd=str(cwd), setting_sources=[], allowed_tools=["mcp__joch", "Bash"],
        stderr=lambda line: print("CLI:", line), **more
    )


async def run(prompt: str, opts: ClaudeAgentOptions) -> str:
    said = ""
    async for message in query(prompt=prompt, options=opts):
        if isinstance(message, ResultMessage):
            said = message.result or ""
    return said


def tool_results(fake: FakeAnthropic) -> dict[str, dict]:
    """The tool results the model was shown on its second turn, by tool use id."""
    last = fake.requests[1]["messages"][-1]
    return {
        block["tool_use_id"]: block
        for block in last["content"]
        if isinstance(block, dict) and block.get("type") == "tool_result"
    }


def tool_use(use_id: str, name: str, args: dict) -> dict:
    return {"type": "tool_use", "id": use_id, "name": name, "input": args}


def claude_name(tool: str) -> str:
    """The name Claude Code gives joch's tool `tool` (MCP server `joch`)."""
    return "mcp__joch__" + tool.replace(".", "_")


def test_claude_code_calls_joch_tools_over_mcp(joch, tmp_path):
    govern(joch)
    fake = FakeAnthropic(
        [
            [
                tool_use("toolu_echo", claude_name(ALLOWED), ECHO_ARGS),
                tool_use("toolu_sum", claude_name(DENIED), SUM_ARGS),
                tool_use("toolu_weather", claude_name(DEFERRED), WEATHER_ARGS),
            ],
            [{"type": "text", "text": "done"}],
        ]
    )
    approver = approve_when_pending(joch)
    servers = {"joch": {"type": "http", "url": joch.mcp_url()}}
    try:
        said = anyio.run(run, "go", options(fake, tmp_path, mcp_servers=servers, strict_mcp_config=True))
    finally:
        fake.close()
    approver.join(timeout=60)
    assert said == "done"
    offered = [t["name"] for t in fake.requests[0]["tools"]]
    assert {claude_name(t) for t in (ALLOWED, DENIED, DEFERRED)} <= set(offered), offered
    results = tool_results(fake)
    assert "Echo: from the agent" in json.dumps(results["toolu_echo"]), results
    assert DENY_REASON in json.dumps(results["toolu_sum"]), results
    assert results["toolu_sum"].get("is_error") is True, results
    assert WEATHER_TEXT in json.dumps(results["toolu_weather"]), results
    assert_governed(joch)


def ask_joch(url: str):
    """An SDK hook callback that asks joch (`/hooks/claude`) with the hook's
    own input and answers what joch answers."""

    def post(body: dict) -> dict:
        request = urllib.request.Request(
            url, data=json.dumps(body).encode(), headers={"content-type": "application/json"}
        )
        with urllib.request.urlopen(request, timeout=600) as response:
            return json.loads(response.read() or b"{}")

    async def hook(input_data, tool_use_id, context):
        return await asyncio.to_thread(post, dict(input_data))

    return hook


def test_claude_codes_own_tools_are_governed_by_hooks(joch, tmp_path):
    joch.apply(
        policy(
            "shell-safety",
            ["Bash"],
            [
                {
                    "name": "no-rm-rf",
                    "when": {"expr": "input.command.contains('rm -rf')"},
                    "action": {"deny": {"reason": "recursive deletes are not allowed"}},
                },
                {"name": "files-need-a-person", "when": {"expr": "input.command.contains('touch')"},
                 "require": {"approval": "human"}},
            ],
        )
    )
    made = tmp_path / "approved.txt"
    fake = FakeAnthropic(
        [
            [
                tool_use("toolu_echo", "Bash", {"command": "echo hooked"}),
                tool_use("toolu_rm", "Bash", {"command": f"rm -rf {tmp_path}/nothing"}),
                tool_use("toolu_touch", "Bash", {"command": f"touch {made}"}),
            ],
            [{"type": "text", "text": "done"}],
        ]
    )
    hook = ask_joch(f"{joch.base}/v1/namespaces/{NAMESPACE}/hooks/claude")
    hooks = {
        event: [HookMatcher(matcher="Bash", hooks=[hook], timeout=120)]
        for event in ("PreToolUse", "PostToolUse", "PostToolUseFailure")
    }
    approver = approve_when_pending(joch)
    try:
        said = anyio.run(run, "go", options(fake, tmp_path, hooks=hooks))
    finally:
        fake.close()
    approver.join(timeout=60)
    assert said == "done"
    results = tool_results(fake)
    assert "hooked" in json.dumps(results["toolu_echo"]), results
    assert "recursive deletes are not allowed" in json.dumps(results["toolu_rm"]), results
    assert made.exists(), "the approved command ran"

    calls = {c["metadata"]["name"]: c for c in joch.calls(NAMESPACE)}
    assert calls["toolu_echo"]["status"]["phase"] == "Succeeded", calls["toolu_echo"]
    assert calls["toolu_echo"]["spec"]["mode"] == "hook"
    assert calls["toolu_rm"]["status"]["phase"] == "Denied", calls["toolu_rm"]
    assert calls["toolu_touch"]["status"]["phase"] == "Succeeded", calls["toolu_touch"]
    assert calls["toolu_touch"]["spec"]["approval"]["approvedBy"] == "alice", calls["toolu_touch"]
