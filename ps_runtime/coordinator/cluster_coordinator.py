"""ClusterCoordinator: schedules closures on workers, TensorFlow-style, in numpy.

Nouns: a `Closure` is one scheduled call; its `RemoteValue` is the caller's handle on
the result; the closure queue is bounded (back-pressure on `schedule`); each worker
has a worker handle whose dispatch thread keeps a bounded number of closures in
flight on that worker.

Delivery guarantee: **at least once**. If a worker RPC fails with UNAVAILABLE (the
worker died or is unreachable), the closure goes back to the front of the queue and
runs on another (or the recovered) worker; it may therefore have run partly or fully
before, e.g. pushed gradients twice. The unavailable worker is probed with backoff and
gets work again once it answers; a restarted worker rebuilds its per-worker resources
(datasets) on first use, before running the closure. Errors raised by the function
itself are not retried: they surface from `RemoteValue.fetch()` as `ClosureError`, and
the first one is also raised by the next `schedule()`, `join()` or `done()` (then
cleared), after cancelling the closures still queued. A parameter server that stops
answering is fatal: the failing closure and the next `schedule()`/`join()`/`done()`
raise `UnavailableError` naming the shard; restart the job from its checkpoint.

Membership is elastic: `add_worker`, `remove_worker` and `set_workers` change the
workers while closures run; a removed worker finishes its in-flight closures (or, if it
is already gone, they are re-queued) and takes no new ones. Under the platform, the agent
keeps the job's current worker list in the file named by TRAINHUB_CLUSTER_FILE and the
coordinator follows it, so scaling a job needs no restart. The same file gives the new
address of a parameter server that moved (a replicated job's server placed on another
node); the coordinator's PS client switches to it, and the handles it sends workers from
then on carry it.
"""

from __future__ import annotations

import itertools
import json
import logging
import os
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any

import grpc

from ps_runtime import taskenv
from ps_runtime.coordinator import closures
from ps_runtime.coordinator.closure_queue import (
    Closure,
    ClosureCancelledError,
    ClosureError,
    ClosureQueue,
    RemoteValue,
    ScheduleOption,
    UnavailableError,
)
from ps_runtime.proto import ps_pb2_grpc
from ps_runtime.wire import rpc
from ps_runtime.wire.codec import decode_value

log = logging.getLogger(__name__)

__all__ = [
    "ClosureCancelledError",
    "ClosureError",
    "ClusterCoordinator",
    "RemoteValue",
    "ScheduleOption",
    "UnavailableError",
]


def ps_unavailable_error(resolver: Any, cause: BaseException) -> UnavailableError | None:
    """An UnavailableError naming the first PS shard that is down, or None if all answer."""
    down = resolver.unavailable_ps()
    if not down:
        return None
    shard, address = down[0]
    first_line = str(cause).splitlines()[0] if str(cause) else repr(cause)
    return UnavailableError(
        f"parameter server {shard} at {address} is unavailable; restart the job from its "
        f"last checkpoint (cause: {first_line})"
    )


