"""A LangGraph agent on joch's MCP endpoint, through langchain-mcp-adapters,
with langchain-core's fake chat model: run by test_langgraph.py with the
Python of its own environment (requirements-langgraph.txt: the adapters
need the MCP Python SDK 1.x, the other examples 2.x).

Usage: python langgraph_agent.py MCP_URL CALLS_JSON
Prints, as JSON: the tools the model was offered, what it read from each
call (by call id), and what it said at the end."""

from __future__ import annotations

import asyncio
import json
import sys

from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
from langchain_core.messages import AIMessage, ToolMessage
from langchain_mcp_adapters.client import MultiServerMCPClient
from langgraph.graph import START, MessagesState, StateGraph
from langgraph.prebuilt import ToolNode, tools_condition


class ScriptedChatModel(GenericFakeChatModel):
    """langchain-core's fake chat model, which takes the tools it is bound
    to (and keeps their names) instead of refusing them."""

    offered: list[str] = []

    def bind_tools(self, tools, **kwargs):
        self.offered = [tool.name for tool in tools]
        return self


async def main(url: str, calls: dict[str, list]) -> dict:
    client = MultiServerMCPClient({"joch": {"url": url, "transport": "streamable_http"}})
    tools = await client.get_tools()
    asks = [{"id": call_id, "name": name, "args": args} for call_id, (name, args) in calls.items()]
    model = ScriptedChatModel(messages=iter([AIMessage(content="", tool_calls=asks), AIMessage(content="done")]))
    bound = model.bind_tools(tools)

    def agent(state: MessagesState) -> dict:
        return {"messages": [bound.invoke(state["messages"])]}

    graph = StateGraph(MessagesState)
    graph.add_node("agent", agent)
    graph.add_node("tools", ToolNode(tools))
    graph.add_edge(START, "agent")
    graph.add_conditional_edges("agent", tools_condition)
    graph.add_edge("tools", "agent")
    state = await graph.compile().ainvoke({"messages": [("user", "go")]})
    read = {m.tool_call_id: str(m.content) for m in state["messages"] if isinstance(m, ToolMessage)}
    return {"offered": model.offered, "read": read, "said": state["messages"][-1].content}


if __name__ == "__main__":
    print(json.dumps(asyncio.run(main(sys.argv[1], json.loads(sys.argv[2])))))
