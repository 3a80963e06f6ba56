"""Tasks waiting for their job's environment: the build runs in a thread of its own while
the agent goes on; the task is reported `preparing` with the build's progress, its log
gets uv's lines, and it starts once the environment is ready.

A build that fails ends the task with `EXIT_ENVIRONMENT` and uv's reason (the control
plane fails the job without spending a restart). A task stopped while it waits is
reported stopped at once; the build itself goes on (the next job that asks for the same
packages finds them), bounded by the spec's timeout, unless the agent stops.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Collection
from pathlib import Path

from ps_runtime.agent.environments import EnvironmentBuildError, EnvironmentCache
from ps_runtime.agent.outbox import Outbox
from ps_runtime.agent.protocol import DesiredTask, LogStream, ReportedState, TaskKey, TaskStatus
from ps_runtime.taskenv import EXIT_ENVIRONMENT

logger = logging.getLogger(__name__)

# How often a preparing task's progress is re-reported (its newest line) at most.
PROGRESS_EVERY_SECONDS = 1.0
LOG_PREFIX = "[environment] "
# uv's lines that say how far a build is.
PROGRESS_WORDS = ("Resolved", "Prepared", "Installed", "Downloading", "Creating", "Building")


class Preparations:
    """The task attempts of this node whose environment is being built."""

    def __init__(
        self,
        cache: EnvironmentCache,
        outbox: Outbox,
        *,
        start: Callable[[DesiredTask, Path], object],
        failed: Callable[[TaskKey], None],
        in_use: Callable[[], Collection[str]],
    ) -> None:
        self.cache = cache
        self._outbox = outbox
        self._start = start
        self._failed = failed
        self._in_use = in_use
        self._lock = threading.Lock()
        self._waiting: dict[TaskKey, threading.Event] = {}  # guarded by _lock; set: stopped

    def keys(self) -> set[TaskKey]:
        with self._lock:
            return set(self._waiting)

    def begin(self, task: DesiredTask) -> None:
        """Build `task`'s environment in the background, then start the task."""
        assert task.environment is not None
        with self._lock:
            if task.key in self._waiting:
                return
            stopped = self._waiting[task.key] = threading.Event()
        thread = threading.Thread(target=self._run, args=(task, stopped), daemon=True)
        thread.start()

    def stop(self, key: TaskKey) -> bool:
        """Stop waiting for `key` (reported stopped); False if it was not waiting."""
        with self._lock:
            stopped = self._waiting.pop(key, None)
        if stopped is None:
            return False
        stopped.set()
        logger.info("task %s attempt %s stopped while its environment was built", *key)
        self._outbox.add_status(
            TaskStatus(key, ReportedState.STOPPED, None, "stopped while its environment was built")
        )
        return True

    def stop_all(self) -> None:
        for key in self.keys():
            self.stop(key)
        self.cache.abort_all()

    def _run(self, task: DesiredTask, stopped: threading.Event) -> None:
        key, spec = task.key, task.environment
        assert spec is not None
        what = ", ".join(spec.requirements) or "no packages"
        self._status(key, f"building the job's Python environment ({what})")
        last = [0.0]

        def on_line(line: str) -> None:
            if stopped.is_set():
                return
            self._outbox.add_log(key, LogStream.STDERR, LOG_PREFIX + line)
            now = time.monotonic()
            if line.lstrip(" +").startswith(PROGRESS_WORDS) and now - last[0] >= 1.0:
                last[0] = now
                self._status(key, f"building the environment: {line.strip()}")

        started = time.monotonic()
        try:
            path = self.cache.build(spec, on_line, in_use=self._in_use())
        except (EnvironmentBuildError, OSError) as exc:
            if self._release(key):
                logger.error("task %s: environment build failed: %s", key.id, exc)
                self._outbox.add_log(key, LogStream.STDERR, LOG_PREFIX + str(exc))
                self._outbox.add_status(
                    TaskStatus(key, ReportedState.FAILED, EXIT_ENVIRONMENT, str(exc))
                )
                self._failed(key)
            return
        logger.info(
            "task %s attempt %s: environment ready after %.1f s",
            key.id,
            key.attempt,
            time.monotonic() - started,
        )
        # Under the lock: a stop either came first (nothing starts) or waits until the
        # task is live (then it stops the process); listed as waiting until it is, so the
        # agent never sees it in neither place.
        with self._lock:
            if stopped.is_set() or key not in self._waiting:
                return
            self._start(task, path)
            del self._waiting[key]

    def _release(self, key: TaskKey) -> bool:
        with self._lock:
            return self._waiting.pop(key, None) is not None

    def _status(self, key: TaskKey, message: str) -> None:
        self._outbox.add_status(TaskStatus(key, ReportedState.PREPARING, None, message[:500]))
