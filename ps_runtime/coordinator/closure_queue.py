"""Closures, their RemoteValues, and the queue that hands them to worker dispatch threads.

Shared state lives under one lock with named conditions. Unbound closures go to any
worker; a closure bound to a worker (`ScheduleOption(worker=i)`) waits in that worker's
own deque until it runs there or its deadline passes.
"""

from __future__ import annotations

import collections
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from ps_runtime import reporting
from ps_runtime.coordinator import closures
from ps_runtime.proto import ps_pb2
from ps_runtime.wire.codec import encode_value


class ClosureError(RuntimeError):
    """A scheduled function raised on a worker; carries the remote traceback."""

    def __init__(self, function: str, error_type: str, message: str, remote_traceback: str):
        super().__init__(
            f"{function} raised {error_type}: {message}\n"
            f"--- remote traceback ---\n{remote_traceback}"
        )
        self.function = function
        self.error_type = error_type
        self.remote_traceback = remote_traceback


class ClosureCancelledError(RuntimeError):
    """The closure never ran because an earlier closure failed."""


class UnavailableError(RuntimeError):
    """A parameter server (or a worker a closure was bound to) is unreachable."""


@dataclass(frozen=True)
class ScheduleOption:
    """Where a closure may run: `worker=i` binds it to worker i, waiting up to `timeout`
    seconds for that worker to be available before its RemoteValue fails."""

    worker: int | None = None
    timeout: float = 60.0


class RemoteValue:
    """The eventual result of a scheduled closure."""

    def __init__(self) -> None:
        self._done = threading.Event()
        self._value: Any = None
        self._error: BaseException | None = None

    def _set(self, value: Any = None, error: BaseException | None = None) -> None:
        self._value, self._error = value, error
        self._done.set()

    def done(self) -> bool:
        """True once the closure finished, failed or was cancelled."""
        return self._done.is_set()

    def wait(self, timeout: float | None = None) -> bool:
        """Block until the closure is done; False if `timeout` passed first."""
        return self._done.wait(timeout)

    def fetch(self, timeout: float | None = None) -> Any:
        """Block until the result is ready and return it (or raise the closure's error)."""
        if not self._done.wait(timeout):
            raise TimeoutError(f"closure result not ready after {timeout}s")
        if self._error is not None:
            raise self._error
        return self._value

    get = fetch


class Closure:
    """One scheduled call: the function reference, its encoded arguments, its placement."""

    def __init__(
        self,
        fn: Callable[..., Any] | str,
        args: Sequence[Any],
        kwargs: dict[str, Any],
        option: ScheduleOption | None = None,
    ) -> None:
        self.function = closures.function_ref(fn)
        text, tensors = encode_value({"args": list(args), "kwargs": kwargs})
        self.request = ps_pb2.RunClosureRequest(
            function=self.function, args_json=text, tensors=tensors
        )
        self.remote_value = RemoteValue()
        self.attempts = 0
        self.worker = option.worker if option else None
        self.deadline = time.monotonic() + option.timeout if option else float("inf")


