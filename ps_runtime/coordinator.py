"""ClusterCoordinator: schedules closures on workers, TensorFlow-style, in numpy.

Nouns: a `Closure` is one scheduled call; its `RemoteValue` is the caller's handle on
the result; the closure queue is bounded (back-pressure on `schedule`); each worker
has a worker handle whose dispatch thread keeps a bounded number of closures in
flight on that worker.

Delivery guarantee: **at least once**. If a worker RPC fails with UNAVAILABLE (the
worker died or is unreachable), the closure goes back to the front of the queue and
runs on another (or the recovered) worker; it may therefore have run partly or fully
before, e.g. pushed gradients twice. Errors raised by the function itself are not
retried: they surface from `RemoteValue.fetch()` as `ClosureError`, and the first
one is also raised by the next `schedule()`, `join()` or `done()` (then cleared),
after cancelling the closures still queued.
"""

from __future__ import annotations

import collections
import logging
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any

import grpc

from ps_runtime import closures, rpc
from ps_runtime.proto import ps_pb2, ps_pb2_grpc
from ps_runtime.wire import decode_value, encode_value

log = logging.getLogger(__name__)


class ClosureError(RuntimeError):
    """A scheduled function raised on a worker; carries the remote traceback."""

    def __init__(self, function: str, error_type: str, message: str, remote_traceback: str):
        super().__init__(f"{function} raised {error_type}: {message}\n"
                         f"--- remote traceback ---\n{remote_traceback}")
        self.function = function
        self.error_type = error_type
        self.remote_traceback = remote_traceback


class ClosureCancelledError(RuntimeError):
    """The closure never ran because an earlier closure failed."""


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

    def fetch(self, timeout: float | None = None) -> Any:
        """Block until the result is ready and return it (or raise the closure's error)."""
        if not self._done.wait(timeout):
            raise TimeoutError(f"closure result not ready after {timeout}s")
        if self._error is not None:
            raise self._error
        return self._value


class Closure:
    """One scheduled call: the function reference and its encoded arguments."""

    def __init__(self, fn: Callable[..., Any] | str, args: Sequence[Any],
                 kwargs: dict[str, Any]) -> None:
        self.function = closures.function_ref(fn)
        text, tensors = encode_value({"args": list(args), "kwargs": kwargs})
        self.request = ps_pb2.RunClosureRequest(function=self.function, args_json=text,
                                                tensors=tensors)
        self.remote_value = RemoteValue()
        self.attempts = 0


class _ClosureQueue:
    """Bounded FIFO of closures plus in-flight accounting, under one lock."""

    def __init__(self, max_queued: int) -> None:
        self._lock = threading.Lock()
        self._not_empty = threading.Condition(self._lock)  # a closure was queued, or stop
        self._not_full = threading.Condition(self._lock)  # a queued closure was taken
        self._idle = threading.Condition(self._lock)  # nothing queued and nothing in flight
        self._queue: collections.deque[Closure] = collections.deque()
        self._max_queued = max_queued
        self._in_flight = 0
        self._error: BaseException | None = None
        self._stopped = False
        self.completed = 0

    def raise_pending_error(self) -> None:
        """Raise (and clear) the first closure error since the last raise."""
        with self._lock:
            error, self._error = self._error, None
        if error is not None:
            raise error

    def put(self, closure: Closure) -> None:
        """Queue a closure, blocking while the queue is full."""
        with self._lock:
            while len(self._queue) >= self._max_queued and not self._stopped:
                self._not_full.wait()
            if self._stopped:
                raise RuntimeError("the coordinator was shut down; create a new one")
            self._queue.append(closure)
            self._not_empty.notify()

    def get(self, timeout: float) -> Closure | None:
        """Take the next closure and count it in flight; None on timeout or stop."""
        with self._lock:
            if not self._queue and not self._stopped:
                self._not_empty.wait(timeout)
            if not self._queue or self._stopped:
                return None
            closure = self._queue.popleft()
            self._in_flight += 1
            self._not_full.notify()
            return closure

    def requeue(self, closure: Closure) -> None:
        """Put an in-flight closure back at the front (its worker became unavailable)."""
        with self._lock:
            self._in_flight -= 1
            self._queue.appendleft(closure)
            self._not_empty.notify()

    def finish(self, closure: Closure, value: Any = None,
               error: BaseException | None = None) -> None:
        """Record an in-flight closure's outcome; an error cancels everything queued."""
        cancelled: list[Closure] = []
        with self._lock:
            self._in_flight -= 1
            self.completed += 1
            if error is not None:
                if self._error is None:
                    self._error = error
                cancelled = list(self._queue)
                self._queue.clear()
                self._not_full.notify_all()
            if not self._queue and self._in_flight == 0:
                self._idle.notify_all()
        closure.remote_value._set(value, error)
        for c in cancelled:
            c.remote_value._set(error=ClosureCancelledError(
                f"{c.function} was cancelled because an earlier closure failed: {error}"))

    def is_idle(self) -> bool:
        """True when nothing is queued or in flight."""
        with self._lock:
            return not self._queue and self._in_flight == 0

    def wait_idle(self, timeout: float | None = None) -> bool:
        """Wait until nothing is queued or in flight; False on timeout."""
        with self._lock:
            return self._idle.wait_for(lambda: not self._queue and self._in_flight == 0,
                                       timeout)

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


