"""joch: record, decide on and approve every tool call an agent makes.

- `Client`: the REST API (call tools, read records, decide approvals,
  follow an execution's events) and the hook-mode endpoint.
- `governed`: wraps a Python function tool so that joch decides on each
  call before it runs and records its result after (hook mode).
- `joch.agents`: OpenAI Agents SDK tool guardrails backed by joch.
"""

from .client import Client, JochError, Verdict
from .hooks import HookDenied, governed

__all__ = ["Client", "JochError", "Verdict", "HookDenied", "governed"]