class _WorkerHandle:
    """One worker: a dispatch thread keeping up to `max_in_flight` closures running on it."""

    def __init__(
        self,
        index: int,
        address: str,
        token: str,
        queue: ClosureQueue,
        max_in_flight: int,
        on_closure_error: Callable[[BaseException], BaseException],
    ) -> None:
        self.index = index
        self.address = address
        self._token = token
        self._metadata = rpc.auth_metadata(token)
        self._queue = queue
        self._on_closure_error = on_closure_error
        self._channel = rpc.create_channel(address)
        self._stub = ps_pb2_grpc.WorkerStub(self._channel)  # type: ignore[no-untyped-call]
        self._slots = threading.Semaphore(max_in_flight)
        # Set while the worker answers. A new worker is asked first (it may still be
        # starting: a routine scale-up, not a failure); `_served` says it answered once.
        self._healthy = threading.Event()
        self._served = False
        self._draining = threading.Event()  # set by remove_worker: take no new closures
        self._lock = threading.Lock()
        self._drained = threading.Condition(self._lock)  # in-flight count dropped to zero
        self._in_flight = 0
        self._thread = threading.Thread(
            target=self._dispatch_loop, daemon=True, name=f"dispatch-worker-{index}"
        )
        self._thread.start()

    def _running(self) -> bool:
        return not self._queue.stopped and not self._draining.is_set()

    def _dispatch_loop(self) -> None:
        while self._running():
            self._queue.expire_bound(time.monotonic())
            if not self._healthy.is_set():
                self._wait_until_healthy()
                continue
            if not self._slots.acquire(timeout=0.5):
                continue
            closure = self._queue.get(self.index, timeout=0.5) if self._running() else None
            if closure is None:
                self._slots.release()
                continue
            closure.attempts += 1
            with self._lock:
                self._in_flight += 1
            future = self._stub.RunClosure.future(closure.request, metadata=self._metadata)
            future.add_done_callback(lambda f, c=closure: self._on_done(c, f))

    def _wait_until_healthy(self) -> None:
        delay = 0.2
        while self._running():
            if rpc.check_health(self.address, self._token, timeout=1.0):
                if self._served:
                    log.warning("worker %d at %s is available again", self.index, self.address)
                else:
                    log.info("worker %d at %s is serving", self.index, self.address)
                self._served = True
                self._healthy.set()
                return
            self._draining.wait(delay)
            delay = min(delay * 2, 5.0 if self._served else 1.0)

    def _on_done(self, closure: Closure, future: Any) -> None:
        try:
            self._complete(closure, future)
        finally:
            self._slots.release()
            with self._lock:
                self._in_flight -= 1
                if self._in_flight == 0:
                    self._drained.notify_all()

    def _complete(self, closure: Closure, future: Any) -> None:
        try:
            reply = future.result()
        except grpc.RpcError as e:
            if e.code() in (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.CANCELLED):
                log.warning(
                    "worker %d at %s unavailable; re-queueing %s (attempt %d)",
                    self.index,
                    self.address,
                    closure.function,
                    closure.attempts,
                )
                self._healthy.clear()
                self._queue.requeue(closure)
            else:
                self._queue.finish(closure, error=e)
            return
        if reply.error_type:
            error = ClosureError(
                closure.function, reply.error_type, reply.error_message, reply.error_traceback
            )
            self._queue.finish(closure, error=self._on_closure_error(error))
            return
        try:
            value = decode_value(reply.result_json, reply.tensors)
        except Exception as e:  # a malformed reply must still finish the closure
            self._queue.finish(closure, error=e)
            return
        self._queue.finish(closure, value=value)

    def drain(self, timeout: float | None) -> bool:
        """Stop taking closures and wait for those in flight; False on timeout."""
        self._draining.set()
        self._thread.join(timeout=2.0)
        with self._lock:
            return self._drained.wait_for(lambda: self._in_flight == 0, timeout)

    def close(self) -> None:
        """Close the channel (the dispatch thread exits once stopped or draining)."""
        self._thread.join(timeout=2.0)
        self._channel.close()


