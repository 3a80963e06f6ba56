"""Each job's own Python environment on a node (issue 27): the agent's real task-starting
code (`Supervisor` with the node's `Isolation`, a root agent as production runs it) builds
it with uv from a local wheelhouse (no network), starts the task in it, sandboxed, and
the task can import what it asked for but change nothing of it. A second job asking the
same starts without a build; a bad requirement fails the task with uv's reason and the
exit code that tells the control plane not to restart it."""

from __future__ import annotations

import dataclasses
import json
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from ps_runtime.agent.environments import EnvironmentCache
from ps_runtime.agent.envspec import JobEnvironment
from ps_runtime.agent.isolation import MODE_SANDBOX, Isolation
from ps_runtime.agent.outbox import Outbox
from ps_runtime.agent.protocol import DesiredTask, TaskKey
from ps_runtime.agent.supervisor import Supervisor
from ps_runtime.taskenv import EXIT_ENVIRONMENT, Role

from ..ps_runtime.agent.helpers import wait_for
from ..ps_runtime.agent.wheels import make_wheel, offline_index
from .test_task_isolation import root_sandbox_dir

PROBE = Path(__file__).with_name("env_probe.py")


@pytest.fixture
def base() -> Iterator[Path]:
    yield from root_sandbox_dir("trainhub-envs-")


class Feed:
    """What the supervisor sent up, drained from its outbox as tests ask."""

    def __init__(self, outbox: Outbox) -> None:
        self.outbox = outbox
        self.messages: list[dict[str, Any]] = []

    def of(self, key: TaskKey, kind: str) -> list[dict[str, Any]]:
        self.messages.extend(m.to_wire() for m in self.outbox.drain())
        return [
            m
            for m in self.messages
            if m["type"] == kind and (m["id"], m["attempt"]) == (key.id, key.attempt)
        ]

    def lines(self, key: TaskKey) -> list[str]:
        return [line for m in self.of(key, "logs") for line in m["lines"]]

    def states(self, key: TaskKey) -> list[str]:
        return [m["state"] for m in self.of(key, "task_status")]

    def ended(self, key: TaskKey) -> dict[str, Any] | None:
        done = [m for m in self.of(key, "task_status") if m["state"] in ("succeeded", "failed")]
        return done[-1] if done else None


def node(base: Path, wheelhouse: Path) -> tuple[Supervisor, Feed, EnvironmentCache]:
    """A root agent's supervisor whose environments come from `wheelhouse` alone."""
    code = base / "job-code"
    code.mkdir(mode=0o755, exist_ok=True)
    shutil.copy(PROBE, code / "probe.py")
    (code / "probe.py").chmod(0o644)
    isolation = Isolation.from_settings(base / "agent", {"TRAINHUB_TASK_ISOLATION": "auto"})
    assert isolation.mode == MODE_SANDBOX, isolation.describe()
    assert isolation.box is not None
    box = dataclasses.replace(isolation.box, runtime=(*isolation.box.runtime, str(code)))
    isolation = dataclasses.replace(isolation, box=box)
    cache = EnvironmentCache(
        base / "agent" / "envs",
        python=isolation.python,
        pythonpath=isolation.pythonpath,
        environ={"PATH": "/usr/bin:/bin", **offline_index(wheelhouse)},
    )
    outbox = Outbox()
    supervisor = Supervisor(
        outbox,
        base / "agent",
        command=[isolation.python, str(code / "probe.py")],
        isolation=isolation,
        environments=cache,
    )
    return supervisor, Feed(outbox), cache


def task(task_id: int, job_id: int, *requirements: str) -> DesiredTask:
    return DesiredTask(
        id=task_id,
        attempt=0,
        job_id=job_id,
        role=Role.WORKER,
        index=0,
        cpu=0.5,
        memory_mb=512,
        env={"TRAINHUB_JOB_TOKEN": f"token-of-job-{job_id}"},
        environment=JobEnvironment(tuple(requirements)),
    )


def report(feed: Feed, key: TaskKey, timeout: float = 90) -> dict[str, Any]:
    line = wait_for(
        lambda: next((x for x in feed.lines(key) if x.startswith("{")), None),
        timeout,
        f"task {key}'s report; output {feed.lines(key)}, states {feed.states(key)}",
    )
    return dict(json.loads(line))


def test_a_job_runs_in_its_own_environment_built_once_and_cannot_change_it(base: Path) -> None:
    wheelhouse = base / "wheels"
    make_wheel(wheelhouse, "envpkg", "2.5")
    supervisor, feed, cache = node(base, wheelhouse)
    first, second = task(1, 101, "envpkg==2.5"), task(2, 202, "envpkg")
    try:
        assert supervisor.start(first) is None  # it waits for its environment
        assert first.key in supervisor.live_keys()  # not started twice meanwhile
        seen = report(feed, first.key)
        states = feed.states(first.key)
        assert states[0] == "preparing" and "running" in states, states
        building = [m["message"] for m in feed.of(first.key, "task_status")]
        assert any("envpkg==2.5" in m for m in building), building
        assert any(x.startswith("[environment] Installed 1 package") for x in feed.lines(first.key))
        env_dir = cache.path(cache.digest(first.environment))  # type: ignore[arg-type]
        assert seen["envpkg"] == "2.5" and seen["prefix"] == str(env_dir)
        assert seen["pythonpath"] == ""  # the runtime comes after the job's packages
        assert seen["ps_runtime"].endswith("ps_runtime")
        # Not the job's files (EACCES: the agent's, 0644) and not writable (EROFS) at all.
        for attempt in ("write_module", "create_in_site", "create_in_bin", "remove_module"):
            assert seen[attempt] in ("PermissionError errno 13", "OSError errno 30"), seen
        # The same packages spelled the same way for another job: no second build.
        second = task(2, 202, "envpkg==2.5")
        assert supervisor.start(second) is not None  # started at once
        assert report(feed, second.key)["prefix"] == str(env_dir)
        assert "preparing" not in feed.states(second.key)
        assert [e[1] for e in cache.environments()] == [env_dir.name]
    finally:
        supervisor.stop_all(grace=1)


def test_a_bad_requirement_fails_the_task_with_uvs_reason(base: Path) -> None:
    wheelhouse = base / "wheels"
    make_wheel(wheelhouse, "envpkg", "2.5")
    supervisor, feed, cache = node(base, wheelhouse)
    bad = task(3, 303, "envpkg==9.9")
    try:
        supervisor.start(bad)
        ended = wait_for(lambda: feed.ended(bad.key), 60, "the failed build")
        assert ended["state"] == "failed" and ended["exit_code"] == EXIT_ENVIRONMENT
        assert "requirement 'envpkg==9.9'" in ended["message"]
        assert "no version of envpkg==9.9" in ended["message"], ended["message"]
        assert bad.key in supervisor.finished_keys()
        assert bad.key not in supervisor.live_keys()
        assert cache.environments() == []  # nothing half-built is reused
    finally:
        supervisor.stop_all(grace=1)