class ClosureQueue:
    """Bounded queue of closures plus in-flight accounting, under one lock."""

    def __init__(self, max_queued: int) -> None:
        self._lock = threading.Lock()
        self._not_empty = threading.Condition(self._lock)  # a closure was queued, or stop
        self._not_full = threading.Condition(self._lock)  # a queued closure was taken
        self._idle = threading.Condition(self._lock)  # nothing queued and nothing in flight
        self._queue: collections.deque[Closure] = collections.deque()
        self._bound: dict[int, collections.deque[Closure]] = collections.defaultdict(
            collections.deque
        )
        self._max_queued = max_queued
        self._in_flight = 0
        self._error: BaseException | None = None
        self._stopped = False
        self.completed = 0

    def _queued(self) -> int:
        return len(self._queue) + sum(len(d) for d in self._bound.values())

    def raise_pending_error(self) -> None:
        """Raise (and clear) the first closure error since the last raise."""
        with self._lock:
            error, self._error = self._error, None
        if error is not None:
            raise error

    def put(self, closure: Closure) -> None:
        """Queue a closure, blocking while the queue is full."""
        with self._lock:
            while self._queued() >= self._max_queued and not self._stopped:
                self._not_full.wait()
            if self._stopped:
                raise RuntimeError("the coordinator was shut down; create a new one")
            if closure.worker is None:
                self._queue.append(closure)
                self._not_empty.notify()
            else:
                self._bound[closure.worker].append(closure)
                self._not_empty.notify_all()  # only that worker's thread can take it

    def get(self, worker: int, timeout: float) -> Closure | None:
        """Take the next closure for `worker` (bound ones first) and count it in flight;
        None on timeout or stop."""
        with self._lock:
            mine = self._bound.get(worker)
            if not self._queue and not mine and not self._stopped:
                self._not_empty.wait(timeout)
                mine = self._bound.get(worker)
            if self._stopped:
                return None
            if mine:
                closure = mine.popleft()
            elif self._queue:
                closure = self._queue.popleft()
            else:
                return None
            self._in_flight += 1
            self._not_full.notify()
            return closure

    def requeue(self, closure: Closure) -> None:
        """Put an in-flight closure back at the front (its worker became unavailable)."""
        with self._lock:
            self._in_flight -= 1
            target = self._queue if closure.worker is None else self._bound[closure.worker]
            target.appendleft(closure)
            self._not_empty.notify_all()

    def finish(
        self,
        closure: Closure,
        value: Any = None,
        error: BaseException | None = None,
        cancel_queued: bool = True,
    ) -> None:
        """Record an in-flight closure's outcome; an error normally cancels everything queued."""
        with self._lock:
            self._in_flight -= 1
            self.completed += 1
            cancelled = self._record_error(error, cancel_queued)
        self._settle(closure, value, error, cancelled)
        if error is None:
            reporting.closure_completed()  # progress, for the platform's stall detection

    def expire_bound(self, now: float) -> None:
        """Fail bound closures whose worker did not take them before their deadline."""
        expired: list[tuple[Closure, UnavailableError]] = []
        with self._lock:
            for worker, waiting in self._bound.items():
                for closure in [c for c in waiting if c.deadline <= now]:
                    waiting.remove(closure)
                    expired.append(
                        (
                            closure,
                            UnavailableError(
                                f"{closure.function} was bound to worker {worker}, which did not "
                                "become available in time; schedule it without a worker to run it "
                                "anywhere"
                            ),
                        )
                    )
            for _, error in expired:
                self.completed += 1
                self._record_error(error, cancel_queued=False)
            if expired:
                self._not_full.notify_all()
        for closure, error in expired:
            closure.remote_value._set(error=error)

    def _record_error(self, error: BaseException | None, cancel_queued: bool) -> list[Closure]:
        cancelled: list[Closure] = []
        if error is not None:
            if self._error is None:
                self._error = error
            if cancel_queued:
                cancelled = list(self._queue) + [c for d in self._bound.values() for c in d]
                self._queue.clear()
                self._bound.clear()
                self._not_full.notify_all()
        self._notify_if_idle()
        return cancelled

    def _notify_if_idle(self) -> None:
        if self._queued() == 0 and self._in_flight == 0:
            self._idle.notify_all()

    @staticmethod
    def _settle(
        closure: Closure, value: Any, error: BaseException | None, cancelled: list[Closure]
    ) -> None:
        closure.remote_value._set(value, error)
        for c in cancelled:
            c.remote_value._set(
                error=ClosureCancelledError(
                    f"{c.function} was cancelled because an earlier closure failed: {error}"
                )
            )

    def is_idle(self) -> bool:
        """True when nothing is queued or in flight."""
        with self._lock:
            return self._queued() == 0 and self._in_flight == 0

    def wait_idle(self, timeout: float | None = None) -> bool:
        """Wait until nothing is queued or in flight; False on timeout."""
        with self._lock:
            return self._idle.wait_for(
                lambda: self._queued() == 0 and self._in_flight == 0, timeout
            )

    def stop(self) -> None:
        """Wake every waiter; no more closures are accepted or handed out."""
        with self._lock:
            self._stopped = True
            self._not_empty.notify_all()
            self._not_full.notify_all()

    @property
    def stopped(self) -> bool:
        """True after stop()."""
        return self._stopped
