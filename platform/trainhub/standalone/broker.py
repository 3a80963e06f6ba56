"""The embedded Redis-protocol server that standalone mode uses as broker and channel layer.

It is fakeredis's TCP server on a loopback port, behind a password: `start_broker` makes a
random one for every start and puts it into the redis:// URL it returns, which the server
processes get as REDIS_URL (web, worker, beat; the local agent runs without it, see
`processes.agent_command`). Anything else on the machine, a job's task included, can reach
the port but not use it.

fakeredis itself serves every command of every connection, so the request handler here
holds a connection back until it authenticates the way a Redis server with `requirepass`
does: `AUTH <password>`, `AUTH default <password>` or `HELLO <protover> AUTH default
<password>` (what redis-py sends for a URL with a password, in RESP2 and RESP3). Until then
every other command is answered `-NOAUTH`, a wrong password `-WRONGPASS`, and fakeredis
sees nothing of the connection.
"""

from __future__ import annotations

import hmac
import logging
import secrets
import select
import threading
from urllib.parse import quote

from fakeredis import TcpFakeServer
from fakeredis._clients._tcp_server import TCPFakeRequestHandler

logger = logging.getLogger(__name__)

NOAUTH = b"-NOAUTH Authentication required.\r\n"
WRONGPASS = b"-WRONGPASS invalid username-password pair or user is disabled.\r\n"
HELLO_NOAUTH = (
    b"-NOAUTH HELLO must be called with the client already authenticated, otherwise the "
    b"HELLO <proto> AUTH <user> <pass> option can be used to authenticate the client and "
    b"select the RESP protocol version at the same time\r\n"
)
OK = b"+OK\r\n"

# What an unauthenticated client may send, as Redis limits it: a few short arguments.
MAX_UNAUTHENTICATED_ARGS = 10
MAX_UNAUTHENTICATED_ARG_BYTES = 16384
MAX_UNAUTHENTICATED_BUFFER = 64 * 1024
_POLL_INTERVAL = 0.05


class _ProtocolError(Exception):
    pass


def _parse_command(buf: bytes) -> tuple[list[bytes], int] | None:
    """The first command in `buf` (RESP array of bulk strings, or an inline command) and
    the bytes it took; None while it is incomplete."""
    if not buf:
        return None
    if not buf.startswith(b"*"):
        end = buf.find(b"\n")
        if end < 0:
            return None
        return buf[:end].rstrip(b"\r").split(), end + 1
    end = buf.find(b"\r\n")
    if end < 0:
        return None
    count = _length(buf[1:end], MAX_UNAUTHENTICATED_ARGS, "multibulk")
    pos = end + 2
    args = []
    for _ in range(count):
        end = buf.find(b"\r\n", pos)
        if end < 0:
            return None
        if buf[pos : pos + 1] != b"$":
            raise _ProtocolError("expected '$'")
        size = _length(buf[pos + 1 : end], MAX_UNAUTHENTICATED_ARG_BYTES, "bulk")
        start = end + 2
        if len(buf) < start + size + 2:
            return None
        if buf[start + size : start + size + 2] != b"\r\n":
            raise _ProtocolError("bulk string not terminated by CRLF")
        args.append(buf[start : start + size])
        pos = start + size + 2
    return args, pos


