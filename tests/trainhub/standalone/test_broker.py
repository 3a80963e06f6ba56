"""Standalone's embedded broker serves only clients that know its per-start password."""

from __future__ import annotations

import asyncio
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import pytest
import redis
from channels_redis.pubsub import RedisPubSubChannelLayer
from kombu import Connection
from kombu.exceptions import OperationalError
from trainhub.standalone.broker import EmbeddedBroker, start_broker
from trainhub.standalone.processes import agent_command, enroll_agent


@pytest.fixture
def broker() -> Iterator[tuple[EmbeddedBroker, str]]:
    server, url = start_broker()
    try:
        yield server, url
    finally:
        server.shutdown()
        server.server_close()


def _with_password(url: str, password: str | None) -> str:
    parts = urlsplit(url)
    netloc = f"{parts.hostname}:{parts.port}"
    if password is not None:
        netloc = f":{password}@{netloc}"
    return urlunsplit(parts._replace(netloc=netloc))


def _raw(url: str, payload: bytes, replies: int) -> bytes:
    """Send `payload` on a fresh connection and read until `replies` lines came back (or
    the server closed it)."""
    parts = urlsplit(url)
    with socket.create_connection((parts.hostname, parts.port), timeout=5) as conn:
        conn.sendall(payload)
        received = b""
        while received.count(b"\r\n") < replies:
            chunk = conn.recv(65536)
            if not chunk:
                break
            received += chunk
        return received


def test_the_url_holds_a_random_password_per_start() -> None:
    urls = []
    for _ in range(2):
        server, url = start_broker()
        server.shutdown()
        server.server_close()
        urls.append(url)
    passwords = [urlsplit(u).password for u in urls]
    assert all(p and len(p) >= 43 for p in passwords), urls  # token_urlsafe(32)
    assert passwords[0] != passwords[1]


@pytest.mark.parametrize("protocol", [2, 3])
def test_a_client_without_the_password_gets_noauth_on_every_command(
    broker: tuple[EmbeddedBroker, str], protocol: int
) -> None:
    _, url = broker
    client = redis.Redis.from_url(_with_password(url, None), protocol=protocol)
    for command in (
        client.ping,
        lambda: client.set("k", "v"),
        lambda: client.get("k"),
        lambda: client.publish("c", "m"),
        lambda: client.lpush("celery", "x"),
    ):
        with pytest.raises(redis.AuthenticationError):
            command()
    pubsub = client.pubsub()
    with pytest.raises(redis.AuthenticationError):
        pubsub.subscribe("c")
    # Nothing it sent reached the data.
    assert redis.Redis.from_url(url).keys("*") == []


def test_the_refusals_say_what_redis_says(broker: tuple[EmbeddedBroker, str]) -> None:
    _, url = broker
    password = urlsplit(url).password
    assert password
    assert _raw(url, b"*1\r\n$4\r\nPING\r\n", 1) == b"-NOAUTH Authentication required.\r\n"
    assert _raw(url, b"GET k\r\n", 1) == b"-NOAUTH Authentication required.\r\n"  # inline
    assert _raw(url, b"*2\r\n$5\r\nHELLO\r\n$1\r\n3\r\n", 1).startswith(b"-NOAUTH HELLO must")
    wrong = b"*2\r\n$4\r\nAUTH\r\n$5\r\nwrong\r\n*1\r\n$4\r\nPING\r\n"
    assert _raw(url, wrong, 2) == (
        b"-WRONGPASS invalid username-password pair or user is disabled.\r\n"
        b"-NOAUTH Authentication required.\r\n"
    )
    other_user = f"AUTH admin {password}\r\n".encode()
    assert _raw(url, other_user, 1).startswith(b"-WRONGPASS")
    # The right one, with commands sent in the same packet behind it (pipelined).
    pipelined = b"*1\r\n$4\r\nPING\r\n*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$1\r\nv\r\n"
    right = f"AUTH {password}\r\n".encode() + pipelined  # fakeredis takes no inline ones
    assert _raw(url, right, 3) == b"+OK\r\n+PONG\r\n+OK\r\n"
    right = f"AUTH default {password}\r\n".encode() + b"*2\r\n$3\r\nGET\r\n$1\r\nk\r\n"
    reply = _raw(url, right, 2)  # fakeredis writes a short value as a simple string
    assert reply in (b"+OK\r\n+v\r\n", b"+OK\r\n$1\r\nv\r\n"), reply


def test_an_unauthenticated_client_cannot_send_big_commands(
    broker: tuple[EmbeddedBroker, str],
) -> None:
    _, url = broker
    reply = _raw(url, b"*1\r\n$100000\r\n" + b"x" * 100000 + b"\r\n", 1)
    assert reply.startswith(b"-ERR Protocol error"), reply
    reply = _raw(url, b"*1000\r\n", 1)
    assert reply.startswith(b"-ERR Protocol error"), reply


