"""A tiny stand-in for the control plane's agent gateway, for the agent's own tests.

One port serves both HTTP (enroll, desired tasks, credential renewal) and the
`/ws/agent/` WebSocket: a small asyncio front end answers HTTP itself and splices
WebSocket upgrades through to a `websockets` server, because `websockets` only speaks
GET.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from datetime import UTC, datetime, timedelta
from typing import Any

from websockets.asyncio.server import Server, ServerConnection, serve
from websockets.exceptions import ConnectionClosed


class FakeControlPlane:
    def __init__(
        self,
        *,
        token: str = "good-token",
        credential: str = "s3cret-cred",
        lifetime: float = 3600.0,
    ) -> None:
        self.token = token
        self.credential = credential
        self.lifetime = lifetime  # seconds a credential it issues is valid
        self.previous: str | None = None  # the credential a renewal replaced, still valid
        self.revoked = False
        self.renewal_auth: list[str | None] = []
        self.desired: dict[str, Any] = {"node_id": 7, "stop_grace_seconds": 1, "tasks": []}
        self.enrollments: list[dict[str, Any]] = []
        self.http_auth: list[str | None] = []
        self.ws_auth: list[str | None] = []
        self.received: list[dict[str, Any]] = []  # every message, its `seq` taken out
        self.seqs: list[int | None] = []  # the `seq` of each received message
        self.acking = True  # acknowledge each numbered message (at once, or after ack_delay)
        self.ack_delay = 0.0
        self.open_sockets: list[ServerConnection] = []
        self._acks: set[asyncio.Future[None]] = set()
        self._front_streams: list[asyncio.StreamWriter] = []
        self._ws_server: Server | None = None
        self._front: asyncio.Server | None = None
        self.url = ""

    async def start(self) -> FakeControlPlane:
        self._ws_server = await serve(self._ws_handler, "127.0.0.1", 0)
        self._front = await asyncio.start_server(self._handle, "127.0.0.1", 0)
        port = self._front.sockets[0].getsockname()[1]
        self.url = f"http://127.0.0.1:{port}"
        return self

    async def close(self) -> None:
        self.drop_connections()
        if self._front is not None:
            self._front.close()
        if self._ws_server is not None:
            self._ws_server.close()
            await self._ws_server.wait_closed()

    # -- test controls -----------------------------------------------------------------

    def set_tasks(self, tasks: list[dict[str, Any]]) -> None:
        self.desired = {**self.desired, "tasks": tasks}

    async def notify_tasks_changed(self) -> None:
        for ws in list(self.open_sockets):
            with contextlib.suppress(Exception):
                await ws.send(json.dumps({"type": "tasks_changed"}))

    def drop_connections(self) -> None:
        """Cut every agent socket as a network failure would (no close frame)."""
        for writer in self._front_streams:
            writer.transport.abort()
        self._front_streams.clear()

    async def revoke(self) -> None:
        """Refuse every credential from now on and close open sockets with 4401."""
        self.revoked = True
        for ws in list(self.open_sockets):
            with contextlib.suppress(Exception):
                await ws.close(4401, "credential revoked")

    def _accepts(self, auth: str | None) -> bool:
        valid = {self.credential, self.previous} - {None}
        return not self.revoked and auth in {f"Node {c}" for c in valid}

    def _expires_at(self) -> str:
        return (datetime.now(UTC) + timedelta(seconds=self.lifetime)).isoformat()

    def of_type(self, kind: str) -> list[dict[str, Any]]:
        return [m for m in self.received if m.get("type") == kind]

    # -- WebSocket ---------------------------------------------------------------------

    async def _ws_handler(self, ws: ServerConnection) -> None:
        assert ws.request is not None
        auth = ws.request.headers.get("Authorization")
        self.ws_auth.append(auth)
        if not self._accepts(auth):
            await ws.close(4401, "bad node credential")
            return
        self.open_sockets.append(ws)
        try:
            async for raw in ws:
                message = json.loads(raw)
                seq = message.pop("seq", None)
                self.received.append(message)
                self.seqs.append(seq)
                if self.acking and seq is not None:
                    if self.ack_delay:
                        asyncio.get_running_loop().call_later(
                            self.ack_delay, self._ack_later, ws, seq
                        )
                    else:
                        await ws.send(json.dumps({"type": "ack", "seq": seq}))
        finally:
            self.open_sockets.remove(ws)

    def _ack_later(self, ws: ServerConnection, seq: int) -> None:
        async def send() -> None:
            with contextlib.suppress(ConnectionClosed):
                await ws.send(json.dumps({"type": "ack", "seq": seq}))

        task = asyncio.ensure_future(send())
        self._acks.add(task)
        task.add_done_callback(self._acks.discard)

    # -- HTTP front end ----------------------------------------------------------------

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            head = await reader.readuntil(b"\r\n\r\n")
        except (asyncio.IncompleteReadError, ConnectionError):
            writer.close()
            return
        request_line, *header_lines = head.decode("latin-1").split("\r\n")
        method, path, _ = request_line.split(" ", 2)
        headers = {
            k.strip().lower(): v.strip()
            for k, _, v in (h.partition(":") for h in header_lines if h)
        }
        if path.startswith("/ws/"):
            await self._splice(head, reader, writer)
            return
        body = await reader.readexactly(int(headers.get("content-length", "0")))
        status, payload = self._route(method, path, headers.get("authorization"), body)
        data = json.dumps(payload).encode()
        writer.write(
            f"HTTP/1.1 {status} X\r\nContent-Type: application/json\r\n"
            f"Content-Length: {len(data)}\r\nConnection: close\r\n\r\n".encode()
            + data
        )
        with contextlib.suppress(ConnectionError):
            await writer.drain()
        writer.close()

    def _route(
        self, method: str, path: str, auth: str | None, body: bytes
    ) -> tuple[int, dict[str, Any]]:
        if method == "POST" and path == "/api/v1/nodes/enroll/":
            request = json.loads(body)
            self.enrollments.append(request)
            if request.get("token") != self.token:
                return 400, {"token": ["Invalid or expired enrollment token."]}
            return 201, {
                "node_id": 7,
                "credential": self.credential,
                "credential_expires_at": self._expires_at(),
            }
        if method == "GET" and path == "/api/v1/agent/tasks/":
            self.http_auth.append(auth)
            if not self._accepts(auth):
                return 401, {"detail": "Invalid node credential."}
            return 200, self.desired
        if method == "POST" and path == "/api/v1/agent/credential/":
            self.renewal_auth.append(auth)
            if not self._accepts(auth):
                return 401, {"detail": "Invalid node credential."}
            self.previous = self.credential
            self.credential = f"renewed-{len(self.renewal_auth)}"
            return 200, {"credential": self.credential, "credential_expires_at": self._expires_at()}
        return 404, {"detail": "Not found."}

    async def _splice(
        self, head: bytes, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
    ) -> None:
        assert self._ws_server is not None
        port = self._ws_server.sockets[0].getsockname()[1]
        up_reader, up_writer = await asyncio.open_connection("127.0.0.1", port)
        up_writer.write(head)
        self._front_streams.append(writer)

        async def pipe(src: asyncio.StreamReader, dst: asyncio.StreamWriter) -> None:
            with contextlib.suppress(ConnectionError, OSError):
                while data := await src.read(65536):
                    dst.write(data)
                    await dst.drain()
            dst.close()

        await asyncio.gather(pipe(reader, up_writer), pipe(up_reader, writer))
