"""A real HTTP webhook receiver on loopback (a threaded `http.server`): it records every
request and answers the statuses a test scripts, then 200."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


@dataclass(frozen=True)
class Received:
    path: str
    headers: dict[str, str]
    body: bytes
    answered: int


@dataclass
class Receiver:
    url: str
    statuses: list[int] = field(default_factory=list)  # answered first, in order
    requests: list[Received] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def answer(self) -> int:
        with self.lock:
            return self.statuses.pop(0) if self.statuses else 200


@contextmanager
def webhook_receiver(*statuses: int, host: str = "127.0.0.1") -> Iterator[Receiver]:
    """A receiver at `http://<host>:<port>/hook` answering `statuses` first, then 200."""

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
            status = receiver.answer()
            with receiver.lock:
                receiver.requests.append(
                    Received(
                        self.path, {k.lower(): v for k, v in self.headers.items()}, body, status
                    )
                )
            self.send_response(status)
            self.send_header("Content-Length", "2")
            self.end_headers()
            self.wfile.write(b"ok")

        def log_message(self, format: str, *args: object) -> None:  # quiet
            pass

    server = ThreadingHTTPServer((host, 0), Handler)
    port = server.server_address[1]
    receiver = Receiver(url=f"http://{host}:{port}/hook", statuses=list(statuses))
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield receiver
    finally:
        server.shutdown()
        server.server_close()
