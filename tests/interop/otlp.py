"""An OTLP/HTTP receiver on loopback that keeps what joch exports, so that
a test can search the exported traces (as JSON text) like a log."""

from __future__ import annotations

import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


class TraceReceiver:
    def __init__(self) -> None:
        self.bodies: list[str] = []
        kept = self.bodies

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802 (the stdlib's name)
                length = int(self.headers.get("content-length", "0"))
                kept.append(self.rfile.read(length).decode("utf-8", "replace"))
                self.send_response(200)
                self.send_header("content-type", "application/json")
                self.end_headers()
                self.wfile.write(b"{}")

            def log_message(self, *args) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def env(self) -> dict[str, str]:
        """What makes joch export its traces here, at once."""
        return {
            "OTEL_EXPORTER_OTLP_ENDPOINT": f"http://127.0.0.1:{self.server.server_port}",
            "OTEL_EXPORTER_OTLP_PROTOCOL": "http/json",
            "OTEL_BSP_SCHEDULE_DELAY": "50",
        }

    def text(self) -> str:
        return "".join(self.bodies)

    def stop(self) -> None:
        self.server.shutdown()
