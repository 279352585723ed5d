"""Hook mode for plain Python tools: joch decides before each call and
records after, while the function runs in your process.

    client = Client("http://127.0.0.1:7070", namespace="support")

    @governed(client, agent="support-bot")
    def refund(order: str, amount: float) -> dict:
        ...

A denied call raises `HookDenied` (the function never runs); a policy that
modifies the arguments runs the function with the new ones; a policy that
modifies the result returns the modified result. Works for `async def` too,
so the wrapped function drops into LangGraph, CrewAI or any framework that
takes a callable tool.
"""

from __future__ import annotations

import asyncio
import functools
import inspect
import uuid
from typing import Any, Callable

from .client import Client, Verdict


class HookDenied(Exception):
    """joch denied the call (before it ran) or its result (after)."""

    def __init__(self, verdict: Verdict) -> None:
        super().__init__(verdict.reason or "denied by joch")
        self.verdict = verdict


def governed(
    client: Client,
    *,
    tool: str | None = None,
    agent: str | None = None,
    session: str | None = None,
    idempotency_key: Callable[..., str] | None = None,
) -> Callable:
    """Routes every call of the decorated function through joch in hook
    mode. `tool` defaults to the function's name; `idempotency_key`, given
    the call's arguments, derives a key so that a retry never runs twice."""

    def decorate(func: Callable) -> Callable:
        name = tool or func.__name__
        signature = inspect.signature(func)

        def arguments(args: tuple, kwargs: dict) -> dict:
            bound = signature.bind(*args, **kwargs)
            bound.apply_defaults()
            return dict(bound.arguments)

        def ask(call_id: str, args: dict) -> dict:
            key = idempotency_key(**args) if idempotency_key else None
            verdict = client.hook_request(call_id, name, args, agent=agent, session=session, idempotency_key=key)
            if not verdict.allowed:
                raise HookDenied(verdict)
            return verdict.modified if verdict.decision == "modify" else args

        def report(call_id: str, output: Any = None, error: BaseException | None = None) -> Any:
            if error is not None:
                client.hook_result(call_id, error=f"{type(error).__name__}: {error}")
                return None
            verdict = client.hook_result(call_id, output=output)
            if not verdict.allowed:
                raise HookDenied(verdict)
            return verdict.modified if verdict.decision == "modify" else output

        if inspect.iscoroutinefunction(func):

            @functools.wraps(func)
            async def run_async(*args: Any, **kwargs: Any) -> Any:
                call_id = f"py-{uuid.uuid4().hex}"
                allowed = await asyncio.to_thread(ask, call_id, arguments(args, kwargs))
                try:
                    output = await func(**allowed)
                except Exception as e:
                    await asyncio.to_thread(report, call_id, None, e)
                    raise
                return await asyncio.to_thread(report, call_id, output)

            return run_async

        @functools.wraps(func)
        def run(*args: Any, **kwargs: Any) -> Any:
            call_id = f"py-{uuid.uuid4().hex}"
            allowed = ask(call_id, arguments(args, kwargs))
            try:
                output = func(**allowed)
            except Exception as e:
                report(call_id, None, e)
                raise
            return report(call_id, output)

        return run

    return decorate