class ClusterCoordinator:
    """Schedules closures on the strategy's workers; see the module docstring for guarantees.

    Args:
        strategy: a ParameterServerStrategy (its cluster resolver names the workers).
        max_queued: closures waiting beyond this make `schedule` block.
        max_in_flight_per_worker: concurrent closures per worker.
    """

    def __init__(
        self, strategy: Any, max_queued: int = 256, max_in_flight_per_worker: int = 2
    ) -> None:
        self.strategy = strategy
        resolver = strategy.cluster_resolver
        self._token = resolver.token
        self._resolver = resolver
        self._max_in_flight = max_in_flight_per_worker
        self._queue = ClosureQueue(max_queued)
        self._lock = threading.Lock()  # guards _workers
        self._workers: dict[int, _WorkerHandle] = {}
        self._indices = itertools.count()
        for address in resolver.workers:
            self.add_worker(address)
        self._stopped = threading.Event()
        self._watcher: threading.Thread | None = None
        cluster_file = taskenv.CLUSTER_FILE.read()
        if cluster_file:
            self._watcher = threading.Thread(
                target=self._watch_cluster_file,
                args=(cluster_file,),
                daemon=True,
                name="cluster-file-watcher",
            )
            self._watcher.start()

    def _watch_cluster_file(self, path: str, poll_seconds: float = 1.0) -> None:
        """Follow the worker list and PS addresses the agent writes when the platform
        rescales the job or moves one of its servers."""
        seen: float | None = None
        while not self._stopped.wait(poll_seconds):
            try:
                mtime = os.stat(path).st_mtime
                if mtime == seen:
                    continue
                seen = mtime
                with open(path) as f:
                    cluster = json.load(f)
                workers, ps = cluster.get("worker", []), cluster.get("ps", [])
            except (OSError, ValueError, AttributeError) as e:
                log.warning("cannot read the cluster file %s: %s", path, e)
                continue
            client = getattr(self.strategy, "ps_client", None)
            addresses = [str(a) for a in ps] if isinstance(ps, list) else []
            if client is not None and addresses and addresses != list(client.addresses):
                try:
                    client.move(addresses)
                except ValueError as e:
                    log.error("cannot follow the cluster file %s: %s", path, e)
            if isinstance(workers, list) and workers and set(workers) != set(self.workers.values()):
                log.warning("workers changed to %s", workers)
                self.set_workers([str(w) for w in workers])

    @property
    def num_workers(self) -> int:
        """Number of current workers."""
        with self._lock:
            return len(self._workers)

    @property
    def workers(self) -> dict[int, str]:
        """Current workers by index (indices of removed workers are never reused)."""
        with self._lock:
            return {i: w.address for i, w in self._workers.items()}

    def add_worker(self, address: str) -> int:
        """Start dispatching closures to the worker at `address`; returns its index."""
        with self._lock:
            index = next(self._indices)
            self._workers[index] = _WorkerHandle(
                index, address, self._token, self._queue, self._max_in_flight, self._check_ps
            )
        log.info("worker %d at %s joined", index, address)
        return index

    def remove_worker(self, index: int, timeout: float | None = 60.0) -> None:
        """Stop giving worker `index` closures; its in-flight ones finish or are re-queued.

        Raises:
            KeyError: no current worker has that index.
        """
        with self._lock:
            handle = self._workers.pop(index)
        if not handle.drain(timeout):
            log.warning("worker %d still had closures in flight after %ss", index, timeout)
        handle.close()
        log.info("worker %d at %s left", index, handle.address)

    def set_workers(self, addresses: Sequence[str]) -> None:
        """Make the worker set exactly `addresses` (add the new, remove the missing)."""
        current = self.workers
        for index, address in current.items():
            if address not in addresses:
                self.remove_worker(index)
        known = set(current.values())
        for address in addresses:
            if address not in known:
                self.add_worker(address)

    def _check_ps(self, error: BaseException) -> BaseException:
        """A closure failed: if a PS is down, that is the real error (name the shard)."""
        return ps_unavailable_error(self._resolver, error) or error

    def schedule(
        self,
        fn: Callable[..., Any] | str,
        args: Sequence[Any] = (),
        kwargs: dict[str, Any] | None = None,
        options: ScheduleOption | None = None,
    ) -> RemoteValue:
        """Queue `fn(*args, **kwargs)` to run on some worker; return at once.

        `fn` must be importable on the workers (module-level function or "module:qualname").
        Arguments may be JSON values, numpy arrays, variables, tables and per-worker
        resources (each worker substitutes its own). `options=ScheduleOption(worker=i)`
        binds the closure to worker i.

        Raises:
            ClosureError: the first error of an earlier closure, if not yet raised.
            UnavailableError: a parameter server stopped answering.
            ValueError: `options` names a worker that does not exist.
        """
        self._queue.raise_pending_error()
        if options is not None and options.worker is not None:
            with self._lock:
                if options.worker not in self._workers:
                    raise ValueError(
                        f"no worker {options.worker}; workers are {sorted(self._workers)}"
                    )
        closure = Closure(fn, args, kwargs or {}, options)
        self._queue.put(closure)
        return closure.remote_value

    def join(self, timeout: float | None = None) -> None:
        """Block until every scheduled closure has finished.

        Raises:
            ClosureError: the first error of a closure since the last raise.
            UnavailableError: a parameter server stopped answering.
            TimeoutError: when `timeout` passes first.
        """
        if not self._queue.wait_idle(timeout):
            raise TimeoutError(f"closures still running after {timeout}s")
        self._queue.raise_pending_error()

    def done(self) -> bool:
        """True if nothing is queued or running (raises a pending closure error)."""
        self._queue.raise_pending_error()
        return self._queue.is_idle()

    def create_per_worker_dataset(
        self, fn: Callable[..., Any] | str, *args: Any, **kwargs: Any
    ) -> closures.PerWorkerResource:
        """A value built once on each worker by `fn(*args, **kwargs)`; pass it to closures."""
        return closures.PerWorkerResource(fn, *args, **kwargs)

    @property
    def completed_closures(self) -> int:
        """Closures finished so far (successfully or not)."""
        return self._queue.completed

    def shutdown(self) -> None:
        """Stop the dispatch threads and close the worker channels."""
        self._stopped.set()
        self._queue.stop()
        with self._lock:
            handles, self._workers = list(self._workers.values()), {}
        for w in handles:
            w.close()

    def __enter__(self) -> ClusterCoordinator:
        return self

    def __exit__(self, *exc: object) -> None:
        self.shutdown()
