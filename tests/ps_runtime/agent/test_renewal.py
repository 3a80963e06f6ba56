"""The agent renews its own credential two thirds into its lifetime, saves it (0600,
atomically) and reconnects with it while its tasks keep running; a revoked credential
stops the agent with the re-enroll hint."""

from __future__ import annotations

import asyncio
import json
import stat
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from ps_runtime.agent import rest
from ps_runtime.agent.daemon import Unauthorized
from ps_runtime.agent.protocol import TaskKey
from ps_runtime.agent.state import AgentState, StateError, load_state, save_state

from .control_plane import FakeControlPlane
from .helpers import pid_alive, statuses
from .test_daemon import _agent, _run, _task_json, _until

NOW = datetime(2026, 11, 24, 12, 0, tzinfo=UTC)


def test_renewal_is_due_two_thirds_into_the_lifetime() -> None:
    state = AgentState("http://x", 7, "c", NOW, NOW + timedelta(days=30))
    assert state.renew_at() == NOW + timedelta(days=20)
    assert AgentState("http://x", 7, "c").renew_at() is None  # unknown: renew at once


def test_state_file_keeps_the_credential_times(tmp_path: Path) -> None:
    path = tmp_path / "agent.json"
    state = AgentState("http://x", 7, "s3cret", NOW, NOW + timedelta(days=30))
    save_state(path, state)
    assert load_state(path) == state
    assert "s3cret" not in repr(state)
    data = json.loads(path.read_text())
    data["credential_expires_at"] = "2026-12-24T12:00:00"  # no timezone
    path.write_text(json.dumps(data))
    path.chmod(0o600)
    with pytest.raises(StateError, match="corrupt"):
        load_state(path)


def test_renewal_while_a_task_runs_loses_nothing(tmp_path: Path) -> None:
    async def scenario() -> None:
        cp = await FakeControlPlane(lifetime=1.5).start()
        cp.set_tasks([_task_json(mode="serve")])
        state_file = tmp_path / "agent.json"
        now = datetime.now(UTC)
        state = AgentState(cp.url, 7, cp.credential, now, now + timedelta(seconds=1.5))
        save_state(state_file, state)
        agent = _agent(state, tmp_path, state_file=state_file)
        run = asyncio.create_task(agent.run())
        await _until(lambda: (31, 1, "running") in statuses(cp.received), what="running")
        pid = agent.supervisor.live_pids()[TaskKey(31, 1)]

        # Renewed at ~1 s, then again ~1 s after that: each time saved and reconnected.
        await _until(lambda: agent.renewals >= 2, timeout=10, what="two renewals")
        await _until(lambda: f"Node {cp.credential}" in cp.ws_auth, what="reconnected")
        saved = load_state(state_file)
        assert saved.credential == agent.state.credential
        assert saved.credential in (cp.credential, cp.previous)
        assert saved.credential_expires_at is not None
        assert saved.credential_expires_at > datetime.now(UTC)
        assert stat.S_IMODE(state_file.stat().st_mode) == 0o600
        assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".")] == []
        assert cp.renewal_auth[0] == "Node s3cret-cred"
        # Desired tasks are fetched with the renewed credential too.
        cp.http_auth.clear()
        await cp.notify_tasks_changed()
        await _until(lambda: cp.http_auth, what="a fetch after renewal")
        assert cp.http_auth[-1] in (f"Node {cp.credential}", f"Node {cp.previous}")

        # The task ran on untouched: one pid, one "running", nothing stopped.
        assert agent.supervisor.live_pids() == {TaskKey(31, 1): pid}
        assert pid_alive(pid)
        assert statuses(cp.received) == [(31, 1, "running")]
        assert agent.fatal_message is None
        agent.request_stop()
        assert await run == 0
        await cp.close()

    _run(scenario())