class _WorkerHandle:
    """One worker: a dispatch thread keeping up to `max_in_flight` closures running on it."""

    def __init__(self, index: int, address: str, token: str, queue: _ClosureQueue,
                 max_in_flight: int) -> None:
        self.index = index
        self.address = address
        self._token = token
        self._metadata = rpc.auth_metadata(token)
        self._queue = queue
        self._channel = rpc.create_channel(address)
        self._stub = ps_pb2_grpc.WorkerStub(self._channel)
        self._slots = threading.Semaphore(max_in_flight)
        self._healthy = threading.Event()  # cleared while the worker is unavailable
        self._healthy.set()
        self._thread = threading.Thread(target=self._dispatch_loop, daemon=True,
                                         name=f"dispatch-worker-{index}")
        self._thread.start()

    def _dispatch_loop(self) -> None:
        while not self._queue.stopped:
            if not self._healthy.is_set():
                self._wait_until_healthy()
                continue
            self._slots.acquire()
            closure = self._queue.get(timeout=0.5)
            if closure is None:
                self._slots.release()
                continue
            closure.attempts += 1
            future = self._stub.RunClosure.future(closure.request, metadata=self._metadata)
            future.add_done_callback(lambda f, c=closure: self._on_done(c, f))

    def _wait_until_healthy(self) -> None:
        delay = 0.2
        while not self._queue.stopped:
            if rpc.check_health(self.address, self._token, timeout=1.0):
                log.warning("worker %d at %s is available again", self.index, self.address)
                self._healthy.set()
                return
            time.sleep(delay)
            delay = min(delay * 2, 5.0)

    def _on_done(self, closure: Closure, future: Any) -> None:
        self._slots.release()
        try:
            reply = future.result()
        except grpc.RpcError as e:
            if e.code() == grpc.StatusCode.UNAVAILABLE:
                log.warning("worker %d at %s unavailable; re-queueing %s (attempt %d)",
                            self.index, self.address, closure.function, closure.attempts)
                self._healthy.clear()
                self._queue.requeue(closure)
            else:
                self._queue.finish(closure, error=e)
            return
        if reply.error_type:
            error = ClosureError(closure.function, reply.error_type, reply.error_message,
                                 reply.error_traceback)
            self._queue.finish(closure, error=error)
            return
        try:
            value = decode_value(reply.result_json, reply.tensors)
        except Exception as e:  # a malformed reply must still finish the closure
            self._queue.finish(closure, error=e)
            return
        self._queue.finish(closure, value=value)

    def close(self) -> None:
        """Close the channel (the dispatch thread exits once the queue is stopped)."""
        self._thread.join(timeout=2.0)
        self._channel.close()


class ClusterCoordinator:
    """Schedules closures on the strategy's workers; see the module docstring for guarantees.

    Args:
        strategy: a ParameterServerStrategy (its cluster resolver names the workers).
        max_queued: closures waiting beyond this make `schedule` block.
        max_in_flight_per_worker: concurrent closures per worker.
    """

    def __init__(self, strategy: Any, max_queued: int = 256,
                 max_in_flight_per_worker: int = 2) -> None:
        self.strategy = strategy
        resolver = strategy.cluster_resolver
        self._queue = _ClosureQueue(max_queued)
        self._workers = [
            _WorkerHandle(i, address, resolver.token, self._queue, max_in_flight_per_worker)
            for i, address in enumerate(resolver.workers)
        ]

    @property
    def num_workers(self) -> int:
        """Number of workers."""
        return len(self._workers)

    def schedule(self, fn: Callable[..., Any] | str, args: Sequence[Any] = (),
                 kwargs: dict[str, Any] | None = None) -> RemoteValue:
        """Queue `fn(*args, **kwargs)` to run on some worker; return at once.

        `fn` must be importable on the workers (module-level function or "module:qualname").
        Arguments may be JSON values, numpy arrays, variables, tables and per-worker
        resources. Blocks only while the closure queue is full.

        Raises:
            ClosureError: the first error of an earlier closure, if not yet raised.
        """
        self._queue.raise_pending_error()
        closure = Closure(fn, args, kwargs or {})
        self._queue.put(closure)
        return closure.remote_value

    def join(self, timeout: float | None = None) -> None:
        """Block until every scheduled closure has finished.

        Raises:
            ClosureError: the first error of a closure since the last raise.
            TimeoutError: when `timeout` passes first.
        """
        if not self._queue.wait_idle(timeout):
            raise TimeoutError(f"closures still running after {timeout}s")
        self._queue.raise_pending_error()

    def done(self) -> bool:
        """True if nothing is queued or running (raises a pending closure error)."""
        self._queue.raise_pending_error()
        return self._queue.is_idle()

    def create_per_worker_dataset(self, fn: Callable[..., Any] | str, *args: Any,
                                  **kwargs: Any) -> closures.PerWorkerResource:
        """A value built once on each worker by `fn(*args, **kwargs)`; pass it to closures."""
        return closures.PerWorkerResource(fn, *args, **kwargs)

    @property
    def completed_closures(self) -> int:
        """Closures finished so far (successfully or not)."""
        return self._queue.completed

    def shutdown(self) -> None:
        """Stop the dispatch threads and close the worker channels."""
        self._queue.stop()
        for w in self._workers:
            w.close()

    def __enter__(self) -> ClusterCoordinator:
        return self

    def __exit__(self, *exc: object) -> None:
        self.shutdown()
