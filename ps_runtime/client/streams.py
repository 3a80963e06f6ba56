"""The client side of the data stream: one long-lived bidirectional call per server.

The data calls (pulls and pushes) travel as frames tagged with an id on one stream, so
many are in flight at once without gRPC's per-call set-up, and the server answers each
when it is ready, in any order. A request whose answer carries an error fails alone,
with the status code and details the unary call would have had (`StreamError` is a
`grpc.RpcError`, so routing and retries treat it alike). When the stream breaks (the
server died, stopped or moved), every request still in flight on it fails with the
stream's status; the next request opens a new stream.
"""

from __future__ import annotations

import itertools
import logging
import queue
import threading
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import grpc

from ps_runtime.wire.frames import Buffer, Frame, decode_frame, encode_frame

log = logging.getLogger(__name__)

METHOD = "/trainhub.ps.ParameterServer/DataStream"
# How one answer frame's body becomes the request's value: (body, is the last frame),
# called on the reader thread; a chunked answer calls it once per frame, and the last
# frame's value is the result.
Answer = Callable[[memoryview, bool], Any]
# A chunked request: given its id, its frames.
Frames = Callable[[int], Iterator[bytes]]
# A chunked request (a large push) is encoded in its caller's thread while gRPC's sends
# the frames before it: at most this many queued ahead, which bounds the memory.
FRAMES_AHEAD = 4
_CODES = {code.value[0]: code for code in grpc.StatusCode}


class StreamError(grpc.RpcError):  # type: ignore[misc]  # grpc has no type hints
    """A data call that failed: on the server (its status) or with its stream."""

    def __init__(self, code: grpc.StatusCode, details: str) -> None:
        super().__init__(details)
        self._code = code
        self._details = details

    def code(self) -> grpc.StatusCode:
        return self._code

    def details(self) -> str:
        return self._details

    def __str__(self) -> str:
        return f"{self._code.name}: {self._details}"


class Call:
    """One request in flight; `result()` waits for its answer."""

    def __init__(self, answer: Answer, timeout: float | None, forget: Callable[[], None]) -> None:
        self._answer = answer
        self._timeout = timeout
        self._forget = forget  # drops the call from its stream: a late answer is ignored
        self._done = threading.Event()
        self._value: Any = None
        self._error: BaseException | None = None

    def feed(self, frame: Frame) -> bool:
        """Take one answer frame; True when the request is answered."""
        if frame.code:
            code = _CODES.get(frame.code, grpc.StatusCode.UNKNOWN)
            return self.fail(StreamError(code, frame.error))
        try:
            value = self._answer(frame.body, not frame.more)
        except Exception as e:
            return self.fail(e)
        if frame.more:
            return False
        self._value = value
        self._done.set()
        return True

    def fail(self, error: BaseException) -> bool:
        if not self._done.is_set():
            self._error = error
            self._done.set()
        return True

    def result(self) -> Any:
        """The answer's value; raises what failed it (`StreamError` for gRPC statuses)."""
        if not self._done.wait(self._timeout):
            self._forget()
            self.fail(StreamError(grpc.StatusCode.DEADLINE_EXCEEDED, "Deadline Exceeded"))
        if self._error is not None:
            raise self._error
        return self._value


class _Opened:
    """One opened stream: its outgoing queue, its gRPC call and its requests in flight."""

    def __init__(self) -> None:
        self.outbox: queue.SimpleQueue[bytes | None] = queue.SimpleQueue()  # None ends it
        self.calls: dict[int, Call] = {}
        self.broken = False
        self.rpc: Any = None
        self.queued = 0  # frames in the outbox
        self.room = threading.Condition()  # gRPC took a frame, or the stream broke

    def requests(self) -> Iterator[bytes]:
        while (message := self.outbox.get()) is not None:
            with self.room:
                self.queued -= 1
                self.room.notify_all()
            yield message

    def send(self, message: bytes, wait: bool) -> bool:
        """Queue a frame; with `wait`, once fewer than FRAMES_AHEAD are queued. False
        when the stream broke (its requests have failed)."""
        with self.room:
            while wait and self.queued >= FRAMES_AHEAD and not self.broken:
                self.room.wait(1.0)
            if self.broken:
                return False
            self.queued += 1
        self.outbox.put(message)
        return True

    def break_off(self) -> dict[int, Call]:
        """Mark the stream broken; return the requests that were in flight on it."""
        self.broken = True
        calls, self.calls = self.calls, {}
        with self.room:
            self.room.notify_all()
        self.outbox.put(None)
        return calls


class DataStream:
    """The data stream of one client to one server, opened on first use and after a
    break."""

    def __init__(
        self, channel: grpc.Channel, address: str, metadata: tuple[tuple[str, str], ...]
    ) -> None:
        self.address = address
        self._metadata = metadata
        self._open_rpc = channel.stream_stream(
            METHOD, request_serializer=None, response_deserializer=None
        )
        self._ids = itertools.count(1)
        self._opened: _Opened | None = None
        self._lock = threading.Lock()  # guards _opened and each _Opened's calls and broken

    def start(
        self,
        method: str,
        shard: int,
        body: Sequence[Buffer],
        answer: Answer,
        timeout: float | None,
    ) -> Call:
        """Send one request; its answer comes through `answer` into the returned call."""
        call, opened, id = self._register(answer, timeout)
        opened.send(encode_frame(id, body, method=method, shard=shard), wait=False)
        return call

    def start_chunked(self, frames: Frames, answer: Answer, timeout: float | None) -> Call:
        """Send a request made of several frames, made here as the stream takes them."""
        call, opened, id = self._register(answer, timeout)
        sent = False
        try:
            for message in frames(id):
                if not opened.send(message, wait=True):
                    break  # the stream broke: the call failed with it
                sent = True
        except BaseException:
            if sent:  # end the request: the server fails it as incomplete
                opened.send(encode_frame(id), wait=False)
            self._forget(opened, id)
            raise
        return call

    def _register(self, answer: Answer, timeout: float | None) -> tuple[Call, _Opened, int]:
        with self._lock:
            opened = self._opened
            if opened is None or opened.broken:
                opened = self._opened = self._open()
            id = next(self._ids)
            call = opened.calls[id] = Call(answer, timeout, lambda: self._forget(opened, id))
        return call, opened, id

    def _forget(self, opened: _Opened, id: int) -> None:
        with self._lock:
            opened.calls.pop(id, None)

    def _open(self) -> _Opened:
        opened = _Opened()
        opened.rpc = self._open_rpc(opened.requests(), metadata=self._metadata)
        threading.Thread(
            target=self._read, args=(opened,), name="ps-data-stream", daemon=True
        ).start()
        return opened

    def _read(self, opened: _Opened) -> None:
        try:
            for message in opened.rpc:
                frame = decode_frame(message)
                with self._lock:
                    call = opened.calls.get(frame.id)
                if call is not None and call.feed(frame):
                    with self._lock:
                        opened.calls.pop(frame.id, None)
            error = StreamError(
                grpc.StatusCode.UNAVAILABLE,
                f"the data stream to the parameter server at {self.address} ended",
            )
        except grpc.RpcError as e:
            error = StreamError(
                e.code(),
                f"the data stream to the parameter server at {self.address} broke: {e.details()}",
            )
        with self._lock:
            calls = opened.break_off()
        if calls:
            log.warning("%s (%d requests in flight fail)", error.details(), len(calls))
        for call in calls.values():
            call.fail(error)

    def close(self) -> None:
        """End the stream; requests in flight fail (CANCELLED)."""
        with self._lock:
            opened, self._opened = self._opened, None
        if opened is not None:
            opened.rpc.cancel()
