"""A webhook receiver for tests: a local HTTP server on loopback that records each delivery."""

from __future__ import annotations

import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


class Receiver:
    """Records each delivery (headers, body) and answers with the next scripted status (204 when none is left),
    adding `headers` to every answer (a Location, to answer with a redirect)."""

    def __init__(self, statuses: list[int] | None = None, headers: dict[str, str] | None = None):
        self.deliveries: list[tuple[dict[str, str], bytes]] = []
        self.statuses = list(statuses or [])
        self.arrived = threading.Event()
        receiver, extra_headers = self, dict(headers or {})

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):
                body = self.rfile.read(int(self.headers["Content-Length"]))
                receiver.deliveries.append((dict(self.headers), body))
                self.send_response(receiver.statuses.pop(0) if receiver.statuses else 204)
                for name, value in extra_headers.items():
                    self.send_header(name, value)
                self.end_headers()
                receiver.arrived.set()

            def log_message(self, *args):
                pass

        self.http = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.address = ("127.0.0.1", self.http.server_address[1])
        self.url = f"http://127.0.0.1:{self.address[1]}/hook?src=luminal"
        threading.Thread(target=self.http.serve_forever, daemon=True).start()

    def close(self):
        self.http.shutdown()
        self.http.server_close()
