"""A scripted stand-in for the Anthropic Messages API on 127.0.0.1, so that
the real Claude Code (the CLI the Claude Agent SDK bundles) runs offline:
`ANTHROPIC_BASE_URL` points it here. Each `POST /v1/messages` that offers
tools is answered with the script's next turn (tool uses, or a text);
anything else (a title, a quota probe) with a short text. The requests
are kept, so a test reads what the model was shown."""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


class FakeAnthropic:
    def __init__(self, turns: list[list[dict]]) -> None:
        """`turns`: each a list of content blocks, `{"type": "text", "text"}`
        or `{"type": "tool_use", "id", "name", "input"}`."""
        self.turns = list(turns)
        self.requests: list[dict] = []
        self.lock = threading.Lock()
        fake = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args) -> None:
                pass

            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers.get("content-length") or 0)) or b"{}")
                if not self.path.split("?")[0].endswith("/v1/messages"):
                    self.reply(json.dumps({}).encode(), "application/json")
                    return
                blocks = fake.answer(body)
                if body.get("stream"):
                    self.reply(sse(blocks), "text/event-stream")
                else:
                    self.reply(json.dumps(message(blocks)).encode(), "application/json")

            def do_GET(self) -> None:
                self.reply(b"{}", "application/json")

            def do_HEAD(self) -> None:
                self.reply(b"", "application/json")

            def reply(self, data: bytes, kind: str) -> None:
                self.send_response(200)
                self.send_header("content-type", kind)
                self.send_header("content-length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}"

    def answer(self, body: dict) -> list[dict]:
        with self.lock:
            if not body.get("tools") or not self.turns:
                return [{"type": "text", "text": "done"}]
            self.requests.append(body)
            return self.turns.pop(0)

    def close(self) -> None:
        self.server.shutdown()


def message(blocks: list[dict]) -> dict:
    uses = any(b["type"] == "tool_use" for b in blocks)
    return {
        "id": "msg_fake",
        "type": "message",
        "role": "assistant",
        "model": "claude-fake",
        "content": blocks,
        "stop_reason": "tool_use" if uses else "end_turn",
        "stop_sequence": None,
        "usage": {"input_tokens": 1, "output_tokens": 1},
    }


def sse(blocks: list[dict]) -> bytes:
    whole = message(blocks)
    events = [("message_start", {"type": "message_start", "message": {**whole, "content": [], "stop_reason": None}})]
    for index, block in enumerate(blocks):
        if block["type"] == "tool_use":
            start = {**block, "input": {}}
            delta = {"type": "input_json_delta", "partial_json": json.dumps(block["input"])}
        else:
            start = {"type": "text", "text": ""}
            delta = {"type": "text_delta", "text": block["text"]}
        events += [
            ("content_block_start", {"type": "content_block_start", "index": index, "content_block": start}),
            ("content_block_delta", {"type": "content_block_delta", "index": index, "delta": delta}),
            ("content_block_stop", {"type": "content_block_stop", "index": index}),
        ]
    events += [
        (
            "message_delta",
            {
                "type": "message_delta",
                "delta": {"stop_reason": whole["stop_reason"], "stop_sequence": None},
                "usage": {"output_tokens": 1},
            },
        ),
        ("message_stop", {"type": "message_stop"}),
    ]
    return "".join(f"event: {name}\ndata: {json.dumps(data)}\n\n" for name, data in events).encode()