def test_a_renewal_reconnects_only_once_what_was_sent_is_acknowledged(tmp_path: Path) -> None:
    """Output streams while the server acknowledges late: the socket closed for a renewal
    still had messages in flight, which the next one sent again (stored twice)."""

    async def scenario() -> None:
        cp = await FakeControlPlane(lifetime=1.5).start()
        cp.ack_delay = 0.3
        cp.set_tasks([_task_json(mode="chatty")])
        now = datetime.now(UTC)
        state = AgentState(cp.url, 7, cp.credential, now, now + timedelta(seconds=1.5))
        agent = _agent(state, tmp_path, flush_interval=0.05)
        run = asyncio.create_task(agent.run())
        await _until(lambda: agent.renewals >= 2, timeout=10, what="two renewals")
        await _until(lambda: len(cp.ws_auth) >= 3, what="the second reconnect")
        agent.request_stop()
        assert await run == 0
        lines = [
            line
            for m in cp.of_type("logs")
            for line in m["lines"]
            if line.startswith("chatty line")
        ]
        assert len(lines) > 100  # it streamed through both renewals
        assert agent.uplink.resent == 0
        assert len(lines) == len(set(lines)), "a line was delivered twice"
        await cp.close()

    _run(scenario())


def test_a_state_file_without_expiry_renews_at_once(tmp_path: Path) -> None:
    async def scenario() -> None:
        cp = await FakeControlPlane().start()
        state_file = tmp_path / "agent.json"
        legacy = AgentState(cp.url, 7, cp.credential)
        save_state(state_file, legacy)
        agent = _agent(legacy, tmp_path, state_file=state_file)
        agent.state = legacy  # `_agent` would give it an expiry
        run = asyncio.create_task(agent.run())
        await _until(lambda: agent.renewals == 1, what="renewal")
        saved = load_state(state_file)
        assert saved.credential == cp.credential == "renewed-1"
        assert saved.credential_expires_at is not None
        assert saved.renew_at() is not None
        agent.request_stop()
        assert await run == 0
        await cp.close()

    _run(scenario())


def test_a_revoked_credential_stops_the_agent_with_the_reenroll_hint(tmp_path: Path) -> None:
    async def scenario() -> None:
        cp = await FakeControlPlane().start()
        agent = _agent(AgentState(cp.url, 7, cp.credential), tmp_path)
        run = asyncio.create_task(agent.run())
        await _until(lambda: cp.open_sockets, what="connected")
        await cp.revoke()
        assert await asyncio.wait_for(run, 10) == 1
        assert agent.fatal_message is not None and "revoked" in agent.fatal_message
        await cp.close()

    _run(scenario())


def test_a_refused_renewal_stops_the_agent(tmp_path: Path) -> None:
    """Renewal answered 401 (revoked while the socket was down): the agent gives up."""

    async def scenario() -> None:
        cp = await FakeControlPlane().start()
        cp.revoked = True
        agent = _agent(AgentState(cp.url, 7, cp.credential), tmp_path)
        http = rest.Client({"Authorization": f"Node {cp.credential}"}, timeout=10.0)
        with pytest.raises(Unauthorized):
            await agent.renew_credential(http)
        assert agent.state.credential == "s3cret-cred" and agent.renewals == 0
        await cp.close()

    _run(scenario())


def test_a_refusal_of_a_credential_replaced_meanwhile_only_reconnects(tmp_path: Path) -> None:
    """A socket opened with the old credential just before a renewal may later be refused
    (4401, once the overlap ends): the agent reconnects with the new one, it does not quit."""

    async def scenario() -> None:
        cp = await FakeControlPlane().start()
        agent = _agent(AgentState(cp.url, 7, cp.credential), tmp_path)
        old = agent._auth
        http = rest.Client(old, timeout=10.0)
        await agent.renew_credential(http)
        assert agent._auth is not old and cp.credential == "renewed-1"
        agent._refused(True, old)  # no Unauthorized: a reconnect
        assert agent._reconnect_at_once
        with pytest.raises(Unauthorized):
            agent._refused(True, agent._auth)
        # The next connection uses the renewed credential.
        run = asyncio.create_task(agent.run())
        await _until(lambda: cp.open_sockets, what="connected")
        assert cp.ws_auth == ["Node renewed-1"]
        agent.request_stop()
        assert await run == 0
        await cp.close()

    _run(scenario())
