"""A LangGraph agent uses joch's MCP endpoint through langchain-mcp-adapters.
The model is langchain-core's fake chat model (no network): it calls an
allowed, a denied and a deferred tool at once, then answers; we check what
it read (docs/integrations.md). The agent runs in its own Python
(`LANGGRAPH_PYTHON`, set up by scripts/test from
requirements-langgraph.txt): langchain-mcp-adapters 0.3.2 needs the MCP
Python SDK 1.x, the other examples 2.x."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

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

AGENT = Path(__file__).with_name("langgraph_agent.py")
CALLS = {"echo": [ALLOWED, ECHO_ARGS], "sum": [DENIED, SUM_ARGS], "weather": [DEFERRED, WEATHER_ARGS]}


def test_a_langgraph_agent_is_governed_through_joch(joch):
    python = os.environ.get("LANGGRAPH_PYTHON")
    if not python:
        pytest.fail("LANGGRAPH_PYTHON is not set: run the interop tests through scripts/test")
    govern(joch)
    approver = approve_when_pending(joch)
    done = subprocess.run(
        [python, str(AGENT), joch.mcp_url(), json.dumps(CALLS)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    approver.join(timeout=60)
    assert done.returncode == 0, done.stderr
    seen = json.loads(done.stdout)
    assert seen["said"] == "done"
    assert {ALLOWED, DENIED, DEFERRED} <= set(seen["offered"]), seen["offered"]
    read = seen["read"]
    assert "Echo: from the agent" in read["echo"], read
    assert DENY_REASON in read["sum"], read
    assert WEATHER_TEXT in read["weather"], read
    assert_governed(joch)
