"""The agent's main loop: one WebSocket to the control plane, level-triggered reconcile.

- The connection loop keeps `/ws/agent/` open (jittered backoff 0.5 s doubling to 10 s),
  sends a heartbeat on connect and every 5 s, flushes the outbox every 0.5 s through the
  `Uplink` (numbered messages, acknowledged; a lost connection's unacknowledged ones go
  again), turns `tasks_changed` notices into reconcile requests and `capture_stacks`
  into a dump of a stalled job's stacks (`stacks`).
- The reconcile loop fetches `GET /api/v1/agent/tasks/` on connect, on every notice and
  every 10 s, and starts/stops processes to match; supervisor threads feed task
  statuses, logs and metrics into the outbox (bounded; readers wait when it is full).
- At start, the tasks a previous agent left running are adopted (`Supervisor.adopt`). A
  stop (SIGTERM, SIGINT) leaves them running for the next agent, so a restart or an
  upgrade costs no job anything; with `stop_tasks_on_exit` (standalone, test clusters),
  or when the server refuses the credential, the tasks are stopped first.
- The renewal loop renews the node credential two thirds into its lifetime, saves it to
  the state file and reconnects the socket with it; tasks keep running throughout.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import random
import signal
from collections.abc import Sequence
from pathlib import Path

from websockets.asyncio.client import ClientConnection, connect
from websockets.exceptions import ConnectionClosed, InvalidHandshake, InvalidStatus

from ps_runtime.agent import protocol, renewal, rest, stacks
from ps_runtime.agent.codecache import CodeCache, CodeError
from ps_runtime.agent.environments import EnvironmentCache
from ps_runtime.agent.facts import UsageSampler
from ps_runtime.agent.isolation import Isolation
from ps_runtime.agent.outbox import Outbox
from ps_runtime.agent.protocol import (
    CaptureStacks,
    DesiredTasks,
    Heartbeat,
    LiveTask,
    TasksChanged,
)
from ps_runtime.agent.reconcile import reconcile
from ps_runtime.agent.state import AgentState
from ps_runtime.agent.supervisor import Supervisor
from ps_runtime.agent.uplink import Uplink
from ps_runtime.version import known_runtime_version

logger = logging.getLogger(__name__)

RECONNECT_DRAIN_S = 2.0  # a renewal waits this long for acks before it reconnects
REENROLL_HINT = (
    "the server rejected this node's credential (401); the node was removed, or its "
    "credential revoked or expired. Enroll it again: trainhub-agent enroll --server URL "
    "--token T"
)


class Unauthorized(Exception):
    """The control plane no longer accepts this node's credential."""