@pytest.mark.parametrize("protocol", [2, 3])
def test_a_wrong_password_gets_wrongpass(broker: tuple[EmbeddedBroker, str], protocol: int) -> None:
    _, url = broker
    client = redis.Redis.from_url(_with_password(url, "not-the-password"), protocol=protocol)
    with pytest.raises(redis.AuthenticationError, match="invalid username-password"):
        client.ping()
    # The connection stays shut after a wrong AUTH.
    auth = b"*3\r\n$4\r\nAUTH\r\n$7\r\ndefault\r\n$5\r\nwrong\r\n*1\r\n$4\r\nPING\r\n"
    assert _raw(url, auth, 2) == (
        b"-WRONGPASS invalid username-password pair or user is disabled.\r\n"
        b"-NOAUTH Authentication required.\r\n"
    )


@pytest.mark.parametrize("protocol", [2, 3])
def test_the_password_in_the_url_opens_the_broker(
    broker: tuple[EmbeddedBroker, str], protocol: int
) -> None:
    _, url = broker
    assert urlsplit(url).password
    client = redis.Redis.from_url(url, protocol=protocol)
    assert client.ping()
    client.set("k", "v")
    assert client.get("k") == b"v"
    assert client.auth(urlsplit(url).password or "")  # again, once in: answered by fakeredis

    pubsub = client.pubsub()
    pubsub.subscribe("events")
    subscribed = pubsub.get_message(timeout=2)
    assert subscribed is not None and subscribed["type"] == "subscribe"
    assert client.publish("events", "hello") == 1
    message = pubsub.get_message(timeout=2)
    assert message is not None and message["data"] == b"hello"
    pubsub.close()
    client.close()


def test_the_channel_layer_works_through_it(broker: tuple[EmbeddedBroker, str]) -> None:
    """The web processes' Channels layer (settings.CHANNEL_LAYERS: pub/sub) on the URL."""
    _, url = broker
    assert urlsplit(url).password

    async def round_trip() -> dict[str, str]:
        layer = RedisPubSubChannelLayer(hosts=[url], prefix="test")
        try:
            channel = await layer.new_channel()
            await layer.group_add("feed", channel)
            await layer.group_send("feed", {"type": "job.event", "text": "hi"})
            return await asyncio.wait_for(layer.receive(channel), timeout=5)
        finally:
            await layer.flush()

    assert asyncio.run(round_trip()) == {"type": "job.event", "text": "hi"}


def test_celery_messages_go_through_it(broker: tuple[EmbeddedBroker, str]) -> None:
    """Celery's transport (kombu's redis) on the URL: a message put and got back."""
    _, url = broker
    assert urlsplit(url).password
    with Connection(url) as conn:
        queue = conn.SimpleQueue("trainhub-test")
        queue.put({"task": "cycle"})
        message = queue.get(timeout=5)
        assert message.payload == {"task": "cycle"}
        message.ack()
        queue.close()
    with (
        Connection(_with_password(url, None), connect_timeout=2) as conn,
        pytest.raises(OperationalError, match="Authentication required"),
    ):
        conn.SimpleQueue("trainhub-test").put({"task": "cycle"})


def _env_seen_by(command: list[str], env: dict[str, str]) -> str:
    """What a command run like `command` (its prefix before the interpreter) sees of
    REDIS_URL and DATABASE_URL."""
    prefix = command[: command.index(sys.executable)]
    probe = "import os; print(os.environ.get('REDIS_URL'), os.environ.get('DATABASE_URL'))"
    done = subprocess.run(
        [*prefix, sys.executable, "-c", probe], env=env, capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


def test_the_local_agent_runs_without_the_broker_url(tmp_path: Path) -> None:
    """The server processes' shared environment holds the broker's password; the agent
    (and so everything it starts) is run without it."""
    env = {
        "PATH": "/usr/bin:/bin",
        "REDIS_URL": "redis://:secret@127.0.0.1:1/0",
        "DATABASE_URL": "postgres://u:secret@db/x",
    }
    command = agent_command(tmp_path / "agent.json", tmp_path / "work")
    assert _env_seen_by(command, env) == "None None"
    assert command[command.index(sys.executable) :] == [
        sys.executable,
        "-m",
        "ps_runtime.agent.cli",
        "run",
        "--state-file",
        str(tmp_path / "agent.json"),
        "--work-dir",
        str(tmp_path / "work"),
        "--stop-tasks-on-exit",
    ]


def test_enrolling_the_agent_runs_without_the_broker_url(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    seen: dict[str, str] = {}

    def fake_run(command: list[str], *, env: dict[str, str], **_: object) -> Any:
        seen.update(env)
        return subprocess.CompletedProcess(command, 0, "", "")

    monkeypatch.setattr(subprocess, "run", fake_run)
    env = {"PATH": "/usr/bin", "REDIS_URL": "redis://:secret@h:1/0", "TRAINHUB_X": "1"}
    enroll_agent("http://127.0.0.1:1", "token", tmp_path / "agent.json", env)
    assert seen == {"PATH": "/usr/bin", "TRAINHUB_X": "1"}
