"""The governance every agent framework's example checks through joch
(docs/integrations.md): joch runs the reference MCP server, and
- `everything.echo` is allowed;
- `everything.get-sum` is denied by a policy, with a reason the model must
  be shown;
- `everything.get-structured-content` waits for a person's approval.

Each framework's test drives its own agent with the framework's offline
test model (no LLM, no network beyond 127.0.0.1), then checks here what
joch recorded."""

from __future__ import annotations

import threading

from conftest import NAMESPACE, deny, policy, stdio_everything, wait_until

ALLOWED = "everything.echo"
DENIED = "everything.get-sum"
DEFERRED = "everything.get-structured-content"
DENY_REASON = "sums are off limits"
APPROVER = "alice"

ECHO_ARGS = {"message": "from the agent"}
SUM_ARGS = {"a": 1, "b": 2}
WEATHER_ARGS = {"location": "Chicago"}
# What the approved call answers (server-everything's simulated weather).
WEATHER_TEXT = "Light rain / drizzle"


def govern(joch, approval_routing: dict | None = None) -> None:
    """The upstream server and the two policies every example runs under."""
    joch.apply(stdio_everything())
    joch.apply(policy("no-sums", [DENIED], [deny(DENY_REASON)]))
    require = {"approval": "human", **({"approvalRouting": approval_routing} if approval_routing else {})}
    joch.apply(policy("ask-first", [DEFERRED], [{"name": "person", "require": require}]))


def approve_when_pending(joch) -> threading.Thread:
    """Approves, as a person in the console would, the first call that
    waits for approval, from a thread (the agent blocks meanwhile)."""

    def approve() -> None:
        pending = wait_until(
            lambda: joch.ok("GET", f"/v1/namespaces/{NAMESPACE}/approvals?phase=Pending")["items"],
            "a pending approval",
            timeout=60,
        )
        name = pending[0]["metadata"]["name"]
        joch.ok("POST", f"/v1/namespaces/{NAMESPACE}/approvals/{name}/approve", {"approvedBy": APPROVER})

    thread = threading.Thread(target=approve, daemon=True)
    thread.start()
    return thread


def records(joch) -> dict[str, dict]:
    """The calls joch recorded, by tool (the last of each)."""
    return {c["spec"]["toolRef"]["name"]: c for c in reversed(joch.calls(NAMESPACE))}


def assert_governed(joch, approved: bool = True) -> None:
    """The echo ran, the sum was denied by its policy, and (with
    `approved`) the deferred call ran once a person approved it."""
    calls = records(joch)
    assert calls[ALLOWED]["status"]["phase"] == "Succeeded", calls[ALLOWED]
    denied = calls[DENIED]
    assert denied["status"]["phase"] == "Denied", denied
    assert denied["status"]["hookDecisions"][0]["policyId"] == "no-sums"
    if approved:
        deferred = calls[DEFERRED]
        assert deferred["status"]["phase"] == "Succeeded", deferred
        assert deferred["spec"]["approval"]["approvedBy"] == APPROVER, deferred