def _length(text: bytes, limit: int, what: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise _ProtocolError(f"invalid {what} length") from None
    if not 0 <= value <= limit:
        raise _ProtocolError(f"unauthenticated {what} length")
    return value


def _encode(args: list[bytes]) -> bytes:
    return b"*%d\r\n" % len(args) + b"".join(b"$%d\r\n%s\r\n" % (len(a), a) for a in args)


class _AuthenticatingHandler(TCPFakeRequestHandler):
    """fakeredis's connection handler, behind an authentication step of its own."""

    server: EmbeddedBroker

    def handle(self) -> None:
        try:
            authenticated = self._authenticate()
        except OSError:  # the peer reset the connection, or does not read its replies
            return
        if authenticated:
            super().handle()

    def _authenticate(self) -> bool:
        """Answer the connection's commands here until it authenticates; then hand what
        it sent after that to fakeredis and return True. False: the peer went away, sent
        garbage or the server is stopping."""
        pending = b""
        refused = False
        while not self.server.stopping.is_set():
            try:
                while (parsed := _parse_command(pending)) is not None:
                    args, used = parsed
                    pending = pending[used:]
                    if not args:
                        continue
                    reply, forward = self._answer(args)
                    if reply:
                        self.wfile.write(reply)
                    if forward is not None:
                        return self._pass_on(forward + pending)
                    if not refused:
                        refused = True
                        logger.warning(
                            "the embedded broker refused %s:%s: %s",
                            *self.client_address,
                            reply.decode(errors="replace").split(" ")[0].lstrip("-"),
                        )
                if len(pending) > MAX_UNAUTHENTICATED_BUFFER:
                    raise _ProtocolError("too big a command before authentication")
            except _ProtocolError as exc:
                self.wfile.write(f"-ERR Protocol error: {exc}\r\n".encode())
                return False
            readable, _, _ = select.select([self.connection], [], [], _POLL_INTERVAL)
            if not readable:
                continue
            try:
                data = self.connection.recv(65536)
            except BlockingIOError:
                continue
            if not data:
                return False
            pending += data
        return False

    def _pass_on(self, data: bytes) -> bool:
        """Hand fakeredis what the client sent after authenticating; False (after saying
        why) when fakeredis cannot parse it, as its own handler does."""
        try:
            self.current_client.get_socket().sendall(data)
        except Exception as exc:  # fakeredis's parse errors (inline commands, say)
            self.writer.dump(exc)
            return False
        return True

    def _answer(self, args: list[bytes]) -> tuple[bytes, bytes | None]:
        """The reply to an unauthenticated client's command, and what to pass on to
        fakeredis once it has authenticated (None: not authenticated)."""
        name = args[0].upper()
        if name == b"AUTH":
            if len(args) not in (2, 3):
                return b"-ERR wrong number of arguments for 'auth' command\r\n", None
            user = args[1] if len(args) == 3 else b"default"
            if self.server.check(user, args[-1]):
                return OK, b""
            return WRONGPASS, None
        if name == b"HELLO" and len(args) > 1:
            kept, credentials, i = args[:2], None, 2
            while i < len(args):
                option = args[i].upper()
                if option == b"AUTH" and i + 2 < len(args):
                    credentials = (args[i + 1], args[i + 2])
                    i += 3
                elif option == b"SETNAME" and i + 1 < len(args):
                    kept += [b"SETNAME", args[i + 1]]
                    i += 2
                else:
                    return b"-ERR Syntax error in HELLO option\r\n", None
            if credentials is None:
                return HELLO_NOAUTH, None
            if self.server.check(*credentials):
                return b"", _encode(kept)  # fakeredis answers HELLO in the new protocol
            return WRONGPASS, None
        return NOAUTH, None


class EmbeddedBroker(TcpFakeServer):
    """A loopback Redis-protocol server that serves only clients that know `password`."""

    def __init__(self, server_address: tuple[str, int], password: str) -> None:
        if not password:
            raise ValueError("the embedded broker needs a password")
        super().__init__(server_address)
        self.RequestHandlerClass = _AuthenticatingHandler
        self._password = password.encode()
        # An authenticated client's AUTH goes to fakeredis, which checks it against this.
        self.fake_server.config[b"requirepass"] = self._password

    @property
    def stopping(self) -> threading.Event:
        return self._shutdown_event

    def check(self, user: bytes, password: bytes) -> bool:
        right = hmac.compare_digest(password, self._password)
        return right and user == b"default"


def start_broker(host: str = "127.0.0.1", port: int = 0) -> tuple[EmbeddedBroker, str]:
    """Start the broker in a background thread, with a new random password; returns it
    and its redis:// URL, which holds the password (never log it)."""
    password = secrets.token_urlsafe(32)
    server = EmbeddedBroker((host, port), password)
    bound_port = server.server_address[1]
    threading.Thread(target=server.serve_forever, name="embedded-broker", daemon=True).start()
    return server, f"redis://:{quote(password, safe='')}@{host}:{bound_port}/0"
