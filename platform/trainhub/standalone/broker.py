"""The embedded Redis-protocol server that standalone mode uses as broker and channel layer.

It is fakeredis's TCP server on a loopback port. fakeredis does not enforce passwords, so
callers are authenticated the way a Unix socket would do it: a connection is accepted only
when the peer socket belongs to the same Unix user as this process (read from the kernel's
socket table in /proc/net/tcp).
"""

from __future__ import annotations

import logging
import os
import socket
import threading
from pathlib import Path
from typing import cast

from fakeredis import TcpFakeServer

logger = logging.getLogger(__name__)


def _socket_owner_uid(ip: str, port: int) -> int | None:
    """The uid owning the local TCP socket bound to (ip, port), from /proc/net/tcp."""
    packed = socket.inet_aton(ip)
    # /proc/net/tcp prints an IPv4 address as one little-endian 32-bit hex word.
    want = f"{int.from_bytes(packed, 'little'):08X}:{port:04X}"
    try:
        lines = Path("/proc/net/tcp").read_text().splitlines()[1:]
    except OSError:
        return None
    for line in lines:
        fields = line.split()
        if len(fields) > 7 and fields[1] == want:
            return int(fields[7])
    return None


class EmbeddedBroker(TcpFakeServer):
    """A loopback Redis-protocol server that admits only this Unix user's processes."""

    def verify_request(self, request: object, client_address: object) -> bool:
        ip, port = cast(tuple[str, int], client_address)
        uid = _socket_owner_uid(ip, port)
        if uid != os.getuid():
            logger.warning("refused a broker connection from %s:%s (uid %s)", ip, port, uid)
            return False
        return True


def start_broker(host: str = "127.0.0.1", port: int = 0) -> tuple[EmbeddedBroker, str]:
    """Start the broker in a background thread; returns it and its redis:// URL."""
    if not Path("/proc/net/tcp").exists():
        raise RuntimeError(
            "standalone mode's embedded broker needs Linux (/proc/net/tcp); "
            "on other systems run in services mode with REDIS_URL"
        )
    server = EmbeddedBroker((host, port))
    bound_port = server.server_address[1]
    threading.Thread(target=server.serve_forever, name="embedded-broker", daemon=True).start()
    return server, f"redis://{host}:{bound_port}/0"