class Agent:
    """The node agent daemon; `await run()` until SIGTERM/SIGINT or `request_stop()`.

    `stop_tasks_on_exit`: stop every task when stopped (default: leave them running for
    the next agent to adopt)."""

    def __init__(
        self,
        state: AgentState,
        work_dir: Path,
        *,
        command: Sequence[str] | None = None,
        cpus: Sequence[int] | None = None,
        isolation: Isolation | None = None,
        heartbeat_interval: float = 5.0,
        reconcile_interval: float = 10.0,
        flush_interval: float = 0.5,
        backoff_initial: float = 0.5,
        backoff_max: float = 10.0,
        http_timeout: float = 10.0,
        state_file: Path | None = None,
        renew_retry: float = 30.0,
        stop_tasks_on_exit: bool = False,
    ) -> None:
        self.state = state
        self.stop_tasks_on_exit = stop_tasks_on_exit
        self.renewals = 0  # credentials renewed so far
        self._state_file = state_file  # where a renewed credential is saved (None: nowhere)
        self._renew_retry = renew_retry
        self._reconnect_at_once = False  # the socket was closed to reconnect with a renewal
        self.outbox = Outbox()
        self.code = CodeCache(state.server, work_dir / "code")
        isolation = isolation if isolation is not None else Isolation()
        self.environments = EnvironmentCache(
            work_dir / "envs", python=isolation.python, pythonpath=isolation.pythonpath
        )
        self.supervisor = Supervisor(
            self.outbox,
            work_dir,
            cpus=cpus,
            command=command,
            isolation=isolation,
            code=self.code,
            environments=self.environments,
        )
        self.sampler = UsageSampler()
        # Read once: after an in-place upgrade this process still runs the code it started
        # with, and says so until it is restarted.
        self.version = known_runtime_version()
        self.fatal_message: str | None = None
        self.connections = 0  # successful WebSocket connections so far
        self._heartbeat_interval = heartbeat_interval
        self._reconcile_interval = reconcile_interval
        self._flush_interval = flush_interval
        self._backoff = (backoff_initial, backoff_max)
        self._http_timeout = http_timeout
        self._grace = protocol.DEFAULT_STOP_GRACE_SECONDS
        self._auth = {"Authorization": f"Node {state.credential}"}
        self._ws: ClientConnection | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stop = asyncio.Event()
        self._reconcile_now = asyncio.Event()
        self.uplink = Uplink(self.outbox, self.supervisor)

    def request_stop(self) -> None:
        """Thread-safe: make `run()` return (stopping the tasks if so configured)."""
        if self._loop is None:
            self._stop.set()
        else:
            self._loop.call_soon_threadsafe(self._stop.set)

    async def run(self) -> int:
        """Run until stopped; 0 on a clean shutdown, 1 when the credential is rejected."""
        self._loop = asyncio.get_running_loop()
        installed = self._install_signal_handlers()
        # Tasks a previous agent left running are ours again before the first reconcile.
        await asyncio.to_thread(self.supervisor.adopt)
        http = rest.Client({**self._auth, "User-Agent": rest.USER_AGENT}, self._http_timeout)
        workers = {
            asyncio.create_task(self._reconcile_loop(http), name="reconcile"),
            asyncio.create_task(self._connection_loop(), name="connection"),
            asyncio.create_task(
                renewal.keep_renewed(
                    lambda: self.renew_credential(http), lambda: self.state, self._renew_retry
                ),
                name="renewal",
            ),
        }
        stopper = asyncio.create_task(self._stop.wait())
        done, _ = await asyncio.wait({stopper, *workers}, return_when=asyncio.FIRST_COMPLETED)
        for task in done - {stopper}:
            exc = task.exception()
            if isinstance(exc, Unauthorized):
                self.fatal_message = REENROLL_HINT
            elif exc is not None:
                logger.error("agent %s loop crashed", task.get_name(), exc_info=exc)
                self.fatal_message = f"agent crashed: {exc!r}"
        for task in workers:
            if task.get_name() in ("reconcile", "renewal"):
                task.cancel()
        # A refused credential means the node is gone from the platform: its tasks' jobs
        # are rescheduled elsewhere, so nothing here may keep running.
        if self.stop_tasks_on_exit or self.fatal_message == REENROLL_HINT:
            logger.info("shutting down: stopping all tasks")
            await asyncio.to_thread(self.supervisor.stop_all, self._grace)
        else:
            logger.info(
                "shutting down: %d task(s) keep running; the next agent adopts them",
                len(self.supervisor.live_keys()),
            )
            # A build in progress starts again with the next agent.
            self.environments.abort_all()
        await self._final_flush(timeout=2.0)
        for task in (*workers, stopper):
            task.cancel()
        await asyncio.gather(*workers, stopper, return_exceptions=True)
        for sig in installed:
            self._loop.remove_signal_handler(sig)
        return 1 if self.fatal_message else 0

    def _install_signal_handlers(self) -> list[signal.Signals]:
        assert self._loop is not None
        installed = []
        for sig in (signal.SIGTERM, signal.SIGINT):
            try:
                self._loop.add_signal_handler(sig, self._stop.set)
            except (NotImplementedError, RuntimeError, ValueError):
                continue  # not the main thread (tests): request_stop() is the way out
            installed.append(sig)
        return installed

    async def _final_flush(self, timeout: float) -> None:
        """Give what is left a chance to reach the server, acknowledged, before exiting
        (the next agent then neither repeats nor misses any of it)."""
        if self._ws is not None:
            with contextlib.suppress(ConnectionClosed, OSError, TimeoutError):
                async with asyncio.timeout(timeout):
                    await self.uplink.finish(self._ws)

    # -- WebSocket -----------------------------------------------------------------------

    async def _connection_loop(self) -> None:
        url = protocol.websocket_url(self.state.server)
        initial, maximum = self._backoff
        delay = initial
        while True:
            auth = self._auth  # a renewal while connecting replaces it (see _refused)
            try:
                async with connect(
                    url,
                    additional_headers=auth,
                    user_agent_header=rest.USER_AGENT,
                    open_timeout=self._http_timeout,
                ) as ws:
                    delay = initial
                    self.connections += 1
                    logger.info("connected to %s", url)
                    self._ws = ws
                    try:
                        await self._session(ws)
                    finally:
                        self._ws = None
                    self._refused(ws.close_code == protocol.CLOSE_UNAUTHORIZED, auth)
                    if not self._reconnect_at_once:
                        logger.warning("connection closed by server (code %s)", ws.close_code)
            except InvalidStatus as exc:
                self._refused(exc.response.status_code == 401, auth)
                if not self._reconnect_at_once:
                    logger.warning("cannot connect to %s: %s", url, exc)
            except ConnectionClosed as exc:
                code = exc.rcvd.code if exc.rcvd else None
                self._refused(code == protocol.CLOSE_UNAUTHORIZED, auth)
                if not self._reconnect_at_once:
                    logger.warning("connection to %s lost: %s", url, exc)
            except (OSError, TimeoutError, InvalidHandshake) as exc:
                logger.warning("cannot connect to %s: %s", url, exc or type(exc).__name__)
            if self._reconnect_at_once:
                self._reconnect_at_once = False
                continue
            # Jittered, so that agents cut off together do not all come back at once.
            await asyncio.sleep(delay * random.uniform(0.5, 1.0))
            delay = min(delay * 2, maximum)

    def _refused(self, refused: bool, auth: dict[str, str]) -> None:
        """Raise `Unauthorized` when the server refused the current credential; one
        replaced by a renewal since the socket opened means: reconnect with the new one."""
        if not refused:
            return
        if auth is self._auth:
            raise Unauthorized
        self._reconnect_at_once = True

    async def _session(self, ws: ClientConnection) -> None:
        self._reconcile_now.set()
        self.uplink.connected()
        await self._send_heartbeat(ws)
        tasks = [
            asyncio.create_task(self._receive_loop(ws)),
            asyncio.create_task(self._send_loop(ws)),
            asyncio.create_task(self._heartbeat_loop(ws)),
        ]
        try:
            done, _ = await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
        for task in done:
            exc = task.exception()
            if exc is not None:
                raise exc

    async def _receive_loop(self, ws: ClientConnection) -> None:
        async for raw in ws:
            try:
                message = protocol.parse_from_server(json.loads(raw))
            except ValueError as exc:  # not JSON, or a ProtocolError
                logger.warning("ignoring a message from the server: %s", exc)
                continue
            if isinstance(message, TasksChanged):
                self._reconcile_now.set()
            elif isinstance(message, CaptureStacks):  # a job stalled: in a thread of its own
                stacks.capture_in_background(self.supervisor, self.outbox, message)
            else:
                await self.uplink.received(message)

    async def _send_loop(self, ws: ClientConnection) -> None:
        while True:
            await asyncio.sleep(self._flush_interval)
            await self.uplink.flush(ws)

    async def _send_heartbeat(self, ws: ClientConnection, delay: float = 0.0) -> None:
        await asyncio.sleep(delay)
        await self.uplink.send_heartbeat(ws, await asyncio.to_thread(self._heartbeat))

    async def _heartbeat_loop(self, ws: ClientConnection) -> None:
        while True:
            await self._send_heartbeat(ws, self._heartbeat_interval)

    def _heartbeat(self) -> Heartbeat:
        live = self.supervisor.live_pids()
        return Heartbeat(
            usage=self.sampler.sample(),
            gpus=tuple(self.sampler.gpus()),
            ports_in_use=tuple(self.sampler.ports_in_use()),
            tasks=tuple(LiveTask(key, pid) for key, pid in live.items()),
            isolation=self.supervisor.isolation.mode,
            agent_version=self.version,
        )

    # -- reconcile -----------------------------------------------------------------------

    async def _reconcile_loop(self, http: rest.Client) -> None:
        while True:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._reconcile_now.wait(), self._reconcile_interval)
            self._reconcile_now.clear()
            try:
                await self.reconcile_once(http)
            except (rest.HTTPError, ValueError) as exc:  # a ProtocolError is a ValueError
                logger.warning("cannot fetch desired tasks: %s", exc or type(exc).__name__)

    async def fetch_desired(self, http: rest.Client) -> DesiredTasks:
        url = protocol.api_url(self.state.server, protocol.DESIRED_TASKS_PATH)
        response = await http.get_async(url)
        if response.status == 401:
            raise Unauthorized
        if response.status != 200:
            raise rest.HTTPError(f"GET {url} answered HTTP {response.status} {response.reason}")
        return protocol.parse_desired_tasks(response.json())

    async def reconcile_once(self, http: rest.Client) -> None:
        desired = await self.fetch_desired(http)
        self._grace = desired.stop_grace_seconds
        plan = reconcile(
            desired.tasks, self.supervisor.live_keys(), self.supervisor.finished_keys()
        )
        for task in desired.tasks:
            self.supervisor.update_cluster(task)
            self.supervisor.update_stop_grace(task)
        if plan.empty:
            return
        self.supervisor.forget(plan.forget)
        # A task no longer listed stops with the grace of the last list that named it (a
        # coordinator saves a checkpoint), else (and if its job ended) the response's.
        default, ended = desired.stop_grace_seconds, desired.ended_jobs
        graces = {key: self.supervisor.stop_grace(key, default, ended) for key in plan.stops}
        for key, grace in graces.items():
            self.supervisor.stop(key, grace)
        for task in plan.starts:
            # A restart (new attempt) waits for the old attempt to be gone: it holds the
            # same ports, GPUs and checkpoint directory.
            for old, grace in graces.items():
                if old.id == task.id:
                    await asyncio.to_thread(self.supervisor.wait_gone, old, grace + 2.0)
            # Download the job's code off the event loop; start() unpacks the cached copy
            # (and reports a failure to fetch as the task's failure to start).
            with contextlib.suppress(CodeError):
                await asyncio.to_thread(self.code.archive, task)
            self.supervisor.start(task)

    # -- credential renewal ----------------------------------------------------------------

    async def renew_credential(self, http: rest.Client) -> None:
        """Get a new credential, save it (atomically, 0600) and reconnect the socket with it.

        Raises:
            Unauthorized: the server refused the current credential (revoked, expired).
            rest.HTTPError, ValueError: no usable answer; the current credential stays.
        """
        state = await renewal.renewed_state(http, self.state)
        if state is None:
            raise Unauthorized
        if self._state_file is not None:
            await asyncio.to_thread(renewal.save, self._state_file, state)
        self.state = state
        self._auth = {"Authorization": f"Node {state.credential}"}
        http.set_header("Authorization", self._auth["Authorization"])
        self.renewals += 1
        logger.info(
            "renewed the node credential; it expires at %s",
            state.credential_expires_at.isoformat(timespec="seconds")
            if state.credential_expires_at
            else "?",
        )
        await self._reconnect()

    async def _reconnect(self) -> None:
        """Close the socket so the connection loop opens it again with the current
        credential at once; tasks keep running and the outbox keeps what is not sent."""
        if self._ws is not None:
            self._reconnect_at_once = True
            await self.uplink.close(self._ws, "credential renewed", drain=RECONNECT_DRAIN_S)
